//! Block-table loads of a prefetch issued one iteration early.
//!
//! A paged K/V tile's copy computes each row's address from a block-table entry: a global
//! load whose result the copy needs at once, so every prefetch would stall its warp for a
//! load latency before the first `cp.async`. Instead, the loads that a prefetch copy's row
//! address makes (per pass of the copy's rows, at the thread's row) go to registers: filled
//! before the loop for the first prefetch, and after each prefetch for the next one, so a
//! whole iteration of compute hides them. Only the loaded values are carried (an `int` per
//! pass and load); the address arithmetic stays at the copy.

use super::async_copy::{thread_row, LoopIteration};
use super::c_types::reg_type;
use super::elem_index::ElemIndex;
use super::emitter::Emitter;
use super::remat::Scope;
use super::CodegenError;
use crate::gpu_ir::remat::defined_in;
use crate::gpu_ir::{AsyncCopy, CopyAt, GpuBlock, GpuOp};
use crate::ir::{OpId, ValueId};

type Res<T> = Result<T, CodegenError>;

/// Passes (rows per thread) up to which a prefetch's row loads are issued early: each holds
/// a register per load across the loop, and a copy of many passes (one-warp decode: 8)
/// already overlaps its rows' loads with each other.
const MAX_EARLY_ROW_PASSES: usize = 2;

/// One load inside a prefetch copy's row address, carried in registers.
#[derive(Clone, Debug)]
pub(crate) struct EarlyLoad {
    /// The tile-IR load's result, and the element the row address reads it at.
    pub(crate) value: ValueId,
    pub(crate) at: ElemIndex,
    /// The per-pass register array.
    pub(crate) name: String,
}

impl<'f> Emitter<'f> {
    /// Before pipelined loop `l` (GPU body `gbody`): declares the registers of every prefetch
    /// copy whose row address loads memory, and fills them for the loop's first prefetch.
    pub(crate) fn declare_early_row_loads(&mut self, l: OpId, gbody: &GpuBlock) -> Res<()> {
        if super::feature_disabled("early_rows") {
            return Ok(());
        }
        for g in &gbody.ops {
            let GpuOp::AsyncCopy(c) = g else { continue };
            let passes = self.copy_passes(c);
            if c.loop_op != Some(l)
                || !matches!(c.at, CopyAt::Ahead(_))
                || !c.map.row_contiguous
                || passes > MAX_EARLY_ROW_PASSES
            {
                continue;
            }
            let loads = self.row_loads(c, "0")?;
            // Only leaf loads (none reads another's result) can be filled independently.
            if loads.is_empty()
                || loads
                    .iter()
                    .any(|(_, _, e)| e.matches("attn_ld(").count() > 1)
            {
                continue;
            }
            self.w.line(format!(
                "// (block-table loads of the `{}` prefetch, one iteration early)",
                self.prog.alloc(c.dst).name
            ));
            let mut early = Vec::new();
            for (value, at, _) in loads {
                let name = self.fresh_name("attn_row_ld");
                self.w
                    .line(format!("{} {name}[{passes}];", reg_type(self.elem(value))));
                early.push(EarlyLoad { value, at, name });
            }
            self.early_rows.insert(c.load.0, early);
            self.fill_early_row_loads(c, 0)?;
        }
        Ok(())
    }

    /// Whether copy `load`'s row address reads early registers; if so, binds them for the
    /// copy being emitted (until [`Emitter::refill_early_row_loads`]).
    pub(crate) fn use_early_row_loads(&self, load: OpId) -> bool {
        let Some(early) = self.early_rows.get(&load.0) else {
            return false;
        };
        let mut locals = self.remat_locals.borrow_mut();
        for e in early {
            locals.insert(e.value.0, (format!("{}[p]", e.name), Some(e.at.clone())));
        }
        true
    }

    /// After a prefetch: unbinds its early registers and refills them for the next one.
    pub(crate) fn refill_early_row_loads(&mut self, c: &AsyncCopy) -> Res<()> {
        if let Some(early) = self.early_rows.get(&c.load.0) {
            let mut locals = self.remat_locals.borrow_mut();
            for e in early {
                locals.remove(&e.value.0);
            }
        }
        self.fill_early_row_loads(c, 1)
    }

    /// Fills copy `c`'s early registers with its row loads `extra` iterations past the
    /// copy's own (0 before the loop, 1 after each prefetch), when that iteration exists.
    fn fill_early_row_loads(&mut self, c: &AsyncCopy, extra: usize) -> Res<()> {
        let (Some(l), CopyAt::Ahead(k)) = (c.loop_op, c.at) else {
            return Err(CodegenError::Malformed(
                "early row loads off a prefetch".into(),
            ));
        };
        let it = LoopIteration::of(self, l)?;
        let iv = if extra == 0 {
            it.ahead(&it.lo, k)
        } else {
            it.ahead(self.name(it.iv)?, k + extra)
        };
        let early = self.early_rows.get(&c.load.0).cloned().unwrap_or_default();
        let loads = self.row_loads(c, &iv)?;
        let lanes = c.map.lanes;
        self.w.open(format!("if ({iv} < {})", it.hi));
        self.w.open_unrolled("p", self.copy_passes(c));
        self.w.line(format!(
            "const int attn_row = p * {} + {}, attn_lane_in_row = tid % {lanes};",
            self.threads / lanes,
            thread_row(lanes)
        ));
        for e in &early {
            let (_, _, expr) = loads
                .iter()
                .find(|(v, at, _)| *v == e.value && *at == e.at)
                .ok_or_else(|| CodegenError::Malformed("early row load not found".into()))?;
            self.w.line(format!("{}[p] = {expr};", e.name));
        }
        self.w.close("");
        self.w.close("");
        Ok(())
    }

    /// The loads copy `c`'s row address makes at iteration `iv` (`"0"`: any; only the
    /// values and elements are used then): (value, element, C++ expression).
    fn row_loads(&self, c: &AsyncCopy, iv: &str) -> Res<Vec<(ValueId, ElemIndex, String)>> {
        let Some(l) = c.loop_op else {
            return Ok(vec![]);
        };
        let body = &self.f.op(l).regions[0];
        let inside = defined_in(self.f, body);
        let scope = Scope::Loop {
            iv: body.args[0],
            iv_expr: iv.to_string(),
            defined_in_body: &inside,
        };
        *self.load_capture.borrow_mut() = Some(Vec::new());
        let ptr = self.f.op(c.load).operands[0];
        let r = self.remat_expr(ptr, &Self::chunk_coords(c, "0"), &scope);
        let captured = self.load_capture.borrow_mut().take().unwrap_or_default();
        r.map(|_| captured)
    }

    /// Row passes of copy `c` (rows per thread).
    fn copy_passes(&self, c: &AsyncCopy) -> usize {
        self.prog
            .alloc(c.dst)
            .rows
            .div_ceil(self.threads / c.map.lanes)
    }
}
