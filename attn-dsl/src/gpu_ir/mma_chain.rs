//! Chained warpgroup MMAs: a dot whose accumulator is the previous dot's result (MLA's
//! scores, `dot(q_pe, k_pe, dot(q_lat, k_lat))`) continues that dot's MMAs in the same
//! accumulator registers. Waiting for the first dot before issuing the second drains the
//! tensor-core pipeline in the middle of the scores; warpgroup MMAs of one shape that
//! accumulate into the same registers are ordered by the hardware, so the second can be
//! issued at once and one wait covers both.
//!
//! The pattern, in one block: `mma_wait d1` (or `d1` waiting inline) directly followed by
//! `mma d2` whose accumulator is `d1`'s result, `d1`'s result used by nothing else, and `d2`
//! waiting inline (so no op runs between the issue and the completion of `d1`'s reads that
//! did not already run between them before). The wait goes, and `d2` is marked chained:
//! the emitter gives it `d1`'s accumulator array instead of a copy.

use super::program::{nested_mut, GpuBlock, GpuOp, GpuProgram};
use crate::ir::{Function, OpId};

/// Chains the MMAs of warpgroup targets (`ATTN_CODEGEN_DISABLE=mma_chain` leaves them
/// apart).
pub fn run(f: &Function, p: &mut GpuProgram) {
    if f.warpgroup_mma && crate::features::on("mma_chain") {
        let uses = f.use_counts();
        chain_block(f, &uses, &mut p.body);
    }
}

fn chain_block(f: &Function, uses: &[u32], b: &mut GpuBlock) {
    for op in b.ops.iter_mut() {
        for inner in nested_mut(op) {
            chain_block(f, uses, inner);
        }
    }
    let mut i = 0;
    while i + 1 < b.ops.len() {
        if let Some(d1) = chainable(f, uses, &b.ops[i], &b.ops[i + 1]) {
            match &mut b.ops[i] {
                GpuOp::MmaWait { .. } => {
                    b.ops.remove(i);
                    mark_chained(&mut b.ops[i], d1);
                    continue;
                }
                GpuOp::Mma { inline_wait, .. } => {
                    *inline_wait = false;
                    mark_chained(&mut b.ops[i + 1], d1);
                }
                _ => {}
            }
        }
        i += 1;
    }
}

/// The first dot when `first` completes it (its deferred wait, or its own inline wait) and
/// `next` is a dot accumulating into its result, the result's only use, waiting inline.
fn chainable(f: &Function, uses: &[u32], first: &GpuOp, next: &GpuOp) -> Option<OpId> {
    let d1 = match first {
        GpuOp::MmaWait { dot, .. } => *dot,
        GpuOp::Mma {
            dot,
            inline_wait: true,
            chained_from: None,
            ..
        } => *dot,
        _ => return None,
    };
    let GpuOp::Mma {
        dot: d2,
        inline_wait: true,
        ..
    } = next
    else {
        return None;
    };
    let r1 = f.op(d1).results[0];
    let acc = *f.op(*d2).operands.get(2)?;
    (acc == r1 && uses[r1.0 as usize] == 1).then_some(d1)
}

fn mark_chained(op: &mut GpuOp, d1: OpId) {
    if let GpuOp::Mma { chained_from, .. } = op {
        *chained_from = Some(d1);
    }
}
