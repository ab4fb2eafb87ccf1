//! The seesaw's ring (`passes::seesaw`): a warp-specialized key loop unrolled by two, each
//! half's scores on one warpgroup, fills its halves' tiles as two parts of one ring whose
//! stage is the tile.
//!
//! Pipelined as any loop, each half's copy takes an `S`-deep ring of its own, `S` tiles a
//! half: MLA's history would hold 72 KB of queries beside 2 × 2 × 72 KB of keys (368,672
//! bytes where 232,448 fit). Here the kernel's `num_stages` counts tiles, so each half gets
//! `S / 2` buffers: at `S = 2` half `h` of every iteration reads its own buffer, and the
//! producer refills it with the next iteration's tile `h` as soon as that tile's last
//! reader (its PV, on both warpgroups) completed, under the other half's softmax and PV.
//! Each half is a part of the ring (a [`WarpSpecialization`] with two `parts`) with its
//! own *full* and *empty* mbarrier:
//!
//! ```text
//! producer                                   consumers
//! fill part 0 (tile 0), part 1 (tile 1)      for i:
//! for i:                                       wait part 0; scores of tile 2i   (wg 0)
//!   acquire part 0; copy tile 2i + 2           wait part 1; scores of tile 2i+1 (wg 1)
//!   acquire part 1; copy tile 2i + 3           ... PV of tile 2i;     release part 0
//!                                              ... PV of tile 2i + 1; release part 1
//! ```
//!
//! Tile `2i + 2` lands under the second half of iteration `i`; tile `2i + 3` has only the
//! next scores of tile `2i + 2` (the lead a deeper ring would give it needs the shared
//! memory of a third tile: docs/gpu_ir.md, "The history's budget").
//!
//! The unsplit program (the same source on a target without the split) reads the same
//! single buffers, so its loop copies each iteration's tiles in place: every thread done
//! with the last tiles, the copies, their landing, then the math.

#[cfg(doc)]
use super::program::WarpSpecialization;
use super::program::{
    loop_body_mut, loop_holder, walk_block, AllocId, BarrierReason, CopyAt, GpuBlock, GpuOp,
    GpuProgram, Iterations, Stage, StageSync,
};
use super::split_ring::split_fills;
use super::warp_specialize::without_ring_copies;
use crate::ir::{Function, OpId};
use std::collections::BTreeMap;

/// The halves of an iteration: one part of the ring each.
const HALVES: usize = 2;

/// Splits the ring of `p`'s warp-specialized loop by half where the loop is the seesaw's
/// (see the module note).
pub fn run(f: &Function, p: &mut GpuProgram) {
    let Some(ws) = p.specialization.as_ref() else {
        return;
    };
    // The copies arrive on their part's stage as they land (a producer that waited for its
    // copies before handing a stage over would hold tile 2i + 2 back until 2i + 3 landed);
    // TMA boxes land on mbarriers of their own.
    let tma = super::tma::wanted(f);
    // Two stages (tiles) make one buffer a half; a deeper ring (`S / 2` a half, the copies
    // that many iterations ahead) is not built.
    if tma || ws.parts != 1 || ws.stages != HALVES {
        return;
    }
    let loop_op = ws.loop_op;
    let ring = ring_allocs(&ws.producer, loop_op);
    let mut body = p.body.clone();
    let Some(lbody) = loop_body_mut(&mut body, loop_op) else {
        return;
    };
    let Some(half_of) = halves(f, lbody, &ring) else {
        return;
    };
    let part_of = |a: AllocId| half_of.get(&a).copied();
    let mut producer = ws.producer.clone();
    if !ws.copies_arrive {
        arrive_on_stages(&mut producer);
    }
    let mut unsplit = ws.unsplit.clone();
    let filled = matches!(split_fills(&mut producer, HALVES, &part_of), Some(n) if n > 0);
    if !filled || !wait_and_release_by_half(f, lbody, &part_of) || !in_place(&mut unsplit, loop_op)
    {
        return;
    }
    let ws = p.specialization.as_mut().expect("split");
    (ws.producer, ws.unsplit, ws.parts, ws.stages) = (producer, unsplit, HALVES, 1);
    ws.copies_arrive = true;
    for a in ring {
        p.allocs[a.0 as usize].stages = 1;
    }
    p.body = body;
}

