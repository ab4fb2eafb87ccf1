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

use super::program::{CopyAt, GpuBlock, GpuOp, GpuProgram, Stage};
use crate::ir::Function;

/// Moves the top copies of every pipelined loop behind its first MMA (warpgroup targets
/// only; `ATTN_CODEGEN_DISABLE=mma_overlap` keeps them at the top).
pub fn run(f: &Function, p: &mut GpuProgram) {
    if f.warpgroup_mma && !crate::features::disabled("mma_overlap") {
        overlap_block(&mut p.body);
    }
}

fn overlap_block(b: &mut GpuBlock) {
    for op in &mut b.ops {
        if let GpuOp::For {
            body,
            pipelined: true,
            ..
        } = op
        {
            overlap_loop(body);
        }
        for inner in super::program::nested_mut(op) {
            overlap_block(inner);
        }
    }
}

/// In a pipelined body `[wait, barrier, copies ahead.., commit, ops.., mma, ..]`, reorders
/// to `[wait, barrier, ops.., mma (async), copies ahead.., commit, mma_wait, ..]`.
fn overlap_loop(body: &mut GpuBlock) {
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
    // The first MMA after the copies, with only tile ops (no memory ops, no control flow
    // that could hold another dot or copy) in between.
    let Some(offset) = body.ops[commit + 1..]
        .iter()
        .position(|op| !matches!(op, GpuOp::Tile(_)))
    else {
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
    let moved: Vec<GpuOp> = body.ops.drain(first..=commit).collect();
    let at = mma - moved.len() + 1;
    let tail = body.ops.split_off(at);
    body.ops.extend(moved);
    body.ops.push(GpuOp::MmaWait { dot });
    body.ops.extend(tail);
}
