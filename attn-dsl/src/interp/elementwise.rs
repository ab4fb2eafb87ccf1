//! Elementwise ops (`Unary`, `Binary`, `Cmp`, `Select`, `Cast`) over flat buffers.
//!
//! Each function picks the per-element operation once and then runs one tight loop, so a
//! 16×64 tile costs one allocation, never one per element.

use super::error::{malformed, Fault};
use super::numerics::{float_to_int, int_bits, int_to_float, round_float, wrap_int};
use super::tile::{same_len, TileData};
use crate::ir::{BinaryOp, CmpPred, ScalarType, UnaryOp};

/// `op x` for a value of dtype `ty`. Float math runs in `f64` and is rounded to `ty`
/// (through `f32`, see [`super::numerics`]).
pub(crate) fn unary(op: UnaryOp, ty: ScalarType, x: &TileData) -> Result<TileData, Fault> {
    match x {
        TileData::Float(v) => {
            let f: fn(f64) -> f64 = match op {
                UnaryOp::Neg => |x| -x,
                UnaryOp::Exp => f64::exp,
                UnaryOp::Exp2 => f64::exp2,
                UnaryOp::Log => f64::ln,
                UnaryOp::Log2 => f64::log2,
                UnaryOp::Sqrt => f64::sqrt,
                UnaryOp::Tanh => f64::tanh,
                UnaryOp::Abs => f64::abs,
                UnaryOp::Not => return Err(malformed("`not` is not defined on floats")),
            };
            Ok(TileData::Float(
                v.iter().map(|&x| round_float(ty, f(x))).collect(),
            ))
        }
        TileData::Int(v) => {
            let f: fn(i64) -> i64 = match op {
                UnaryOp::Neg => i64::wrapping_neg,
                UnaryOp::Not => |x| !x,
                UnaryOp::Abs => i64::wrapping_abs,
                _ => return Err(malformed(format!("{op:?} is not defined on integers"))),
            };
            Ok(TileData::Int(
                v.iter().map(|&x| wrap_int(ty, f(x))).collect(),
            ))
        }
        TileData::Bool(v) if op == UnaryOp::Not => {
            Ok(TileData::Bool(v.iter().map(|&b| !b).collect()))
        }
        other => Err(malformed(format!(
            "{op:?} is not defined on {} values",
            other.family()
        ))),
    }
}

/// `a op b` for two operands of dtype `ty` and equal size.
pub(crate) fn binary(
    op: BinaryOp,
    ty: ScalarType,
    a: &TileData,
    b: &TileData,
) -> Result<TileData, Fault> {
    same_len(a.len(), b.len())?;
    match (a, b) {
        (TileData::Float(x), TileData::Float(y)) => float_binary(op, ty, x, y).map(TileData::Float),
        (TileData::Int(x), TileData::Int(y)) => int_binary(op, ty, x, y).map(TileData::Int),
        (TileData::Bool(x), TileData::Bool(y)) => bool_binary(op, x, y).map(TileData::Bool),
        _ => Err(malformed(format!(
            "{op:?} on {} and {} values",
            a.family(),
            b.family()
        ))),
    }
}

/// Float `min`/`max` return the non-NaN operand when one is NaN, like CUDA's `fminf`/`fmaxf`.
fn float_binary(op: BinaryOp, ty: ScalarType, x: &[f64], y: &[f64]) -> Result<Vec<f64>, Fault> {
    let f: fn(f64, f64) -> f64 = match op {
        BinaryOp::Add => |a, b| a + b,
        BinaryOp::Sub => |a, b| a - b,
        BinaryOp::Mul => |a, b| a * b,
        BinaryOp::Div => |a, b| a / b,
        BinaryOp::Min => f64::min,
        BinaryOp::Max => f64::max,
        _ => return Err(malformed(format!("{op:?} is not defined on floats"))),
    };
    Ok(x.iter()
        .zip(y)
        .map(|(&a, &b)| round_float(ty, f(a, b)))
        .collect())
}

/// Integer ops wrap to the width of `ty`; `/` and `%` truncate toward zero (C semantics)
/// and fail on a zero divisor; shifts fail on an amount outside `0..bits`; `>>` is
/// arithmetic (CUDA on signed integers).
fn int_binary(op: BinaryOp, ty: ScalarType, x: &[i64], y: &[i64]) -> Result<Vec<i64>, Fault> {
    let bits = int_bits(ty);
    let f: fn(i64, i64, u32) -> Result<i64, Fault> = match op {
        BinaryOp::Add => |a, b, _| Ok(a.wrapping_add(b)),
        BinaryOp::Sub => |a, b, _| Ok(a.wrapping_sub(b)),
        BinaryOp::Mul => |a, b, _| Ok(a.wrapping_mul(b)),
        BinaryOp::Div => |a, b, _| nonzero(b, "division").map(|b| a.wrapping_div(b)),
        BinaryOp::Rem => |a, b, _| nonzero(b, "remainder").map(|b| a.wrapping_rem(b)),
        BinaryOp::Min => |a, b, _| Ok(a.min(b)),
        BinaryOp::Max => |a, b, _| Ok(a.max(b)),
        BinaryOp::And => |a, b, _| Ok(a & b),
        BinaryOp::Or => |a, b, _| Ok(a | b),
        BinaryOp::Xor => |a, b, _| Ok(a ^ b),
        BinaryOp::Shl => |a, b, bits| shift_amount(b, bits).map(|s| a.wrapping_shl(s)),
        BinaryOp::Shr => |a, b, bits| shift_amount(b, bits).map(|s| a >> s),
    };
    x.iter()
        .zip(y)
        .map(|(&a, &b)| f(a, b, bits).map(|r| wrap_int(ty, r)))
        .collect()
}

