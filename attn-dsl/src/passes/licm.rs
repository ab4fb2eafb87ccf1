//! Loop-invariant code motion: the loads, nested loops, branches and reductions of a `for`
//! body that read nothing the loop changes run once, before it.
//!
//! Why here and not in NVCC: a loop that stages copies through shared memory holds barriers
//! and `asm volatile` with memory clobbers, across which NVCC never moves a global load. A
//! mask written per tile (the variant's `MASK` is called once a tile) may read row data: the
//! image ranges holding each query, a variant's per-sequence table. Those loads and the loops
//! over them then ran once a tile, each load waited for (P3 without the clamp: 24 `LDG` a KV
//! tile in the consumer loop).
//!
//! What moves: an op that is invariant (every value it reads, its regions' included, is
//! defined outside the loop or by another op that moves) and is worth moving (a load, a
//! `for`, an `if` or a reduction), with the invariant ops that compute its operands.
//! Arithmetic alone stays: NVCC hoists it itself, and a tile held across the loop costs
//! registers that recomputing it does not. `dot`s, stores and `while` loops (which may not
//! terminate) never move, and nothing that loads leaves a loop that stores (there is no
//! alias analysis: the store may write what the load reads).
//!
//! A moved load runs even when the loop runs zero times, where it never ran before: its
//! mask gains the loop's trip test (`lo < hi`), so it touches no memory then.

use super::loop_rewrite::{cmp, new_op};
use crate::ir::{
    BinaryOp, Block, CmpPred, Elem, Function, Op, OpId, OpKind, Scalar, ScalarType, Type, ValueId,
};
use std::collections::BTreeSet;

/// Runs LICM over the whole function, innermost loops first (what leaves an inner loop may
/// then leave the outer one too). Shipped; `ATTN_CODEGEN_DISABLE=licm` leaves loops whole.
pub fn run(f: &mut Function) {
    if !crate::features::on("licm") {
        return;
    }
    let body = std::mem::take(&mut f.body.ops);
    f.body.ops = block(f, body);
}

fn block(f: &mut Function, ops: Vec<OpId>) -> Vec<OpId> {
    let mut out = Vec::with_capacity(ops.len());
    for o in ops {
        for i in 0..f.op(o).regions.len() {
            let inner = std::mem::take(&mut f.op_mut(o).regions[i].ops);
            f.op_mut(o).regions[i].ops = block(f, inner);
        }
        if f.op(o).kind == OpKind::For {
            out.extend(hoist(f, o));
        }
        out.push(o);
    }
    out
}

/// Takes the moving ops out of `for_op`'s body and returns them, in order, to run before it.
fn hoist(f: &mut Function, for_op: OpId) -> Vec<OpId> {
    let body = f.op(for_op).regions[0].clone();
    let invariant = invariant_ops(f, &body, stores(f, &body.ops));
    let moving = moving_ops(f, &body, &invariant);
    if moving.is_empty() {
        return vec![];
    }
    f.op_mut(for_op).regions[0]
        .ops
        .retain(|o| !moving.contains(o));
    let moved: Vec<OpId> = body
        .ops
        .iter()
        .copied()
        .filter(|o| moving.contains(o))
        .collect();
    let (lo, hi) = (f.op(for_op).operands[0], f.op(for_op).operands[1]);
    if runs_at_least_once(f, lo, hi) {
        return moved;
    }
    let mut out = vec![];
    let guard = cmp(f, CmpPred::Lt, lo, hi, f.op(for_op).loc);
    out.push(guard.0);
    out.extend(guard_loads(f, moved, guard.1));
    out
}

/// The body's top-level ops that read nothing the loop defines (its induction variable,
/// carried values, or the results of ops that are not invariant themselves). In a loop that
/// stores, memory is one of those things: no load moves (there is no alias analysis).
fn invariant_ops(f: &Function, body: &Block, loop_stores: bool) -> BTreeSet<OpId> {
    let mut variant: BTreeSet<ValueId> = body.args.iter().copied().collect();
    let mut invariant = BTreeSet::new();
    for &o in &body.ops {
        let op = f.op(o);
        let reads_variant =
            free_uses(f, o).iter().any(|v| variant.contains(v)) || (loop_stores && loads(f, &[o]));
        if movable_kind(f, op) && !reads_variant {
            invariant.insert(o);
        } else {
            variant.extend(op.results.iter().copied());
        }
    }
    invariant
}

/// The invariant ops worth moving, with the invariant ops their operands come from.
fn moving_ops(f: &Function, body: &Block, invariant: &BTreeSet<OpId>) -> BTreeSet<OpId> {
    let mut needed: BTreeSet<ValueId> = BTreeSet::new();
    let mut moving = BTreeSet::new();
    for &o in body.ops.iter().rev() {
        if !invariant.contains(&o) {
            continue;
        }
        let op = f.op(o);
        if worth_moving(op) || op.results.iter().any(|r| needed.contains(r)) {
            moving.insert(o);
            needed.extend(free_uses(f, o));
        }
    }
    moving
}

fn worth_moving(op: &Op) -> bool {
    matches!(
        op.kind,
        OpKind::Load { .. } | OpKind::For | OpKind::If | OpKind::Reduce { .. }
    )
}

