//! The softmax one tile ahead: FlashAttention-3's intra-warpgroup overlap, on a loop that
//! [`super::rotate_scores`] rotated. There iteration `j` runs the softmax of the carried
//! scores of tile `j`, then issues the next scores and PV together, and waits for both.
//! Here the softmax moves behind PV and computes tile `j + step`'s probabilities from the
//! scores just issued, so it runs while the tensor cores compute PV:
//!
//! ```text
//! s0 = dot(q, K(lo)); p, alpha, m, l = softmax(s0, m0, l0)       // lo < hi, else m0, l0
//! for j in lo..hi carrying m, l, acc, p, alpha {
//!     s = dot(q, K(j + step))                  // issued ...
//!     acc = dot(p, V(j), acc * alpha)          // ... together (one warpgroup turn)
//!     p', alpha', m', l' = softmax(s, m, l)    // waits for s only: PV still computing
//!     yield j + step < hi ? m', l' : m, l;  acc (waited here), p', alpha'
//! }
//! ```
//!
//! The softmax is every op of the body reading the carried scores, except what reads the
//! accumulator (its rescale and PV); what it reads from the induction variable (the tile's
//! mask) is recomputed at `j + step`. Its results read by the rescale and PV become carried
//! values; those the body yielded (the running max and sum) are guarded, so the tile past
//! `hi` that the last iteration's scores cover (see `rotate_scores`) changes nothing.
//! `gpu_ir::mma_defer` then waits for each MMA just before its first reader: the scores with
//! PV still in flight (`wgmma.wait_group 1`), PV at the yield.

use super::loop_rewrite::{clone_ops, cmp, replace_uses, select_if};
use crate::ir::{Block, CmpPred, Function, OpId, OpKind, ValueId};
use std::collections::{BTreeMap, BTreeSet};

/// A loop [`super::rotate_scores`] rotated: `peel` (before it) computes the first scores `s0`
/// at `lo`; the body's last argument carries the scores and its yield's last operand is
/// the next ones, computed at `next_iv`.
pub struct Rotated<'a> {
    pub lp: OpId,
    pub peel: &'a mut Vec<OpId>,
    pub s0: ValueId,
    pub next_iv: ValueId,
}

/// Moves the rotated loop's softmax a tile ahead; false (nothing changed) when the body does
/// not have that shape.
pub fn run(f: &mut Function, r: Rotated) -> bool {
    let Some(plan) = Plan::of(f, r.lp, r.next_iv) else {
        return false;
    };
    plan.apply(f, r);
    true
}

/// What moves: the softmax ops `x` (body order), the body ops `support` they read that
/// depend on the induction variable alone, and which of their results are fed to the body
/// (`fed`: become carried) or yielded (`yielded`: guarded).
struct Plan {
    x: Vec<OpId>,
    support: Vec<OpId>,
    fed: Vec<ValueId>,
    yielded: Vec<(usize, ValueId)>,
}

impl Plan {
    fn of(f: &Function, lp: OpId, next_iv: ValueId) -> Option<Plan> {
        let body = f.op(lp).regions.first()?;
        let (&iv, &s_c) = (body.args.first()?, body.args.last()?);
        let yield_op = *body.ops.last()?;
        let yielded_ops = &f.op(yield_op).operands;
        let pv = *body.ops.iter().rev().find(|&&o| {
            f.op(o).kind == OpKind::Dot && Some(&f.op(o).results[0]) != yielded_ops.last()
        })?;
        let acc_pos = yielded_ops.iter().position(|&v| v == f.op(pv).results[0])?;
        let acc_arg = body.args[acc_pos + 1];
        // Which body values depend on the scores, and which on the accumulator.
        let (on_s, on_acc) = (depends(f, body, s_c), depends(f, body, acc_arg));
        let reads =
            |o: OpId, dep: &BTreeSet<ValueId>| reads_of(f, o).iter().any(|v| dep.contains(v));
        let x: Vec<OpId> = body.ops[..body.ops.len() - 1]
            .iter()
            .copied()
            .filter(|&o| reads(o, &on_s) && !reads(o, &on_acc))
            .collect();
        let x = without_widening_tail(f, body, x);
        if x.is_empty() || x.iter().any(|&o| !effect_free(f, o)) {
            return None;
        }
        let x_set: BTreeSet<OpId> = x.iter().copied().collect();
        let x_results: BTreeSet<ValueId> =
            x.iter().flat_map(|&o| f.op(o).results.clone()).collect();
        // What stays reads the softmax's results (they become carried) or its own, never
        // the scores themselves (an op reading them and the accumulator together).
        let stays_clean = body.ops[..body.ops.len() - 1]
            .iter()
            .filter(|o| !x_set.contains(o))
            .all(|&o| !reads_of(f, o).contains(&s_c));
        if !stays_clean {
            return None;
        }
        let support = support_of(f, body, &x, iv, next_iv)?;
        let mut fed = Vec::new();
        for &o in &body.ops[..body.ops.len() - 1] {
            if x_set.contains(&o) {
                continue;
            }
            for v in reads_of(f, o) {
                if x_results.contains(&v) && !fed.contains(&v) {
                    fed.push(v);
                }
            }
        }
        let yielded: Vec<(usize, ValueId)> = yielded_ops[..yielded_ops.len() - 1]
            .iter()
            .enumerate()
            .filter(|(_, v)| x_results.contains(v))
            .map(|(i, &v)| (i, v))
            .collect();
        (!fed.is_empty()).then_some(Plan {
            x,
            support,
            fed,
            yielded,
        })
    }

