//! The loop unrolled by two: its shape, the two halves, where the second half runs, and
//! the owners each half's scores chain gets.

use super::owners::chain;
use crate::ir::{BinaryOp, Block, Function, Op, OpId, OpKind, ValueId};
use crate::passes::loop_rewrite::{clone_ops, cmp, new_op, select_if, value_or_fill};
use std::collections::{BTreeMap, BTreeSet};

/// The loop's two dots: the scores (first) and PV (last), whose accumulator comes from
/// the carried value at `acc_pos`.
pub(super) struct Shape {
    qk: OpId,
    pv: OpId,
    acc_pos: usize,
}

pub(super) fn shape(f: &Function, body: &Block) -> Option<Shape> {
    let dots: Vec<OpId> = body
        .ops
        .iter()
        .copied()
        .filter(|&o| f.op(o).kind == OpKind::Dot)
        .collect();
    let (&qk, &pv) = (dots.first()?, dots.last()?);
    if qk == pv || !forward(f, &body.ops, &[f.op(qk).results[0]]).contains(&f.op(pv).operands[0]) {
        return None;
    }
    let yield_op = f.op(*body.ops.last()?);
    let acc_pos = yield_op
        .operands
        .iter()
        .position(|&v| v == f.op(pv).results[0])?;
    let acc_arg = *body.args.get(acc_pos + 1)?;
    forward(f, &body.ops, &[acc_arg])
        .contains(&f.op(pv).operands[2])
        .then_some(Shape { qk, pv, acc_pos })
}

/// Values the ops of `ops` compute, in order, from `from` (included).
pub(super) fn forward(f: &Function, ops: &[OpId], from: &[ValueId]) -> BTreeSet<ValueId> {
    let mut reach: BTreeSet<ValueId> = from.iter().copied().collect();
    for &o in ops {
        let op = f.op(o);
        if op.operands.iter().any(|v| reach.contains(v)) {
            reach.extend(op.results.iter().copied());
        }
    }
    reach
}

/// One copy of the loop body: its ops, what it maps the body's values to, what it yields.
struct Half {
    ops: Vec<OpId>,
    map: BTreeMap<ValueId, ValueId>,
    out: Vec<ValueId>,
}

/// The body's `ops` cloned on `map` (the body's arguments to this half's inputs).
fn clone_half(
    f: &mut Function,
    ops: &[OpId],
    mut map: BTreeMap<ValueId, ValueId>,
    yielded: &[ValueId],
) -> Half {
    let ops = clone_ops(f, ops, &mut map);
    let out = yielded.iter().map(|v| *map.get(v).unwrap_or(v)).collect();
    Half { ops, map, out }
}

