//! The GPU call's side of a user variant: which variant, and its aux tensors on the device
//! (with optional host copies, so bool tensors can be checked to be 0 / 1 before launching).

use cudarc::driver::CudaView;

use super::variant::{AuxView, Variant};

/// One aux tensor `[S, row_stride]` on the device.
#[derive(Debug)]
pub struct AuxTensor<'a, E> {
    /// The device buffer.
    pub device: CudaView<'a, E>,
    /// The same values on the host, when the caller has them (validation reads them).
    pub host: Option<&'a [E]>,
    /// Elements between consecutive sequences' rows.
    pub row_stride: usize,
}

impl<E> AuxTensor<'_, E> {
    /// What validation looks at.
    pub fn view(&self) -> AuxView<'_, E> {
        AuxView {
            len: self.device.len(),
            row_stride: self.row_stride,
            host: self.host,
        }
    }
}

/// A variant bound to one call: the variant and the aux tensors it declares.
#[derive(Debug)]
pub struct VariantArgs<'a> {
    /// The variant (mask, bounds and aux declarations).
    pub variant: &'a Variant,
    /// Read by the variant as `aux` (`i32`, or bool as 0 / 1).
    pub aux_i32: Option<AuxTensor<'a, i32>>,
    /// Read by the variant as `aux_f32`.
    pub aux_f32: Option<AuxTensor<'a, f32>>,
}

impl<'a> VariantArgs<'a> {
    /// A variant without aux data.
    pub fn plain(variant: &'a Variant) -> Self {
        VariantArgs {
            variant,
            aux_i32: None,
            aux_f32: None,
        }
    }

    /// A variant reading one `i32` aux tensor.
    pub fn with_i32(variant: &'a Variant, aux: AuxTensor<'a, i32>) -> Self {
        VariantArgs {
            variant,
            aux_i32: Some(aux),
            aux_f32: None,
        }
    }
}
