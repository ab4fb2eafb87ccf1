//! Handoffs gathered: each moved up to the handoff before it where its tile is ready
//! there, so a run of them meets behind one barrier (`codegen::handoff`: every writer's
//! part, one barrier, every reader's part) instead of one a handoff.
//!
//! A handoff reads one tile and has no effect on memory the program sees (the executor runs
//! it as the identity), so it may run anywhere after its tile is computed and before its
//! first reader: moving it up keeps both. In the seesaw's loop the running max and sum
//! handed from one warpgroup to the other, and the rescale factor and P handed to every
//! warp, are computed by the same softmax: eight handoffs a pair of tiles become four runs
//! (one a softmax's output before its PV, one after; a handoff is not moved above a dot).

use crate::ir::{Block, Function, OpId, OpKind, ValueId};

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
        match joinable_run_end(f, &out, o) {
            Some(at) => out.insert(at, o),
            None => out.push(o),
        }
    }
    b.ops = out;
}

/// Where handoff `o` joins the last run of handoffs in `placed` (the index after the run),
/// if `o` is a handoff, its tile is computed before that run (or outside the block), and
/// no dot lies between. A handoff stays behind a dot: the run it meets in there has its
/// barrier after the dot's reads of the scratch buffer (P staged for PV), so the next run
/// may write over those bytes instead of growing the buffer past them (MLA's history has
/// 1.2 KB of shared memory to spare, P takes 9 KB).
fn joinable_run_end(f: &Function, placed: &[OpId], o: OpId) -> Option<usize> {
    let is_handoff = |o: OpId| f.op(o).kind == OpKind::Handoff;
    if !is_handoff(o) {
        return None;
    }
    let end = placed.iter().rposition(|&p| is_handoff(p))? + 1;
    if placed[end..].iter().any(|&p| f.op(p).kind == OpKind::Dot) {
        return None;
    }
    let start = placed[..end]
        .iter()
        .rposition(|&p| !is_handoff(p))
        .map_or(0, |i| i + 1);
    let x: ValueId = f.op(o).operands[0];
    let defined_at = placed.iter().position(|&p| f.op(p).results.contains(&x));
    defined_at.is_none_or(|d| d < start).then_some(end)
}
