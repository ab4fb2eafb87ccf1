//! Helpers of the loop rewrites that software-pipeline attention's key loop on warpgroup
//! targets (`rotate_scores`, `softmax_ahead`, `pv_behind`): visiting every `for`, cloning
//! ops (regions included) at another induction value, redirecting uses, building the
//! scalar compares and guards the rewrites add.

use crate::ir::{Block, CmpPred, Function, Loc, Op, OpId, OpKind, ScalarType, Type, ValueId};
use std::collections::BTreeMap;

/// Offers every `for` of `f` (inner loops first) to `rewrite`, which returns the ops to
/// place before the loop when it changed it; runs DCE and returns true when one did.
pub(crate) fn rewrite_loops(
    f: &mut Function,
    rewrite: &mut dyn FnMut(&mut Function, OpId) -> Option<Vec<OpId>>,
) -> bool {
    let mut body = std::mem::take(&mut f.body);
    let changed = rewrite_block(f, &mut body, rewrite);
    f.body = body;
    if changed {
        super::dce::run(f);
    }
    changed
}

fn rewrite_block(
    f: &mut Function,
    b: &mut Block,
    rewrite: &mut dyn FnMut(&mut Function, OpId) -> Option<Vec<OpId>>,
) -> bool {
    let mut changed = false;
    let mut out = Vec::with_capacity(b.ops.len());
    for o in std::mem::take(&mut b.ops) {
        let mut regions = std::mem::take(&mut f.op_mut(o).regions);
        for r in &mut regions {
            changed |= rewrite_block(f, r, rewrite);
        }
        f.op_mut(o).regions = regions;
        if f.op(o).kind == OpKind::For {
            if let Some(before) = rewrite(f, o) {
                out.extend(before);
                changed = true;
            }
        }
        out.push(o);
    }
    b.ops = out;
    changed
}

/// Deep copies of `ops` (regions included) reading through `map`, which gains every
/// result's (and nested block argument's) copy.
pub(crate) fn clone_ops(
    f: &mut Function,
    ops: &[OpId],
    map: &mut BTreeMap<ValueId, ValueId>,
) -> Vec<OpId> {
    ops.iter().map(|&o| clone_op(f, o, map)).collect()
}

fn clone_op(f: &mut Function, o: OpId, map: &mut BTreeMap<ValueId, ValueId>) -> OpId {
    let op = f.op(o).clone();
    let operands = op
        .operands
        .iter()
        .map(|v| *map.get(v).unwrap_or(v))
        .collect();
    let regions = op
        .regions
        .iter()
        .map(|r| {
            let args = r.args.iter().map(|&a| fresh_copy(f, a, map)).collect();
            let ops = clone_ops(f, &r.ops, map);
            Block { args, ops }
        })
        .collect();
    let results = op.results.iter().map(|&r| fresh_copy(f, r, map)).collect();
    f.push_op(Op {
        kind: op.kind,
        operands,
        results,
        regions,
        loc: op.loc,
    })
}

fn fresh_copy(f: &mut Function, v: ValueId, map: &mut BTreeMap<ValueId, ValueId>) -> ValueId {
    let d = f.value(v).clone();
    let c = f.new_value(d.ty, d.name);
    map.insert(v, c);
    c
}

/// Makes every op of `b` (nested blocks included) read `to` where it read `from`.
pub(crate) fn replace_uses(f: &mut Function, b: &Block, from: ValueId, to: ValueId) {
    for &o in &b.ops {
        for v in &mut f.op_mut(o).operands {
            if *v == from {
                *v = to;
            }
        }
        for r in f.op(o).regions.clone() {
            replace_uses(f, &r, from, to);
        }
    }
}

/// A new detached op of one result of type `ty`: the op and its result.
pub(crate) fn new_op(
    f: &mut Function,
    kind: OpKind,
    operands: Vec<ValueId>,
    ty: Type,
    loc: Loc,
) -> (OpId, ValueId) {
    let r = f.new_value(ty, None);
    let o = f.push_op(Op {
        kind,
        operands,
        results: vec![r],
        regions: vec![],
        loc,
    });
    (o, r)
}

/// `a pred b` for two scalars: the op and its result.
pub(crate) fn cmp(
    f: &mut Function,
    pred: CmpPred,
    a: ValueId,
    b: ValueId,
    loc: Loc,
) -> (OpId, ValueId) {
    let bool_ty = Type::scalar(ScalarType::Bool);
    new_op(f, OpKind::Cmp(pred), vec![a, b], bool_ty, loc)
}

/// `if cond { yes } else { no }` over several values: the op and its results.
pub(crate) fn select_if(
    f: &mut Function,
    cond: ValueId,
    yes: &[ValueId],
    no: &[ValueId],
    loc: Loc,
) -> (OpId, Vec<ValueId>) {
    let arm = |f: &mut Function, vals: &[ValueId]| {
        let y = f.push_op(Op {
            kind: OpKind::Yield,
            operands: vals.to_vec(),
            results: vec![],
            regions: vec![],
            loc,
        });
        Block {
            args: vec![],
            ops: vec![y],
        }
    };
    let (then_b, else_b) = (arm(f, yes), arm(f, no));
    let results: Vec<ValueId> = yes
        .iter()
        .map(|&v| {
            let d = f.value(v).clone();
            f.new_value(d.ty, d.name)
        })
        .collect();
    let o = f.push_op(Op {
        kind: OpKind::If,
        operands: vec![cond],
        results: results.clone(),
        regions: vec![then_b, else_b],
        loc,
    });
    (o, results)
}

/// A tile of type `ty` filled with `x`: its ops (a constant and its splat) and value.
pub(crate) fn filled(
    f: &mut Function,
    x: f64,
    elem: ScalarType,
    ty: &Type,
    loc: Loc,
) -> (Vec<OpId>, ValueId) {
    let c = new_op(
        f,
        OpKind::Const(crate::ir::Scalar::Float(x, elem)),
        vec![],
        Type::scalar(elem),
        loc,
    );
    let s = splat(f, c.1, ty, loc);
    (vec![c.0, s.0], s.1)
}

/// Scalar `x` as a tile of type `ty`: the op and its value.
pub(crate) fn splat(f: &mut Function, x: ValueId, ty: &Type, loc: Loc) -> (OpId, ValueId) {
    let shape = ty.shape.clone();
    new_op(f, OpKind::Splat { shape }, vec![x], ty.clone(), loc)
}

/// Bools of `ty`'s shape and layout.
pub(crate) fn bools_like(ty: &Type) -> Type {
    ty.with_elem(crate::ir::Elem::Scalar(ScalarType::Bool))
}

/// `select(splat(cond), x, splat(fill))`: the tile `x` where scalar `cond` holds, else
/// `fill` everywhere; its ops and value.
pub(crate) fn value_or_fill(
    f: &mut Function,
    cond: ValueId,
    x: ValueId,
    fill: f64,
    loc: Loc,
) -> (Vec<OpId>, ValueId) {
    let ty = f.ty(x).clone();
    let elem = ty.elem.scalar().unwrap_or(ScalarType::F32);
    let (mut ops, fills) = filled(f, fill, elem, &ty, loc);
    let c = splat(f, cond, &bools_like(&ty), loc);
    let sel = new_op(f, OpKind::Select, vec![c.1, x, fills], ty, loc);
    ops.extend([c.0, sel.0]);
    (ops, sel.1)
}
