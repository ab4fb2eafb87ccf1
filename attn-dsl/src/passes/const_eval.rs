//! Exact evaluation of scalar ops on literals, with the semantics of the generated CUDA C++
//! (and of the CPU executor): i32/i64 wrap, integer division truncates toward zero, `%` takes
//! the dividend's sign, shifts are arithmetic, f32 arithmetic is IEEE round-to-nearest-even,
//! `min`/`max` ignore a NaN operand (`fminf`/`fmaxf`).
//!
//! Every function returns `None` where folding would be wrong or would hide an error:
//! division or remainder by zero (left for the executor to report), `MIN / -1`, shifts by an
//! out-of-range amount, float→int conversions of NaN or out-of-range values (undefined in C),
//! transcendental functions (the GPU's `expf`/`logf`/`tanhf` are not correctly rounded, so a
//! host result could differ from the device's), and arithmetic in bf16/f16 (the device
//! computes those through f32 with its own rounding points).

use crate::ir::{BinaryOp, CmpPred, Scalar, ScalarType, UnaryOp};

/// `v` rounded to the float type `t` (exactly what a value of type `t` can hold).
pub fn round_float(v: f64, t: ScalarType) -> f64 {
    match t {
        ScalarType::F32 => v as f32 as f64,
        ScalarType::Bf16 => half::bf16::from_f64(v).to_f64(),
        ScalarType::F16 => half::f16::from_f64(v).to_f64(),
        _ => v,
    }
}

/// `v` wrapped to the integer type `t`.
pub fn wrap_int(v: i64, t: ScalarType) -> i64 {
    match t {
        ScalarType::I32 => v as i32 as i64,
        _ => v,
    }
}

fn bits(t: ScalarType) -> i64 {
    if t == ScalarType::I32 {
        32
    } else {
        64
    }
}

fn min_int(t: ScalarType) -> i64 {
    if t == ScalarType::I32 {
        i32::MIN as i64
    } else {
        i64::MIN
    }
}

/// The literal's value as a float of its own type (ints and bools converted exactly).
fn as_float(s: Scalar) -> Option<(f64, ScalarType)> {
    match s {
        Scalar::Float(v, t) => Some((round_float(v, t), t)),
        _ => None,
    }
}

pub fn unary(op: UnaryOp, x: Scalar) -> Option<Scalar> {
    match (op, x) {
        (UnaryOp::Neg, Scalar::Int(v, t)) => Some(Scalar::Int(wrap_int(v.wrapping_neg(), t), t)),
        (UnaryOp::Abs, Scalar::Int(v, t)) => Some(Scalar::Int(wrap_int(v.wrapping_abs(), t), t)),
        (UnaryOp::Not, Scalar::Int(v, t)) => Some(Scalar::Int(wrap_int(!v, t), t)),
        (UnaryOp::Not, Scalar::Bool(b)) => Some(Scalar::Bool(!b)),
        // Sign operations are exact in every float format.
        (UnaryOp::Neg, Scalar::Float(..)) => as_float(x).map(|(v, t)| Scalar::Float(-v, t)),
        (UnaryOp::Abs, Scalar::Float(..)) => as_float(x).map(|(v, t)| Scalar::Float(v.abs(), t)),
        // sqrtf is correctly rounded on both sides.
        (UnaryOp::Sqrt, Scalar::Float(v, ScalarType::F32)) => {
            Some(Scalar::Float((v as f32).sqrt() as f64, ScalarType::F32))
        }
        _ => None,
    }
}

pub fn binary(op: BinaryOp, a: Scalar, b: Scalar) -> Option<Scalar> {
    match (a, b) {
        (Scalar::Int(x, t), Scalar::Int(y, u)) if t == u => {
            int_binary(op, wrap_int(x, t), wrap_int(y, t), t)
        }
        (Scalar::Float(x, ScalarType::F32), Scalar::Float(y, ScalarType::F32)) => {
            f32_binary(op, x as f32, y as f32).map(|r| Scalar::Float(r as f64, ScalarType::F32))
        }
        (Scalar::Bool(x), Scalar::Bool(y)) => match op {
            BinaryOp::And => Some(Scalar::Bool(x & y)),
            BinaryOp::Or => Some(Scalar::Bool(x | y)),
            BinaryOp::Xor => Some(Scalar::Bool(x ^ y)),
            _ => None,
        },
        _ => None,
    }
}

