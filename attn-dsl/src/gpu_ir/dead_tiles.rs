//! Dead tile ops after lowering: a load that became an async copy no longer needs its mask
//! or pointer tiles in registers (the copy recomputes them per chunk), so a reduction that
//! only fed a copy's mask (the V guard of attention) would still cost registers, shared
//! memory and barriers if it were emitted. This pass drops every pure tile op whose results
//! nothing emitted reads (loops and branches that only compute unread values included).
//! Scalars a copy recomputes from stay (the copy reads them by name).

use super::program::{GpuBlock, GpuOp, GpuProgram, OperandSource};
use super::remat::defining_ops;
use crate::ir::{Block, Function, OpId, OpKind, ValueId};

/// Removes dead pure tile ops from `p` until none is left.
pub fn run(f: &Function, p: &mut GpuProgram) {
    let defs = defining_ops(f);
    loop {
        let mut used = vec![false; f.values.len()];
        mark_block(f, &defs, &p.body, &mut used);
        if !sweep(f, &mut p.body, &used) {
            return;
        }
    }
}

fn mark_block(f: &Function, defs: &[Option<OpId>], b: &GpuBlock, used: &mut [bool]) {
    for op in &b.ops {
        match op {
            GpuOp::Tile(o)
            | GpuOp::For { op: o, .. }
            | GpuOp::If { op: o, .. }
            | GpuOp::While { op: o, .. } => {
                for v in &f.op(*o).operands {
                    used[v.0 as usize] = true;
                }
            }
            GpuOp::Mma { dot, a, b, .. } => {
                let d = f.op(*dot);
                used[d.operands[2].0 as usize] = true;
                for (i, src) in [a, b].into_iter().enumerate() {
                    if *src == OperandSource::Registers {
                        used[d.operands[i].0 as usize] = true;
                    }
                }
            }
            GpuOp::AsyncCopy(c) => {
                for &v in &f.op(c.load).operands {
                    mark_remat_leaves(f, defs, v, used);
                }
            }
            _ => {}
        }
        for inner in super::program::nested(op) {
            mark_block(f, defs, inner, used);
        }
    }
}

/// Marks the scalars a recomputed tile is evaluated from (those a recomputed loop or branch
/// reads inside its regions included).
pub(super) fn mark_remat_leaves(
    f: &Function,
    defs: &[Option<OpId>],
    v: ValueId,
    used: &mut [bool],
) {
    if f.ty(v).is_scalar() {
        used[v.0 as usize] = true;
        return;
    }
    if let Some(o) = defs[v.0 as usize] {
        let op = f.op(o);
        for &x in &op.operands {
            mark_remat_leaves(f, defs, x, used);
        }
        for b in &op.regions {
            mark_region_reads(f, defs, b, used);
        }
    }
}

fn mark_region_reads(f: &Function, defs: &[Option<OpId>], b: &Block, used: &mut [bool]) {
    for &o in &b.ops {
        let op = f.op(o);
        for &x in &op.operands {
            mark_remat_leaves(f, defs, x, used);
        }
        for r in &op.regions {
            mark_region_reads(f, defs, r, used);
        }
    }
}

/// Whether a GPU block only computes values: tile ops without side effects, branches and
/// counted loops of such blocks, terminators.
pub(super) fn pure_block(f: &Function, b: &GpuBlock) -> bool {
    b.ops.iter().all(|op| match op {
        GpuOp::Tile(o) => !matches!(f.op(*o).kind, OpKind::Store { .. } | OpKind::Return),
        GpuOp::For { .. } | GpuOp::If { .. } => {
            super::program::nested(op).iter().all(|b| pure_block(f, b))
        }
        _ => false,
    })
}

/// Drops unused pure tile ops; returns whether it dropped any.
fn sweep(f: &Function, b: &mut GpuBlock, used: &[bool]) -> bool {
    let before = b.ops.len();
    b.ops.retain(|op| match op {
        GpuOp::Tile(o) => {
            let t = f.op(*o);
            let pure = !matches!(t.kind, OpKind::Store { .. }) && !t.kind.is_terminator();
            !pure || t.results.iter().any(|r| used[r.0 as usize])
        }
        // A loop or branch whose results nobody reads and whose regions only compute values
        // (a mask loop the copies recompute) is not run at all.
        GpuOp::For { op: o, .. } | GpuOp::If { op: o, .. } => {
            let t = f.op(*o);
            t.results.iter().any(|r| used[r.0 as usize])
                || !super::program::nested(op).iter().all(|b| pure_block(f, b))
        }
        _ => true,
    });
    let mut changed = b.ops.len() != before;
    for op in &mut b.ops {
        for inner in super::program::nested_mut(op) {
            changed |= sweep(f, inner, used);
        }
    }
    changed
}
