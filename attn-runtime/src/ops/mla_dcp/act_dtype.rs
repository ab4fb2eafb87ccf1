//! The activation dtype of the MLA-DCP path (bf16 or f16): partial outputs, the combine output, W_UV
//! and the V-up result all share it, so one trait ties a Rust element type to its cuBLAS data type
//! and to the name the hand-written CUDA kernels use for it.

use cudarc::cublas::sys::cudaDataType;
use cudarc::driver::{DeviceRepr, ValidAsZeroBits};
use half::{bf16, f16};

/// Which 16-bit float the activations are stored in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ActDtype {
    /// bfloat16.
    Bf16,
    /// IEEE half.
    F16,
}

impl ActDtype {
    /// Bytes per element (both are 16-bit).
    pub const fn size_bytes(self) -> usize {
        2
    }

    /// The cuBLAS `cudaDataType` for A, B and C of the V-up GEMM.
    pub fn cuda_data_type(self) -> cudaDataType {
        match self {
            ActDtype::Bf16 => cudaDataType::CUDA_R_16BF,
            ActDtype::F16 => cudaDataType::CUDA_R_16F,
        }
    }

    /// Suffix of the hand-written CUDA kernels specialized for this dtype (`vup_fallback_bf16`).
    pub const fn kernel_suffix(self) -> &'static str {
        match self {
            ActDtype::Bf16 => "bf16",
            ActDtype::F16 => "f16",
        }
    }
}

impl std::fmt::Display for ActDtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.kernel_suffix())
    }
}

/// A Rust element type usable as the activation dtype on the device.
pub trait ActivationElem: DeviceRepr + ValidAsZeroBits + Copy + Send + Sync + 'static {
    /// The dtype tag the kernels are specialized for.
    const DTYPE: ActDtype;
    /// Rounds (to nearest even) from f32; host-side packing and test inputs use it.
    fn from_f32(x: f32) -> Self;
    /// The exact f32 value (results read back, references compared with).
    fn to_f32(self) -> f32;
    /// The 16-bit pattern (how the exchange moves partials in their own dtype).
    fn to_bits(self) -> u16;
    /// From the 16-bit pattern: `T::from_bits(x.to_bits()) == x`.
    fn from_bits(bits: u16) -> Self;
}

impl ActivationElem for bf16 {
    const DTYPE: ActDtype = ActDtype::Bf16;
    fn from_f32(x: f32) -> Self {
        bf16::from_f32(x)
    }
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    fn to_bits(self) -> u16 {
        bf16::to_bits(self)
    }
    fn from_bits(bits: u16) -> Self {
        bf16::from_bits(bits)
    }
}

impl ActivationElem for f16 {
    const DTYPE: ActDtype = ActDtype::F16;
    fn from_f32(x: f32) -> Self {
        f16::from_f32(x)
    }
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    fn to_bits(self) -> u16 {
        f16::to_bits(self)
    }
    fn from_bits(bits: u16) -> Self {
        f16::from_bits(bits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtype_maps_to_cublas_types() {
        assert_eq!(ActDtype::Bf16.cuda_data_type(), cudaDataType::CUDA_R_16BF);
        assert_eq!(ActDtype::F16.cuda_data_type(), cudaDataType::CUDA_R_16F);
        assert_eq!(<bf16 as ActivationElem>::DTYPE, ActDtype::Bf16);
        assert_eq!(<f16 as ActivationElem>::DTYPE, ActDtype::F16);
    }

    #[test]
    fn bits_round_trip() {
        let x = <bf16 as ActivationElem>::from_f32(1.5);
        assert_eq!(<bf16 as ActivationElem>::from_bits(x.to_bits()), x);
        let y = <f16 as ActivationElem>::from_f32(-0.3125);
        assert_eq!(<f16 as ActivationElem>::to_f32(y), -0.3125);
    }
}
