//! A copy mask's row test against a uniform bound (opt-in, `ATTN_CODEGEN_ENABLE=mask_bound`).
//! A copy's mask tests each row's key against a bound, `(start + row) < bound` with `start`
//! (the tile's first key) and `bound` the same for every row: an add and a compare a row
//! and pass, since the DSL's integers wrap and the compiler cannot move the add across the
//! compare. Written `row < (bound − start)`, the difference is one uniform value a tile and
//! each pass compares a row index that does not change from tile to tile. The two differ
//! only where `start + row` or `bound − start` overflows an `int`: keys and bounds of a
//! cache the op has validated are far below that. P0's producer loop, sm_90a SASS, after
//! `page_pointer` and `byte_rows`: 317 → 303 instructions a warp a tile (pinned with the
//! other address cuts in `attn-runtime/tests/producer_address_kernels.rs`).

use super::elem_index::ElemIndex;
use super::emitter::{Emitter, Role};
use super::remat::Scope;
use super::CodegenError;
use crate::ir::{BinaryOp, CmpPred, Op, OpKind};

type Res<T> = Result<T, CodegenError>;

impl Emitter<'_> {
    /// Recomputes copy mask `f` with its row tests against uniform bounds (off unless
    /// enabled, and only in a producer: a consumer's copies share registers with its
    /// accumulators, and P0's queries tested this way cost its consumers a spill).
    pub(crate) fn in_copy_mask<T>(&self, f: impl FnOnce() -> T) -> T {
        if !crate::features::on("mask_bound") || self.role != Role::Producer {
            return f();
        }
        let before = self.copy_mask.replace(true);
        let out = f();
        self.copy_mask.replace(before);
        out
    }

    /// `row < bound − start` for a copy mask's `start + row < bound` (or `≤`), `start` and
    /// `bound` uniform scalars and `row` a tile; `None` to recompute the test as written.
    pub(crate) fn mask_bound(&self, op: &Op, at: &ElemIndex, scope: &Scope) -> Res<Option<String>> {
        if !self.copy_mask.get() {
            return Ok(None);
        }
        let sym = match op.kind {
            OpKind::Cmp(CmpPred::Lt) => "<",
            OpKind::Cmp(CmpPred::Le) => "<=",
            _ => return Ok(None),
        };
        let [lhs, bound] = op.operands[..] else {
            return Ok(None);
        };
        let (Some(bound), Some(add)) = (self.uniform_scalar(bound), self.def_op(lhs)) else {
            return Ok(None);
        };
        let (OpKind::Binary(BinaryOp::Add), [a, b]) = (&add.kind, add.operands.as_slice()) else {
            return Ok(None);
        };
        let (start, row) = match (self.uniform_scalar(*a), self.uniform_scalar(*b)) {
            (Some(s), None) => (s, *b),
            (None, Some(s)) => (s, *a),
            _ => return Ok(None),
        };
        let start = self.remat_expr(start, at, scope)?;
        let bound = self.remat_expr(bound, at, scope)?;
        let row = self.remat_expr(row, at, scope)?;
        Ok(Some(format!("({row} {sym} attn_wsub({bound}, {start}))")))
    }
}
