//! Typing rules of the DSL (they are the specializer's, not the Builder's).
//!
//! - Constexprs and literals are untyped numbers until they meet a runtime value: an
//!   integer constexpr adopts the other operand's dtype (`x * 2` with `x: f32` multiplies by
//!   `2.0f32`), a float constexpr adopts a float dtype; a float constexpr meeting an integer
//!   operand is a dtype mismatch, as is a bool meeting a number.
//! - Two runtime operands must have the same dtype: no implicit promotion; the message
//!   says which `.cast::<T>()` would fix it.
//! - A constexpr used alone as a runtime value materializes as i32 (i64 when it does not
//!   fit), f32 or bool.
//! - Shapes broadcast numpy-style (rank ≤ 2); mismatches name both shapes.
//! - Values crossing `if`/`for`/`while` boundaries keep their type: a constexpr adopts the
//!   type the variable has, a runtime value of another type is an error.

use super::lowerer::{Lowerer, R};
use super::value::{describe_const, Val};
use super::{ConstValue, DslError};
use crate::ir::{Elem, Scalar, ScalarType, Type, ValueId};
use proc_macro2::Span;

/// How dtypes rank when suggesting a cast: floats over ints, wider over narrower.
fn cast_rank(s: ScalarType) -> u8 {
    match s {
        ScalarType::Bool => 0,
        ScalarType::I32 => 1,
        ScalarType::I64 => 2,
        ScalarType::F16 | ScalarType::Bf16 => 3,
        ScalarType::F32 => 4,
    }
}

/// The dtype to cast both operands to when `a` and `b` meet.
fn suggested_cast(a: ScalarType, b: ScalarType) -> ScalarType {
    match cast_rank(a).cmp(&cast_rank(b)) {
        std::cmp::Ordering::Greater => a,
        std::cmp::Ordering::Less => b,
        std::cmp::Ordering::Equal => ScalarType::F32,
    }
}

/// The same element type and shape (layouts are not assigned yet).
pub(crate) fn same_type(a: &Type, b: &Type) -> bool {
    a.elem == b.elem && a.shape == b.shape
}

/// A constexpr's dtype when nothing else decides it.
pub(crate) fn default_scalar(c: &ConstValue) -> Option<ScalarType> {
    match c {
        ConstValue::Int(v) if i32::try_from(*v).is_ok() => Some(ScalarType::I32),
        ConstValue::Int(_) => Some(ScalarType::I64),
        ConstValue::Float(_) => Some(ScalarType::F32),
        ConstValue::Bool(_) => Some(ScalarType::Bool),
        _ => None,
    }
}

impl<'m, 'f> Lowerer<'m, 'f> {
    /// The scalar `Const` op for constexpr `c` as dtype `s`; `op` names the context.
    pub fn const_as(&mut self, c: &ConstValue, s: ScalarType, op: &str, span: Span) -> R<ValueId> {
        let scalar = match (c, s) {
            (ConstValue::Int(v), s) if s.is_int() => {
                if s == ScalarType::I32 && i32::try_from(*v).is_err() {
                    return Err(DslError::new(
                        span,
                        format!("constant {v} does not fit in i32 (in `{op}`)"),
                    ));
                }
                Scalar::Int(*v, s)
            }
            (ConstValue::Int(v), s) if s.is_float() => Scalar::Float(*v as f64, s),
            (ConstValue::Float(v), s) if s.is_float() => Scalar::Float(*v, s),
            (ConstValue::Bool(v), ScalarType::Bool) => Scalar::Bool(*v),
            _ => {
                let hint = if matches!(c, ConstValue::Float(_)) && s.is_int() {
                    format!(" (insert `.cast::<f32>()` on the {s} operand)")
                } else {
                    String::new()
                };
                return Err(DslError::new(
                    span,
                    format!(
                        "dtype mismatch in `{op}`: {} vs {s}{hint}",
                        describe_const(c)
                    ),
                ));
            }
        };
        self.at(span);
        Ok(self.b.constant(scalar))
    }

    /// A value as one runtime SSA value (constexprs materialize with their default dtype).
    pub fn runtime(&mut self, v: Val, what: &str, span: Span) -> R<ValueId> {
        match v {
            Val::Runtime(id) => Ok(id),
            Val::Const(c) => match default_scalar(&c) {
                Some(s) => self.const_as(&c, s, what, span),
                None => Err(DslError::new(
                    span,
                    format!("`{what}` needs a number, got {}", describe_const(&c)),
                )),
            },
            other => Err(DslError::new(
                span,
                format!("`{what}` needs a number or tile, got {}", other.kind_name()),
            )),
        }
    }

