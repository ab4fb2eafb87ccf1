//! TMA copies (sm_90a): a pipelined copy into a swizzled ring whose source rows
//! are one stride apart in runs of at least eight (a page of a paged K/V cache, see
//! [`super::row_affine`]) is issued as 2D boxes — a run of rows by 64 columns each,
//! written in the 128-byte swizzle the allocs already use — through a tensor map the
//! launcher encodes over the pointer's buffer. No thread then computes an address per 16
//! bytes: P0's producer warpgroup spends ~500 instructions a tile on them, as many as its
//! consumers' softmax and MMAs, on the same schedulers.
//!
//! The copy keeps its `cp.async` form for targets without TMA (the other side of the
//! emitted `#if`), its place in the schedule and its waits: the pass only sets its engine,
//! records the tensor map and marks where the boxes of the current stage must have landed
//! ([`GpuOp::TmaLanded`]): after the loop top's wait, or, in a split program, after the
//! consumers' wait for the stage's hand-over, with the producer waiting for the boxes
//! before it hands the stage over ([`StageSync::Filled`]) only to zero the masked chunks
//! the consumers must see (see [`Landing`]).
//!
//! Whose copies: a warp-specialized program's producer's, else the math warps'. Chosen per
//! specialization by the kernel's `tma` attribute (the MLA history's launcher sets it for
//! long programs, where the boxes measured faster, docs/gpu_ir.md, "TMA copies"), forced for
//! every kernel by `ATTN_CODEGEN_ENABLE=tma`, or off for all by `ATTN_CODEGEN_DISABLE=tma`;
//! off where a kernel does not ask, because where first
//! measured neither form was faster than `cp.async` (H200,
//! docs/gpu_ir.md, "TMA copies"): issued by the math warps P0 3.49 against 3.18 ms; issued
//! by the producer 2.83 against 2.80 ms, P1 374 against 372 µs, L1's history 410 against
//! 405 µs (two rounds in one call, 2026-12-02). The producer's address work was not what
//! held the consumers back.
//!
//! Which copies: warpgroup targets; both copies of a ring
//! (the prologue's and the loop's) rows contiguous along the columns; the row stride a
//! 16-byte multiple known at launch (a constant, or a constant times a parameter whose
//! divisibility the specialization promises); the masked chunks a thread zeroes after
//! landing fit one 32-bit word per thread.

use super::program::{
    loop_body_mut, AllocId, AsyncCopy, CopyAt, CopyEngine, GpuBlock, GpuOp, GpuProgram, Iterations,
    Landing, Stage, StageSync, TmaStride, TmaView, WarpSpecialization,
};
use crate::ir::{Function, OpKind, ValueId};

/// Bytes of a TMA row stride's granule (`cuTensorMapEncodeTiled`).
const STRIDE_ALIGN_BYTES: u64 = 16;
/// The most rows one box may have.
const MAX_BOX_ROWS: usize = 256;
/// Rows of a 128-byte swizzle atom: a box must cover whole atoms.
const ATOM_ROWS: usize = 8;
/// Masked-chunk bits a thread keeps per copy.
const MAX_ZERO_BITS: usize = 32;

/// Whether `f`'s copies are to move as TMA boxes: a warpgroup target whose kernel asks
/// (`tma = ...`), or every warpgroup target under `ATTN_CODEGEN_ENABLE=tma`; never under
/// `ATTN_CODEGEN_DISABLE=tma` (the A/B of the kernels' choice).
pub fn wanted(f: &Function) -> bool {
    let asked = f.tma_copies || crate::features::enabled("tma");
    f.warpgroup_mma && asked && !crate::features::disabled("tma")
}

/// Turns eligible pipelined copies into TMA copies (see the module note).
pub fn run(f: &Function, p: &mut GpuProgram) {
    if !wanted(f) {
        return;
    }
    let defs = super::remat::defining_ops(f);
    if let Some(mut ws) = p.specialization.take() {
        let copiers = Copiers(ws.producer_threads);
        visit(f, &defs, p, &mut ws.producer, copiers);
        hand_boxes_to_consumers(p, &mut ws);
        p.specialization = Some(ws);
        return;
    }
    let copiers = Copiers(32 * f.num_warps as usize);
    let mut body = std::mem::take(&mut p.body);
    visit(f, &defs, p, &mut body, copiers);
    p.body = body;
}

