//! The evaluator of rematerialized values (see `gpu_ir::remat` for which values qualify):
//! the C++ expression of one element of a value at any coordinates, recomputed from scalars,
//! coordinates and read-only loads, optionally for another iteration of a loop.

use super::c_types::literal;
use super::elem_index::ElemIndex;
use super::elementwise::zero;
use super::emitter::Emitter;
use super::recompute::check_broadcast;
use super::CodegenError;
use crate::ir::{OpKind, ValueId};

type Res<T> = Result<T, CodegenError>;

/// Where an expression is evaluated: in place (every scalar defined so far has its name), or
/// for an iteration of a loop other than the current one (the loop body's values are
/// recomputed and the induction variable is `iv_expr`).
pub(crate) enum Scope<'a> {
    InPlace,
    Loop {
        iv: ValueId,
        iv_expr: String,
        defined_in_body: &'a [bool],
    },
}

impl<'f> Emitter<'f> {
    /// Element `at` of `v`, recomputed.
    pub(crate) fn remat_expr(&self, v: ValueId, at: &ElemIndex, scope: &Scope) -> Res<String> {
        let scalar = self.f.ty(v).is_scalar();
        match scope {
            Scope::Loop { iv, iv_expr, .. } if *iv == v => return Ok(iv_expr.clone()),
            Scope::Loop {
                defined_in_body, ..
            } if scalar && !defined_in_body[v.0 as usize] => {
                return Ok(self.name(v)?.to_string())
            }
            Scope::InPlace if scalar => return Ok(self.name(v)?.to_string()),
            _ => {}
        }
        let op = self.def_op(v).ok_or_else(|| {
            CodegenError::Malformed(format!("%{} cannot be recomputed (no defining op)", v.0))
        })?;
        let recurse = |x: ValueId, i: &ElemIndex| self.remat_expr(x, i, scope);
        match &op.kind {
            OpKind::Const(s) => Ok(literal(*s)),
            OpKind::Broadcast { .. } => {
                let x = Self::operand(op, 0)?;
                if self.f.ty(x).is_scalar() {
                    return recurse(x, at);
                }
                check_broadcast(self.shape(x), self.shape(v))?;
                recurse(x, &at.broadcast_source(self.shape(x), self.shape(v)))
            }
            OpKind::Load {
                has_mask,
                has_other,
            } => {
                let ptr = recurse(Self::operand(op, 0)?, at)?;
                let load = format!("attn_ld({ptr})");
                if !has_mask {
                    return Ok(load);
                }
                let mask = recurse(Self::operand(op, 1)?, at)?;
                let other = if *has_other {
                    recurse(Self::operand(op, 2)?, at)?
                } else {
                    zero(self.elem(v)).to_string()
                };
                Ok(format!("(({mask}) ? {load} : {other})"))
            }
            k if k.is_coordinate_op() => self.element_expr(op, at, &recurse),
            k => Err(CodegenError::Malformed(format!(
                "%{} ({k:?}) cannot be recomputed",
                v.0
            ))),
        }
    }
}
