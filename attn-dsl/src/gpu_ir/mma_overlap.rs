//! Copies issued under the first warpgroup MMA: a pipelined loop issues the copies of a
//! later iteration at its top, and their per-row address work (block-table loads, the
//! attention V guard's mask) then stalls the warps before any math starts. Under warpgroup
//! MMAs the iteration's first dot runs asynchronously, so the copies move behind its issue
//! and its wait moves behind them: the tensor cores compute the scores while the warps
//! compute the next tile's addresses.
//!
//! Legal because the moved copies write the ring's next stage, which the first dot does not
//! read (it reads the current one, or buffers outside the ring), and nothing between their
//! old and new place reads a value they define. The barrier at the loop's top, which freed
//! the next stage, still precedes them.
//!
//! Two-warpgroup programs keep at the top the copies whose mask runs a loop of its own (the
//! V guard of a mask over image ranges): there every thread already holds a 64-row
//! accumulator slab, and that loop's state on top of the scores' reserved accumulators
//! overflows the register file (P3 at 128 × 64: 60 B of spills moved, none kept at the top).

use super::program::{AsyncCopy, CopyAt, GpuBlock, GpuOp, GpuProgram, Stage};
use super::remat::{defined_in, defining_ops};
use crate::ir::{Function, OpId, OpKind, ValueId};

/// Warps from which a program is two warpgroups (see the module note).
const TWO_WARPGROUPS: u32 = 8;

/// Moves the top copies of every pipelined loop behind its first MMA (warpgroup targets
/// only; `ATTN_CODEGEN_DISABLE=mma_overlap` keeps them at the top).
pub fn run(f: &Function, p: &mut GpuProgram) {
    if f.warpgroup_mma && crate::features::on("mma_overlap") {
        let defs = defining_ops(f);
        let stays = |c: &AsyncCopy| f.num_warps >= TWO_WARPGROUPS && mask_runs_a_loop(f, &defs, c);
        overlap_block(&mut p.body, &stays);
    }
}

fn overlap_block(b: &mut GpuBlock, stays: &dyn Fn(&AsyncCopy) -> bool) {
    for op in &mut b.ops {
        if let GpuOp::For {
            body,
            pipelined: true,
            ..
        } = op
        {
            overlap_loop(body, stays);
        }
        for inner in super::program::nested_mut(op) {
            overlap_block(inner, stays);
        }
    }
}

/// Whether the mask of copy `c` is computed by a loop of its own: a `for` or `while` inside
/// the pipelined loop's body among the ops its value is built from (the loops before it,
/// such as the sequence lookup, are computed once).
fn mask_runs_a_loop(f: &Function, defs: &[Option<OpId>], c: &AsyncCopy) -> bool {
    let Some(body) = c.loop_op.and_then(|l| f.op(l).regions.first()) else {
        return false;
    };
    let inside = defined_in(f, body);
    let op = f.op(c.load);
    let Some(&mask) = op
        .operands
        .get(1)
        .filter(|_| matches!(op.kind, OpKind::Load { has_mask: true, .. }))
    else {
        return false;
    };
    let mut stack: Vec<ValueId> = vec![mask];
    let mut seen = std::collections::BTreeSet::new();
    while let Some(v) = stack.pop() {
        let Some(d) = defs.get(v.0 as usize).copied().flatten() else {
            continue;
        };
        if !seen.insert(d) {
            continue;
        }
        let def = f.op(d);
        let nested = inside.get(v.0 as usize).copied().unwrap_or(false);
        if nested && matches!(def.kind, OpKind::For | OpKind::While) {
            return true;
        }
        stack.extend(def.operands.iter().copied());
    }
    false
}

/// In a pipelined body `[wait, barrier, copies ahead.., commit, ops.., mma, ..]`, reorders
/// to `[wait, barrier, kept.., ops.., mma (async), moved.., commit, mma_wait, ..]`: the
/// copies `stays` accepts are kept, in order, before the tile ops.
fn overlap_loop(body: &mut GpuBlock, stays: &dyn Fn(&AsyncCopy) -> bool) {
    let is_ahead = |op: &GpuOp| matches!(op, GpuOp::AsyncCopy(c) if matches!(c.at, CopyAt::Ahead(_)) && c.stage == Stage::Next);
    let Some(first) = body.ops.iter().position(is_ahead) else {
        return;
    };
    let run = body.ops[first..]
        .iter()
        .take_while(|op| is_ahead(op))
        .count();
    let commit = first + run;
    if !matches!(body.ops.get(commit), Some(GpuOp::Commit)) {
        return;
    }
    // Decided once per copy (each answer walks its mask's definitions).
    let keep: Vec<bool> = body.ops[first..=commit]
        .iter()
        .map(|op| matches!(op, GpuOp::AsyncCopy(c) if stays(c)))
        .collect();
    if keep[..run].iter().all(|&k| k) {
        return;
    }
    // The first MMA after the copies, with only tile work in between: tile ops, and loops
    // or branches of tile ops alone (a full-tile predicate's loop over image ranges), no
    // memory ops and no control flow holding another dot or copy.
    let Some(offset) = body.ops[commit + 1..].iter().position(|op| !tile_work(op)) else {
        return;
    };
    let mma = commit + 1 + offset;
    let dot = match &mut body.ops[mma] {
        GpuOp::Mma {
            dot,
            inline_wait: inline_wait @ true,
            ..
        } => {
            *inline_wait = false;
            *dot
        }
        _ => return,
    };
    // `partition` visits the drained ops in order, one answer each.
    let mut keep = keep.into_iter();
    let (stay, moved): (Vec<GpuOp>, Vec<GpuOp>) = body
        .ops
        .drain(first..=commit)
        .partition(|_| keep.next().unwrap_or(false));
    let at = mma - moved.len() - stay.len() + 1;
    let tail = body.ops.split_off(at);
    body.ops.splice(first..first, stay);
    body.ops.extend(moved);
    body.ops.push(GpuOp::MmaWait {
        dot,
        in_scale: None,
    });
    body.ops.extend(tail);
}

/// Whether `op` is tile work only: a tile op, or control flow whose blocks hold nothing else.
fn tile_work(op: &GpuOp) -> bool {
    match op {
        GpuOp::Tile(_) => true,
        GpuOp::For { .. } | GpuOp::If { .. } | GpuOp::While { .. } => super::program::nested(op)
            .iter()
            .all(|b| b.ops.iter().all(tile_work)),
        _ => false,
    }
}
