//! Software pipelining (`num_stages` S ≥ 2 buffers per ring): a copy in a loop body whose
//! addresses depend only on the induction variable and on values the body can recompute is
//! issued S − 1 iterations ahead. The loop's prologue copies its first S − 1 iterations,
//! one commit group each; the top of each iteration waits until only the S − 2 newest
//! groups are in flight (so its own stage landed), synchronizes once (this stage landed for
//! everyone, and everyone is done with the buffer the previous iteration read, the one about
//! to be refilled), then issues the copies of iteration i + S − 1, which fly while this and
//! the next S − 2 iterations compute. The allocs become S-buffer rings.

use super::program::{AllocId, CopyAt, GpuBlock, GpuOp, GpuProgram, OperandSource, Stage};
use super::remat::{can_remat, defined_in, defining_ops, RematScope};
use crate::ir::{Function, OpId, OpKind};
use std::collections::BTreeSet;

/// Pipelines every eligible loop of `p` (nothing with fewer than two stages).
pub fn run(f: &Function, p: &mut GpuProgram) {
    let stages = f.num_stages as usize;
    if stages < 2 {
        return;
    }
    let defs = defining_ops(f);
    let mut piped = BTreeSet::new();
    pipeline_block(f, &defs, &mut p.body, &mut piped, stages);
    for a in piped {
        p.allocs[a.0 as usize].stages = stages;
    }
}

fn pipeline_block(
    f: &Function,
    defs: &[Option<OpId>],
    b: &mut GpuBlock,
    piped: &mut BTreeSet<AllocId>,
    stages: usize,
) {
    let mut out = Vec::with_capacity(b.ops.len());
    for mut op in std::mem::take(&mut b.ops) {
        for inner in super::program::nested_mut(&mut op) {
            pipeline_block(f, defs, inner, piped, stages);
        }
        if let GpuOp::For {
            op: loop_op,
            body,
            pipelined,
        } = &mut op
        {
            let prologue = pipeline_loop(f, defs, *loop_op, body, piped, stages);
            if !prologue.is_empty() {
                *pipelined = true;
                out.extend(prologue);
            }
        }
        out.push(op);
    }
    b.ops = out;
}

/// Moves the body's prefetchable copies `stages - 1` iterations ahead; returns the
/// prologue (its copies, one commit group per iteration).
fn pipeline_loop(
    f: &Function,
    defs: &[Option<OpId>],
    loop_op: OpId,
    body: &mut GpuBlock,
    piped: &mut BTreeSet<AllocId>,
    stages: usize,
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
        GpuOp::Wait {
            pending: (stages - 2) as u32,
        },
        GpuOp::Barrier {
            reason: super::program::BarrierReason::PipelineStage,
        },
    ];
    top.extend(
        moved
            .iter()
            .map(|c| copy(c, CopyAt::Ahead(stages - 1), Stage::Next)),
    );
    top.push(GpuOp::Commit);
    top.extend(kept);
    body.ops = top;
    let mut prologue = Vec::new();
    for k in 0..stages - 1 {
        prologue.extend(
            moved
                .iter()
                .map(|c| copy(c, CopyAt::Prologue(k), Stage::Fixed(k))),
        );
        prologue.push(GpuOp::Commit);
    }
    prologue
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
