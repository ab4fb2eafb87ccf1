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
    #[error("view {shape:?} with strides {strides:?} reaches past usize::MAX elements")]
    ExtentOverflow {
        shape: Vec<usize>,
        strides: Vec<usize>,
    },
    #[error("shape {shape:?} holds more than usize::MAX elements")]
    TooLarge { shape: Vec<usize> },
    #[error("CUDA driver call failed while {during}: {source}")]
    Driver {
        during: &'static str,
        source: DriverError,
    },
}

fn driver(during: &'static str) -> impl FnOnce(DriverError) -> TensorError {
    move |source| TensorError::Driver { during, source }
}

/// Row-major strides of `shape` (saturating: only shapes whose [`numel`] fits are built).
pub fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1].saturating_mul(shape[i + 1]);
    }
    strides
}

/// Elements of `shape`, `None` when the product does not fit in `usize`.
pub fn numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
}

/// One past the largest element offset a view of `shape`/`strides` touches (0 when empty),
/// `None` when it does not fit in `usize` (a wrapped extent would pass a bounds check).
pub fn extent(shape: &[usize], strides: &[usize]) -> Option<usize> {
    if shape.contains(&0) {
        return Some(0);
    }
    shape.iter().zip(strides).try_fold(1usize, |end, (&d, &s)| {
        d.checked_sub(1)?.checked_mul(s)?.checked_add(end)
    })
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
        let expected = numel(shape).ok_or_else(|| TensorError::TooLarge {
            shape: shape.to_vec(),
        })?;
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
        let n = numel(shape).ok_or_else(|| TensorError::TooLarge {
            shape: shape.to_vec(),
        })?;
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
        let n = numel(shape).ok_or_else(|| TensorError::TooLarge {
            shape: shape.to_vec(),
        })?;
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
        // Checked when the tensor was built.
        numel(&self.shape).unwrap_or(usize::MAX)
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
        let needed = extent(shape, strides).ok_or_else(|| TensorError::ExtentOverflow {
            shape: shape.to_vec(),
            strides: strides.to_vec(),
        })?;
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
        assert_eq!(extent(&[2, 3, 4], &[12, 4, 1]), Some(24));
        assert_eq!(extent(&[4, 8], &[16, 1]), Some(56), "row pitch 16, 8 used");
        assert_eq!(extent(&[0, 8], &[8, 1]), Some(0));
        // 5 tokens of stride 2^62 reach 2^64 + ...: not representable, never wrapped to 256.
        assert_eq!(extent(&[5, 4, 64], &[1 << 62, 64, 1]), None);
        assert_eq!(numel(&[1 << 40, 1 << 40]), None);
    }
}