/// FlashAttention-3's handoff of a split program's TMA stages (`ATTN_CODEGEN_DISABLE=
/// consumer_landing` keeps the producer's): the consumers wait on the boxes' mbarriers
/// right after their wait for the stage's hand-over, and the producer waits for a stage's
/// boxes only in threads with masked chunks to zero first (see [`Landing`]). Otherwise the
/// producer waits for every stage to land before it hands it over, and issues the fill
/// `S − 1` tiles ahead no earlier than that: on P0's three stages (H200, 2026-12-04) 2.76
/// against 2.90 ms with 16-row boxes, 2.27 against 2.31 with whole-tile ones.
fn hand_boxes_to_consumers(p: &mut GpuProgram, ws: &mut WarpSpecialization) {
    if !crate::features::on("consumer_landing") {
        return;
    }
    let Some(producer) = loop_body_mut(&mut ws.producer, ws.loop_op) else {
        return;
    };
    let allocs: Vec<AllocId> = producer
        .ops
        .iter()
        .filter_map(|o| match o {
            GpuOp::TmaLanded { alloc, .. } => Some(*alloc),
            _ => None,
        })
        .collect();
    if allocs.is_empty() {
        return;
    }
    let Some(consumer) = loop_body_mut(&mut p.body, ws.loop_op) else {
        return;
    };
    let waits_for_stage = |o: &GpuOp| {
        matches!(
            o,
            GpuOp::Stage(StageSync::Wait {
                part: 0,
                when: Iterations::All,
                by: None,
            })
        )
    };
    let Some(w) = consumer.ops.iter().position(waits_for_stage) else {
        return;
    };
    let landed = allocs.iter().map(|&alloc| GpuOp::TmaLanded {
        alloc,
        stage: Stage::Current,
        by: Landing::Consumers,
    });
    consumer.ops.splice(w + 1..w + 1, landed);
    for o in &mut producer.ops {
        if let GpuOp::TmaLanded { by, .. } = o {
            *by = Landing::Zeroers;
        }
    }
}

/// Threads that run a program's copies (the masked-chunk bits are counted per thread).
#[derive(Clone, Copy)]
struct Copiers(usize);

fn visit(
    f: &Function,
    defs: &[Option<crate::ir::OpId>],
    p: &mut GpuProgram,
    b: &mut GpuBlock,
    copiers: Copiers,
) {
    for i in 0..b.ops.len() {
        match &b.ops[i] {
            GpuOp::For {
                op,
                pipelined: true,
                ..
            } => {
                let loop_op = *op;
                convert_loop(f, defs, p, b, i, loop_op, copiers);
            }
            _ => {
                for inner in super::program::nested_mut(&mut b.ops[i]) {
                    visit(f, defs, p, inner, copiers);
                }
            }
        }
    }
}

/// Moves the eligible copies of the pipelined loop `b.ops[i]` (and their prologue copies,
/// before it in `b`) by TMA, and marks where each stage lands: after the loop top's wait,
/// or before a producer's hand-over of the stage.
fn convert_loop(
    f: &Function,
    defs: &[Option<crate::ir::OpId>],
    p: &mut GpuProgram,
    b: &mut GpuBlock,
    i: usize,
    loop_op: crate::ir::OpId,
    copiers: Copiers,
) {
    let GpuOp::For { body, .. } = &b.ops[i] else {
        return;
    };
    let mut planned = Vec::new();
    for op in &body.ops {
        if let GpuOp::AsyncCopy(c) = op {
            if matches!(c.at, CopyAt::Ahead(_)) && c.stage == Stage::Next {
                if let Some(e) = plan(f, defs, p, c, copiers) {
                    planned.push((c.load, c.dst, e));
                }
            }
        }
    }
    if planned.is_empty() {
        return;
    }
    let set = |op: &mut GpuOp| {
        if let GpuOp::AsyncCopy(c) = op {
            let same =
                |(l, d, _): &&(crate::ir::OpId, AllocId, CopyEngine)| *l == c.load && *d == c.dst;
            if let Some((_, _, e)) = planned
                .iter()
                .find(same)
                .filter(|_| c.loop_op == Some(loop_op))
            {
                c.engine = e.clone();
            }
        }
    };
    b.ops[..i].iter_mut().for_each(set);
    let GpuOp::For { body, .. } = &mut b.ops[i] else {
        return;
    };
    body.ops.iter_mut().for_each(set);
    let at = body
        .ops
        .iter()
        .position(|o| matches!(o, GpuOp::Wait { .. } | GpuOp::Stage(StageSync::Filled)))
        .map_or(0, |t| match body.ops[t] {
            GpuOp::Wait { .. } => t + 1,
            _ => t,
        });
    let landed = planned.iter().map(|(_, alloc, _)| GpuOp::TmaLanded {
        alloc: *alloc,
        stage: Stage::Current,
        by: Landing::Copiers,
    });
    body.ops.splice(at..at, landed);
}

