//! PV from the previous stage (sm_90a, warp-specialized; `ATTN_CODEGEN_DISABLE=previous_stage`):
//! FlashAttention-3's intra-warpgroup overlap with the ring's stages as they are.
//!
//! `passes::pv_behind` leaves a loop whose iteration `j` issues the scores of tile `j` and
//! PV of tile `j − step`, V's load recomputed at `j − step`. Ringed as it is, a stage holds
//! K of one tile and V of the one before: two gathers, two address computations per stage
//! in the producer (its loop 841 → 1,236 SASS instructions on P0, the block-table loads
//! doubled), and P0 slower than shipped. This pass puts the stage back to one tile:
//!
//! ```text
//! producer                                 consumers, iteration j
//! stage s(t) <- K(t), V(t)                   wait full[s(j)]
//!   (V's copy with `prev` = t: one           S  = QK(K in s(j))          } one turn
//!    address computation for both)           acc += P·(V in s(j − 1))    } (not at j = lo)
//!                                            softmax(S) under PV (wait_group 1)
//!                                            wait PV; release s(j − 1) (not at j = lo)
//! ```
//!
//! The consumers keep a stage one iteration longer (K read in `j`, V in `j + 1`), so the
//! producer runs `stages − 2` tiles ahead instead of `stages − 1`: three stages at least,
//! and the copies must arrive on the stages themselves (`copy_arrive`: a producer that waits
//! for its copies before announcing a stage would wait for the consumers' late release).
//!
//! Exact, not approximate: the first iteration's PV, not issued here, multiplies the zeros P
//! starts as (checked: P's initial value is a zero splat). The loop runs at most once per
//! program (the split's condition), so the last stage, never released, is never refilled.
//! Only the split programs change; the unsplit one (`mma.sync` targets) keeps V's load at
//! `j − step`.

use super::program::{
    loop_body_mut, loop_holder, GpuBlock, GpuOp, GpuProgram, OneBehind, OperandSource, Stage,
    StageSync,
};
use super::remat::{defining_ops, is_zero};
use crate::ir::{BinaryOp, CmpPred, Function, OpId, OpKind, ValueId};
use std::collections::BTreeSet;

/// The fewest ring stages the form keeps a tile in flight with, one ring holding a tile's
/// K and V.
const MIN_STAGES: usize = 3;

/// The fewest where the ring then splits into K's and V's parts (`split_ring`; opt-in
/// below three, `ATTN_CODEGEN_ENABLE=two_stage_overlap`): K's part of a stage is free once
/// the scores completed, so two stages keep the next keys in flight (P1's D 256 tiles: a
/// third stage does not fit beside the queries). Measured slower there (H100, session 24,
/// one call, two rounds, against the shipped one ring with PV after the softmax): P1 302.7
/// / 304.1 against 286.3 / 286.5 µs, P3 347.4 / 349.9 against 324.6 / 324.5, P1 with
/// softcap 321.5 / 320.1 against 297.8 / 298.9; see docs/gpu_ir.md.
const MIN_STAGES_SPLIT: usize = 2;

/// The narrowest PV (head size) the form pays at. H200, one call (2026-12-03, commit
/// 5bbc991): P0 at head size 128 2.371 ms against 2.426–2.437 shipped, at 64 1.759–1.765
/// against 1.674–1.676. A PV half as long hides less of the softmax than the form costs
/// (the iteration past `hi`, the stage held one iteration longer).
const MIN_PV_COLUMNS: usize = 128;

/// Whether the form can apply to `f` at all (switched on, a ring deep enough): worth
/// rewriting its loop with PV behind to find out.
pub fn worth_trying(f: &Function) -> bool {
    let split = crate::features::on("split_ring") && crate::features::on("two_stage_overlap");
    crate::features::on("previous_stage") && f.num_stages as usize >= least_stages(split)
}

/// The fewest stages the form keeps a tile in flight with: one ring, or K's and V's parts.
fn least_stages(split: bool) -> usize {
    if split {
        MIN_STAGES_SPLIT
    } else {
        MIN_STAGES
    }
}

/// Whether `f`'s ring loop `loop_op` takes the form (the split asks, to have its copies
/// arrive on the stages: see the module note).
pub fn applies(f: &Function, loop_op: OpId) -> bool {
    if !worth_trying(f) {
        return false;
    }
    let defs = defining_ops(f);
    f.op(loop_op).regions[0]
        .ops
        .iter()
        .any(|&o| f.op(o).kind == OpKind::Dot && pv_behind_dot(f, &defs, loop_op, o).is_some())
}

