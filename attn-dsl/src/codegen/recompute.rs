//! Index tiles recomputed where they are used instead of held in registers.
//!
//! A tile that is a pure function of its element's coordinates and of scalars (`arange`,
//! splats, `unsqueeze`, `broadcast`, and arithmetic, comparisons, selects, casts and pointer
//! offsets over such tiles: index, pointer and mask tiles) is *deferred*: the emitter writes
//! no code for it and every consumer evaluates its expression at the element it needs. This
//! turns the `broadcast` of an index tile into integer arithmetic (no shared-memory round
//! trip, no barrier), keeps pointer and mask tiles out of registers across loops, and gives
//! NVRTC far less code. Expressions longer than [`MAX_EXPR_CHARS`] are materialized instead,
//! so deeply shared index DAGs cannot blow up the source.

use super::elem_index::ElemIndex;
use super::emitter::Emitter;
use super::CodegenError;
use crate::ir::{Op, OpKind, ValueId};

type Res<T> = Result<T, CodegenError>;

/// Longest per-element expression a deferred tile may have (in characters of C++).
pub(crate) const MAX_EXPR_CHARS: usize = 3000;

impl<'f> Emitter<'f> {
    /// Defers `op` (result `res`) when it is a per-element function of coordinates and
    /// scalars whose expression stays short; returns whether it did.
    pub(crate) fn try_defer(&mut self, op: &'f Op, res: ValueId) -> Res<bool> {
        let kind_ok = op.kind.is_coordinate_op();
        let operands_ok = op
            .operands
            .iter()
            .all(|&v| self.f.ty(v).is_scalar() || self.is_deferred(v));
        if self.f.ty(res).is_scalar() || !kind_ok || !operands_ok {
            return Ok(false);
        }
        self.set_deferred(res, true);
        let probe = self.expr_at(res, &self.map(res).index("s"))?;
        if probe.len() > MAX_EXPR_CHARS {
            self.set_deferred(res, false);
            return Ok(false);
        }
        self.w.line("// (index tile: recomputed where used)");
        Ok(true)
    }

    /// The C++ expression of element `at` of `v`, which must be a scalar or a deferred tile.
    pub(crate) fn expr_at(&self, v: ValueId, at: &ElemIndex) -> Res<String> {
        if self.f.ty(v).is_scalar() {
            return Ok(self.name(v)?.to_string());
        }
        let op = self
            .def_op(v)
            .filter(|_| self.is_deferred(v))
            .ok_or_else(|| CodegenError::Malformed(format!("%{} is not a deferred tile", v.0)))?;
        if let OpKind::Broadcast { .. } = op.kind {
            let x = Self::operand(op, 0)?;
            if self.f.ty(x).is_scalar() {
                return self.expr_at(x, at);
            }
            check_broadcast(self.shape(x), self.shape(v))?;
            return self.expr_at(x, &at.broadcast_source(self.shape(x), self.shape(v)));
        }
        self.element_expr(op, at, &|x, i| self.expr_at(x, i))
    }
}

/// Checks that `broadcast` from `src` to `dst` only repeats size-1 dims of the same rank.
pub(crate) fn check_broadcast(src: &[usize], dst: &[usize]) -> Res<()> {
    if src.len() != dst.len() || src.iter().zip(dst).any(|(&a, &b)| a != b && a != 1) {
        return Err(CodegenError::Malformed(format!(
            "broadcast {src:?} -> {dst:?}"
        )));
    }
    Ok(())
}