/// The producer's fills made to arrive on their stage as the copies land: each group
/// acquired for a stage is followed by its arrival ([`StageSync::Issued`]) instead of the
/// producer waiting for it at the next iteration's top ([`StageSync::Filled`]).
fn arrive_on_stages(b: &mut GpuBlock) {
    let mut open = None;
    let mut out = Vec::with_capacity(b.ops.len() + 2);
    for mut op in std::mem::take(&mut b.ops) {
        for inner in super::program::nested_mut(&mut op) {
            arrive_on_stages(inner);
        }
        match op {
            GpuOp::Stage(StageSync::Filled) => continue,
            GpuOp::Stage(StageSync::Acquire { stage, at, part }) => open = Some((stage, at, part)),
            GpuOp::Commit => {
                if let Some((stage, at, part)) = open.take() {
                    out.push(op);
                    out.push(GpuOp::Stage(StageSync::Issued { stage, at, part }));
                    continue;
                }
            }
            _ => {}
        }
        out.push(op);
    }
    b.ops = out;
}

/// The allocs the producer's copies of loop `loop_op` fill.
fn ring_allocs(producer: &GpuBlock, loop_op: OpId) -> Vec<AllocId> {
    let mut ring = Vec::new();
    walk_block(producer, &mut |op| {
        if let GpuOp::AsyncCopy(c) = op {
            if c.loop_op == Some(loop_op) && !ring.contains(&c.dst) {
                ring.push(c.dst);
            }
        }
    });
    ring
}

/// The half of each ring alloc: the warpgroup whose owned MMAs read it. `None` unless every
/// ring alloc is read by exactly one warpgroup's owned MMAs and both halves have allocs.
fn halves(f: &Function, body: &GpuBlock, ring: &[AllocId]) -> Option<BTreeMap<AllocId, usize>> {
    let mut half_of = BTreeMap::new();
    let mut clash = false;
    walk_block(body, &mut |op| {
        let (GpuOp::Mma { a, b, .. }, Some(owner)) = (op, mma_owner(f, op)) else {
            return;
        };
        for (alloc, _) in [a, b].into_iter().filter_map(|s| s.alloc()) {
            if ring.contains(&alloc) {
                let before = half_of.insert(alloc, owner as usize);
                clash |= before.is_some_and(|h| h != owner as usize);
            }
        }
    });
    let every_half = (0..HALVES).all(|h| half_of.values().any(|&o| o == h));
    (!clash && half_of.len() == ring.len() && every_half).then_some(half_of)
}

/// The warpgroup owning an MMA's result, if `op` is an MMA of an owned dot.
fn mma_owner(f: &Function, op: &GpuOp) -> Option<u32> {
    match op {
        GpuOp::Mma { dot, .. } => f.ty(f.op(*dot).results[0]).layout.owner(),
        _ => None,
    }
}

/// The allocs an op of the consumers' loop reads from shared memory.
fn reads(op: &GpuOp) -> Vec<AllocId> {
    match op {
        GpuOp::Mma { a, b, .. } => [a, b]
            .into_iter()
            .filter_map(|s| s.alloc())
            .map(|x| x.0)
            .collect(),
        _ => Vec::new(),
    }
}

/// In the consumers' loop: each half's part waited for by each warpgroup before the first
/// MMA it runs that reads it (the split's wait at the top goes: warpgroup 1 need not wait
/// for tile 2i to issue the scores of 2i + 1), released where the last MMA reading it
/// completed. Whether the loop had that shape (flat reads, every reading MMA waited for).
fn wait_and_release_by_half(
    f: &Function,
    body: &mut GpuBlock,
    part_of: &dyn Fn(AllocId) -> Option<usize>,
) -> bool {
    // The split's wait at the top and release at the end of the iteration go.
    let syncs = body
        .ops
        .iter()
        .filter(|o| matches!(o, GpuOp::Stage(_)))
        .count();
    body.ops.retain(|o| !matches!(o, GpuOp::Stage(_)));
    let parts_read =
        |op: &GpuOp| -> Vec<usize> { reads(op).into_iter().filter_map(part_of).collect() };
    let nested_reads = body.ops.iter().any(|op| {
        let mut any = false;
        for inner in super::program::nested(op) {
            walk_block(inner, &mut |o| any |= !parts_read(o).is_empty());
        }
        any
    });
    if syncs != 2 || nested_reads {
        return false;
    }
    let mut inserts: Vec<(usize, GpuOp)> = Vec::new();
    for h in 0..HALVES {
        let readers: Vec<usize> = (0..body.ops.len())
            .filter(|&i| parts_read(&body.ops[i]).contains(&h))
            .collect();
        let Some(done) = readers.last().and_then(|&last| completion(&body.ops, last)) else {
            return false;
        };
        for (at, by) in first_reads(f, &body.ops, &readers) {
            let wait = StageSync::Wait {
                part: h,
                when: Iterations::All,
                by,
            };
            inserts.push((at, GpuOp::Stage(wait)));
        }
        let release = StageSync::Release {
            stage: Stage::Current,
            part: h,
        };
        inserts.push((done + 1, GpuOp::Stage(release)));
    }
    // From the back, so each position still names the op it was computed for.
    inserts.sort_by_key(|(at, _)| std::cmp::Reverse(*at));
    for (at, op) in inserts {
        body.ops.insert(at, op);
    }
    true
}

