//! The seesaw schedule (FlashMLA's decode loop) at the tile IR: a key loop whose two
//! warpgroups take its tiles in turn. Each warpgroup computes the scores and softmax of
//! every other tile on its own (its values [`Layout::Owned`] by it), so one warpgroup's
//! softmax runs while the other's scores are on the tensor cores; both compute PV, each its
//! column half of the accumulator, which stays the whole program's.
//!
//! ```text
//! for j in (lo..hi).step_by(2 step) carrying m, l, acc {       // m, l on warpgroup 1
//!     s, m', l', p, alpha = softmax(dot(q, K(j)), m, l)         // warpgroup 0
//!     acc = dot(p, V(j), acc * alpha)                           // both
//!     if j + step < hi {
//!         s, m'', l'', p, alpha = softmax(dot(q, K(j + step)), m', l')  // warpgroup 1
//!         acc = dot(p, V(j + step), acc * alpha)                // both
//!     }
//! }
//! ```
//!
//! The rewrite unrolls the loop by two (the second tile under a guard, so any trip count
//! runs exactly the original tiles), gives each half's scores chain its warpgroup (the
//! scores, what is computed from them, and what only they read, less the accumulator's
//! chain), and puts a `handoff` wherever a value crosses from one owner to another: the
//! running max and sum from one warpgroup to the other, P and the rescale factor to every
//! warp for PV. Layouts: the owned values get what the layout pass gives a one-warpgroup
//! program, the rest what it gives the whole program. The executor runs the result exactly
//! as the loop it came from (a handoff is the identity).

use super::loop_rewrite::{clone_ops, cmp, new_op, rewrite_loops, select_if};
use crate::ir::{BinaryOp, Block, Function, Layout, Op, OpId, OpKind, ValueId};
use std::collections::{BTreeMap, BTreeSet};

/// Warps of the programs the seesaw applies to: two warpgroups.
const WARPS: u32 = 8;

/// The most ops an index tile recomputed by another owner takes.
const MAX_REMAT_DEPTH: usize = 8;

/// `f` with its key loop rewritten for the seesaw and laid out; `None` when `f` has no
/// loop of that shape (two warpgroups, a loop whose first dot's result feeds its last
/// dot's A operand, which accumulates into a carried value).
pub fn apply(f: &Function) -> Option<Function> {
    if f.num_warps != WARPS {
        return None;
    }
    let mut g = f.clone();
    // Two tiles an iteration, each half's scores chain on its warpgroup.
    let mut owners = unroll_first_loop(&mut g)?;
    // Values that cross owners: handed off, or recomputed by the new owner (index tiles).
    place_crossings(&mut g, &mut owners);
    // Handoffs of what the loop does not change: once, before it.
    hoist_invariant_handoffs(&mut g);
    // Owned values laid out for one warpgroup, the rest for the whole program.
    lay_out(&mut g, &owners);
    // The replaced loop body's values, which no layout reached, dropped.
    super::compact::run(&mut g);
    crate::ir::verify::verify(&g).ok()?;
    Some(g)
}

/// Unrolls the first loop of `g` that has the seesaw's shape; the owners it gave.
fn unroll_first_loop(g: &mut Function) -> Option<BTreeMap<ValueId, u32>> {
    let mut owners = BTreeMap::new();
    let mut done = false;
    rewrite_loops(g, &mut |f, lp| {
        if done {
            return None;
        }
        let before = unroll(f, lp, &mut owners)?;
        done = true;
        Some(before)
    });
    done.then_some(owners)
}

/// Puts handoffs (or recomputed index tiles) wherever an op of `g` reads a tile of
/// another owner than its own.
fn place_crossings(g: &mut Function, owners: &mut BTreeMap<ValueId, u32>) {
    let mut defs = BTreeMap::new();
    g.walk(&mut |id, op| defs.extend(op.results.iter().map(|&r| (r, id))));
    let unowned_dot_reads = unowned_dot_reads(g, owners, &defs);
    let mut body = std::mem::take(&mut g.body);
    let mut fix = Crossings {
        owners,
        defs: &defs,
        unowned_dot_reads,
    };
    fix.block(g, &mut body, None, &mut BTreeMap::new());
    g.body = body;
}

