//! A page's block-table entry addressed from one pointer a tile (opt-in,
//! `ATTN_CODEGEN_ENABLE=page_pointer`). Where a copy addresses its rows from their run's
//! first row (`run_rows`), the block-table entry of a pass's page is `table + x(first) /
//! PAGE` for the key vector `x` at that row: a signed division's fix-ups, a sign extension
//! and a 64-bit add for every page, since the compiler can prove neither the key
//! non-negative nor the wrapping add splittable. When `x` steps by one a row over the
//! whole tile and its first element is a multiple of `PAGE` (the axis analysis says so),
//! and the run is the page, `x(first) = x(0) + first` with both terms multiples of `PAGE`,
//! so the division splits exactly: `(table + x(0) / PAGE) + first / PAGE`, the tile's
//! pointer once and a constant a pass. (It differs only where `x(0) + first` overflows an
//! `int`, keys no cache holds.) P0's producer loop, sm_90a SASS: 413 → 334 instructions a
//! warp a tile, P1's 189 → 143 (NVRTC 13.0, sm_90a); not yet timed on the GPU.

use super::elem_index::ElemIndex;
use super::emitter::Emitter;
use super::remat::Scope;
use super::CodegenError;
use crate::ir::{BinaryOp, Op, OpKind, ValueId};

type Res<T> = Result<T, CodegenError>;

/// The run-start row a copy's address is being recomputed at ([`Emitter::run_rows`]).
#[derive(Clone)]
pub(crate) struct RunStart {
    /// The row's C text (substituted for the copy's row coordinate).
    pub first: String,
    /// Rows of a run (a page).
    pub run: u64,
}

impl Emitter<'_> {
    /// Recomputes `f` with the copy's row at run start `start`, so block-table addresses
    /// met on the way split at the page (see the module note; off unless enabled).
    pub(crate) fn at_run_start<T>(&self, start: RunStart, f: impl FnOnce() -> T) -> T {
        if !crate::features::on("page_pointer") {
            return f();
        }
        let before = self.run_start.replace(Some(start));
        let out = f();
        self.run_start.replace(before);
        out
    }

    /// `table + x / PAGE` at the run start, split at the page, when the module note's
    /// conditions hold; `None` to recompute it as written.
    pub(crate) fn page_pointer(
        &self,
        op: &Op,
        at: &ElemIndex,
        scope: &Scope,
    ) -> Res<Option<String>> {
        let Some(start) = self.run_start.borrow().clone() else {
            return Ok(None);
        };
        let (Some(&table), Some(&offset)) = (op.operands.first(), op.operands.get(1)) else {
            return Ok(None);
        };
        let Some(div) = self.def_op(offset) else {
            return Ok(None);
        };
        let (OpKind::Binary(BinaryOp::Div), [x, d]) = (&div.kind, div.operands.as_slice()) else {
            return Ok(None);
        };
        if self.int_constant(*d) != Some(start.run as i64) || !self.steps_by_row(*x, start.run) {
            return Ok(None);
        }
        let at_start = self.remat_expr(*x, at, scope)?;
        if !at_start.contains(&start.first) {
            return Ok(None);
        }
        let at_zero = at_start.replace(&start.first, "0");
        let table = self.remat_expr(table, at, scope)?;
        Ok(Some(format!(
            "(({table} + {}) + {})",
            exact_quotient(&at_zero, start.run),
            exact_quotient(&start.first, start.run)
        )))
    }

    /// Whether vector `x` steps by one element a row over its whole length from a first
    /// element that is a multiple of `page`.
    fn steps_by_row(&self, x: ValueId, page: u64) -> bool {
        let shape = &self.f.ty(x).shape;
        let info = self.prog.axis.get(x);
        shape.len() == 1
            && info.contiguity.first().copied() >= Some(shape[0] as u64)
            && info.divisibility.first().is_some_and(|d| d % page == 0)
    }
}

/// `x / divisor` for an `x` known to be a multiple of it: an arithmetic shift for a power of
/// two (exact for negative multiples too), which the compiler neither has to fix up for
/// rounding toward zero nor sinks into every page's predicated load as it did the division.
fn exact_quotient(x: &str, divisor: u64) -> String {
    if divisor.is_power_of_two() {
        format!("(({x}) >> {})", divisor.trailing_zeros())
    } else {
        format!("(({x}) / {divisor})")
    }
}
