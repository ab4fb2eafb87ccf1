//! Scores waited for at the yield: a pipelined loop whose dot's only reader is the body's
//! `yield` (the next tile's scores of a rotated loop, see `passes::rotate_scores`) issues
//! its warpgroup MMAs at once and waits for them just before the yield, so the iteration's
//! softmax and its PV issue run while the tensor cores compute the next scores.
//!
//! Legal because nothing between the issue and the yield reads the result, and the MMAs'
//! operands stay put until then: the ring stage they read is released (or overwritten by
//! the next iteration's copies) only after the yield.

use super::program::{GpuBlock, GpuOp, GpuProgram};
use crate::ir::{Function, OpId};

/// Defers the waits of every pipelined loop's carried dots (warpgroup targets only).
pub fn run(f: &Function, p: &mut GpuProgram) {
    if f.warpgroup_mma {
        let uses = f.use_counts();
        defer_block(f, &uses, &mut p.body);
    }
}

fn defer_block(f: &Function, uses: &[u32], b: &mut GpuBlock) {
    for op in &mut b.ops {
        if let GpuOp::For {
            body,
            pipelined: true,
            ..
        } = op
        {
            defer_loop(f, uses, body);
        }
        for inner in super::program::nested_mut(op) {
            defer_block(f, uses, inner);
        }
    }
}

fn defer_loop(f: &Function, uses: &[u32], body: &mut GpuBlock) {
    let Some(GpuOp::Tile(yield_op)) = body.ops.last() else {
        return;
    };
    let yielded = &f.op(*yield_op).operands;
    let carried = |dot: OpId| {
        let r = f.op(dot).results[0];
        uses[r.0 as usize] == 1 && yielded.contains(&r)
    };
    // The body's last MMA has nothing of its own iteration to run under: it keeps its wait.
    let Some(last) = body
        .ops
        .iter()
        .rposition(|op| matches!(op, GpuOp::Mma { .. }))
    else {
        return;
    };
    let mut deferred = Vec::new();
    for op in &mut body.ops[..last] {
        if let GpuOp::Mma {
            dot,
            inline_wait,
            chained_from: None,
            ..
        } = op
        {
            if carried(*dot) {
                *inline_wait = false;
                deferred.push(*dot);
            }
        }
    }
    body.ops
        .retain(|op| !matches!(op, GpuOp::MmaWait { dot } if deferred.contains(dot)));
    let at = body.ops.len() - 1;
    body.ops.splice(
        at..at,
        deferred.into_iter().map(|dot| GpuOp::MmaWait { dot }),
    );
}
