//! PV one tile behind: FlashAttention-3's intra-warpgroup overlap without rotating the
//! scores. Iteration `j` issues the scores of tile `j` and PV of tile `j − step` together,
//! then runs tile `j`'s softmax while the tensor cores compute PV:
//!
//! ```text
//! for j in lo..hi + step carrying m, l, acc, p = 0 {
//!     s = dot(q, K(j))                               // issued ...
//!     acc = dot(p, V(j − step) if j > lo else 0, acc) // ... in one warpgroup turn
//!     p', alpha, m', l' = softmax(s, m, l)           // wgmma.wait_group 1: PV computing
//!     yield j < hi ? (m', l', acc * alpha) : (m, l, acc);  p'
//! }
//! ```
//!
//! Every load stays in the loop at its own tile (K at `j`, V at `j − step`), so the ring
//! holds them like any other copies: no buffer of its own for a peeled first tile, which is
//! what kept the rotated form (`rotate_scores` + `softmax_ahead`) off three-stage rings at
//! head size 128. The extra iteration's scores are of the tile past `hi`, read inside the
//! kernel's masks like the rotated loop's, and change nothing (the guard); the first
//! iteration's PV multiplies zeros (its V load masked off, no address touched).
//!
//! Which loops: the body's first and last dots are warpgroup-shaped, the last (PV) reads
//! the carried accumulator through what it rescales it with, and its B operand (V) is a
//! load computed from the induction variable and loop invariants alone.

use super::loop_rewrite::{
    bools_like, clone_ops, cmp, filled, new_op, replace_uses, rewrite_loops, select_if, splat,
    value_or_fill,
};
use super::rotate_scores::slice_of;
use crate::ir::{BinaryOp, CmpPred, Function, Op, OpId, OpKind, ValueId};
use std::collections::BTreeMap;

/// Puts PV one tile behind in every loop that qualifies; true when one changed.
pub fn run(f: &mut Function) -> bool {
    rewrite_loops(f, &mut behind)
}

/// The loop's shape: its scores and PV dots, where PV's result is yielded, and V's load.
struct Shape {
    qk: OpId,
    pv: OpId,
    acc_pos: usize,
    v_slice: Vec<OpId>,
}

fn shape(f: &Function, lp: OpId) -> Option<Shape> {
    let body = f.op(lp).regions.first()?;
    let iv = *body.args.first()?;
    let yield_op = *body.ops.last()?;
    let wg_dots: Vec<OpId> = body
        .ops
        .iter()
        .copied()
        .filter(|&o| f.op(o).kind == OpKind::Dot)
        .filter(|&o| crate::gpu_ir::lower::warpgroup_shaped(f, f.op(o).results[0]))
        .collect();
    let (&qk, &pv) = (wg_dots.first()?, wg_dots.last()?);
    if qk == pv || super::rotate_scores::stores(f, body) {
        return None;
    }
    let acc_pos = f
        .op(yield_op)
        .operands
        .iter()
        .position(|&v| v == f.op(pv).results[0])?;
    let v = *f.op(pv).operands.get(1)?;
    let load = *body.ops.iter().find(|&&o| f.op(o).results.contains(&v))?;
    if !matches!(f.op(load).kind, OpKind::Load { .. }) {
        return None;
    }
    let v_slice = slice_of(f, body, load, iv)?;
    Some(Shape {
        qk,
        pv,
        acc_pos,
        v_slice,
    })
}

