//! Rounding of f64 values to a storage dtype, to reproduce where the kernels round
//! (e.g. softmax probabilities cast to the value dtype before P·V).

use attn_dsl::ir::ScalarType;
use half::{bf16, f16};

/// A floating-point storage dtype the references can round to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dtype {
    Bf16,
    F16,
    F32,
}

impl Dtype {
    /// Rounds `x` to the nearest value representable in this dtype (ties to even).
    pub fn round(self, x: f64) -> f64 {
        match self {
            Dtype::Bf16 => bf16::from_f64(x).to_f64(),
            Dtype::F16 => f16::from_f64(x).to_f64(),
            Dtype::F32 => f64::from(x as f32),
        }
    }

    /// The matching IR scalar type.
    pub fn scalar_type(self) -> ScalarType {
        match self {
            Dtype::Bf16 => ScalarType::Bf16,
            Dtype::F16 => ScalarType::F16,
            Dtype::F32 => ScalarType::F32,
        }
    }

    /// The dtype of a float IR scalar type; `None` for integers and bool.
    pub fn from_scalar_type(t: ScalarType) -> Option<Self> {
        match t {
            ScalarType::Bf16 => Some(Dtype::Bf16),
            ScalarType::F16 => Some(Dtype::F16),
            ScalarType::F32 => Some(Dtype::F32),
            _ => None,
        }
    }
}

/// Rounds when a dtype is given, passes through otherwise.
pub fn round_opt(dtype: Option<Dtype>, x: f64) -> f64 {
    dtype.map_or(x, |d| d.round(x))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_keeps_8_significant_bits() {
        assert_eq!(Dtype::Bf16.round(1.0 + 1.0 / 256.0), 1.0);
        assert_eq!(Dtype::Bf16.round(1.0 + 1.0 / 128.0), 1.0 + 1.0 / 128.0);
        assert_eq!(Dtype::F16.round(1.0 + 1.0 / 2048.0), 1.0);
        assert_eq!(Dtype::F32.round(0.1), f64::from(0.1f32));
    }
}
