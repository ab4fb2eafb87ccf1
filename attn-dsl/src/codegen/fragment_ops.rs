//! Ops on `Mma` fragments that never leave the registers: broadcasting a row vector over the
//! columns of its fragment (each lane already holds the rows it needs) and reducing the rows
//! of a fragment into its row vector (an in-thread fold and two quad shuffles).
//!
//! Row-reduction order: each lane folds its own elements of the row (column tiles
//! ascending, the two columns of a tile ascending), then the four lanes of the quad combine
//! pairwise (`xor 1`, then `xor 2`), so a row sum is a tree over lanes of in-lane sums, not the
//! CPU executor's ascending sum: f32 sums agree to rounding, not bit for bit. `max`/`min`
//! start from NaN, which `fmaxf`/`fminf` ignore, so they equal the executor's result exactly.
//!
//! Column-split fragments (the `C` warps of a grid row own column blocks of its slabs) add a
//! cross-warp step: the first lane of each quad writes its warp's partial to a `[rows][C]`
//! buffer in the scratch area, and after a barrier every thread folds its grid row's `C`
//! partials in ascending grid-column order (so a row sum is `((p0 + p1) + p2) + ...` over
//! per-warp quad trees; all threads compute the same value, keeping the replicated row vector
//! consistent across warps). A barrier before the writes keeps them off scratch data other
//! warps may still read.

use super::c_types::{reg_type, round_to, scalar_reg_type};
use super::elementwise::binary;
use super::emitter::Emitter;
use super::tile_map::{MmaMap, TileMap};
use super::CodegenError;
use crate::ir::{BinaryOp, Op, ReduceKind, ScalarType, ValueId};

type Res<T> = Result<T, CodegenError>;

/// Independent chains of an in-lane row fold (see `Emitter::try_reduce_rows`).
const FOLD_WAYS: usize = 4;

impl<'f> Emitter<'f> {
    /// Emits `broadcast(x) -> res` as register reads when `x` is the row vector of `res`'s
    /// fragment (`[m, 1]` → `[m, n]` in `Mma`); returns whether it did.
    pub(crate) fn try_broadcast_rows(&mut self, x: ValueId, res: ValueId) -> Res<bool> {
        let (TileMap::Mma(xm), TileMap::Mma(rm)) = (self.map(x), self.map(res)) else {
            return Ok(false);
        };
        if self.f.ty(x).is_scalar() || !rm.has_row_vector(&xm) {
            return Ok(false);
        }
        self.w
            .line("// (row vector over its fragment's columns: a register read)");
        let src = rm.row_slot_of("s");
        self.define_map(res, move |e, _| e.at(x, &src))?;
        Ok(true)
    }

    /// Emits `reduce(x, axis 1) -> res` in registers when `res` is the row vector of `x`'s
    /// fragment; returns whether it did.
    pub(crate) fn try_reduce_rows(
        &mut self,
        op: &'f Op,
        kind: ReduceKind,
        axis: usize,
    ) -> Res<bool> {
        let (x, res) = (Self::operand(op, 0)?, Self::result(op)?);
        let (TileMap::Mma(xm), TileMap::Mma(rm)) = (self.map(x), self.map(res)) else {
            return Ok(false);
        };
        if axis != 1 || self.f.ty(res).rank() != 1 || !xm.has_row_vector(&rm) {
            return Ok(false);
        }
        let t = self.scalar(x)?;
        let (init, acc_t, finish) = reduce_rule(kind, t)?;
        let bop = match kind {
            ReduceKind::Sum => BinaryOp::Add,
            ReduceKind::Max => BinaryOp::Max,
            ReduceKind::Min => BinaryOp::Min,
        };
        let rt = reg_type(self.elem(x));
        // A deferred row sum (see `deferred_sum`) stays per lane: no shuffles, no warps.
        let partial = self.partial_rows.contains(&res.0);
        let split = xm.col_split() && !partial;
        let name = self.define_tile(res);
        if split {
            self.w.open("");
            self.w.line(format!(
                "{} attn_part[{}];",
                scalar_reg_type(acc_t),
                rm.slots()
            ));
        }
        // The in-lane fold keeps FOLD_WAYS independent chains (a 16-deep chain of dependent
        // `fmax` stalled P0's consumers more than its exponentials did), joined pairwise.
        // `ATTN_CODEGEN_DISABLE=fold_chains`: one chain, as before (A/B timing).
        let ways = if !crate::features::on("fold_chains") {
            1
        } else if xm.tiles_n % 2 == 0 {
            FOLD_WAYS
        } else {
            2
        };
        self.w.line(
            "// (row reduction: in-lane fold in independent chains, then the quad's xor-1 and xor-2 shuffles)",
        );
        self.w.open_unrolled("r", rm.slots());
        self.w.line(format!("{rt} attn_fold[{ways}];"));
        let guard = xm.col_guard("s");
        // Unguarded, each chain starts at its first element (no fold with the identity).
        let seeded = guard.is_none() && ways > 1;
        let first_nt = if seeded { ways / 2 } else { 0 };
        self.w.open_unrolled("k", ways);
        if seeded {
            self.w.line(format!(
                "const int s = ((r / 2) * {} + (k >> 1)) * 4 + (r & 1) * 2 + (k & 1);",
                xm.tiles_n
            ));
            self.w.line(format!("attn_fold[k] = {};", self.at(x, "s")?));
        } else {
            self.w.line(format!("attn_fold[k] = {init};"));
        }
        self.w.close("");
        self.w.line("#pragma unroll");
        self.w.open(format!(
            "for (int nt = {first_nt}; nt < {}; ++nt)",
            xm.tiles_n
        ));
        self.w.open_unrolled("c", 2);
        self.w.line(format!(
            "const int s = ((r / 2) * {} + nt) * 4 + (r & 1) * 2 + c;",
            xm.tiles_n
        ));
        let chain = match ways {
            FOLD_WAYS => "attn_fold[(nt & 1) * 2 + c]",
            2 => "attn_fold[c]",
            _ => "attn_fold[0]",
        };
        let step = format!(
            "{chain} = {};",
            binary(bop, acc_t, chain, &self.at(x, "s")?)?
        );
        match guard {
            Some(g) => self.w.line(format!("if ({g}) {step}")),
            None => self.w.line(step),
        }
        self.w.close("");
        self.w.close("");
        let pair = |a: &str, b: &str| binary(bop, acc_t, a, b);
        let joined = match ways {
            FOLD_WAYS => pair(
                &pair("attn_fold[0]", "attn_fold[1]")?,
                &pair("attn_fold[2]", "attn_fold[3]")?,
            )?,
            2 => pair("attn_fold[0]", "attn_fold[1]")?,
            _ => "attn_fold[0]".to_string(),
        };
        self.w.line(format!("{rt} acc = {joined};"));
        for lanes in [1, 2].into_iter().filter(|_| !partial) {
            let other = format!("attn_shfl_xor(acc, {lanes})");
            self.w
                .line(format!("acc = {};", binary(bop, acc_t, "acc", &other)?));
        }
        if split {
            self.w.line("attn_part[r] = acc;");
        } else {
            self.w
                .line(format!("{name}[r] = {};", finish("acc".into())));
        }
        self.w.close("");
        if split {
            // The row vector shares its fragment's warp grid (`has_row_vector`).
            self.combine_warp_partials(&name, bop, acc_t, &rm, &*finish)?;
            self.w.close("");
        }
        Ok(true)
    }