/// Pure ops other than `dot` and those that may trap, and `for`/`if` whose regions hold only
/// such ops.
fn movable_kind(f: &Function, op: &Op) -> bool {
    match op.kind {
        OpKind::Dot | OpKind::While | OpKind::Store { .. } => false,
        _ if may_trap(f, op) => false,
        OpKind::For | OpKind::If => op.regions.iter().all(|r| {
            r.ops.iter().all(|&o| {
                let inner = f.op(o);
                matches!(inner.kind, OpKind::Yield) || movable_kind(f, inner)
            })
        }),
        _ => op.kind.is_pure() && !op.kind.is_terminator(),
    }
}

/// Integer division and remainder by a run-time value, and shifts by one: a zero divisor or
/// a shift out of range is an error on the CPU executor, so one that only ran inside the
/// loop must not run when the loop does not.
fn may_trap(f: &Function, op: &Op) -> bool {
    let OpKind::Binary(b) = op.kind else {
        return false;
    };
    let int = f
        .ty(op.operands[0])
        .elem
        .scalar()
        .is_some_and(|s| s.is_int());
    let safe_rhs = match b {
        BinaryOp::Div | BinaryOp::Rem => literal(f, op.operands[1]).is_some_and(|d| d != 0),
        BinaryOp::Shl | BinaryOp::Shr => {
            literal(f, op.operands[1]).is_some_and(|d| (0..32).contains(&d))
        }
        _ => true,
    };
    int && !safe_rhs
}

/// Values an op reads that it does not define itself: its operands and whatever its regions
/// read from outside them.
fn free_uses(f: &Function, o: OpId) -> BTreeSet<ValueId> {
    let mut defined = BTreeSet::new();
    let mut used = BTreeSet::new();
    fn visit(f: &Function, o: OpId, defined: &mut BTreeSet<ValueId>, used: &mut BTreeSet<ValueId>) {
        let op = f.op(o);
        used.extend(op.operands.iter().copied());
        defined.extend(op.results.iter().copied());
        for r in &op.regions {
            defined.extend(r.args.iter().copied());
            for &inner in &r.ops {
                visit(f, inner, defined, used);
            }
        }
    }
    visit(f, o, &mut defined, &mut used);
    used.retain(|v| !defined.contains(v));
    used
}

/// Whether `lo < hi` holds for literal bounds (no trip test needed then).
fn runs_at_least_once(f: &Function, lo: ValueId, hi: ValueId) -> bool {
    match (literal(f, lo), literal(f, hi)) {
        (Some(a), Some(b)) => a < b,
        _ => false,
    }
}

fn literal(f: &Function, v: ValueId) -> Option<i64> {
    let mut found = None;
    f.walk(&mut |_, op| {
        if let (OpKind::Const(Scalar::Int(x, _)), Some(&r)) = (&op.kind, op.results.first()) {
            if r == v {
                found = Some(*x);
            }
        }
    });
    found
}

/// `ops` with every load among them (nested ones included) masked by `guard` as well.
fn guard_loads(f: &mut Function, ops: Vec<OpId>, guard: ValueId) -> Vec<OpId> {
    let mut out = Vec::with_capacity(ops.len());
    for o in ops {
        for i in 0..f.op(o).regions.len() {
            let inner = std::mem::take(&mut f.op_mut(o).regions[i].ops);
            f.op_mut(o).regions[i].ops = guard_loads(f, inner, guard);
        }
        if let OpKind::Load {
            has_mask,
            has_other,
        } = f.op(o).kind
        {
            let shape = f.ty(f.op(o).operands[0]).shape.clone();
            let loc = f.op(o).loc;
            let mut mask = guard;
            if !shape.is_empty() {
                let splat = new_op(
                    f,
                    OpKind::Splat {
                        shape: shape.clone(),
                    },
                    vec![guard],
                    bool_ty(&shape),
                    loc,
                );
                out.push(splat.0);
                mask = splat.1;
            }
            let op = f.op(o).clone();
            if has_mask {
                let both = new_op(
                    f,
                    OpKind::Binary(BinaryOp::And),
                    vec![op.operands[1], mask],
                    bool_ty(&shape),
                    loc,
                );
                out.push(both.0);
                mask = both.1;
            }
            let mut operands = vec![op.operands[0], mask];
            operands.extend(op.operands.get(2).filter(|_| has_mask && has_other));
            let target = f.op_mut(o);
            target.operands = operands;
            target.kind = OpKind::Load {
                has_mask: true,
                has_other: has_mask && has_other,
            };
        }
        out.push(o);
    }
    out
}

fn bool_ty(shape: &[usize]) -> Type {
    Type::tile(Elem::Scalar(ScalarType::Bool), shape.to_vec())
}

/// Whether any of `ops` (or an op of their regions) is of a kind `is`.
fn any_op(f: &Function, ops: &[OpId], is: fn(&OpKind) -> bool) -> bool {
    ops.iter().any(|&o| {
        let op = f.op(o);
        is(&op.kind) || op.regions.iter().any(|r| any_op(f, &r.ops, is))
    })
}

fn stores(f: &Function, ops: &[OpId]) -> bool {
    any_op(f, ops, |k| matches!(k, OpKind::Store { .. }))
}

fn loads(f: &Function, ops: &[OpId]) -> bool {
    any_op(f, ops, |k| matches!(k, OpKind::Load { .. }))
}
