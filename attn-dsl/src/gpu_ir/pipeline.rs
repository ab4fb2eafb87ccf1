//! Software pipelining (two stages): a copy in a loop body whose addresses depend only on the
//! induction variable and on values the body can recompute is issued one iteration ahead.
//! The loop's prologue copies the first iteration; the top of each iteration waits for its
//! own stage, synchronizes once (this stage landed for everyone, and everyone is done with
//! the buffer about to be refilled), then issues the next iteration's copies, which fly
//! while this iteration computes. The allocs become two-buffer rings.

use super::program::{AllocId, CopyAt, GpuBlock, GpuOp, GpuProgram, OperandSource, Stage};
use super::remat::{can_remat, defined_in, defining_ops, RematScope};
use crate::ir::{Function, OpId, OpKind};
use std::collections::BTreeSet;

/// Pipelines every eligible loop of `p`.
pub fn run(f: &Function, p: &mut GpuProgram) {
    let defs = defining_ops(f);
    let mut piped = BTreeSet::new();
    pipeline_block(f, &defs, &mut p.body, &mut piped);
    for a in piped {
        p.allocs[a.0 as usize].stages = 2;
    }
}

fn pipeline_block(
    f: &Function,
    defs: &[Option<OpId>],
    b: &mut GpuBlock,
    piped: &mut BTreeSet<AllocId>,
) {
    let mut out = Vec::with_capacity(b.ops.len());
    for mut op in std::mem::take(&mut b.ops) {
        for inner in super::program::nested_mut(&mut op) {
            pipeline_block(f, defs, inner, piped);
        }
        if let GpuOp::For {
            op: loop_op,
            body,
            pipelined,
        } = &mut op
        {
            let prologue = pipeline_loop(f, defs, *loop_op, body, piped);
            if !prologue.is_empty() {
                *pipelined = true;
                out.extend(prologue);
                out.push(GpuOp::Commit);
            }
        }
        out.push(op);
    }
    b.ops = out;
}

/// Moves the body's prefetchable copies one iteration ahead; returns the prologue copies.
fn pipeline_loop(
    f: &Function,
    defs: &[Option<OpId>],
    loop_op: OpId,
    body: &mut GpuBlock,
    piped: &mut BTreeSet<AllocId>,
) -> Vec<GpuOp> {
    let tile_loop = f.op(loop_op);
    let Some(&iv) = tile_loop.regions[0].args.first() else {
        return vec![];
    };
    let inside = defined_in(f, &tile_loop.regions[0]);
    let scope = RematScope::Loop {
        iv,
        defined_in_body: &inside,
    };
    let prefetchable = |load: OpId| {
        let op = f.op(load);
        op.operands.iter().all(|&v| can_remat(f, defs, v, scope))
            && matches!(op.kind, OpKind::Load { .. })
    };
    let mut moved = Vec::new();
    let mut kept = Vec::with_capacity(body.ops.len());
    let mut drop_commit = false;
    for op in std::mem::take(&mut body.ops) {
        match op {
            GpuOp::AsyncCopy(c) if c.at == CopyAt::InPlace && prefetchable(c.load) => {
                piped.insert(c.dst);
                moved.push(c);
                drop_commit = true;
            }
            GpuOp::Commit if drop_commit => drop_commit = false,
            other => {
                drop_commit = false;
                kept.push(other);
            }
        }
    }
    if moved.is_empty() {
        body.ops = kept;
        return vec![];
    }
    let ring: BTreeSet<AllocId> = moved.iter().map(|c| c.dst).collect();
    for op in &mut kept {
        read_current_stage(op, &ring);
    }
    let copy = |c: &super::program::AsyncCopy, at: CopyAt, stage: Stage| {
        let mut c = c.clone();
        (c.at, c.stage, c.loop_op) = (at, stage, Some(loop_op));
        GpuOp::AsyncCopy(c)
    };
    let mut top = vec![
        GpuOp::Wait { pending: 0 },
        GpuOp::Barrier {
            reason: super::program::BarrierReason::PipelineStage,
        },
    ];
    top.extend(
        moved
            .iter()
            .map(|c| copy(c, CopyAt::NextIteration, Stage::Next)),
    );
    top.push(GpuOp::Commit);
    top.extend(kept);
    body.ops = top;
    moved
        .iter()
        .map(|c| copy(c, CopyAt::FirstIteration, Stage::Current))
        .collect()
}

/// Makes the `mma`s of `op` that read a ring alloc read the current iteration's stage.
fn read_current_stage(op: &mut GpuOp, ring: &BTreeSet<AllocId>) {
    if let GpuOp::Mma { a, b, .. } = op {
        for s in [a, b] {
            if let OperandSource::Shared { alloc, stage, .. } = s {
                if ring.contains(alloc) {
                    *stage = Stage::Current;
                }
            }
        }
    }
    for inner in super::program::nested_mut(op) {
        for o in &mut inner.ops {
            read_current_stage(o, ring);
        }
    }
}
