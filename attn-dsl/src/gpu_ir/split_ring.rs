//! The keys and values of a loop that reads V from the previous stage as rings of their own
//! (one stage counter, a full and an empty mbarrier a stage for each part).
//!
//! After `previous_stage` a stage holds K(j) and V(j), and the consumers hold it from the
//! scores of iteration `j` until PV of `j` completed in iteration `j + 1`: of three stages
//! one is in flight, and a fill waits for PV before it may start its keys. What bounds P0 is
//! that supply (docs/gpu_ir.md, "What bounds P0 and P1 now": with a perfect ring it runs 1.48
//! against 2.10 ms). Split, K's part of a stage is released as soon as the scores that read
//! it completed, and the producer fills each part on its own acquire: the keys of tile
//! `j + 2` start an iteration earlier, while its values wait for PV of `j − 1` as before.
//! The consumers wait for V's part of the current stage at the end of the iteration, for
//! the next PV (in the first iteration before its own PV, which reads it), no longer at the
//! top: the values land an iteration later than the keys may.
//!
//! Measured (H200, one call each, two rounds). With V's wait before PV's issue, inside the
//! warpgroup's turn: P0 2.336 / 2.335 ms against 2.089 / 2.092 with one ring. As placed
//! now, V's wait at the end of the iteration (the values the next PV reads; in the first
//! iteration before its PV): 2.265 / 2.279 against 2.072 / 2.072. That loss was the
//! producer computing every row's address twice; with V's copy reading the row offsets
//! K's kept (the emitter's `SharedRows`) and rows addressed from their page's first
//! (`run_rows`), 1.962 / 1.966 against 2.110 / 2.105 with one ring (session 17). Shipped;
//! `ATTN_CODEGEN_DISABLE=split_ring` keeps one ring.
//!
//! Applies to a split loop whose consumers read exactly two ring allocs, the keys by the
//! scores on the current stage and the values by PV on the previous one, and whose producer
//! fills every stage with both in one group that arrives on its stage (`copies_arrive`).

use super::program::{
    loop_body_mut, AllocId, GpuBlock, GpuOp, GpuProgram, Iterations, OperandSource, Stage,
    StageSync,
};
use crate::ir::OpId;

/// The ring's two parts: the keys' alloc and the dot reading them, the values' and theirs.
#[derive(Clone, Copy)]
struct Parts {
    keys: AllocId,
    scores: OpId,
    values: AllocId,
    pv: OpId,
}

/// Splits the ring of `p`'s warp-specialized loop where it applies (see the module note).
pub fn run(p: &mut GpuProgram) {
    if !crate::features::on("split_ring") {
        return;
    }
    let Some(ws) = p.specialization.as_ref() else {
        return;
    };
    if !ws.copies_arrive || ws.parts != 1 {
        return;
    }
    let mut body = p.body.clone();
    let Some(lbody) = loop_body_mut(&mut body, ws.loop_op) else {
        return;
    };
    let Some(parts) = find_parts(lbody) else {
        return;
    };
    let mut producer = ws.producer.clone();
    let part_of = |a: AllocId| match a {
        a if a == parts.keys => Some(0),
        a if a == parts.values => Some(1),
        _ => None,
    };
    let filled = matches!(split_fills(&mut producer, 2, &part_of), Some(n) if n > 0);
    if !filled || !split_consumer_body(lbody, parts) {
        return;
    }
    let ws = p.specialization.as_mut().expect("split");
    ws.producer = producer;
    ws.parts = 2;
    p.body = body;
}

/// The loop's scores on the current stage of one ring alloc and PV on the previous stage of
/// another, the only MMAs of the loop body `body` reading shared operands of the ring.
fn find_parts(body: &GpuBlock) -> Option<Parts> {
    let (mut keys, mut values) = (None, None);
    for op in &body.ops {
        if let GpuOp::Mma {
            dot,
            b: OperandSource::Shared { alloc, stage, .. },
            ..
        } = op
        {
            let slot = match stage {
                Stage::Current => &mut keys,
                Stage::Previous => &mut values,
                _ => return None,
            };
            if slot.replace((*alloc, *dot)).is_some() {
                return None;
            }
        }
    }
    let ((keys, scores), (values, pv)) = (keys?, values?);
    (keys != values).then_some(Parts {
        keys,
        scores,
        values,
        pv,
    })
}

