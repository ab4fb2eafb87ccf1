//! Sinking into branches: a pure op (index arithmetic, or a loop or branch that only computes
//! values) whose results only one branch of a later `if` in the same block reads moves to the
//! start of that branch, so its work runs only when the branch does. In attention, once the V
//! copy recomputes its own guard, the score mask (with image ranges: a loop over the ranges)
//! is read only by `if !full { s = select(allowed, s, -inf) }`, and a full tile, the common
//! case, skips it. Ops never move into loops (that would repeat them), and a loop that loads
//! never moves past an op that may store.

use super::dead_tiles::{mark_remat_leaves, pure_block};
use super::program::{nested, nested_mut, GpuBlock, GpuOp, GpuProgram, OperandSource};
use super::remat::defining_ops;
use crate::ir::{Function, OpId, OpKind, ValueId};

/// Sinks every movable op of `p` as deep as it goes.
pub fn run(f: &Function, p: &mut GpuProgram) {
    let defs = defining_ops(f);
    sink_block(f, &defs, &mut p.body);
}

fn sink_block(f: &Function, defs: &[Option<OpId>], b: &mut GpuBlock) {
    // Later ops first, so a chain (a loop, then the ops combining its result) moves whole
    // and keeps its order at the start of the branch.
    let mut i = b.ops.len();
    while i > 0 {
        i -= 1;
        let Some(results) = movable(f, &b.ops[i]) else {
            continue;
        };
        let mut readers = (i + 1..b.ops.len()).filter(|&j| reads_any(f, defs, &b.ops[j], &results));
        let (Some(j), None) = (readers.next(), readers.next()) else {
            continue;
        };
        let GpuOp::If {
            op: if_op,
            then_block,
            else_block,
        } = &b.ops[j]
        else {
            continue;
        };
        let cond_reads = f.op(*if_op).operands.iter().any(|v| results.contains(v));
        let arm = match (
            block_reads_any(f, defs, then_block, &results),
            block_reads_any(f, defs, else_block, &results),
        ) {
            (true, false) => 0,
            (false, true) => 1,
            _ => continue,
        };
        let loads = op_loads(f, &b.ops[i]);
        if cond_reads || (loads && b.ops[i + 1..j].iter().any(|o| may_store(f, o))) {
            continue;
        }
        let x = b.ops.remove(i);
        if let Some(target) = nested_mut(&mut b.ops[j - 1]).into_iter().nth(arm) {
            target.ops.insert(0, x);
        }
    }
    for op in &mut b.ops {
        for inner in nested_mut(op) {
            sink_block(f, defs, inner);
        }
    }
}

/// The results of `op` when it may move: index arithmetic and constants, or a loop or branch
/// with results whose regions only compute values.
fn movable(f: &Function, op: &GpuOp) -> Option<Vec<ValueId>> {
    let (o, ok) = match op {
        GpuOp::Tile(o) => (*o, f.op(*o).kind.is_register_only()),
        GpuOp::For { op: o, .. } | GpuOp::If { op: o, .. } => {
            (*o, nested(op).iter().all(|b| pure_block(f, b)))
        }
        _ => return None,
    };
    let results = &f.op(o).results;
    (ok && !results.is_empty()).then(|| results.clone())
}

/// Whether emitting `op` reads any of `vals` by name (its nested blocks included; a copy
/// reads the scalars its addresses and mask are recomputed from).
fn reads_any(f: &Function, defs: &[Option<OpId>], op: &GpuOp, vals: &[ValueId]) -> bool {
    let direct = match op {
        GpuOp::Tile(o)
        | GpuOp::For { op: o, .. }
        | GpuOp::If { op: o, .. }
        | GpuOp::While { op: o, .. } => f.op(*o).operands.iter().any(|v| vals.contains(v)),
        GpuOp::Mma { dot, a, b, .. } => {
            let d = f.op(*dot);
            vals.contains(&d.operands[2])
                || [a, b].into_iter().enumerate().any(|(i, src)| {
                    *src == OperandSource::Registers && vals.contains(&d.operands[i])
                })
        }
        GpuOp::AsyncCopy(c) => {
            let mut used = vec![false; f.values.len()];
            for &v in &f.op(c.load).operands {
                mark_remat_leaves(f, defs, v, &mut used);
            }
            vals.iter().any(|v| used[v.0 as usize])
        }
        _ => false,
    };
    direct || nested(op).iter().any(|b| block_reads_any(f, defs, b, vals))
}

fn block_reads_any(f: &Function, defs: &[Option<OpId>], b: &GpuBlock, vals: &[ValueId]) -> bool {
    b.ops.iter().any(|o| reads_any(f, defs, o, vals))
}

/// Whether `op` (or anything nested in it) loads from global memory.
fn op_loads(f: &Function, op: &GpuOp) -> bool {
    any_tile_op(f, op, |k| matches!(k, OpKind::Load { .. }))
}

/// Whether `op` (or anything nested in it) may write global memory.
fn may_store(f: &Function, op: &GpuOp) -> bool {
    any_tile_op(f, op, |k| matches!(k, OpKind::Store { .. }))
}

/// Whether a tile op of `op` or nested in it has a kind `pred` accepts.
fn any_tile_op(f: &Function, op: &GpuOp, pred: impl Fn(&OpKind) -> bool) -> bool {
    let mut any = false;
    super::program::walk_block(
        &GpuBlock {
            ops: vec![op.clone()],
        },
        &mut |o| {
            if let GpuOp::Tile(t) = o {
                any |= pred(&f.op(*t).kind);
            }
        },
    );
    any
}