fn int_binary(op: BinaryOp, x: i64, y: i64, t: ScalarType) -> Option<Scalar> {
    let overflowing_div = y == 0 || (x == min_int(t) && y == -1);
    let r = match op {
        BinaryOp::Add => x.wrapping_add(y),
        BinaryOp::Sub => x.wrapping_sub(y),
        BinaryOp::Mul => x.wrapping_mul(y),
        BinaryOp::Div if overflowing_div => return None,
        BinaryOp::Div => x / y,
        BinaryOp::Rem if overflowing_div => return None,
        BinaryOp::Rem => x % y,
        BinaryOp::Min => x.min(y),
        BinaryOp::Max => x.max(y),
        BinaryOp::And => x & y,
        BinaryOp::Or => x | y,
        BinaryOp::Xor => x ^ y,
        BinaryOp::Shl | BinaryOp::Shr if y < 0 || y >= bits(t) => return None,
        BinaryOp::Shl if t == ScalarType::I32 => ((x as i32) << y) as i64,
        BinaryOp::Shl => x << y,
        BinaryOp::Shr => x >> y,
    };
    Some(Scalar::Int(wrap_int(r, t), t))
}

fn f32_binary(op: BinaryOp, x: f32, y: f32) -> Option<f32> {
    Some(match op {
        BinaryOp::Add => x + y,
        BinaryOp::Sub => x - y,
        BinaryOp::Mul => x * y,
        BinaryOp::Div if y == 0.0 => return None,
        BinaryOp::Div => x / y,
        BinaryOp::Min => x.min(y),
        BinaryOp::Max => x.max(y),
        _ => return None,
    })
}

pub fn cmp(p: CmpPred, a: Scalar, b: Scalar) -> Option<Scalar> {
    use std::cmp::Ordering;
    let ord: Option<Ordering> = match (a, b) {
        (Scalar::Int(x, t), Scalar::Int(y, u)) if t == u => {
            Some(wrap_int(x, t).cmp(&wrap_int(y, t)))
        }
        (Scalar::Float(x, t), Scalar::Float(y, u)) if t == u => {
            round_float(x, t).partial_cmp(&round_float(y, t))
        }
        (Scalar::Bool(x), Scalar::Bool(y)) => Some(x.cmp(&y)),
        _ => return None,
    };
    // An unordered comparison (a NaN operand) is false, except `!=` which is true.
    let r = match (p, ord) {
        (CmpPred::Ne, None) => true,
        (_, None) => false,
        (CmpPred::Eq, Some(o)) => o == Ordering::Equal,
        (CmpPred::Ne, Some(o)) => o != Ordering::Equal,
        (CmpPred::Lt, Some(o)) => o == Ordering::Less,
        (CmpPred::Le, Some(o)) => o != Ordering::Greater,
        (CmpPred::Gt, Some(o)) => o == Ordering::Greater,
        (CmpPred::Ge, Some(o)) => o != Ordering::Less,
    };
    Some(Scalar::Bool(r))
}

/// Largest magnitude below which every integer is exact in an f64 (so int→f64→narrow
/// conversions round once).
const F64_EXACT_INT: i64 = 1 << 53;