fn nonzero(divisor: i64, op: &'static str) -> Result<i64, Fault> {
    if divisor == 0 {
        Err(Fault::DivisionByZero(op))
    } else {
        Ok(divisor)
    }
}

fn shift_amount(amount: i64, bits: u32) -> Result<u32, Fault> {
    u32::try_from(amount)
        .ok()
        .filter(|&s| s < bits)
        .ok_or(Fault::ShiftOutOfRange { amount, bits })
}

fn bool_binary(op: BinaryOp, x: &[bool], y: &[bool]) -> Result<Vec<bool>, Fault> {
    let f: fn(bool, bool) -> bool = match op {
        BinaryOp::And => |a, b| a & b,
        BinaryOp::Or => |a, b| a | b,
        BinaryOp::Xor => |a, b| a ^ b,
        _ => return Err(malformed(format!("{op:?} is not defined on bool"))),
    };
    Ok(x.iter().zip(y).map(|(&a, &b)| f(a, b)).collect())
}

/// `a pred b`. Float comparisons with NaN are false except `!=` (IEEE, like CUDA).
pub(crate) fn compare(pred: CmpPred, a: &TileData, b: &TileData) -> Result<TileData, Fault> {
    same_len(a.len(), b.len())?;
    let out = match (a, b) {
        (TileData::Float(x), TileData::Float(y)) => cmp_slices(pred, x, y),
        (TileData::Int(x), TileData::Int(y)) => cmp_slices(pred, x, y),
        (TileData::Bool(x), TileData::Bool(y)) => cmp_slices(pred, x, y),
        _ => {
            return Err(malformed(format!(
                "cannot compare {} and {} values",
                a.family(),
                b.family()
            )))
        }
    };
    Ok(TileData::Bool(out))
}

fn cmp_slices<T: PartialOrd>(pred: CmpPred, x: &[T], y: &[T]) -> Vec<bool> {
    let f: fn(&T, &T) -> bool = match pred {
        CmpPred::Eq => |a, b| a == b,
        CmpPred::Ne => |a, b| a != b,
        CmpPred::Lt => |a, b| a < b,
        CmpPred::Le => |a, b| a <= b,
        CmpPred::Gt => |a, b| a > b,
        CmpPred::Ge => |a, b| a >= b,
    };
    x.iter().zip(y).map(|(a, b)| f(a, b)).collect()
}

/// `cond ? a : b` per element.
pub(crate) fn select(cond: &TileData, a: &TileData, b: &TileData) -> Result<TileData, Fault> {
    let c = cond.bools()?;
    same_len(c.len(), a.len())?;
    same_len(c.len(), b.len())?;
    fn pick<T: Copy>(c: &[bool], x: &[T], y: &[T]) -> Vec<T> {
        c.iter()
            .zip(x.iter().zip(y))
            .map(|(&c, (&x, &y))| if c { x } else { y })
            .collect()
    }
    Ok(match (a, b) {
        (TileData::Float(x), TileData::Float(y)) => TileData::Float(pick(c, x, y)),
        (TileData::Int(x), TileData::Int(y)) => TileData::Int(pick(c, x, y)),
        (TileData::Bool(x), TileData::Bool(y)) => TileData::Bool(pick(c, x, y)),
        (TileData::Ptr(x), TileData::Ptr(y)) => TileData::Ptr(pick(c, x, y)),
        _ => {
            return Err(malformed(format!(
                "select between {} and {} values",
                a.family(),
                b.family()
            )))
        }
    })
}

/// Converts `x` to dtype `to`: float→float rounds to nearest even, float→int truncates
/// toward zero (saturating, NaN → 0), int→float rounds, bool→number gives 0/1,
/// number→bool tests `!= 0`.
pub(crate) fn cast(to: ScalarType, x: &TileData) -> Result<TileData, Fault> {
    Ok(match x {
        TileData::Float(v) if to.is_float() => {
            TileData::Float(v.iter().map(|&f| round_float(to, f)).collect())
        }
        TileData::Float(v) if to.is_int() => {
            TileData::Int(v.iter().map(|&f| float_to_int(to, f)).collect())
        }
        TileData::Float(v) => TileData::Bool(v.iter().map(|&f| f != 0.0).collect()),
        TileData::Int(v) if to.is_float() => {
            TileData::Float(v.iter().map(|&i| int_to_float(to, i)).collect())
        }
        TileData::Int(v) if to.is_int() => {
            TileData::Int(v.iter().map(|&i| wrap_int(to, i)).collect())
        }
        TileData::Int(v) => TileData::Bool(v.iter().map(|&i| i != 0).collect()),
        TileData::Bool(v) if to.is_float() => {
            TileData::Float(v.iter().map(|&b| b as u8 as f64).collect())
        }
        TileData::Bool(v) if to.is_int() => TileData::Int(v.iter().map(|&b| b as i64).collect()),
        TileData::Bool(v) => TileData::Bool(v.clone()),
        TileData::Ptr(_) => return Err(malformed(format!("cannot cast a pointer to {to}"))),
    })
}
