//! Where tiles cross owners: a `handoff`, or an index tile recomputed by its new owner;
//! handoffs of loop-invariant tiles hoisted in front of the loop.

use super::owners::wanted;
use crate::ir::{Block, Function, OpId, OpKind, ValueId};
use crate::passes::loop_rewrite::new_op;
use std::collections::{BTreeMap, BTreeSet};

/// Puts handoffs (or recomputed index tiles) wherever an op of `g` reads a tile of
/// another owner than its own.
pub(super) fn place_crossings(g: &mut Function, owners: &mut BTreeMap<ValueId, u32>) {
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

/// The most ops an index tile recomputed by another owner takes.
const MAX_REMAT_DEPTH: usize = 8;

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
pub(super) fn hoist_invariant_handoffs(f: &mut Function) {
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