    /// The cross-warp step of a column-split row reduction: per-warp partials `attn_part[r]`
    /// (the rows of row-vector slot `r`) go through a `[rows][col_warps]` scratch buffer and
    /// are folded in ascending grid-column order into `name[r]`.
    pub(crate) fn combine_warp_partials(
        &mut self,
        name: &str,
        bop: BinaryOp,
        acc_t: ScalarType,
        rows: &MmaMap,
        finish: &dyn Fn(String) -> String,
    ) -> Res<()> {
        let ct = scalar_reg_type(acc_t);
        let cw = rows.col_warps;
        let padded_rows = rows.slabs_per_warp * rows.row_warps * 16;
        let row = rows.row("r");
        self.w.open("");
        // One of two alternating slots of its own (`scratch_ledger`: no barrier before), or
        // the start of the shared scratch buffer behind a barrier.
        let own_slot = self.take_reduction_slot(ct, padded_rows * cw * acc_t.size_bytes());
        if !own_slot {
            self.need_scratch(padded_rows * cw * 8);
            self.w.line(format!(
                "{ct}* attn_red = reinterpret_cast<{ct}*>(attn_scratch);"
            ));
            self.emit_block_sync();
        }
        self.w.open_unrolled("r", rows.slots());
        self.w.line(format!(
            "if (attn_t4 == 0) attn_red[{row} * {cw} + {}] = attn_part[r];",
            rows.warp_col()
        ));
        self.w.close("");
        if own_slot {
            self.emit_scratch_barrier();
        } else {
            self.emit_block_sync();
        }
        self.w.open_unrolled("r", rows.slots());
        self.w
            .line(format!("const {ct}* row = attn_red + {row} * {cw};"));
        self.w.line(format!("{ct} acc = row[0];"));
        self.w.open_unrolled("w", cw - 1);
        self.w.line(format!(
            "acc = {};",
            binary(bop, acc_t, "acc", "row[w + 1]")?
        ));
        self.w.close("");
        self.w
            .line(format!("{name}[r] = {};", finish("acc".into())));
        self.w.close("");
        self.w.close("");
        Ok(())
    }
}

/// A conversion applied to the final accumulator of a reduction.
type Finish = Box<dyn Fn(String) -> String>;

/// (identity, accumulator type, final conversion) of a reduction over elements of type `t`:
/// float sums accumulate in f32 and round once at the end, like the CPU executor.
fn reduce_rule(kind: ReduceKind, t: ScalarType) -> Res<(String, ScalarType, Finish)> {
    let keep: Finish = Box::new(|x| x);
    Ok(match (kind, t) {
        (ReduceKind::Sum, t) if t.is_float() => (
            "0.0f".into(),
            ScalarType::F32,
            Box::new(move |x| round_to(t, x)),
        ),
        (ReduceKind::Sum, ScalarType::I32) => ("0".into(), t, keep),
        (ReduceKind::Sum, ScalarType::I64) => ("0LL".into(), t, keep),
        (ReduceKind::Max | ReduceKind::Min, t) if t.is_float() => ("attn_nan()".into(), t, keep),
        (ReduceKind::Max, ScalarType::I32) => ("(-2147483647 - 1)".into(), t, keep),
        (ReduceKind::Min, ScalarType::I32) => ("2147483647".into(), t, keep),
        (ReduceKind::Max, ScalarType::I64) => ("(-9223372036854775807LL - 1LL)".into(), t, keep),
        (ReduceKind::Min, ScalarType::I64) => ("9223372036854775807LL".into(), t, keep),
        (k, t) => {
            return Err(CodegenError::Unsupported(format!(
                "{k:?} reduction of {t} values (allowed: bf16, f16, f32, i32, i64)"
            )))
        }
    })
}
