//! Layouts of the rewritten function: owned values as a one-warpgroup program lays
//! them out, the rest for the whole program.

use super::owners::wanted;
use super::WARPS;
use crate::ir::{Block, Function, Layout, Op, OpKind, ValueId};
use std::collections::{BTreeMap, BTreeSet};

/// Lays `f` out: owned values as a one-warpgroup program would have them, wrapped in
/// their owner; the rest for the whole program.
pub(super) fn lay_out(f: &mut Function, owners: &BTreeMap<ValueId, u32>) {
    let handoff_owner = handoff_owners(f, owners);
    let mut one = f.clone();
    one.num_warps = WARPS / 2;
    crate::passes::layout::run(&mut one);
    crate::passes::layout::run(f);
    for (i, v) in f.values.iter_mut().enumerate() {
        let id = ValueId(i as u32);
        let owner = owners.get(&id).or(handoff_owner.get(&id));
        if let (Some(&w), false) = (owner, v.ty.is_scalar()) {
            let inner = Box::new(one.values[i].ty.layout.clone());
            v.ty.layout = Layout::Owned {
                warpgroup: w,
                inner,
            };
        }
    }
}

/// The owner of each handoff's result: that of the op reading it.
fn handoff_owners(f: &Function, owners: &BTreeMap<ValueId, u32>) -> BTreeMap<ValueId, u32> {
    let handoffs: BTreeSet<ValueId> = {
        let mut s = BTreeSet::new();
        f.walk(&mut |_, op| {
            if op.kind == OpKind::Handoff {
                s.insert(op.results[0]);
            }
        });
        s
    };
    let mut out = BTreeMap::new();
    walk_with_parent(f, &f.body, None, &mut |op, parent| {
        for (i, v) in op.operands.iter().enumerate() {
            if handoffs.contains(v) {
                if let Some(w) = wanted(f, op, i, owners, parent) {
                    out.insert(*v, w);
                }
            }
        }
    });
    out
}

/// Visits every op of `b` with the op whose region holds it.
fn walk_with_parent<'a>(
    f: &'a Function,
    b: &'a Block,
    parent: Option<&'a Op>,
    visit: &mut impl FnMut(&'a Op, Option<&'a Op>),
) {
    for &o in &b.ops {
        let op = f.op(o);
        for r in &op.regions {
            walk_with_parent(f, r, Some(op), visit);
        }
        visit(op, parent);
    }
}
