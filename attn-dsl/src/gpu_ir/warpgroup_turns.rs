//! Warpgroup turns (ping-pong): a program of two warpgroups runs the same loop on both, and
//! left alone they issue their MMAs together, then both compute the softmax while the
//! tensor cores idle. Taking turns to issue (warpgroup 0's scores, then 1's while 0 computes
//! its softmax, then 0's PV while 1 computes its softmax, ...) keeps the tensor cores busy
//! through the softmax of the other warpgroup.
//!
//! Each MMA of the loop body becomes `take, mma (async), pass, mma_wait` (an MMA already
//! async passes at once and keeps its wait): the turn passes as soon as the MMAs are issued,
//! not when they complete. Both warpgroups must issue the same MMAs in the same order, so
//! only loops whose MMAs all sit directly in the body (none under a branch) take turns.
//!
//! Warpgroups that split an MMA's columns (a `[4, 2]` warp grid: each holds half of every
//! row) meet at every row reduction of its result, so one cannot run its softmax while the
//! other issues: their loops do not take turns.

use super::program::{GpuBlock, GpuOp, GpuProgram, Turn};
use crate::ir::{Function, Layout, OpId, ScheduleChoice};

/// Warps of the programs that take turns: two warpgroups.
const TWO_WARPGROUPS: u32 = 8;

/// Makes the pipelined loops of two-warpgroup programs take turns (warpgroup targets only,
/// where the kernel's `pingpong` allows it; `ATTN_CODEGEN_DISABLE=wg_turns` leaves them in
/// step). An error only where the kernel requires turns (`pingpong = true`) and no loop of
/// the program can take them: the reason.
pub fn run(f: &Function, p: &mut GpuProgram) -> Result<(), String> {
    let wanted = f.pingpong.allowed() && crate::features::on("wg_turns");
    if !f.warpgroup_mma || !wanted {
        return Ok(());
    }
    let required = f.pingpong == ScheduleChoice::Required;
    if f.num_warps != TWO_WARPGROUPS && required {
        return Err(format!(
            "`pingpong = true`, but `{}` runs {} warps: turns need two warpgroups (num_warps = 8)",
            f.name, f.num_warps
        ));
    }
    if f.num_warps != TWO_WARPGROUPS {
        return Ok(());
    }
    let splits_rows = |dot: OpId| rows_split_over_warpgroups(f, dot);
    if turns_block(&mut p.body, &splits_rows) == 0 && required {
        return Err(format!(
            "`pingpong = true`, but no pipelined loop of `{}` can take turns: its MMAs must all \
             sit directly in the loop body, each warpgroup holding whole rows of their results",
            f.name
        ));
    }
    Ok(())
}

/// Whether `dot`'s result splits its columns over warp-grid columns (warpgroups).
fn rows_split_over_warpgroups(f: &Function, dot: OpId) -> bool {
    let res = f.op(dot).results[0];
    matches!(f.ty(res).layout, Layout::Mma { warps_per_cta: [_, c] } if c > 1)
}

/// Rewrites the pipelined loops of `b` (nested too) that can take turns; how many did.
fn turns_block(b: &mut GpuBlock, splits_rows: &dyn Fn(OpId) -> bool) -> usize {
    let mut taken = 0;
    let mut out = Vec::with_capacity(b.ops.len());
    for mut op in std::mem::take(&mut b.ops) {
        let takes = match &mut op {
            GpuOp::For {
                body,
                pipelined: true,
                ..
            } => take_turns(body, splits_rows),
            _ => false,
        };
        if !takes {
            for inner in super::program::nested_mut(&mut op) {
                taken += turns_block(inner, splits_rows);
            }
            out.push(op);
            continue;
        }
        taken += 1;
        out.push(GpuOp::Turn(Turn::Begin));
        out.push(op);
        out.push(GpuOp::Turn(Turn::End));
    }
    b.ops = out;
    taken
}

/// Rewrites the body's MMAs to take turns; false (and the body untouched) when it has none,
/// some sit under control flow, or some split rows over the warpgroups.
fn take_turns(body: &mut GpuBlock, splits_rows: &dyn Fn(OpId) -> bool) -> bool {
    let is_mma = |op: &GpuOp| matches!(op, GpuOp::Mma { .. });
    let split = |op: &GpuOp| matches!(op, GpuOp::Mma { dot, .. } if splits_rows(*dot));
    let mut nested_mma = false;
    for inner in body.ops.iter().flat_map(super::program::nested) {
        super::program::walk_block(inner, &mut |op| nested_mma |= is_mma(op));
    }
    if nested_mma || !body.ops.iter().any(is_mma) || body.ops.iter().any(split) {
        return false;
    }
    let joins = joined_with_next(&body.ops);
    let mut out = Vec::with_capacity(body.ops.len() + 8);
    let mut in_turn = false;
    for (i, mut op) in std::mem::take(&mut body.ops).into_iter().enumerate() {
        let GpuOp::Mma {
            dot, inline_wait, ..
        } = &mut op
        else {
            out.push(op);
            continue;
        };
        let (dot, waits) = (*dot, std::mem::replace(inline_wait, false));
        if !in_turn {
            out.push(GpuOp::Turn(Turn::Take));
        }
        out.push(op);
        in_turn = joins[i];
        if !in_turn {
            out.push(GpuOp::Turn(Turn::Pass));
        }
        if waits {
            out.push(GpuOp::MmaWait {
                dot,
                in_scale: None,
            });
        }
    }
    body.ops = out;
    true
}

/// Per op of a loop body, whether it is an MMA issued in one turn with the body's next MMA:
/// it waits for nothing (its wait was deferred) and only tile ops and copy issues sit between
/// them (a rotated loop's next scores, then PV; a split program's copies leave for the
/// producer). One turn for the pair keeps the tensor cores fed while the
/// other warpgroup runs its softmax, where separate turns would make this warpgroup's PV
/// wait for the other's softmax.
fn joined_with_next(ops: &[GpuOp]) -> Vec<bool> {
    let mut joins = vec![false; ops.len()];
    for (i, op) in ops.iter().enumerate() {
        let GpuOp::Mma {
            inline_wait: false, ..
        } = op
        else {
            continue;
        };
        joins[i] = ops[i + 1..]
            .iter()
            .find(|o| !matches!(o, GpuOp::Tile(_) | GpuOp::AsyncCopy(_) | GpuOp::Commit))
            .is_some_and(|o| matches!(o, GpuOp::Mma { .. }));
    }
    joins
}