/// The A and B operands of the dots no warpgroup owns (and what they transpose).
fn unowned_dot_reads(
    g: &Function,
    owners: &BTreeMap<ValueId, u32>,
    defs: &BTreeMap<ValueId, OpId>,
) -> BTreeSet<ValueId> {
    let mut reads = BTreeSet::new();
    g.walk(&mut |_, op| {
        if op.kind != OpKind::Dot || owners.contains_key(&op.results[0]) {
            return;
        }
        for &x in &op.operands[..2] {
            reads.insert(x);
            match defs.get(&x).map(|&d| g.op(d)) {
                Some(d) if d.kind == OpKind::Trans => {
                    reads.insert(d.operands[0]);
                }
                _ => {}
            }
        }
    });
    reads
}

/// The loop's two dots: the scores (first) and PV (last), whose accumulator comes from
/// the carried value at `acc_pos`.
struct Shape {
    qk: OpId,
    pv: OpId,
    acc_pos: usize,
}

fn shape(f: &Function, body: &Block) -> Option<Shape> {
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
fn forward(f: &Function, ops: &[OpId], from: &[ValueId]) -> BTreeSet<ValueId> {
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
fn unroll(f: &mut Function, lp: OpId, owners: &mut BTreeMap<ValueId, u32>) -> Option<Vec<OpId>> {
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
    let second = clone_half(f, ops, inputs, &yielded);

    // Where the second half runs; the guard picks its results when its tile exists.
    let placed = place_second_half(f, &second.ops, &first.out);
    let (guard, kept) = select_if(f, more.1, &second.out, &first.out, loc);
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
    let mut new_ops = vec![iv1.0];
    new_ops.extend(&first.ops[..=at]);
    new_ops.extend(&placed.ahead);
    new_ops.extend(&first.ops[at + 1..]);
    new_ops.extend(&placed.after);
    new_ops.extend([more.0, guard, new_yield]);
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

/// The values one half's warpgroup owns: what the scores `qk` compute (less the
/// accumulator's chain from `acc_in`, PV `pv` included), and the tiles only those read.
fn chain(
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
fn users(f: &Function, lp: OpId, half: &[OpId]) -> BTreeMap<ValueId, Vec<OpId>> {
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
fn wanted(
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

/// Where tiles cross owners: what each value's owner is, and which op defines it.
struct Crossings<'a> {
    owners: &'a mut BTreeMap<ValueId, u32>,
    defs: &'a BTreeMap<ValueId, OpId>,
    /// Tiles an unowned dot reads as A or B (through `trans` too).
    unowned_dot_reads: BTreeSet<ValueId>,
}

/// A value's copy for an owner, made once a block (and the blocks it holds).
type Made = BTreeMap<(ValueId, Option<u32>), ValueId>;

impl Crossings<'_> {
    /// Gives every op of `b` (nested blocks included) its tiles on the threads it runs on:
    /// an index tile recomputed by the owner that reads it, anything else handed off.
    fn block(&mut self, f: &mut Function, b: &mut Block, parent: Option<OpId>, made: &mut Made) {
        let mut out = Vec::with_capacity(b.ops.len());
        for o in std::mem::take(&mut b.ops) {
            let mut regions = std::mem::take(&mut f.op_mut(o).regions);
            for r in &mut regions {
                self.block(f, r, Some(o), &mut made.clone());
            }
            f.op_mut(o).regions = regions;
            for i in 0..f.op(o).operands.len() {
                let v = f.op(o).operands[i];
                let want = wanted(f, f.op(o), i, self.owners, parent.map(|p| f.op(p)));
                if f.ty(v).is_scalar()
                    || self.owners.get(&v).copied() == want
                    || self.read_from_shared(f, o, i)
                {
                    continue;
                }
                let moved = match want {
                    Some(w) if self.index_tile(f, v, MAX_REMAT_DEPTH) => {
                        self.remat(f, v, w, &mut out, made)
                    }
                    _ => self.hand_off(f, v, want, f.op(o).loc, &mut out, made),
                };
                f.op_mut(o).operands[i] = moved;
            }
            out.push(o);
        }
        b.ops = out;
    }

    /// Whether operand `i` of `o` is a dot operand every warp can read from shared memory
    /// (so no warpgroup needs its own copy): a loaded tile (through `trans` for B) that an
    /// unowned dot reads too (a tile the key loop copies once for both, MLA's latent
    /// keys), or any loaded tile on a warpgroup target (whose MMAs read both operands
    /// through descriptors).
    fn read_from_shared(&self, f: &Function, o: OpId, i: usize) -> bool {
        let op = f.op(o);
        let v = op.operands[i];
        if op.kind != OpKind::Dot || i > 1 || self.owners.contains_key(&v) {
            return false;
        }
        let def = |x: ValueId| self.defs.get(&x).map(|&d| f.op(d));
        let loaded = match def(v) {
            Some(d) if d.kind == OpKind::Trans => {
                def(d.operands[0]).is_some_and(|l| matches!(l.kind, OpKind::Load { .. }))
            }
            Some(d) => matches!(d.kind, OpKind::Load { .. }),
            None => false,
        };
        loaded && (f.warpgroup_mma || self.unowned_dot_reads.contains(&v))
    }

    fn hand_off(
        &mut self,
        f: &mut Function,
        v: ValueId,
        want: Option<u32>,
        loc: crate::ir::Loc,
        out: &mut Vec<OpId>,
        made: &mut Made,
    ) -> ValueId {
        if let Some(&h) = made.get(&(v, want)) {
            return h;
        }
        let (op, r) = new_op(f, OpKind::Handoff, vec![v], f.ty(v).clone(), loc);
        out.push(op);
        made.insert((v, want), r);
        r
    }

    /// Whether `v` is computed from scalars and coordinates alone (within `depth` ops).
    fn index_tile(&self, f: &Function, v: ValueId, depth: usize) -> bool {
        if f.ty(v).is_scalar() {
            return true;
        }
        let Some(op) = self.defs.get(&v).map(|&o| f.op(o)) else {
            return false;
        };
        depth > 0
            && op.kind.is_coordinate_op()
            && op
                .operands
                .iter()
                .all(|&x| self.index_tile(f, x, depth - 1))
    }

    /// A copy of index tile `v`'s ops owned by `w`, placed in `out`.
    fn remat(
        &mut self,
        f: &mut Function,
        v: ValueId,
        w: u32,
        out: &mut Vec<OpId>,
        made: &mut Made,
    ) -> ValueId {
        if f.ty(v).is_scalar() {
            return v;
        }
        if let Some(&r) = made.get(&(v, Some(w))) {
            return r;
        }
        let op = f.op(self.defs[&v]).clone();
        let operands = op
            .operands
            .iter()
            .map(|&x| self.remat(f, x, w, out, made))
            .collect();
        let (o, r) = new_op(f, op.kind, operands, f.ty(v).clone(), op.loc);
        out.push(o);
        self.owners.insert(r, w);
        made.insert((v, Some(w)), r);
        r
    }
}

/// Moves the handoffs in a top-level loop of values defined before it (the queries, to
/// each warpgroup) in front of the loop: once, not every tile.
fn hoist_invariant_handoffs(f: &mut Function) {
    let mut ops = Vec::with_capacity(f.body.ops.len());
    for o in std::mem::take(&mut f.body.ops) {
        if f.op(o).kind == OpKind::For {
            let inside = crate::gpu_ir::remat::defined_in(f, &f.op(o).regions[0]);
            let mut regions = std::mem::take(&mut f.op_mut(o).regions);
            for r in &mut regions {
                take_invariant_handoffs(f, r, &inside, &mut ops);
            }
            f.op_mut(o).regions = regions;
        }
        ops.push(o);
    }
    f.body.ops = ops;
}

fn take_invariant_handoffs(f: &mut Function, b: &mut Block, inside: &[bool], out: &mut Vec<OpId>) {
    let mut kept = Vec::with_capacity(b.ops.len());
    for o in std::mem::take(&mut b.ops) {
        let op = f.op(o);
        if op.kind == OpKind::Handoff && !inside[op.operands[0].0 as usize] {
            out.push(o);
            continue;
        }
        let mut regions = std::mem::take(&mut f.op_mut(o).regions);
        for r in &mut regions {
            take_invariant_handoffs(f, r, inside, out);
        }
        f.op_mut(o).regions = regions;
        kept.push(o);
    }
    b.ops = kept;
}

/// Lays `f` out: owned values as a one-warpgroup program would have them, wrapped in
/// their owner; the rest for the whole program.
fn lay_out(f: &mut Function, owners: &BTreeMap<ValueId, u32>) {
    let handoff_owner = handoff_owners(f, owners);
    let mut one = f.clone();
    one.num_warps = WARPS / 2;
    super::layout::run(&mut one);
    super::layout::run(f);
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