pub fn cast(x: Scalar, to: ScalarType) -> Option<Scalar> {
    match x {
        Scalar::Bool(b) => Some(match to {
            ScalarType::Bool => Scalar::Bool(b),
            t if t.is_float() => Scalar::Float(b as i64 as f64, t),
            t => Scalar::Int(b as i64, t),
        }),
        Scalar::Int(v, from) => {
            let v = wrap_int(v, from);
            Some(match to {
                ScalarType::Bool => Scalar::Bool(v != 0),
                ScalarType::F32 => Scalar::Float(v as f32 as f64, to),
                t if t.is_float() => {
                    if v.abs() >= F64_EXACT_INT {
                        return None;
                    }
                    Scalar::Float(round_float(v as f64, t), t)
                }
                t => Scalar::Int(wrap_int(v, t), t),
            })
        }
        Scalar::Float(v, from) => {
            let v = round_float(v, from);
            Some(match to {
                ScalarType::Bool => Scalar::Bool(v != 0.0),
                t if t.is_float() => Scalar::Float(round_float(v, t), t),
                t => {
                    let tr = v.trunc();
                    let (lo, hi) = if t == ScalarType::I32 {
                        (i32::MIN as f64, i32::MAX as f64)
                    } else {
                        (i64::MIN as f64, 9.223372036854775e18)
                    };
                    if v.is_nan() || tr < lo || tr > hi {
                        return None;
                    }
                    Scalar::Int(tr as i64, t)
                }
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ScalarType::*;

    fn i(v: i64) -> Scalar {
        Scalar::Int(v, I32)
    }
    fn fl(v: f64) -> Scalar {
        Scalar::Float(v, F32)
    }

    #[test]
    fn i32_arithmetic_wraps_and_truncates() {
        assert_eq!(
            binary(BinaryOp::Add, i(i32::MAX as i64), i(1)),
            Some(i(i32::MIN as i64))
        );
        assert_eq!(binary(BinaryOp::Mul, i(65536), i(65536)), Some(i(0)));
        assert_eq!(binary(BinaryOp::Div, i(-7), i(2)), Some(i(-3)));
        assert_eq!(binary(BinaryOp::Rem, i(-7), i(2)), Some(i(-1)));
        assert_eq!(binary(BinaryOp::Rem, i(7), i(-2)), Some(i(1)));
        assert_eq!(binary(BinaryOp::Shr, i(-8), i(1)), Some(i(-4)));
        assert_eq!(binary(BinaryOp::Shl, i(1), i(31)), Some(i(i32::MIN as i64)));
        assert_eq!(
            unary(UnaryOp::Neg, i(i32::MIN as i64)),
            Some(i(i32::MIN as i64))
        );
        assert_eq!(unary(UnaryOp::Not, i(0)), Some(i(-1)));
    }

    #[test]
    fn undefined_or_trapping_cases_do_not_fold() {
        assert_eq!(binary(BinaryOp::Div, i(1), i(0)), None);
        assert_eq!(binary(BinaryOp::Rem, i(1), i(0)), None);
        assert_eq!(binary(BinaryOp::Div, i(i32::MIN as i64), i(-1)), None);
        assert_eq!(binary(BinaryOp::Shl, i(1), i(32)), None);
        assert_eq!(binary(BinaryOp::Shr, i(1), i(-1)), None);
        assert_eq!(binary(BinaryOp::Div, fl(1.0), fl(0.0)), None);
        assert_eq!(cast(fl(f64::NAN), I32), None);
        assert_eq!(cast(fl(3e9), I32), None);
        assert_eq!(unary(UnaryOp::Exp, fl(1.0)), None);
        assert_eq!(
            binary(
                BinaryOp::Add,
                Scalar::Float(1.0, Bf16),
                Scalar::Float(1.0, Bf16)
            ),
            None
        );
    }

    #[test]
    fn f32_arithmetic_rounds_like_ieee_single() {
        // 0.1 + 0.2 in f32 is 0.3 rounded to f32 (not the f64 result).
        let r = binary(BinaryOp::Add, fl(0.1), fl(0.2));
        assert_eq!(r, Some(fl((0.1f32 + 0.2f32) as f64)));
        assert_ne!(r, Some(fl(0.1 + 0.2)));
        assert_eq!(
            binary(BinaryOp::Mul, fl(1e30), fl(1e30)),
            Some(fl(f64::INFINITY))
        );
        assert_eq!(binary(BinaryOp::Min, fl(f64::NAN), fl(2.0)), Some(fl(2.0)));
        assert_eq!(unary(UnaryOp::Sqrt, fl(2.0)), Some(fl(2f32.sqrt() as f64)));
    }

    #[test]
    fn comparisons_with_nan_are_unordered() {
        let nan = fl(f64::NAN);
        for p in [
            CmpPred::Eq,
            CmpPred::Lt,
            CmpPred::Le,
            CmpPred::Gt,
            CmpPred::Ge,
        ] {
            assert_eq!(cmp(p, nan, fl(1.0)), Some(Scalar::Bool(false)));
        }
        assert_eq!(cmp(CmpPred::Ne, nan, nan), Some(Scalar::Bool(true)));
        assert_eq!(
            cmp(CmpPred::Lt, fl(f64::NEG_INFINITY), fl(-1e38)),
            Some(Scalar::Bool(true))
        );
        assert_eq!(
            cmp(CmpPred::Eq, fl(-0.0), fl(0.0)),
            Some(Scalar::Bool(true))
        );
    }

    #[test]
    fn casts_follow_c_conversions() {
        assert_eq!(cast(fl(-2.7), I32), Some(i(-2)));
        assert_eq!(cast(Scalar::Int(1 << 33, I64), I32), Some(i(0)));
        assert_eq!(cast(i(-1), I64), Some(Scalar::Int(-1, I64)));
        assert_eq!(cast(i(16_777_217), F32), Some(fl(16_777_216.0)));
        assert_eq!(cast(fl(f64::NAN), Bool), Some(Scalar::Bool(true)));
        assert_eq!(cast(Scalar::Bool(true), F32), Some(fl(1.0)));
        // 1 + 2^-8 is a tie between bf16 neighbours 1 and 1 + 2^-7: rounds to even (1).
        assert_eq!(
            cast(fl(1.0 + 1.0 / 256.0), Bf16),
            Some(Scalar::Float(1.0, Bf16))
        );
        assert_eq!(
            cast(fl(1.0 + 3.0 / 256.0), Bf16),
            Some(Scalar::Float(1.0 + 4.0 / 256.0, Bf16))
        );
    }
}
