//! Divisibility promises on integer parameters, taken at specialization time.
//!
//! A paged K/V row starts at `block · stride_block + slot · stride_slot + head · stride_head`
//! elements: only when the strides are multiples of 8 (16 bytes of bf16) can the axis
//! analysis prove the row 16-byte aligned, which is what vectorized and asynchronous copies
//! need. The runtime knows the strides when it launches, so it specializes on them: a
//! parameter promised divisible by 16 is part of the specialization key, and the launcher
//! refuses a call whose value breaks the promise.

use crate::ir::{Function, ParamKind, ScalarType};

/// Divisor every promise uses (Triton's choice: it covers 16-byte rows of 1-byte types).
pub const DIVISOR: u64 = 16;

/// Records that each parameter in `names` is a multiple of [`DIVISOR`]. An unknown or
/// non-integer parameter is an error naming it.
pub fn divisible(f: &mut Function, names: &[&str]) -> Result<(), String> {
    for &n in names {
        let p = f
            .params
            .iter()
            .find(|p| p.name == n)
            .ok_or_else(|| format!("no parameter `{n}` to assume divisible"))?;
        if !matches!(p.kind, ParamKind::Scalar(ScalarType::I32 | ScalarType::I64)) {
            return Err(format!("`{n}` is not an integer parameter"));
        }
        if !f.assumed_divisible.iter().any(|(m, _)| m == n) {
            f.assumed_divisible.push((n.to_string(), DIVISOR));
        }
    }
    f.assumed_divisible.sort();
    Ok(())
}

/// Whether `value` keeps a promise of divisibility by `divisor`.
pub fn keeps(value: i64, divisor: u64) -> bool {
    value.unsigned_abs().is_multiple_of(divisor)
}
