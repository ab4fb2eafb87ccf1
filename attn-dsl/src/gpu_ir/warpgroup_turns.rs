//! Warpgroup turns (ping-pong): a program of two warpgroups runs the same loop on both, and
//! left alone they issue their MMAs together, then both compute the softmax while the
//! tensor cores idle. Taking turns to issue (warpgroup 0's scores, then 1's while 0 computes
//! its softmax, then 0's PV while 1 computes its softmax, ...) keeps the tensor cores busy
//! through the softmax of the other warpgroup.
//!
//! Each MMA of the loop body becomes `take, mma (async), pass, mma_wait` (an MMA already
//! async passes at once and keeps its wait): the turn passes as soon as the MMAs are issued,
//! not when they complete. Both warpgroups must issue the same MMAs in the same order, so
//! only loops whose MMAs all sit directly in the body (none under a branch) take turns.

use super::program::{GpuBlock, GpuOp, GpuProgram, Turn};
use crate::ir::Function;

/// Warps of the programs that take turns: two warpgroups.
const TWO_WARPGROUPS: u32 = 8;

/// Makes the pipelined loops of two-warpgroup programs take turns (warpgroup targets only;
/// `ATTN_CODEGEN_DISABLE=wg_turns` leaves them in step).
pub fn run(f: &Function, p: &mut GpuProgram) {
    if f.warpgroup_mma && f.num_warps == TWO_WARPGROUPS && !crate::features::disabled("wg_turns") {
        turns_block(&mut p.body);
    }
}

fn turns_block(b: &mut GpuBlock) {
    let mut out = Vec::with_capacity(b.ops.len());
    for mut op in std::mem::take(&mut b.ops) {
        let takes = match &mut op {
            GpuOp::For {
                body,
                pipelined: true,
                ..
            } => take_turns(body),
            _ => false,
        };
        if !takes {
            for inner in super::program::nested_mut(&mut op) {
                turns_block(inner);
            }
            out.push(op);
            continue;
        }
        out.push(GpuOp::Turn(Turn::Begin));
        out.push(op);
        out.push(GpuOp::Turn(Turn::End));
    }
    b.ops = out;
}

/// Rewrites the body's MMAs to take turns; false (and the body untouched) when it has none
/// or some sit under control flow.
fn take_turns(body: &mut GpuBlock) -> bool {
    let is_mma = |op: &GpuOp| matches!(op, GpuOp::Mma { .. });
    let mut nested_mma = false;
    for inner in body.ops.iter().flat_map(super::program::nested) {
        super::program::walk_block(inner, &mut |op| nested_mma |= is_mma(op));
    }
    if nested_mma || !body.ops.iter().any(is_mma) {
        return false;
    }
    let mut out = Vec::with_capacity(body.ops.len() + 8);
    for mut op in std::mem::take(&mut body.ops) {
        let GpuOp::Mma {
            dot, inline_wait, ..
        } = &mut op
        else {
            out.push(op);
            continue;
        };
        let (dot, waits) = (*dot, std::mem::replace(inline_wait, false));
        out.push(GpuOp::Turn(Turn::Take));
        out.push(op);
        out.push(GpuOp::Turn(Turn::Pass));
        if waits {
            out.push(GpuOp::MmaWait { dot });
        }
    }
    body.ops = out;
    true
}
