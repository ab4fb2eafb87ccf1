//! Handoffs gathered: each moved up to the handoff before it where its tile is ready
//! there, so a run of them meets behind one barrier (`codegen::handoff`: every writer's
//! part, one barrier, every reader's part) instead of one a handoff.
//!
//! A handoff reads one tile and has no effect on memory the program sees (the executor runs
//! it as the identity), so it may run anywhere after its tile is computed and before its
//! first reader: moving it up keeps both. Where its tile is computed after the run by
//! register-only ops (P's cast, the neutral PV's select) from values ready before it, those
//! ops move up too, so the schedule does not depend on the order the kernel's source wrote
//! them in. In the seesaw's loop the running max and sum handed from one warpgroup to the
//! other, and the rescale factor and P handed to every warp, are computed by the same
//! softmax: eight handoffs a pair of tiles become four runs (one a softmax's output before
//! its PV, one after; a handoff is not moved above a dot).

use crate::ir::{Block, Function, OpId, OpKind, ValueId};

/// The deepest chain of register-only ops moved up with a handoff.
const MAX_HOISTED_DEPTH: usize = 6;

/// Gathers the handoffs of every block of `f` (see the module note).
pub(super) fn gather_handoffs(f: &mut Function) {
    let mut body = std::mem::take(&mut f.body);
    gather_block(f, &mut body);
    f.body = body;
}

fn gather_block(f: &mut Function, b: &mut Block) {
    let mut out: Vec<OpId> = Vec::with_capacity(b.ops.len());
    for o in std::mem::take(&mut b.ops) {
        let mut regions = std::mem::take(&mut f.op_mut(o).regions);
        for r in &mut regions {
            gather_block(f, r);
        }
        f.op_mut(o).regions = regions;
        if !join_last_run(f, &mut out, o) {
            out.push(o);
        }
    }
    b.ops = out;
}

/// Puts handoff `o` at the end of the last run of handoffs in `placed`, with the
/// register-only ops computing its tile after the run's start moved in front of the run;
/// whether it could (`o` a handoff, no dot after the run, its tile computable before it).
/// A handoff stays behind a dot: the run it meets there has its barrier after the dot's
/// reads of the scratch buffer (P staged for PV), so the next run may write over those
/// bytes instead of growing the buffer past them (MLA's history has 1.2 KB of shared
/// memory to spare, P takes 9 KB).
fn join_last_run(f: &Function, placed: &mut Vec<OpId>, o: OpId) -> bool {
    let is_handoff = |o: OpId| f.op(o).kind == OpKind::Handoff;
    if !is_handoff(o) {
        return false;
    }
    let Some(end) = placed.iter().rposition(|&p| is_handoff(p)).map(|i| i + 1) else {
        return false;
    };
    if placed[end..].iter().any(|&p| f.op(p).kind == OpKind::Dot) {
        return false;
    }
    let start = placed[..end]
        .iter()
        .rposition(|&p| !is_handoff(p))
        .map_or(0, |i| i + 1);
    let mut hoisted = Vec::new();
    let x = f.op(o).operands[0];
    if !computable_before(f, placed, start, x, MAX_HOISTED_DEPTH, &mut hoisted) {
        return false;
    }
    hoisted.sort_unstable();
    hoisted.dedup();
    let moved: Vec<OpId> = hoisted.iter().map(|&i| placed[i]).collect();
    for &i in hoisted.iter().rev() {
        placed.remove(i);
    }
    let end = end + moved.len();
    placed.splice(start..start, moved);
    placed.insert(end, o);
    true
}

/// Whether `x` can be computed before `placed[start]`: defined there already (or outside
/// the block), or by register-only ops after it (indices into `placed`, added to `hoisted`)
/// whose operands can, within `depth` ops. Never by a handoff of the run.
fn computable_before(
    f: &Function,
    placed: &[OpId],
    start: usize,
    x: ValueId,
    depth: usize,
    hoisted: &mut Vec<usize>,
) -> bool {
    let Some(d) = placed.iter().position(|&p| f.op(p).results.contains(&x)) else {
        return true;
    };
    if d < start {
        return true;
    }
    let op = f.op(placed[d]);
    if depth == 0 || !op.kind.is_register_only() || !op.regions.is_empty() {
        return false;
    }
    hoisted.push(d);
    op.operands
        .iter()
        .all(|&y| computable_before(f, placed, start, y, depth - 1, hoisted))
}
