//! GPU-faithful rounding of executor values.
//!
//! Floats live in `f64` and are rounded to their IR dtype after every op; integers live in
//! `i64` and wrap to their IR width. Half types round through `f32` because the GPU computes
//! bf16/f16 arithmetic (and Triton's math functions) in `f32` and narrows the result: the
//! `f64` result of `+ - * / sqrt` on `f32`-representable inputs rounds to the same `f32` as
//! a native `f32` op (53 ≥ 2·24 + 2 bits, so double rounding is innocuous), and narrowing
//! that `f32` to bf16/f16 is round-to-nearest-even (`half`).

use crate::ir::ScalarType;
use half::{bf16, f16};

/// Rounds `x` to the nearest value of float type `ty` (identity for non-float types).
#[inline(always)]
pub(crate) fn round_float(ty: ScalarType, x: f64) -> f64 {
    match ty {
        ScalarType::F32 => x as f32 as f64,
        ScalarType::Bf16 => bf16::from_f32(x as f32).to_f64(),
        ScalarType::F16 => f16::from_f32(x as f32).to_f64(),
        _ => x,
    }
}

/// Rounds `x` to `f32`: the precision of `dot` and `sum` accumulators.
#[inline(always)]
pub(crate) fn round_f32(x: f64) -> f64 {
    x as f32 as f64
}

/// Wraps `x` to the two's-complement width of integer type `ty`.
#[inline]
pub(crate) fn wrap_int(ty: ScalarType, x: i64) -> i64 {
    match ty {
        ScalarType::I32 => x as i32 as i64,
        _ => x,
    }
}

/// Bit width of an integer type (for shift range checks).
pub(crate) fn int_bits(ty: ScalarType) -> u32 {
    match ty {
        ScalarType::I32 => 32,
        _ => 64,
    }
}

/// Float → integer conversion: truncates toward zero; out-of-range values saturate and NaN
/// gives 0, like CUDA's `cvt.rzi` (and Rust's `as`).
#[inline]
pub(crate) fn float_to_int(ty: ScalarType, x: f64) -> i64 {
    match ty {
        ScalarType::I32 => x as i32 as i64,
        _ => x as i64,
    }
}

/// Integer → float conversion, rounding once from the exact integer to `f32` (an `i64`
/// through `f64` would round twice), then narrowing for half types.
#[inline]
pub(crate) fn int_to_float(ty: ScalarType, x: i64) -> f64 {
    round_float(ty, x as f32 as f64)
}