/// Unrolls loop `lp` by two (the second tile under `iv + step < hi`), records each half's
/// owned values in `owners`; returns the ops to place before the loop.
pub(super) fn unroll(
    f: &mut Function,
    lp: OpId,
    owners: &mut BTreeMap<ValueId, u32>,
) -> Option<Vec<OpId>> {
    let body = f.op(lp).regions.first()?.clone();
    let sh = shape(f, &body)?;
    if body.ops.iter().any(|&o| !f.op(o).regions.is_empty()) {
        return None;
    }
    let (yield_op, ops) = body.ops.split_last()?;
    let yielded = f.op(*yield_op).operands.clone();
    let (hi, step) = (f.op(lp).operands[1], f.op(lp).operands[2]);
    let loc = f.op(lp).loc;

    // The first half on the new body's arguments; the second at `iv + step` on the
    // first's results.
    let args: Vec<ValueId> = body
        .args
        .iter()
        .map(|&a| f.new_value(f.ty(a).clone(), f.value(a).name.clone()))
        .collect();
    let first = clone_half(
        f,
        ops,
        body.args.iter().copied().zip(args.clone()).collect(),
        &yielded,
    );
    let iv1 = new_op(
        f,
        OpKind::Binary(BinaryOp::Add),
        vec![args[0], step],
        f.ty(step).clone(),
        loc,
    );
    let more = cmp(f, crate::ir::CmpPred::Lt, iv1.1, hi, loc);
    let inputs = std::iter::once((body.args[0], iv1.1))
        .chain(body.args[1..].iter().copied().zip(first.out.clone()))
        .collect();
    let mut second = clone_half(f, ops, inputs, &yielded);

    // Where the second half runs; the guard picks its results when its tile exists.
    let mut placed = place_second_half(f, &second.ops, &first.out);
    let pv1 = second.map[&f.op(sh.pv).results[0]];
    let mut no = first.out.clone();
    if placed.guarded.is_empty() {
        if let Some(neutral) = neutral_pv(f, &second.ops, pv1, more.1, loc) {
            // PV of a missing tile adds nothing: the guard keeps one accumulator. Each
            // select goes right before the op it feeds (from the back: positions hold).
            // They are the second half's: its warpgroup picks P or zeros (and the factor or
            // one) before the handoff, so PV reads the handed-off tile itself.
            for (before, ops) in neutral.into_iter().rev() {
                let at = placed.after.iter().position(|&o| o == before)?;
                second.ops.extend(&ops);
                placed.after.splice(at..at, ops);
            }
            no[sh.acc_pos] = pv1;
        }
    }
    let (guard, kept) = select_if(f, more.1, &second.out, &no, loc);
    let then_yield = f.op(guard).regions[0].ops[0];
    f.op_mut(guard).regions[0].ops = placed.guarded.iter().copied().chain([then_yield]).collect();
    let new_yield = f.push_op(Op {
        kind: OpKind::Yield,
        operands: kept.clone(),
        results: vec![],
        regions: vec![],
        loc: f.op(*yield_op).loc,
    });
    // The second tile's scores issue right after the first's (after its last scores dot),
    // so the second warpgroup's MMAs run under the first one's softmax.
    let pv0 = first.map[&f.op(sh.pv).results[0]];
    let at = first
        .ops
        .iter()
        .rposition(|&o| f.op(o).kind == OpKind::Dot && !f.op(o).results.contains(&pv0))?;
    let mut new_ops = vec![iv1.0, more.0];
    new_ops.extend(&first.ops[..=at]);
    new_ops.extend(&placed.ahead);
    new_ops.extend(&first.ops[at + 1..]);
    new_ops.extend(&placed.after);
    new_ops.extend([guard, new_yield]);
    let (before, step2) = doubled(f, step, loc);
    let l = f.op_mut(lp);
    l.operands[2] = step2;
    l.regions[0] = Block {
        args: args.clone(),
        ops: new_ops,
    };
    own_halves(f, lp, &sh, [&first, &second], &args, &kept, owners);
    Some(before)
}

/// The op of `ops` defining `v`.
fn def_of(f: &Function, ops: &[OpId], v: ValueId) -> Option<OpId> {
    ops.iter().copied().find(|&o| f.op(o).results.contains(&v))
}

/// Makes PV `pv` (`dot(a, b, acc · broadcast(row))`) add nothing where `more` is false: its
/// A zero and its row factor one, so its accumulator is the one it was given, exactly (an
/// accumulator times 1, plus products of 0 with the masked loads' finite values). Then the
/// guard after the second half need not keep the first half's accumulator beside it (two
/// live: MLA's 128 registers a thread each). The new ops, each list with the op it must
/// run before (the row's broadcast, then PV); `None` (and nothing changed) where the
/// accumulator has another shape.
fn neutral_pv(
    f: &mut Function,
    half: &[OpId],
    acc: ValueId,
    more: ValueId,
    loc: crate::ir::Loc,
) -> Option<[(OpId, Vec<OpId>); 2]> {
    let pv = def_of(f, half, acc)?;
    let (a, c) = (f.op(pv).operands[0], f.op(pv).operands[2]);
    let scale = def_of(f, half, c)?;
    let bcast = f.op(scale).operands.iter().find_map(|&x| {
        let d = def_of(f, half, x)?;
        matches!(f.op(d).kind, OpKind::Broadcast { .. }).then_some(d)
    });
    let bcast = bcast.filter(|_| f.op(scale).kind == OpKind::Binary(BinaryOp::Mul))?;
    let row = f.op(bcast).operands[0];
    let (row_ops, row_or_one) = value_or_fill(f, more, row, 1.0, loc);
    f.op_mut(bcast).operands[0] = row_or_one;
    let (a_ops, a_or_zero) = value_or_fill(f, more, a, 0.0, loc);
    f.op_mut(pv).operands[0] = a_or_zero;
    Some([(bcast, row_ops), (pv, a_ops)])
}