/// Rewrites every fill `acquire, copies, commit, issued` of the producer (any depth) into
/// one fill a part, in the parts' order, each with its acquire and arrival: `part_of`
/// names the part of each copy's alloc, of `parts`. The number of fills split, or `None`
/// where a fill has another shape or leaves a part empty.
pub(super) fn split_fills(
    b: &mut GpuBlock,
    parts: usize,
    part_of: &dyn Fn(AllocId) -> Option<usize>,
) -> Option<usize> {
    let mut n = 0;
    for op in b.ops.iter_mut() {
        for inner in super::program::nested_mut(op) {
            n += split_fills(inner, parts, part_of)?;
        }
    }
    let mut out = Vec::with_capacity(b.ops.len() + 2);
    let mut ops = std::mem::take(&mut b.ops).into_iter();
    while let Some(op) = ops.next() {
        let GpuOp::Stage(StageSync::Acquire { stage, at, part: 0 }) = op else {
            out.push(op);
            continue;
        };
        let mut copies = vec![Vec::new(); parts];
        loop {
            match ops.next()? {
                GpuOp::AsyncCopy(c) => copies.get_mut(part_of(c.dst)?)?.push(GpuOp::AsyncCopy(c)),
                GpuOp::Commit => {}
                GpuOp::Stage(StageSync::Issued {
                    stage: s,
                    at: a,
                    part: 0,
                }) if s == stage && a == at => break,
                _ => return None,
            }
        }
        if copies.iter().any(Vec::is_empty) {
            return None;
        }
        for (part, copies) in copies.into_iter().enumerate() {
            out.push(GpuOp::Stage(StageSync::Acquire { stage, at, part }));
            out.extend(copies);
            out.push(GpuOp::Commit);
            out.push(GpuOp::Stage(StageSync::Issued { stage, at, part }));
        }
        n += 1;
    }
    b.ops = out;
    Some(n)
}

/// In the consumers' loop: V's part of the current stage waited for at the end of an
/// iteration (the values the next iteration's PV reads; in the first, before its own PV,
/// which reads them), K's part released once the scores completed, the previous stage's
/// release V's. Whether the loop had that shape.
fn split_consumer_body(body: &mut GpuBlock, parts: Parts) -> bool {
    let wait = |when| {
        GpuOp::Stage(StageSync::Wait {
            part: 1,
            when,
            by: None,
        })
    };
    let (mut waited, mut released, mut moved) = (false, false, false);
    let mut out = Vec::with_capacity(body.ops.len() + 3);
    for op in std::mem::take(&mut body.ops) {
        match &op {
            GpuOp::Mma { dot, .. } if *dot == parts.pv => {
                out.push(wait(Iterations::First));
                waited = true;
                out.push(op);
            }
            GpuOp::MmaWait { dot, .. } if *dot == parts.scores => {
                out.push(op);
                out.push(GpuOp::Stage(StageSync::Release {
                    stage: Stage::Current,
                    part: 0,
                }));
                released = true;
            }
            GpuOp::Stage(StageSync::Release {
                stage: Stage::Previous,
                part: 0,
            }) => {
                out.push(GpuOp::Stage(StageSync::Release {
                    stage: Stage::Previous,
                    part: 1,
                }));
                moved = true;
            }
            GpuOp::Stage(StageSync::Release { .. }) => return false,
            _ => out.push(op),
        }
    }
    // Before the terminator: the values of this iteration's stage, for the next PV.
    let term = out.pop();
    out.push(wait(Iterations::AfterFirst));
    out.extend(term);
    body.ops = out;
    waited && released && moved
}
