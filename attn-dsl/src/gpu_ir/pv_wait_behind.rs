//! PV's wait one iteration behind (sm_90a, warp-specialized; opt-in:
//! `ATTN_CODEGEN_ENABLE=pv_wait_behind`).
//!
//! A loop that issues PV after its softmax and releases the stage at the end of the body
//! waits for PV right after issuing it: the warpgroup then sits through PV's MMAs (and the
//! other warpgroup's, queued before them), and the tensor cores idle from PV's end until
//! the next iteration's scores are issued (the release, the loop's top, the next stage's
//! wait). `ncu` put 16 % of L1's history samples on that wait and 10 % of P1's (docs/gpu_ir.md,
//! "Where the warps stall"). Here PV accumulates in place into the loop's carried
//! accumulator and is waited for in the next iteration, where the scores' wait completes it
//! anyway (warpgroup MMA groups complete in order), so the next scores queue right behind
//! it; its stage is released there (the previous stage, not at the first iteration), and
//! after the loop one wait completes the last PV.
//!
//! ```text
//! consumers, iteration j                     before
//!   wait full[s(j)]                            the same
//!   S = QK(K in s(j)); wait S (and PV(j−1))
//!   release s(j − 1)   (not at j = lo)         —
//!   softmax(S); acc = acc · α                  the same
//!   acc += P·(V in s(j)), not waited           acc += P·V; wait; release s(j)
//! after the loop: wait the last PV
//! ```
//!
//! Only loops whose warpgroups take turns: in L1's history (its warpgroups meet on every
//! tile) ptxas serialized every `wgmma` of the kernel instead.
//!
//! The stage is held until the next scores completed instead of until PV did, so the
//! producer refills it that much later. Timed (H100, session 25): P1 0.6 % faster, P3 3.4 %
//! slower, so it stays opt-in (docs/gpu_ir.md). Exact: the same MMAs on the same operands,
//! the accumulator read only after its wait. Applies to a split loop of one ring part whose
//! body ends with PV (its wait inline, reading the current stage), the current stage's
//! release and the yield of PV's result, the carried accumulator read only before PV.

use super::mma_defer::reads;
use super::program::{loop_holder, GpuBlock, GpuOp, GpuProgram, OperandSource, Stage, StageSync};
use crate::ir::{Function, OpId, OpKind, ValueId};

/// Rewrites the consumers' ring loop of `p` where it has the shape (see the module note).
pub fn run(f: &Function, p: &mut GpuProgram) {
    if !f.warpgroup_mma || !crate::features::on("pv_wait_behind") {
        return;
    }
    let Some(ws) = &p.specialization else {
        return;
    };
    if ws.parts != 1 {
        return;
    }
    let loop_op = ws.loop_op;
    let Some((holder, at)) = loop_holder(&mut p.body, loop_op) else {
        return;
    };
    let Some(found) = find(f, &holder.ops[at], loop_op) else {
        return;
    };
    if let GpuOp::For { body, .. } = &mut holder.ops[at] {
        rewrite_body(body, &found);
    }
    holder.ops.insert(
        at + 1,
        GpuOp::MmaWaitCarried {
            dot: found.pv,
            value: found.result,
        },
    );
}

/// The loop's PV and where its wait goes.
struct Found {
    pv: OpId,
    /// Index of PV's `Mma` in the body, and of its `MmaWait` where it has one.
    issued: usize,
    waited: Option<usize>,
    /// Index of the op that completes the scores (the first wait before PV).
    scores_done: usize,
    /// PV's accumulator as the body's argument, and as the loop's result.
    arg: ValueId,
    result: ValueId,
}

fn find(f: &Function, looped: &GpuOp, loop_op: OpId) -> Option<Found> {
    let GpuOp::For { body, .. } = looped else {
        return None;
    };
    let ops = &body.ops;
    // Only where two warpgroups take turns (P1, P3): L1's history, whose warpgroups meet on
    // every tile instead, had every `wgmma` of its kernel serialized by ptxas in this form
    // (NVRTC 13.0, C7515: "non wgmma instructions defining accumulator registers of a wgmma
    // between start and end of the pipeline stage").
    if !ops.iter().any(|o| matches!(o, GpuOp::Turn(_))) {
        return None;
    }
    // `… mma PV [turn pass; wait PV]; release current; yield`.
    let term = ops.len().checked_sub(1)?;
    let GpuOp::Tile(yield_op) = ops[term] else {
        return None;
    };
    let current = GpuOp::Stage(StageSync::Release {
        stage: Stage::Current,
        part: 0,
    });
    if f.op(yield_op).kind != OpKind::Yield || ops.get(term.checked_sub(1)?) != Some(&current) {
        return None;
    }
    let before = term.checked_sub(2)?;
    let (pv, waited) = match ops[before] {
        GpuOp::Mma { dot, .. } => (dot, None),
        GpuOp::MmaWait {
            dot,
            in_scale: None,
        } => (dot, Some(before)),
        _ => return None,
    };
    let issued = ops[..=before].iter().rposition(|o| {
        matches!(o, GpuOp::Mma {
            dot,
            b: OperandSource::Shared { stage: Stage::Current, .. },
            chained_from: None,
            inline_wait,
            ..
        } if *dot == pv && *inline_wait == waited.is_none())
    })?;
    let res = f.op(pv).results[0];
    let k = f.op(yield_op).operands.iter().position(|&v| v == res)?;
    let arg = *f.op(loop_op).regions[0].args.get(1 + k)?;
    let result = *f.op(loop_op).results.get(k)?;
    // PV accumulates into the carried value's array from its issue on: nothing may read the
    // carried value, or PV's result before its wait, after it.
    if ops[issued + 1..term]
        .iter()
        .any(|o| reads(f, o, arg) || reads(f, o, res))
    {
        return None;
    }
    let scores_done = ops[..issued].iter().position(|o| match o {
        GpuOp::MmaWait { dot, .. }
        | GpuOp::Mma {
            dot,
            inline_wait: true,
            ..
        } => *dot != pv,
        _ => false,
    })?;
    // The carried accumulator is first read after the scores completed.
    if ops[..=scores_done].iter().any(|o| reads(f, o, arg)) {
        return None;
    }
    Some(Found {
        pv,
        issued,
        waited,
        scores_done,
        arg,
        result,
    })
}

fn rewrite_body(body: &mut GpuBlock, found: &Found) {
    if let GpuOp::Mma { inline_wait, .. } = &mut body.ops[found.issued] {
        *inline_wait = false;
    }
    // The current stage's release, before the yield; then PV's own wait.
    body.ops.remove(body.ops.len() - 2);
    if let Some(w) = found.waited {
        body.ops.remove(w);
    }
    let at = found.scores_done + 1;
    body.ops.splice(
        at..at,
        [
            GpuOp::MmaWaitCarried {
                dot: found.pv,
                value: found.arg,
            },
            GpuOp::Stage(StageSync::Release {
                stage: Stage::Previous,
                part: 0,
            }),
        ],
    );
}