    fn apply(self, f: &mut Function, r: Rotated) {
        let lp = r.lp;
        let body = f.op(lp).regions[0].clone();
        let (iv, s_c) = (body.args[0], *body.args.last().unwrap());
        let yield_op = *body.ops.last().unwrap();
        let (lo, hi) = (f.op(lp).operands[0], f.op(lp).operands[1]);
        let inits: Vec<ValueId> = f.op(lp).operands[3..].to_vec();
        let loc = f.op(lp).loc;

        // Before the loop: the first tile's softmax, from the initial running values.
        let mut at_lo: BTreeMap<ValueId, ValueId> = body.args[1..]
            .iter()
            .copied()
            .zip(inits.iter().copied())
            .collect();
        at_lo.insert(iv, lo);
        at_lo.insert(s_c, r.s0);
        let mut pre = clone_ops(f, &self.support, &mut at_lo);
        pre.extend(clone_ops(f, &self.x, &mut at_lo));
        let runs = cmp(f, CmpPred::Lt, lo, hi, loc);
        pre.push(runs.0);
        let kept: Vec<ValueId> = self.yielded.iter().map(|&(i, _)| inits[i]).collect();
        let fresh: Vec<ValueId> = self.yielded.iter().map(|&(_, v)| at_lo[&v]).collect();
        let (guard, guarded) = select_if(f, runs.1, &fresh, &kept, loc);
        pre.push(guard);
        r.peel.extend(pre);

        // In the body: the next tile's softmax behind PV, its running values guarded.
        let mut at_next = BTreeMap::from([
            (iv, r.next_iv),
            (s_c, *f.op(yield_op).operands.last().unwrap()),
        ]);
        let mut ahead = clone_ops(f, &self.support, &mut at_next);
        ahead.extend(clone_ops(f, &self.x, &mut at_next));
        let valid = cmp(f, CmpPred::Lt, r.next_iv, hi, loc);
        ahead.push(valid.0);
        let old: Vec<ValueId> = self
            .yielded
            .iter()
            .map(|&(i, _)| body.args[i + 1])
            .collect();
        let new: Vec<ValueId> = self.yielded.iter().map(|&(_, v)| at_next[&v]).collect();
        let (guard, next_running) = select_if(f, valid.1, &new, &old, loc);
        ahead.push(guard);

        // Carried: what the softmax fed the rescale and PV; no longer the scores.
        let carried: Vec<ValueId> = self
            .fed
            .iter()
            .map(|&v| {
                let d = f.value(v).clone();
                f.new_value(d.ty, d.name)
            })
            .collect();
        for (&v, &c) in self.fed.iter().zip(&carried) {
            replace_uses(f, &body, v, c);
        }
        let x_set: BTreeSet<OpId> = self.x.iter().copied().collect();
        let mut ops: Vec<OpId> = body
            .ops
            .iter()
            .copied()
            .filter(|o| !x_set.contains(o))
            .collect();
        let at = ops.len() - 1;
        ops.splice(at..at, ahead);
        {
            let y = f.op_mut(yield_op);
            y.operands.pop();
            for (&(i, _), &g) in self.yielded.iter().zip(&next_running) {
                y.operands[i] = g;
            }
            y.operands.extend(self.fed.iter().map(|v| at_next[v]));
        }
        let finals: Vec<ValueId> = carried
            .iter()
            .map(|&c| {
                let d = f.value(c).clone();
                f.new_value(d.ty, None)
            })
            .collect();
        let l = f.op_mut(lp);
        let region = &mut l.regions[0];
        region.ops = ops;
        region.args.pop();
        region.args.extend(carried);
        l.operands.pop();
        for (&(i, _), &g) in self.yielded.iter().zip(&guarded) {
            l.operands[3 + i] = g;
        }
        l.operands.extend(self.fed.iter().map(|v| at_lo[v]));
        l.results.pop();
        l.results.extend(finals);
    }
}

