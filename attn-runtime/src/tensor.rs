//! Thin typed tensors over cudarc buffers (DESIGN §3.6): a `CudaSlice<T>` with a shape and
//! strides in elements. Ops take views, so buffers owned by other cudarc code pass in.

use attn_dsl::kernel::DslType;
use cudarc::driver::{
    CudaSlice, CudaStream, CudaView, CudaViewMut, DeviceRepr, DriverError, ValidAsZeroBits,
};
use std::sync::Arc;

/// Tensor errors: shapes that do not match the data, driver failures.
#[derive(Debug, thiserror::Error)]
pub enum TensorError {
    #[error("shape {shape:?} holds {expected} elements but the data has {got}")]
    ShapeMismatch {
        shape: Vec<usize>,
        expected: usize,
        got: usize,
    },
    #[error(
        "view {shape:?} with strides {strides:?} reaches element {needed} but the buffer has {len}"
    )]
    OutOfBounds {
        shape: Vec<usize>,
        strides: Vec<usize>,
        needed: usize,
        len: usize,
    },
    #[error("CUDA driver call failed while {during}: {source}")]
    Driver {
        during: &'static str,
        source: DriverError,
    },
}

fn driver(during: &'static str) -> impl FnOnce(DriverError) -> TensorError {
    move |source| TensorError::Driver { during, source }
}

/// Row-major strides of `shape`.
pub fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    strides
}

/// One past the largest element offset a view of `shape`/`strides` touches (0 when empty).
pub fn extent(shape: &[usize], strides: &[usize]) -> usize {
    if shape.contains(&0) {
        return 0;
    }
    1 + shape
        .iter()
        .zip(strides)
        .map(|(&d, &s)| (d - 1) * s)
        .sum::<usize>()
}

/// An owned device tensor (row-major on creation).
#[derive(Debug)]
pub struct Tensor<T> {
    data: CudaSlice<T>,
    shape: Vec<usize>,
    strides: Vec<usize>,
}

impl<T: DslType + DeviceRepr> Tensor<T> {
    /// Uploads `host` as a tensor of `shape`.
    pub fn from_host(
        stream: &Arc<CudaStream>,
        host: &[T],
        shape: &[usize],
    ) -> Result<Self, TensorError> {
        let expected: usize = shape.iter().product();
        if expected != host.len() {
            return Err(TensorError::ShapeMismatch {
                shape: shape.to_vec(),
                expected,
                got: host.len(),
            });
        }
        let data = stream
            .clone_htod(host)
            .map_err(driver("uploading a tensor"))?;
        Ok(Tensor {
            data,
            shape: shape.to_vec(),
            strides: contiguous_strides(shape),
        })
    }

    /// A tensor with every element equal to `value` (NaN poisons outputs in parity tests).
    pub fn filled(
        stream: &Arc<CudaStream>,
        shape: &[usize],
        value: T,
    ) -> Result<Self, TensorError> {
        let n: usize = shape.iter().product();
        Tensor::from_host(stream, &vec![value; n], shape)
    }

    /// Downloads the underlying buffer (row-major for tensors created here).
    pub fn to_host(&self, stream: &Arc<CudaStream>) -> Result<Vec<T>, TensorError> {
        stream
            .clone_dtoh(&self.data)
            .map_err(driver("downloading a tensor"))
    }
}

impl<T: DslType + DeviceRepr + ValidAsZeroBits> Tensor<T> {
    pub fn zeros(stream: &Arc<CudaStream>, shape: &[usize]) -> Result<Self, TensorError> {
        let n: usize = shape.iter().product();
        let data = stream
            .alloc_zeros(n)
            .map_err(driver("allocating a tensor"))?;
        Ok(Tensor {
            data,
            shape: shape.to_vec(),
            strides: contiguous_strides(shape),
        })
    }
}

impl<T> Tensor<T> {
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    pub fn strides(&self) -> &[usize] {
        &self.strides
    }
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
    pub fn slice(&self) -> &CudaSlice<T> {
        &self.data
    }
    /// A read-only kernel argument (`In<'_, T>` of the `Cuda` backend).
    pub fn as_in(&self) -> CudaView<'_, T> {
        self.data.as_view()
    }
    /// A writable kernel argument (`Out<'_, T>` of the `Cuda` backend).
    pub fn as_out(&mut self) -> CudaViewMut<'_, T> {
        self.data.as_view_mut()
    }
    pub fn view(&self) -> TensorView<'_, T> {
        TensorView {
            data: self.data.as_view(),
            shape: self.shape.clone(),
            strides: self.strides.clone(),
        }
    }
}

/// A borrowed, possibly strided view: the data plus how to index it.
#[derive(Debug)]
pub struct TensorView<'a, T> {
    data: CudaView<'a, T>,
    shape: Vec<usize>,
    strides: Vec<usize>,
}

impl<'a, T> TensorView<'a, T> {
    /// Views `data` with `shape`/`strides` (in elements), checking it stays in bounds.
    pub fn new(
        data: CudaView<'a, T>,
        shape: &[usize],
        strides: &[usize],
    ) -> Result<Self, TensorError> {
        let needed = extent(shape, strides);
        if shape.len() != strides.len() || needed > data.len() {
            return Err(TensorError::OutOfBounds {
                shape: shape.to_vec(),
                strides: strides.to_vec(),
                needed,
                len: data.len(),
            });
        }
        Ok(TensorView {
            data,
            shape: shape.to_vec(),
            strides: strides.to_vec(),
        })
    }
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    pub fn strides(&self) -> &[usize] {
        &self.strides
    }
    pub fn is_contiguous(&self) -> bool {
        self.strides == contiguous_strides(&self.shape)
    }
    /// The data as a kernel argument.
    pub fn into_in(self) -> CudaView<'a, T> {
        self.data
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strides_and_extent() {
        assert_eq!(contiguous_strides(&[2, 3, 4]), vec![12, 4, 1]);
        assert_eq!(contiguous_strides(&[]), Vec::<usize>::new());
        assert_eq!(extent(&[2, 3, 4], &[12, 4, 1]), 24);
        assert_eq!(extent(&[4, 8], &[16, 1]), 56, "row pitch 16, 8 used");
        assert_eq!(extent(&[0, 8], &[8, 1]), 0);
    }
}