/// Rewrites loop `lp`; returns the ops to place before it.
fn behind(f: &mut Function, lp: OpId) -> Option<Vec<OpId>> {
    let sh = shape(f, lp)?;
    let body = f.op(lp).regions[0].clone();
    let (iv, yield_op) = (body.args[0], *body.ops.last()?);
    let (lo, hi, step) = {
        let o = &f.op(lp).operands;
        (o[0], o[1], o[2])
    };
    let loc = f.op(sh.pv).loc;
    let acc_arg = body.args[sh.acc_pos + 1];
    let (p, v, acc_in) = {
        let o = &f.op(sh.pv).operands;
        (o[0], o[1], o[2])
    };
    let mut before = Vec::new();

    // One more iteration: the last PV runs in it.
    let hi_plus = new_op(
        f,
        OpKind::Binary(BinaryOp::Add),
        vec![hi, step],
        f.ty(hi).clone(),
        loc,
    );
    before.push(hi_plus.0);
    // P of the tile before the first: zeros.
    let p_ty = f.ty(p).clone();
    let elem = p_ty.elem.scalar()?;
    let p0 = filled(f, 0.0, elem, &p_ty, loc);
    before.extend(p0.0);

    // In the body, after the scores: V of the previous tile (masked off in the first
    // iteration) and PV on the carried P and accumulator.
    let p_c = f.new_value(p_ty.clone(), f.value(p).name.clone());
    let prev_iv = new_op(
        f,
        OpKind::Binary(BinaryOp::Sub),
        vec![iv, step],
        f.ty(iv).clone(),
        loc,
    );
    let not_first = cmp(f, CmpPred::Gt, iv, lo, loc);
    let mut at_prev = BTreeMap::from([(iv, prev_iv.1)]);
    let mut pv_ops = vec![prev_iv.0, not_first.0];
    let v_ops = clone_ops(f, &sh.v_slice, &mut at_prev);
    let v_prev = at_prev[&v];
    let v_load = *v_ops.last()?;
    pv_ops.extend(&v_ops[..v_ops.len() - 1]);
    pv_ops.extend(mask_off(f, v_load, not_first.1, loc)?);
    pv_ops.push(v_load);
    let r = f.new_value(f.ty(f.op(sh.pv).results[0]).clone(), None);
    let pv_new = f.push_op(Op {
        kind: OpKind::Dot,
        operands: vec![p_c, v_prev, acc_arg],
        results: vec![r],
        regions: vec![],
        loc,
    });
    pv_ops.push(pv_new);

    // The rescale reads PV's result (not the carried accumulator) and, with the softmax's
    // running values, is kept only for tiles below `hi`.
    let acc_chain: Vec<OpId> = body
        .ops
        .iter()
        .copied()
        .filter(|&o| o != sh.pv && f.op(o).operands.contains(&acc_arg))
        .collect();
    for &o in &acc_chain {
        for x in &mut f.op_mut(o).operands {
            if *x == acc_arg {
                *x = r;
            }
        }
    }
    let valid = cmp(f, CmpPred::Lt, iv, hi, loc);
    // The rescale's factor is 1 past `hi` (a select of a row, where selecting the
    // accumulator would copy a whole tile and keep the rescale behind PV's wait).
    let alpha_guard = guard_rescale(f, &body, acc_in, r, valid.1, loc);
    let yielded = f.op(yield_op).operands.clone();
    let mut new: Vec<ValueId> = Vec::new();
    let mut old: Vec<ValueId> = Vec::new();
    let mut unguarded = None;
    for (i, &y) in yielded.iter().enumerate() {
        let (n, o) = match i == sh.acc_pos {
            // PV accumulating into the carried value itself has no rescale.
            true if acc_in == acc_arg => (r, r),
            true if alpha_guard.is_some() => {
                unguarded = Some(acc_in);
                continue;
            }
            true => (acc_in, r),
            false => (y, body.args[i + 1]),
        };
        new.push(n);
        old.push(o);
    }
    let (guard, mut kept) = select_if(f, valid.1, &new, &old, loc);
    if let Some(acc) = unguarded {
        kept.insert(sh.acc_pos, acc);
    }

    let qk_at = body.ops.iter().position(|&o| o == sh.qk)?;
    let mut ops: Vec<OpId> = Vec::with_capacity(body.ops.len() + pv_ops.len() + 6);
    ops.push(valid.0);
    for (i, &o) in body.ops.iter().enumerate() {
        if o == sh.pv || o == yield_op {
            continue;
        }
        ops.push(o);
        if i == qk_at {
            ops.extend(pv_ops.iter().copied());
        }
        if let Some((after, guard_ops)) = &alpha_guard {
            if o == *after {
                ops.extend(guard_ops.iter().copied());
            }
        }
    }
    ops.extend([guard, yield_op]);
    {
        let y = f.op_mut(yield_op);
        y.operands = kept;
        y.operands.push(p);
    }
    let fin = f.new_value(p_ty, None);
    let l = f.op_mut(lp);
    l.operands[1] = hi_plus.1;
    l.operands.push(p0.1);
    l.results.push(fin);
    let region = &mut l.regions[0];
    region.ops = ops;
    region.args.push(p_c);
    // Nothing else may read the old PV's result.
    replace_uses(f, &body, f.op(sh.pv).results[0], r);
    Some(before)
}