/// `x` without the shape ops (`unsqueeze`, `broadcast`) and casts whose results only the
/// rest of the body reads: they stay there, reading the carried value they widen or
/// convert. The rescale factor is carried as its row vector (2 registers a thread), not
/// broadcast over the accumulator (64), and the probabilities in f32, rounded to bf16 where
/// PV packs its operand (once, not also when carried).
fn without_widening_tail(f: &Function, b: &Block, mut x: Vec<OpId>) -> Vec<OpId> {
    loop {
        let in_x: BTreeSet<OpId> = x.iter().copied().collect();
        let readers = |v: ValueId| -> Vec<OpId> {
            b.ops
                .iter()
                .copied()
                .filter(|&o| reads_of(f, o).contains(&v))
                .collect()
        };
        let yield_op = *b.ops.last().expect("a terminated body");
        let tail = x.iter().rposition(|&o| {
            let widens = matches!(
                f.op(o).kind,
                OpKind::ExpandDims { .. } | OpKind::Broadcast { .. } | OpKind::Cast(_)
            );
            widens
                && f.op(o).results.iter().all(|&r| {
                    readers(r)
                        .iter()
                        .all(|u| !in_x.contains(u) && *u != yield_op)
                })
        });
        match tail {
            Some(i) => {
                x.remove(i);
            }
            None => return x,
        }
    }
}

/// Values of `b` (its top-level ops' results, nested results included) that depend on `v`.
fn depends(f: &Function, b: &Block, v: ValueId) -> BTreeSet<ValueId> {
    let mut dep = BTreeSet::from([v]);
    for &o in &b.ops {
        if reads_of(f, o).iter().any(|r| dep.contains(r)) {
            dep.extend(f.op(o).results.iter().copied());
        }
    }
    dep
}

/// Every value op `o` reads: its operands and those of the ops in its regions.
fn reads_of(f: &Function, o: OpId) -> Vec<ValueId> {
    let mut out = Vec::new();
    crate::gpu_ir::warp_specialize::region_operands(f, o, &mut out);
    out
}

/// Whether `o` (and everything in its regions) only computes its results.
fn effect_free(f: &Function, o: OpId) -> bool {
    let op = f.op(o);
    let own = op.kind.is_pure() || matches!(op.kind, OpKind::If | OpKind::Yield);
    own && op
        .regions
        .iter()
        .all(|r| r.ops.iter().all(|&i| effect_free(f, i)))
}

/// The body ops outside `x` that `x` reads through, in body order: pure, region-free,
/// computed from the induction variable and loop invariants alone (none carried), so they
/// can be recomputed at another tile. None when one is not.
fn support_of(
    f: &Function,
    b: &Block,
    x: &[OpId],
    iv: ValueId,
    next_iv: ValueId,
) -> Option<Vec<OpId>> {
    let def: BTreeMap<ValueId, OpId> = b
        .ops
        .iter()
        .flat_map(|&o| f.op(o).results.iter().map(move |&r| (r, o)))
        .collect();
    let x_set: BTreeSet<OpId> = x.iter().copied().collect();
    let carried: BTreeSet<ValueId> = b.args[1..].iter().copied().collect();
    let mut keep = BTreeSet::new();
    let mut stack: Vec<ValueId> = x.iter().flat_map(|&o| reads_of(f, o)).collect();
    while let Some(v) = stack.pop() {
        let Some(&o) = def.get(&v) else {
            continue;
        };
        // The rotated loop's `iv + step` (and what reads it) is already at the next tile.
        if x_set.contains(&o) || v == next_iv || !keep.insert(o) {
            continue;
        }
        let op = f.op(o);
        if !op.kind.is_pure() || !op.regions.is_empty() {
            return None;
        }
        for &r in &op.operands {
            if carried.contains(&r) {
                return None;
            }
            if r != iv {
                stack.push(r);
            }
        }
    }
    Some(b.ops.iter().copied().filter(|o| keep.contains(o)).collect())
}
