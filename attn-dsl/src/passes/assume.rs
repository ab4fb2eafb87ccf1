//! Promises on integer parameters, taken at specialization time: divisibility, and (for
//! 64-bit ones) a value in `int`'s range.
//!
//! A paged K/V row starts at `block · stride_block + slot · stride_slot + head · stride_head`
//! elements: only when the strides are multiples of 8 (16 bytes of bf16) can the axis
//! analysis prove the row 16-byte aligned, which is what vectorized and asynchronous copies
//! need. The runtime knows the strides when it launches, so it specializes on them: a
//! parameter promised divisible by 16 is part of the specialization key, and the launcher
//! refuses a call whose value breaks the promise.
//!
//! A page's address is `page · stride_block` with a 64-bit stride: the compiler multiplies
//! 64 × 64 bits (a sign extension and three `IMAD`s a page). A stride promised to fit in an
//! `int` makes the product of two sign-extended `int`s, one `mul.wide.s32` (see the code
//! generator's `attn_mul_wide`); the launcher refuses a value outside the range.

use crate::ir::{Function, Param, ParamKind, ScalarType};

/// Divisor every promise uses (Triton's choice: it covers 16-byte rows of 1-byte types).
pub const DIVISOR: u64 = 16;

/// Records that each parameter in `names` is a multiple of [`DIVISOR`]. An unknown or
/// non-integer parameter is an error naming it.
pub fn divisible(f: &mut Function, names: &[&str]) -> Result<(), String> {
    for &n in names {
        let p = param(f, n, "divisible")?;
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

/// Parameter `name` of `f`, or an error saying what was to be assumed of it.
fn param<'f>(f: &'f Function, name: &str, what: &str) -> Result<&'f Param, String> {
    f.params
        .iter()
        .find(|p| p.name == name)
        .ok_or_else(|| format!("no parameter `{name}` to assume {what}"))
}

/// Whether `value` keeps a promise of divisibility by `divisor`.
pub fn keeps(value: i64, divisor: u64) -> bool {
    value.unsigned_abs().is_multiple_of(divisor)
}

/// Records that each 64-bit parameter in `names` lies in `int`'s range. An unknown or
/// non-`i64` parameter is an error naming it.
pub fn fits_i32(f: &mut Function, names: &[&str]) -> Result<(), String> {
    for &n in names {
        let p = param(f, n, "within i32")?;
        if p.kind != ParamKind::Scalar(ScalarType::I64) {
            return Err(format!("`{n}` is not an i64 parameter"));
        }
        if !f.assumed_i32.iter().any(|m| m == n) {
            f.assumed_i32.push(n.to_string());
        }
    }
    f.assumed_i32.sort();
    Ok(())
}

/// How far below `int`'s limit a promised value stays: a stride promised in range is still
/// in range as bytes of elements up to 16 bytes wide (`codegen::page_row` multiplies the
/// page by the stride in bytes as an `int`).
pub const I32_HEADROOM: i64 = 16;

/// Whether `value` keeps a promise to lie in `int`'s range, with [`I32_HEADROOM`] to spare.
pub fn keeps_i32(value: i64) -> bool {
    value.unsigned_abs() <= (i64::from(i32::MAX) / I32_HEADROOM) as u64
}

/// The promises one launch's arguments make a specialization: the parameters that are
/// multiples of [`DIVISOR`], and the 64-bit ones in `int`'s range.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Promises {
    pub divisible: Vec<&'static str>,
    pub fits_i32: Vec<&'static str>,
}

impl Promises {
    /// The promises arguments keep: of the (name, value) pairs in `divisible` those that are
    /// multiples of [`DIVISOR`], of those in `fits_i32` those in range ([`keeps_i32`]).
    pub fn kept_by(
        divisible: &[(&'static str, i64)],
        fits_i32: &[(&'static str, i64)],
    ) -> Promises {
        let kept = |args: &[(&'static str, i64)], keeps: &dyn Fn(i64) -> bool| {
            args.iter()
                .filter(|&&(_, v)| keeps(v))
                .map(|&(n, _)| n)
                .collect()
        };
        Promises {
            divisible: kept(divisible, &|v| keeps(v, DIVISOR)),
            fits_i32: kept(fits_i32, &keeps_i32),
        }
    }

    /// Records both kinds on `f` ([`divisible`], [`fits_i32`]).
    pub fn apply(&self, f: &mut Function) -> Result<(), String> {
        divisible(f, &self.divisible)?;
        fits_i32(f, &self.fits_i32)
    }

    /// `|i32[a,b]` for a kernel key, or nothing without such promises (so keys of launches
    /// that make none stay as they were).
    pub fn i32_key(&self) -> String {
        if self.fits_i32.is_empty() {
            String::new()
        } else {
            format!("|i32[{}]", self.fits_i32.join(","))
        }
    }
}
