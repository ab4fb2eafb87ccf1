//! Scores one tile ahead: software pipelining of a loop's first dot across iterations
//! (FlashAttention-3's intra-warpgroup overlap). In
//!
//! ```text
//! for j in lo..hi { k = load(K(j)); s = dot(q, k); softmax(s); acc = dot(p, v(j), acc) }
//! ```
//!
//! the scores of tile `j` wait for their MMAs before the softmax can start, and nothing
//! else of the warpgroup runs meanwhile. Rotated, iteration `j` runs the softmax of tile `j`
//! (carried from the previous iteration), then issues the scores of tile `j + step` and
//! PV of tile `j` together, so a warpgroup hands the tensor cores both its MMAs at once
//! (one warpgroup turn, `gpu_ir::warpgroup_turns`) and its next softmax hides behind the
//! other warpgroup's pair:
//!
//! ```text
//! s0 = dot(q, load(K(lo)))
//! for j in lo..hi carrying s = s0 {
//!     softmax(s)
//!     s_next = dot(q, load(K(j + step)))     // issued just before PV, waited at the yield
//!     acc = dot(p, v(j), acc)
//!     yield s_next
//! }
//! ```
//!
//! Issued at the body's top instead, the next scores' accumulators stay live through the
//! softmax (P0 at 128 x 128 spilled 112 bytes).
//!
//! The rotated dot is the loop body's first warpgroup-shaped dot (only `wgmma` runs
//! asynchronously; an `mma.sync` scores tile gains nothing) whose operands are computed from the
//! induction variable and loop invariants alone (no carried value, nothing defined under a
//! branch), by ops without side effects; the loop must store nothing (a load of the
//! computation must not see the loop's writes). The last iteration computes one tile past
//! `hi`, and `lo >= hi` computes one tile it does not use: their loads are the kernel's own,
//! with the kernel's masks, evaluated at another key (the kernel's masks bound a load by
//! the data, never by the loop's range, which is what lets the pipeliner prefetch too).
//!
//! A target pass: run on the copy the code generator emits for warpgroup targets (the CPU
//! executor runs the kernel as written), where `gpu_ir::mma_defer` then waits for the
//! scores' MMAs at the yield.

use super::loop_rewrite::{clone_ops, new_op, replace_uses, rewrite_loops};
use crate::ir::{BinaryOp, Block, Function, OpId, OpKind, Type, ValueId};
use std::collections::{BTreeMap, BTreeSet};

/// Rotates every loop that qualifies; true when one did.
pub fn run(f: &mut Function) -> bool {
    let ahead = crate::features::on("softmax_ahead");
    rewrite_loops(f, &mut |f, o| {
        let (mut peel, s0, next_iv) = rotate_loop(f, o)?;
        if ahead {
            let r = super::softmax_ahead::Rotated {
                lp: o,
                peel: &mut peel,
                s0,
                next_iv,
            };
            super::softmax_ahead::run(f, r);
        }
        Some(peel)
    })
}