/// When the rescaled accumulator `acc_in` is `r` times a broadcast row vector defined in
/// `body`: that vector replaced, in the broadcast, by `valid ? vector : 1`. Returns the
/// op after which the guard's ops go (the vector's definition) and those ops.
fn guard_rescale(
    f: &mut Function,
    body: &crate::ir::Block,
    acc_in: ValueId,
    r: ValueId,
    valid: ValueId,
    loc: crate::ir::Loc,
) -> Option<(OpId, Vec<OpId>)> {
    let def = |f: &Function, v: ValueId| {
        body.ops
            .iter()
            .copied()
            .find(|&o| f.op(o).results.contains(&v))
    };
    let mul = def(f, acc_in)?;
    let m = f.op(mul);
    if m.kind != OpKind::Binary(BinaryOp::Mul) || !m.operands.contains(&r) {
        return None;
    }
    let mut user = mul;
    let mut v = *m.operands.iter().find(|&&x| x != r)?;
    // Through the broadcast's shape ops down to the row vector.
    loop {
        let o = def(f, v)?;
        match f.op(o).kind {
            OpKind::Broadcast { .. } | OpKind::ExpandDims { .. } => {
                user = o;
                v = f.op(o).operands[0];
            }
            _ => break,
        }
    }
    let (alpha_def, ty) = (def(f, v)?, f.ty(v).clone());
    let elem = ty.elem.scalar()?;
    if user == mul || !matches!(elem, crate::ir::ScalarType::F32) {
        return None;
    }
    let (ops, sel) = value_or_fill(f, valid, v, 1.0, loc);
    for x in &mut f.op_mut(user).operands {
        if *x == v {
            *x = sel;
        }
    }
    Some((alpha_def, ops))
}

/// Load `load` also masked by scalar `keep`: the ops computing the new mask (to place
/// before it).
fn mask_off(f: &mut Function, load: OpId, keep: ValueId, loc: crate::ir::Loc) -> Option<Vec<OpId>> {
    let OpKind::Load {
        has_mask,
        has_other,
    } = f.op(load).kind
    else {
        return None;
    };
    let mask_ty = match has_mask {
        true => f.ty(f.op(load).operands[1]).clone(),
        false => bools_like(f.ty(f.op(load).operands[0])),
    };
    let splat = splat(f, keep, &mask_ty, loc);
    let mut ops = vec![splat.0];
    let mask = if has_mask {
        let old = f.op(load).operands[1];
        let and = new_op(
            f,
            OpKind::Binary(BinaryOp::And),
            vec![old, splat.1],
            f.ty(old).clone(),
            loc,
        );
        ops.push(and.0);
        and.1
    } else {
        splat.1
    };
    let op = f.op_mut(load);
    if has_mask {
        op.operands[1] = mask;
    } else {
        op.operands.insert(1, mask);
        op.kind = OpKind::Load {
            has_mask: true,
            has_other,
        };
    }
    Some(ops)
}