    /// Brings two operands (at least one runtime) to one dtype, per the module rules.
    pub fn operands(&mut self, op: &str, a: Val, b: Val, span: Span) -> R<(ValueId, ValueId)> {
        match (a, b) {
            (Val::Runtime(x), Val::Runtime(y)) => {
                let (ex, ey) = (self.b.ty(x).elem, self.b.ty(y).elem);
                if ex != ey {
                    let hint = match (ex.scalar(), ey.scalar()) {
                        (Some(p), Some(q)) => {
                            format!(" (insert `.cast::<{}>()`)", suggested_cast(p, q))
                        }
                        _ => String::new(),
                    };
                    return Err(DslError::new(
                        span,
                        format!("dtype mismatch in `{op}`: {ex} vs {ey}{hint}"),
                    ));
                }
                Ok((x, y))
            }
            (Val::Const(c), Val::Runtime(y)) => {
                let s = self.scalar_of(y, op, span)?;
                Ok((self.const_as(&c, s, op, span)?, y))
            }
            (Val::Runtime(x), Val::Const(c)) => {
                let s = self.scalar_of(x, op, span)?;
                Ok((x, self.const_as(&c, s, op, span)?))
            }
            (Val::Const(p), Val::Const(q)) => {
                let s = joint_default(&p, &q).ok_or_else(|| {
                    DslError::new(
                        span,
                        format!(
                            "dtype mismatch in `{op}`: {} vs {}",
                            describe_const(&p),
                            describe_const(&q)
                        ),
                    )
                })?;
                Ok((
                    self.const_as(&p, s, op, span)?,
                    self.const_as(&q, s, op, span)?,
                ))
            }
            (a, b) => {
                let bad = if matches!(a, Val::Runtime(_) | Val::Const(_)) {
                    b
                } else {
                    a
                };
                Err(DslError::new(
                    span,
                    format!("`{op}` needs numbers or tiles, got {}", bad.kind_name()),
                ))
            }
        }
    }

    /// The element dtype of a numeric value (pointers are not numbers).
    pub fn scalar_of(&self, v: ValueId, op: &str, span: Span) -> R<ScalarType> {
        let t = self.b.ty(v);
        t.elem
            .scalar()
            .ok_or_else(|| DslError::new(span, format!("`{op}` is not defined on {t}")))
    }

    /// Fails with the Builder's shape message (named after `op`) when shapes do not broadcast.
    pub fn check_broadcast(&self, op: &str, a: ValueId, b: ValueId, span: Span) -> R<()> {
        let (sa, sb) = (self.b.ty(a).shape.clone(), self.b.ty(b).shape.clone());
        self.b
            .broadcast_shape(op, &sa, &sb)
            .map(|_| ())
            .map_err(Self::ir_err(span))
    }

    /// `v` as a value of exactly type `ty` (constexprs adopt it, splatted to its shape);
    /// `mismatch` words the error from a description of what `v` is.
    pub fn coerce(
        &mut self,
        v: &Val,
        ty: &Type,
        span: Span,
        mismatch: &dyn Fn(String) -> String,
    ) -> R<ValueId> {
        match v {
            Val::Runtime(id) => {
                let t = self.b.ty(*id).clone();
                if same_type(&t, ty) {
                    Ok(*id)
                } else {
                    Err(DslError::new(span, mismatch(t.to_string())))
                }
            }
            Val::Const(c) => {
                let ok = match (c, ty.elem) {
                    (ConstValue::Int(_), Elem::Scalar(_)) => true,
                    (ConstValue::Float(_), Elem::Scalar(s)) => s.is_float(),
                    (ConstValue::Bool(_), Elem::Scalar(s)) => s == ScalarType::Bool,
                    _ => false,
                };
                let s = match ty.elem.scalar() {
                    Some(s) if ok => s,
                    _ => return Err(DslError::new(span, mismatch(describe_const(c)))),
                };
                let x = self.const_as(c, s, "assignment", span)?;
                self.b.splat(x, &ty.shape).map_err(Self::ir_err(span))
            }
            other => Err(DslError::new(span, mismatch(other.kind_name().to_string()))),
        }
    }
}

/// The dtype two constexprs share when both must materialize: f32 if either is a float.
pub(crate) fn joint_default(a: &ConstValue, b: &ConstValue) -> Option<ScalarType> {
    let (x, y) = (default_scalar(a)?, default_scalar(b)?);
    if x == y {
        return Some(x);
    }
    match (x, y) {
        (ScalarType::Bool, _) | (_, ScalarType::Bool) => None,
        (ScalarType::F32, _) | (_, ScalarType::F32) => Some(ScalarType::F32),
        _ => Some(ScalarType::I64),
    }
}