/// Rotates loop `l` when it qualifies; returns the ops computing the first scores (to be
/// placed before it), those scores, and the body's `iv + step` the next ones are at.
fn rotate_loop(f: &mut Function, l: OpId) -> Option<(Vec<OpId>, ValueId, ValueId)> {
    let body = f.op(l).regions.first()?.clone();
    let iv = *body.args.first()?;
    if stores(f, &body) {
        return None;
    }
    let (dot, slice) = body
        .ops
        .iter()
        .filter(|&&o| f.op(o).kind == OpKind::Dot)
        .filter(|&&o| crate::gpu_ir::lower::warpgroup_shaped(f, f.op(o).results[0]))
        .find_map(|&d| Some((d, slice_of(f, &body, d, iv)?)))?;
    let s = f.op(dot).results[0];
    let (lo, step) = (f.op(l).operands[0], f.op(l).operands[2]);

    // The first scores, before the loop: the slice at `iv = lo`.
    let mut at_lo = BTreeMap::from([(iv, lo)]);
    let peel = clone_ops(f, &slice, &mut at_lo);
    // The next scores, first in the body: the slice at `iv + step`.
    let loc = f.op(dot).loc;
    let iv_ty = f.ty(iv).clone();
    let (add, next_iv) = new_op(f, OpKind::Binary(BinaryOp::Add), vec![iv, step], iv_ty, loc);
    let mut at_next = BTreeMap::from([(iv, next_iv)]);
    let ahead = clone_ops(f, &slice, &mut at_next);

    // The scores become a carried value: `s0` in, `s_next` yielded.
    let ty: Type = f.ty(s).clone();
    let name = f.value(s).name.clone();
    let carried = f.new_value(ty.clone(), name);
    let final_s = f.new_value(ty, None);
    replace_uses(f, &body, s, carried);
    // Issued just before the body's last warpgroup dot (PV), so the two issue together:
    // the softmax of this tile then has no MMA of its own to wait for and hides behind
    // the other warpgroup's pair, and the next scores' accumulators are not live
    // through it (at the body's top they were: 112 bytes of spills at P0's 128 x 128).
    let at = late_issue_point(f, &f.op(l).regions[0], dot);
    let region = &mut f.op_mut(l).regions[0];
    region.args.push(carried);
    let mut ops = std::mem::take(&mut region.ops);
    ops.splice(at..at, std::iter::once(add).chain(ahead));
    region.ops = ops;
    let yield_op = *region.ops.last()?;
    f.op_mut(yield_op).operands.push(at_next[&s]);
    let lp = f.op_mut(l);
    lp.operands.push(at_lo[&s]);
    lp.results.push(final_s);
    Some((peel, at_lo[&s], next_iv))
}

/// Where the next scores go in body `b`: before its last warpgroup-shaped dot other than
/// the rotated `dot` (PV), else at the top.
fn late_issue_point(f: &Function, b: &Block, dot: OpId) -> usize {
    b.ops
        .iter()
        .rposition(|&o| {
            o != dot
                && f.op(o).kind == OpKind::Dot
                && crate::gpu_ir::lower::warpgroup_shaped(f, f.op(o).results[0])
        })
        .unwrap_or(0)
}

/// Whether `b` (or a block inside it) stores.
pub(crate) fn stores(f: &Function, b: &Block) -> bool {
    b.ops.iter().any(|&o| {
        let op = f.op(o);
        matches!(op.kind, OpKind::Store { .. }) || op.regions.iter().any(|r| stores(f, r))
    })
}

/// The ops of `b`'s top level that `dot` is computed from (itself included, in block
/// order), when they read only `iv`, loop invariants and each other and have no effect.
pub(crate) fn slice_of(f: &Function, b: &Block, dot: OpId, iv: ValueId) -> Option<Vec<OpId>> {
    let defined_here: BTreeMap<ValueId, OpId> = b
        .ops
        .iter()
        .flat_map(|&o| f.op(o).results.iter().map(move |&r| (r, o)))
        .collect();
    let inside = crate::gpu_ir::remat::defined_in(f, b);
    let mut keep = BTreeSet::new();
    let mut stack = vec![dot];
    while let Some(o) = stack.pop() {
        if !keep.insert(o) {
            continue;
        }
        let op = f.op(o);
        if !op.kind.is_pure() || !op.regions.is_empty() {
            return None;
        }
        for &v in &op.operands {
            match defined_here.get(&v) {
                Some(&d) => stack.push(d),
                // A block argument other than the induction variable is carried; a value
                // defined under a branch of the body is not available at its top.
                None if v == iv => {}
                None if inside.get(v.0 as usize).copied().unwrap_or(false) => return None,
                None => {}
            }
        }
    }
    Some(b.ops.iter().copied().filter(|o| keep.contains(o)).collect())
}