/// Rewrites the split program `p` when its loop is PV-behind shaped (see the module note).
pub fn run(f: &Function, p: &mut GpuProgram) {
    let Some(ws) = &p.specialization else {
        return;
    };
    // The stage is announced as its copies land: `cp.async` arriving on it, or TMA boxes
    // landed on their own mbarriers before the producer's `filled` (its `cp.async` wait
    // then leaves the newest fill, the one ahead, in flight).
    if !(ws.copies_arrive || super::tma::wanted(f)) || !worth_trying(f) {
        return;
    }
    let loop_op = ws.loop_op;
    let Some(found) = loop_body_mut(&mut p.body, loop_op).and_then(|body| find(f, body, loop_op))
    else {
        return;
    };
    if !only_reader(&p.body, found.dot, found.alloc) {
        return;
    }
    let Some((holder, at)) = loop_holder(&mut p.body, loop_op) else {
        return;
    };
    if let GpuOp::For { body, .. } = &mut holder.ops[at] {
        consumer_reads_previous(body, found.dot);
        pack_p_ahead(body, found.dot, found.next_p);
    }
    // The first iteration's P, zeros, packed before the loop.
    let zeros = GpuOp::PackA {
        dot: found.dot,
        from: None,
    };
    holder.ops.insert(at, zeros);
    if let Some(ws) = &mut p.specialization {
        copy_own_iteration(&mut ws.producer, found.load, found.behind);
    }
}

/// Whether a program reads a ring's previous stage (the form applied) with a tile in
/// flight: three stages of one ring, or K's and V's rings of their own.
pub fn reads_previous_stage(p: &GpuProgram) -> bool {
    let in_flight = p
        .specialization
        .as_ref()
        .is_some_and(|ws| ws.stages >= least_stages(ws.parts == 2));
    in_flight && reads_previous(p)
}

fn reads_previous(p: &GpuProgram) -> bool {
    let mut found = false;
    super::program::walk_block(&p.body, &mut |op| {
        if let GpuOp::Mma { b, .. } = op {
            found |= b.alloc().is_some_and(|(_, s)| s == Stage::Previous);
        }
    });
    found
}

/// The PV MMA of the consumers' loop, its V load and alloc, and how the load is behind.
struct Found {
    dot: OpId,
    /// The P tile the loop body yields for PV's next iteration.
    next_p: ValueId,
    load: OpId,
    alloc: super::program::AllocId,
    behind: OneBehind,
}

/// PV behind, as `passes::pv_behind` leaves it: `dot`'s B a load one iteration back, its A
/// carried in from zeros, at least [`MIN_PV_COLUMNS`] wide. (V's load, how it is behind,
/// the P the body yields.)
fn pv_behind_dot(
    f: &Function,
    defs: &[Option<OpId>],
    loop_op: OpId,
    dot: OpId,
) -> Option<(OpId, OneBehind, ValueId)> {
    let lp = f.op(loop_op);
    let region = &lp.regions[0];
    let d = f.op(dot);
    if f.ty(d.results[0])
        .shape
        .get(1)
        .is_none_or(|&n| n < MIN_PV_COLUMNS)
    {
        return None;
    }
    let load = defs[d.operands[1].0 as usize]?;
    // P comes in carried, zeros at first: the first PV (on the current stage) adds nothing.
    let p_pos = region.args.iter().position(|&a| a == d.operands[0])?;
    let p_init = *lp.operands.get(2 + p_pos)?;
    if p_pos == 0 || !is_zero(f, defs, p_init) {
        return None;
    }
    let behind = one_behind(f, defs, loop_op, load)?;
    let term = *region.ops.last()?;
    let next_p = *f.op(term).operands.get(p_pos - 1)?;
    Some((load, behind, next_p))
}

fn find(f: &Function, lbody: &GpuBlock, loop_op: OpId) -> Option<Found> {
    let defs = defining_ops(f);
    let waited: BTreeSet<OpId> = lbody
        .ops
        .iter()
        .filter_map(|o| match o {
            GpuOp::MmaWait { dot, .. } => Some(*dot),
            _ => None,
        })
        .collect();
    lbody.ops.iter().find_map(|op| {
        let GpuOp::Mma {
            dot,
            b:
                OperandSource::Shared {
                    alloc,
                    stage: Stage::Current,
                    ..
                },
            chained_from: None,
            ..
        } = op
        else {
            return None;
        };
        if !waited.contains(dot) {
            return None;
        }
        let (load, behind, next_p) = pv_behind_dot(f, &defs, loop_op, *dot)?;
        Some(Found {
            dot: *dot,
            next_p,
            load,
            alloc: *alloc,
            behind,
        })
    })
}