/// `2 · step`: the ops computing it and its value.
fn doubled(f: &mut Function, step: ValueId, loc: crate::ir::Loc) -> (Vec<OpId>, ValueId) {
    let two = crate::ir::Scalar::Int(2, crate::ir::ScalarType::I32);
    let two = new_op(f, OpKind::Const(two), vec![], f.ty(step).clone(), loc);
    let step2 = new_op(
        f,
        OpKind::Binary(BinaryOp::Mul),
        vec![step, two.1],
        f.ty(step).clone(),
        loc,
    );
    (vec![two.0, step2.0], step2.1)
}

/// Records each half's scores chain as its warpgroup's, and the carried values the second
/// half's owned results become (the body's arguments `args`, the guard's results `kept`,
/// the loop's results) as that owner's.
fn own_halves(
    f: &Function,
    lp: OpId,
    sh: &Shape,
    halves: [&Half; 2],
    args: &[ValueId],
    kept: &[ValueId],
    owners: &mut BTreeMap<ValueId, u32>,
) {
    let acc_in = [args[sh.acc_pos + 1], halves[0].out[sh.acc_pos]];
    for (h, half) in halves.iter().enumerate() {
        let (qk, pv) = (
            half.map[&f.op(sh.qk).results[0]],
            half.map[&f.op(sh.pv).results[0]],
        );
        for v in chain(f, lp, &half.ops, qk, pv, acc_in[h]) {
            owners.insert(v, h as u32);
        }
    }
    let results = &f.op(lp).results;
    for (k, v) in halves[1].out.iter().enumerate() {
        if let Some(&w) = owners.get(v) {
            for c in [args[k + 1], kept[k], results[k]] {
                owners.insert(c, w);
            }
        }
    }
}

/// Where the second half's ops go.
struct SecondHalf {
    /// Right after the first half's scores: the second tile's loads, masks and scores
    /// (computed from the tile index alone), so its MMAs run under the first softmax.
    ahead: Vec<OpId>,
    /// After the first half, for every pair.
    after: Vec<OpId>,
    /// Under the guard `iv + step < hi`.
    guarded: Vec<OpId>,
}

/// Places the second half (`half`, reading the first half's results `first_out`). Where
/// every load it makes is masked and it writes no memory, all of it runs for every pair:
/// the tile past `hi` is read inside the kernel's masks and the guard only picks the
/// first half's results (one copy of the key tile for both its dots: MLA's latent tile,
/// which an `If` would split from its scores). Else its scores still run ahead where their
/// loads are masked, and the rest under the guard.
fn place_second_half(f: &Function, half: &[OpId], first_out: &[ValueId]) -> SecondHalf {
    let dependent = forward(f, half, first_out);
    let (ahead, rest): (Vec<OpId>, Vec<OpId>) = half.iter().partition(|&&o| {
        let op = f.op(o);
        !op.results.is_empty() && op.results.iter().all(|r| !dependent.contains(r))
    });
    let masked = |ops: &[OpId]| {
        ops.iter().all(|&o| {
            !matches!(
                f.op(o).kind,
                OpKind::Load {
                    has_mask: false,
                    ..
                }
            )
        })
    };
    let writes = half.iter().any(|&o| f.op(o).results.is_empty());
    if !masked(&ahead) {
        return SecondHalf {
            ahead: Vec::new(),
            after: Vec::new(),
            guarded: half.to_vec(),
        };
    }
    if masked(&rest) && !writes {
        return SecondHalf {
            ahead,
            after: rest,
            guarded: Vec::new(),
        };
    }
    SecondHalf {
        ahead,
        after: Vec::new(),
        guarded: rest,
    }
}