/// The engine of copy `c` when it can move by TMA (and its tensor map, added to `p`).
fn plan(
    f: &Function,
    defs: &[Option<crate::ir::OpId>],
    p: &mut GpuProgram,
    c: &AsyncCopy,
    copiers: Copiers,
) -> Option<CopyEngine> {
    let al = p.alloc(c.dst);
    let esize = al.elem.size_bytes();
    if !al.swizzled || al.stages < 2 || esize != 2 || !c.map.row_contiguous {
        return None;
    }
    let passes = al.rows.div_ceil(copiers.0 / c.map.lanes);
    let slots = c.map.slots_per_row(al.cols);
    if passes * slots > MAX_ZERO_BITS {
        return None;
    }
    let ptr = f.op(c.load).operands[0];
    let rows = super::row_affine::of_copy(f, defs, &p.axis, c)?;
    let group = (rows.run as usize).min(al.rows).min(MAX_BOX_ROWS);
    if group < ATOM_ROWS || !group.is_multiple_of(ATOM_ROWS) || !al.rows.is_multiple_of(group) {
        return None;
    }
    let row_stride = launch_stride(f, p, &rows.stride, esize as u64)?;
    let base = root_param(f, defs, ptr)?;
    let view = TmaView {
        base,
        elem: al.elem,
        row_stride,
        box_rows: group,
        box_cols: super::program::SWIZZLE_COLS,
    };
    let map = match p.tensor_maps.iter().position(|v| *v == view) {
        Some(m) => m,
        None => {
            p.tensor_maps.push(view);
            p.tensor_maps.len() - 1
        }
    };
    Some(CopyEngine::Tma {
        map,
        group_rows: group,
    })
}

/// The stride as the launcher computes it, when it is a positive 16-byte multiple.
fn launch_stride(
    f: &Function,
    p: &GpuProgram,
    s: &super::row_affine::Lin,
    esize: u64,
) -> Option<TmaStride> {
    if let Some(k) = s.as_konst() {
        return (k > 0 && (k as u64 * esize).is_multiple_of(STRIDE_ALIGN_BYTES))
            .then_some(TmaStride::Const(k));
    }
    let (&value, &coeff) = s
        .terms
        .iter()
        .next()
        .filter(|_| s.terms.len() == 1 && s.konst == 0)?;
    let param = f.params.iter().find(|p| p.value == value)?;
    if !matches!(param.kind, crate::ir::ParamKind::Scalar(_)) || coeff <= 0 {
        return None;
    }
    let div = p.axis.get(value).divisibility[0];
    (div * coeff as u64 * esize)
        .is_multiple_of(STRIDE_ALIGN_BYTES)
        .then_some(TmaStride::Param { value, coeff })
}

/// The pointer parameter a pointer tile offsets.
fn root_param(f: &Function, defs: &[Option<crate::ir::OpId>], mut v: ValueId) -> Option<ValueId> {
    while let Some(d) = defs.get(v.0 as usize).copied().flatten() {
        let op = f.op(d);
        match op.kind {
            OpKind::AddPtr
            | OpKind::Broadcast { .. }
            | OpKind::ExpandDims { .. }
            | OpKind::Splat { .. } => v = op.operands[0],
            _ => return None,
        }
    }
    f.params.iter().any(|p| p.value == v).then_some(v)
}
