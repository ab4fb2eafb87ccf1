//! Which values a half's warpgroup owns, and which owner each operand must have.

use super::unroll::forward;
use crate::ir::{Function, Op, OpId, OpKind, ValueId};
use std::collections::{BTreeMap, BTreeSet};

/// The values one half's warpgroup owns: what the scores `qk` compute (less the
/// accumulator's chain from `acc_in`, PV `pv` included), and the tiles only those read.
pub(super) fn chain(
    f: &Function,
    lp: OpId,
    half: &[OpId],
    qk: ValueId,
    pv: ValueId,
    acc_in: ValueId,
) -> BTreeSet<ValueId> {
    let acc = forward(f, half, &[acc_in]);
    let mut owned: BTreeSet<ValueId> = forward(f, half, &[qk])
        .into_iter()
        .filter(|v| !acc.contains(v) && *v != pv && !f.ty(*v).is_scalar())
        .collect();
    let uses = users(f, lp, half);
    // On a warpgroup target a dot reads loaded operands from shared memory through
    // descriptors: such a load stays the whole program's copy, with its addresses.
    let shared = |op: &Op| {
        f.warpgroup_mma
            && matches!(op.kind, OpKind::Load { .. } | OpKind::Trans)
            && op.results.iter().all(|r| {
                uses.get(r).is_some_and(|us| {
                    us.iter().all(|&u| {
                        let user = f.op(u);
                        user.kind == OpKind::Dot && !user.operands[2..].contains(r)
                            || user.kind == OpKind::Trans
                    })
                })
            })
    };
    loop {
        let before = owned.len();
        for &o in half.iter().rev() {
            let op = f.op(o);
            let private = !op.results.is_empty()
                && !shared(op)
                && op.results.iter().all(|r| {
                    !f.ty(*r).is_scalar()
                        && !acc.contains(r)
                        && uses.get(r).is_some_and(|us| {
                            !us.is_empty()
                                && us
                                    .iter()
                                    .all(|u| f.op(*u).results.iter().any(|x| owned.contains(x)))
                        })
                });
            if private {
                owned.extend(op.results.iter().copied());
            }
        }
        if owned.len() == before {
            break;
        }
    }
    // A row vector widened only for the accumulator's chain (the rescale factor) crosses
    // as the vector: the widening runs on every warp, and the handoff moves one value a row.
    loop {
        let widening = half.iter().rev().find_map(|&o| {
            let op = f.op(o);
            let r = *op.results.first()?;
            let shape_op = matches!(
                op.kind,
                OpKind::ExpandDims { .. } | OpKind::Broadcast { .. }
            );
            let readers = uses.get(&r)?;
            let for_acc = readers
                .iter()
                .all(|u| f.op(*u).results.iter().all(|x| !owned.contains(x)));
            (shape_op && owned.contains(&r) && for_acc).then_some(r)
        });
        match widening {
            Some(r) => owned.remove(&r),
            None => return owned,
        };
    }
}

/// The readers of each value `half` defines, when all of them are in `half` (a value read
/// elsewhere in loop `lp`, the only place its values are visible, is not private).
pub(super) fn users(f: &Function, lp: OpId, half: &[OpId]) -> BTreeMap<ValueId, Vec<OpId>> {
    let inside: BTreeSet<ValueId> = half.iter().flat_map(|&o| f.op(o).results.clone()).collect();
    let mut all: BTreeMap<ValueId, Vec<OpId>> = BTreeMap::new();
    let mut visit = |id: OpId, op: &Op| {
        for v in &op.operands {
            if inside.contains(v) {
                all.entry(*v).or_default().push(id);
            }
        }
    };
    let mut stack: Vec<OpId> = f
        .op(lp)
        .regions
        .iter()
        .flat_map(|r| r.ops.clone())
        .collect();
    while let Some(o) = stack.pop() {
        visit(o, f.op(o));
        stack.extend(f.op(o).regions.iter().flat_map(|r| r.ops.clone()));
    }
    let members: BTreeSet<OpId> = half.iter().copied().collect();
    all.retain(|_, us| us.iter().all(|u| members.contains(u)));
    all
}

/// The owner each operand of `op` must have: the owner of what it becomes (a carried
/// value, a branch's result) for control flow and terminators, the op's own otherwise.
pub(super) fn wanted(
    f: &Function,
    op: &Op,
    i: usize,
    owners: &BTreeMap<ValueId, u32>,
    parent: Option<&Op>,
) -> Option<u32> {
    let own = |v: &ValueId| owners.get(v).copied();
    match op.kind {
        OpKind::For => op.results.get(i.checked_sub(3)?).and_then(own),
        OpKind::Yield => parent?.results.get(i).and_then(own),
        OpKind::If | OpKind::While | OpKind::Condition | OpKind::Return => None,
        _ => op
            .results
            .first()
            .and_then(own)
            .filter(|_| !f.ty(op.operands[i]).is_scalar()),
    }
}
