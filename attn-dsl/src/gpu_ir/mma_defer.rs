//! Each warpgroup MMA of a pipelined loop waits just before the first op that reads its
//! result, so what lies between runs while the tensor cores compute:
//!
//! - a rotated loop's next scores (`passes::rotate_scores`), read only by the yield, wait
//!   there: the iteration's softmax and its PV issue run under them;
//! - with the softmax a tile ahead (`passes::softmax_ahead`), the next scores wait before
//!   that softmax, with PV still in flight (`wgmma.wait_group 1`: groups complete in
//!   order), and PV waits at the yield, under the softmax.
//!
//! An MMA read by the op right after it keeps its wait where it is, and so does one
//! accumulating into another's result (`mma_chain` continues the first one in it). Legal because nothing
//! between the issue and the wait reads the result, and the MMAs' operands stay put until
//! then: the ring stage they read is released (or overwritten by the next iteration's
//! copies) only after the yield, and a register operand is a value of its own, assigned to
//! the loop's carried variable only at the yield.

use super::program::{GpuBlock, GpuOp, GpuProgram};
use crate::ir::{Function, OpId, ValueId};

/// Moves the waits of every pipelined loop's MMAs to their first readers (warpgroup
/// targets only).
pub fn run(f: &Function, p: &mut GpuProgram) {
    if f.warpgroup_mma {
        defer_block(f, &mut p.body);
    }
}

fn defer_block(f: &Function, b: &mut GpuBlock) {
    for op in &mut b.ops {
        if let GpuOp::For {
            body,
            pipelined: true,
            ..
        } = op
        {
            defer_loop(f, body);
        }
        for inner in super::program::nested_mut(op) {
            defer_block(f, inner);
        }
    }
}

fn defer_loop(f: &Function, body: &mut GpuBlock) {
    let dots: Vec<OpId> = body
        .ops
        .iter()
        .filter_map(|op| match op {
            GpuOp::Mma { dot, .. } => Some(*dot),
            _ => None,
        })
        .collect();
    let results: Vec<ValueId> = dots.iter().map(|&d| f.op(d).results[0]).collect();
    // A dot accumulating into another's result keeps its wait: `mma_chain` continues the
    // first one's MMAs in it (MLA's two score dots).
    let continues = |d: OpId| f.op(d).operands.get(2).is_some_and(|a| results.contains(a));
    for dot in dots.iter().copied().filter(|&d| !continues(d)) {
        let r = f.op(dot).results[0];
        let issued = position(
            body,
            |op| matches!(op, GpuOp::Mma { dot: d, .. } if *d == dot),
        );
        let Some(first) = body.ops[issued + 1..]
            .iter()
            .position(|op| reads(f, op, r))
            .map(|k| issued + 1 + k)
        else {
            continue;
        };
        if first == issued + 1 {
            continue;
        }
        if let GpuOp::Mma { inline_wait, .. } = &mut body.ops[issued] {
            *inline_wait = false;
        }
        body.ops
            .retain(|op| !matches!(op, GpuOp::MmaWait { dot: d, .. } if *d == dot));
        let at = position(body, |op| reads(f, op, r));
        body.ops.insert(
            at,
            GpuOp::MmaWait {
                dot,
                in_scale: None,
            },
        );
    }
}

fn position(body: &GpuBlock, pred: impl Fn(&GpuOp) -> bool) -> usize {
    body.ops
        .iter()
        .position(pred)
        .expect("the op is in the body")
}

/// Whether `op` (or an op nested in it) reads value `v`.
pub(super) fn reads(f: &Function, op: &GpuOp, v: ValueId) -> bool {
    let direct = match op {
        GpuOp::Tile(o)
        | GpuOp::For { op: o, .. }
        | GpuOp::If { op: o, .. }
        | GpuOp::While { op: o, .. } => f.op(*o).operands.contains(&v),
        GpuOp::Mma { dot, .. } => f.op(*dot).operands.contains(&v),
        _ => false,
    };
    direct
        || super::program::nested(op)
            .iter()
            .any(|b| b.ops.iter().any(|o| reads(f, o, v)))
}
