//! Row sums kept per lane across a loop (FlashAttention's softmax denominator).
//!
//! A loop-carried row vector `l` of `Mma` fragments updated only as `l = l * alpha +
//! x.sum(1)` is linear in the sums: each lane can keep the sum of its own columns, scaled by
//! the same replicated `alpha`, and the quad's lanes and the grid row's warps combine once
//! after the loop instead of every iteration. On entry the initial value goes to one lane of
//! each row (the quad's first lane in the grid row's first warp) and zeros to the others, so
//! the lanes' partials always sum to `l`. That saves the two
//! shuffles per row slot of every iteration, and on a column-split grid the two barriers and
//! the scratch round trip of the cross-warp step. The f32 sum is then a tree over lanes of
//! per-lane running sums rather than a running sum of per-tile trees: equal to rounding.

use super::emitter::Emitter;
use super::tile_map::TileMap;
use super::CodegenError;
use crate::ir::{BinaryOp, Op, OpKind, ReduceKind, ScalarType, ValueId};

type Res<T> = Result<T, CodegenError>;

impl<'f> Emitter<'f> {
    /// The carried positions of `for` op `lp` whose row sums can stay per lane (see the
    /// module docs), with the `reduce` whose result is then a per-lane partial.
    pub(crate) fn deferred_row_sums(&self, lp: &Op) -> Vec<(usize, ValueId)> {
        let Some(body) = lp
            .regions
            .first()
            .filter(|_| crate::features::on("deferred_sum"))
        else {
            return vec![];
        };
        let Some(yield_op) = body.ops.last().map(|&o| self.f.op(o)) else {
            return vec![];
        };
        let inits = lp.operands.get(3..).unwrap_or(&[]);
        (0..inits.len())
            .filter_map(|i| {
                let carried = *body.args.get(i + 1)?;
                let next = *yield_op.operands.get(i)?;
                self.row_sum_update(carried, next).map(|r| (i, r))
            })
            .collect()
    }

    /// The `reduce` of `next = carried * alpha + reduce_sum(x, 1)` when that is all the loop
    /// does with `carried` and the update feeds only the yield.
    fn row_sum_update(&self, carried: ValueId, next: ValueId) -> Option<ValueId> {
        let TileMap::Mma(rows) = self.map(carried) else {
            return None;
        };
        let f32_rows = rows.is_rows() && self.scalar(carried) == Ok(ScalarType::F32);
        let add = self.def_op(next)?;
        if !f32_rows || add.kind != OpKind::Binary(BinaryOp::Add) {
            return None;
        }
        let single = |v: ValueId| self.use_count(v) == 1;
        let (mul, sum) = match add.operands[..] {
            [a, b] if self.is_row_sum(b) => (a, b),
            [a, b] if self.is_row_sum(a) => (b, a),
            _ => return None,
        };
        let scaled = self.def_op(mul).is_some_and(|m| {
            m.kind == OpKind::Binary(BinaryOp::Mul) && m.operands.contains(&carried)
        });
        (scaled && single(carried) && single(mul) && single(sum) && single(next)).then_some(sum)
    }

    /// Whether `v` is an f32 `sum` over axis 1 of `Mma` fragments into their row vector.
    fn is_row_sum(&self, v: ValueId) -> bool {
        let Some(op) = self.def_op(v) else {
            return false;
        };
        let OpKind::Reduce {
            kind: ReduceKind::Sum,
            axis: 1,
        } = op.kind
        else {
            return false;
        };
        match (self.map(op.operands[0]), self.map(v)) {
            (TileMap::Mma(x), TileMap::Mma(r)) => {
                x.has_row_vector(&r) && self.scalar(v) == Ok(ScalarType::F32)
            }
            _ => false,
        }
    }

    /// On loop entry: keeps carried row vector `v`'s value in one lane per row (the first
    /// of the quad, in the grid row's first warp) and zeroes the others' partials.
    pub(crate) fn start_row_sum(&mut self, v: ValueId) -> Res<()> {
        let TileMap::Mma(rows) = self.map(v) else {
            return Err(CodegenError::Malformed("deferred row sum off Mma".into()));
        };
        let name = self.name(v)?.to_string();
        let mut keep = "attn_t4 == 0".to_string();
        if rows.col_split() {
            keep = format!("{keep} && {} == 0", rows.warp_col());
        }
        self.w
            .line("// (row sums kept per lane through the loop: one lane holds the start)");
        self.w.open_unrolled("s", rows.slots());
        self.w
            .line(format!("{name}[s] = ({keep}) ? {name}[s] : 0.0f;"));
        self.w.close("");
        Ok(())
    }

    /// After the loop: combines the per-lane partials of row vector `v` (the quad's lanes,
    /// then the grid row's warps) into the full row sums, in place.
    pub(crate) fn finish_row_sum(&mut self, v: ValueId) -> Res<()> {
        let TileMap::Mma(rows) = self.map(v) else {
            return Err(CodegenError::Malformed("deferred row sum off Mma".into()));
        };
        let name = self.name(v)?.to_string();
        self.w
            .line("// (the loop's per-lane row sums, combined once: quad lanes, then warps)");
        self.w.open("");
        self.w.line(format!("float attn_part[{}];", rows.slots()));
        self.w.open_unrolled("r", rows.slots());
        self.w.line(format!("float acc = {name}[r];"));
        for lanes in [1, 2] {
            self.w
                .line(format!("acc = acc + attn_shfl_xor(acc, {lanes});"));
        }
        let dst = if rows.col_split() { "attn_part" } else { &name };
        self.w.line(format!("{dst}[r] = acc;"));
        self.w.close("");
        if rows.col_split() {
            self.combine_warp_partials(&name, BinaryOp::Add, ScalarType::F32, &rows, &|x| x)?;
        }
        self.w.close("");
        Ok(())
    }
}
