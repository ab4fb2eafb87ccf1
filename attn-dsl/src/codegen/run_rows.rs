//! Rows addressed from their run's first row (shipped; `ATTN_CODEGEN_DISABLE=run_rows`): a
//! paged cache's rows come in runs one stride apart (a page), and a thread's row in a pass
//! is the run's first row's address plus its offset in the run, so the page index is taken
//! of a multiple of the run and the offset is loop-invariant.

use super::emitter::{Emitter, Role};
use super::page_pointer::RunStart;
use super::CodegenError;
use crate::gpu_ir::AsyncCopy;

type Res<T> = Result<T, CodegenError>;

/// The shortest run of rows [`Emitter::run_rows`] addresses from its first (a page of 8
/// keys and up; a 128-byte swizzle atom's rows).
pub(crate) const MIN_RUN_ROWS: usize = 8;

/// A thread's rows of one pass inside a run of rows one stride apart
/// ([`Emitter::run_rows`]): the run's first row (an alloc row index) and length, and the
/// element offset from its address to this thread's row.
pub(crate) struct RunRows {
    pub(crate) start: RunStart,
    pub(crate) offset: String,
}

impl Emitter<'_> {
    /// Where copy `c`'s source rows come in runs one stride apart (a page of a paged cache,
    /// [`crate::gpu_ir::row_affine`]) and each pass's rows of a thread fall in runs it can
    /// name without dividing by the run (the run a multiple of the rows a pass covers, or
    /// the other way round): the first row of this thread's run in pass `p`, and the offset
    /// to its row (shipped; `ATTN_CODEGEN_DISABLE=run_rows` turns it off). The address of
    /// the run's first row leaves the compiler a multiple of the run to divide (its bits
    /// known), where each row's own address makes it divide and take the remainder of a row
    /// it cannot bound (P0's producer loop, sm_90a SASS: 346 instructions a warp a tile, 297
    /// with it; P0 on the H200 2.11 → 2.05 ms, 1.96 with the split ring).
    pub(crate) fn run_rows(&self, c: &AsyncCopy, lanes: usize) -> Res<Option<RunRows>> {
        // Only the producer's: other copies share the registers with accumulators, and the
        // offset a pass they hold spilled (P3's image-range loop the consumers copy
        // themselves, 12 bytes at 232 registers; MLA's combine, 4 at 128).
        if !crate::features::on("run_rows") || self.role != Role::Producer {
            return Ok(None);
        }
        let Some(rows) = crate::gpu_ir::row_affine::of_copy(self.f, &self.defs, &self.prog.axis, c)
        else {
            return Ok(None);
        };
        // A run longer than the tile (rows one stride apart end to end) is the whole tile.
        let tile_rows = self.prog.alloc(c.dst).rows;
        let (run, per_pass) = ((rows.run as usize).min(tile_rows), self.threads / lanes);
        // Short runs (the queries' rows of a GQA group: two) save nothing and hold an offset
        // a pass (P3's consumers spilled with them).
        if run < MIN_RUN_ROWS {
            return Ok(None);
        }
        let row_in_pass = format!("tid / {lanes}");
        let (first, in_run) = if run >= per_pass && run.is_multiple_of(per_pass) {
            (
                format!("(p * {per_pass} / {run}) * {run}"),
                format!("p * {per_pass} % {run} + {row_in_pass}"),
            )
        } else if run > 0 && per_pass.is_multiple_of(run) {
            (
                format!("p * {per_pass} + {row_in_pass} / {run} * {run}"),
                format!("{row_in_pass} % {run}"),
            )
        } else {
            return Ok(None);
        };
        let Some(stride) = self.lin_text(&rows.stride)? else {
            return Ok(None);
        };
        Ok(Some(RunRows {
            start: RunStart {
                first,
                run: run as u64,
            },
            offset: format!("(long long)({in_run}) * ({stride})"),
        }))
    }

    /// A row stride as C (`None` when a term is not a kernel parameter, whose name holds
    /// everywhere).
    pub(crate) fn lin_text(&self, l: &crate::gpu_ir::row_affine::Lin) -> Res<Option<String>> {
        let mut parts = vec![format!("{}ll", l.konst)];
        for (&v, &k) in &l.terms {
            if !self.f.params.iter().any(|p| p.value == v) {
                return Ok(None);
            }
            parts.push(format!("{k}ll * (long long){}", self.name(v)?));
        }
        Ok(Some(parts.join(" + ")))
    }
}