/// How `load` (in `loop_op`'s body) reads the tile one iteration back, if it does: a mask
/// `… & (iv > lo)` and addresses reading the induction variable only as `iv − step`.
fn one_behind(f: &Function, defs: &[Option<OpId>], loop_op: OpId, load: OpId) -> Option<OneBehind> {
    let lp = f.op(loop_op);
    let (lo, step) = (lp.operands[0], lp.operands[2]);
    let body = &lp.regions[0];
    let iv = body.args[0];
    let l = f.op(load);
    if !matches!(l.kind, OpKind::Load { has_mask: true, .. }) {
        return None;
    }
    let def = |v: ValueId| defs[v.0 as usize].map(|o| f.op(o));
    let splat_of = |v: ValueId| match def(v)? {
        op if matches!(op.kind, OpKind::Splat { .. }) => Some(op.operands[0]),
        _ => None,
    };
    let mask = l.operands[1];
    let first_off = splat_of(mask).or_else(|| match def(mask)? {
        op if op.kind == OpKind::Binary(BinaryOp::And) => splat_of(op.operands[1]),
        _ => None,
    })?;
    let c = def(first_off)?;
    if c.kind != OpKind::Cmp(CmpPred::Gt) || c.operands != [iv, lo] {
        return None;
    }
    let prev = body.ops.iter().find_map(|&o| {
        let op = f.op(o);
        (op.kind == OpKind::Binary(BinaryOp::Sub) && op.operands == [iv, step])
            .then(|| op.results[0])
    })?;
    let mut seen = BTreeSet::from([prev, first_off]);
    let reads_iv = l
        .operands
        .iter()
        .any(|&v| reaches(f, defs, v, iv, &mut seen));
    (!reads_iv).then_some(OneBehind { prev, first_off })
}

/// Whether computing `v` reads `target` (through ops and their regions), not looking
/// through the values in `seen`.
fn reaches(
    f: &Function,
    defs: &[Option<OpId>],
    v: ValueId,
    target: ValueId,
    seen: &mut BTreeSet<ValueId>,
) -> bool {
    if v == target {
        return true;
    }
    if !seen.insert(v) {
        return false;
    }
    let Some(o) = defs[v.0 as usize] else {
        return false;
    };
    let mut operands = Vec::new();
    super::warp_specialize::region_operands(f, o, &mut operands);
    operands
        .into_iter()
        .any(|x| reaches(f, defs, x, target, seen))
}

/// Whether `dot` is the only op of the consumers' program reading `alloc`.
fn only_reader(body: &GpuBlock, dot: OpId, alloc: super::program::AllocId) -> bool {
    let mut others = 0;
    super::program::walk_block(body, &mut |op| {
        if let GpuOp::Mma { dot: d, a, b, .. } = op {
            let reads = [a, b]
                .iter()
                .any(|s| s.alloc().is_some_and(|(x, _)| x == alloc));
            others += usize::from(reads && *d != dot);
        }
    });
    others == 0
}

/// PV reads the previous stage, which it releases once its MMAs completed (instead of the
/// current one at the end of the iteration).
fn consumer_reads_previous(body: &mut GpuBlock, pv: OpId) {
    body.ops
        .retain(|o| !matches!(o, GpuOp::Stage(StageSync::Release { .. })));
    let mut ops = Vec::with_capacity(body.ops.len() + 1);
    for mut op in std::mem::take(&mut body.ops) {
        let waited = matches!(op, GpuOp::MmaWait { dot, .. } if dot == pv);
        if let GpuOp::Mma {
            dot,
            b: OperandSource::Shared { stage, .. },
            ..
        } = &mut op
        {
            if *dot == pv {
                *stage = Stage::Previous;
            }
        }
        ops.push(op);
        if waited {
            ops.push(GpuOp::Stage(StageSync::Release {
                stage: Stage::Previous,
                part: 0,
            }));
        }
    }
    body.ops = ops;
}

/// P's fragments are packed where the body yields P, for PV of the next iteration: 32
/// registers carried instead of 64 bf16-rounded floats, and none of the packing inside
/// PV's warpgroup turn (the other warpgroup waits for that turn; packed inside it, P0 took
/// 2.78 ms against the hand-written form's 2.27).
fn pack_p_ahead(body: &mut GpuBlock, pv: OpId, next_p: ValueId) {
    let at = body.ops.len().saturating_sub(1);
    body.ops.insert(
        at,
        GpuOp::PackA {
            dot: pv,
            from: Some(next_p),
        },
    );
}

/// The producer's copies of `load` move their own iteration's tile.
fn copy_own_iteration(b: &mut GpuBlock, load: OpId, behind: OneBehind) {
    for op in &mut b.ops {
        if let GpuOp::AsyncCopy(c) = op {
            if c.load == load {
                c.behind = Some(behind);
            }
        }
        for inner in super::program::nested_mut(op) {
            copy_own_iteration(inner, load, behind);
        }
    }
}