/// Where each warpgroup first reads a part (`readers`: the indices of the MMAs reading it,
/// in order) and who waits there: one wait for every warp where that read is every
/// warp's, else one a warpgroup.
fn first_reads(f: &Function, ops: &[GpuOp], readers: &[usize]) -> Vec<(usize, Option<u32>)> {
    let owner = |i: usize| mma_owner(f, &ops[i]);
    let first = |w: u32| {
        readers
            .iter()
            .copied()
            .find(|&i| owner(i).is_none_or(|o| o == w))
    };
    match (first(0), first(1)) {
        (Some(a), Some(b)) if a == b => vec![(a, None)],
        (a, b) => [(a, 0), (b, 1)]
            .into_iter()
            .filter_map(|(at, w)| Some((at?, Some(w))))
            .collect(),
    }
}

/// The index of the op after which the MMA at `at` has completed: itself when it waits
/// inline, else the first wait for its dot (or for a dot continuing its chain) after it.
fn completion(ops: &[GpuOp], at: usize) -> Option<usize> {
    let GpuOp::Mma {
        dot, inline_wait, ..
    } = &ops[at]
    else {
        return None;
    };
    if *inline_wait {
        return Some(at);
    }
    let mut chain = vec![*dot];
    for (i, op) in ops.iter().enumerate().skip(at + 1) {
        match op {
            GpuOp::Mma {
                dot: d,
                chained_from: Some(from),
                ..
            } if chain.contains(from) => chain.push(*d),
            GpuOp::MmaWait { dot: d, .. } if chain.contains(d) => return Some(i),
            _ => {}
        }
    }
    None
}

/// The unsplit program's loop `loop_op` with each iteration's copies in place: no prologue;
/// at the top every thread done with the last tiles, the copies of this iteration, their
/// landing for every thread. Whether the loop had copies of its own.
fn in_place(unsplit: &mut GpuBlock, loop_op: OpId) -> bool {
    let Some((holder, at)) = loop_holder(unsplit, loop_op) else {
        return false;
    };
    let (before, after) = holder.ops.split_at(at);
    let mut ops = without_ring_copies(before, loop_op);
    let Some(GpuOp::For { body, .. }) = after.first() else {
        return false;
    };
    let Some(top) = this_iterations_copies(body, loop_op) else {
        return false;
    };
    let mut lp = after[0].clone();
    if let GpuOp::For { body, .. } = &mut lp {
        *body = top;
    }
    ops.push(lp);
    ops.extend(after[1..].iter().cloned());
    holder.ops = ops;
    true
}

/// A pipelined body as one that copies its own iteration's tiles first: every thread done
/// with the last ones, the copies, their landing for every thread, then the rest (its own
/// waits and barriers kept: they find nothing more to wait for).
fn this_iterations_copies(body: &GpuBlock, loop_op: OpId) -> Option<GpuBlock> {
    let mut out = vec![GpuOp::Barrier {
        reason: BarrierReason::BufferFree,
    }];
    for op in &body.ops {
        if let GpuOp::AsyncCopy(c) = op {
            if c.loop_op == Some(loop_op) {
                let mut c = c.clone();
                (c.at, c.stage) = (CopyAt::Ahead(0), Stage::Current);
                out.push(GpuOp::AsyncCopy(c));
            }
        }
    }
    if out.len() == 1 {
        return None;
    }
    out.push(GpuOp::Commit);
    out.push(GpuOp::Wait { pending: 0 });
    out.push(GpuOp::Barrier {
        reason: BarrierReason::CopiesVisible,
    });
    out.extend(without_ring_copies(&body.ops, loop_op));
    Some(GpuBlock { ops: out })
}
