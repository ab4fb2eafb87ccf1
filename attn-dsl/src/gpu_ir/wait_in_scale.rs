//! A warpgroup MMA's deferred wait placed in the arms of the row scale that first reads its
//! accumulator (FlashAttention-3's `O *= alpha` after PV).
//!
//! Where a loop runs its softmax under an MMA in flight (P0's PV from the previous stage),
//! the source orders the softmax before the MMA's `wgmma.wait_group`, but ptxas schedules
//! freely inside a basic block and hoists `WARPGROUP.DEPBAR` to the top of the block it sits
//! in: all 66 of P0's `MUFU.EX2` ended up behind PV's wait, the top stall of the kernel.
//! The row scale that follows the wait is a warp-uniform branch (the multiplies are skipped
//! where every factor is 1, see `codegen::row_scale`); with the wait at the head of both of
//! its arms, the softmax and the branch's vote sit in the block before, and ptxas keeps them
//! there (P0: 66 of 66 ahead of the wait, no spills, no serialized MMAs).
//!
//! The pattern, in one block: `mma_wait d` followed by stage releases and then the tile op
//! `acc · broadcast(row)` reading `d`'s result. The releases move after the scale (they must
//! follow the wait, now inside it), and the wait is marked with the scale op; the emitter
//! falls back to the plain wait before the op where it emits no such branch.

use super::program::{nested_mut, GpuBlock, GpuOp, GpuProgram, StageSync};
use super::remat::defining_ops;
use crate::ir::{BinaryOp, Function, OpId, OpKind};

/// Marks the waits of warpgroup targets (`ATTN_CODEGEN_DISABLE=wait_in_scale` leaves them
/// where they are).
pub fn run(f: &Function, p: &mut GpuProgram) {
    if f.warpgroup_mma && crate::features::on("wait_in_scale") {
        place_block(f, &defining_ops(f), &mut p.body);
    }
}

fn place_block(f: &Function, defs: &[Option<OpId>], b: &mut GpuBlock) {
    for op in b.ops.iter_mut() {
        for inner in nested_mut(op) {
            place_block(f, defs, inner);
        }
    }
    for i in 0..b.ops.len() {
        let GpuOp::MmaWait {
            dot,
            in_scale: None,
        } = b.ops[i]
        else {
            continue;
        };
        let releases = b.ops[i + 1..]
            .iter()
            .take_while(|o| matches!(o, GpuOp::Stage(StageSync::Release { .. })))
            .count();
        let at = i + 1 + releases;
        let Some(&GpuOp::Tile(scale)) = b.ops.get(at) else {
            continue;
        };
        if !scales_result(f, defs, scale, dot) {
            continue;
        }
        let moved: Vec<GpuOp> = b.ops.drain(i + 1..at).collect();
        let after_scale = i + 2;
        b.ops.splice(after_scale..after_scale, moved);
        b.ops[i] = GpuOp::MmaWait {
            dot,
            in_scale: Some(scale),
        };
    }
}

/// Whether tile op `scale` is `x · broadcast(row)` (either order) with `x` the result of
/// `dot`.
fn scales_result(f: &Function, defs: &[Option<OpId>], scale: OpId, dot: OpId) -> bool {
    let op = f.op(scale);
    let acc = f.op(dot).results[0];
    op.kind == OpKind::Binary(BinaryOp::Mul)
        && op.operands.len() == 2
        && op.operands.contains(&acc)
        && op.operands.iter().any(|&v| {
            v != acc
                && defs[v.0 as usize]
                    .is_some_and(|d| matches!(f.op(d).kind, OpKind::Broadcast { .. }))
        })
}
