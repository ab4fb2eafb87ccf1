//! The GPU IR verifier: every fragment load reads an alloc shaped like its operand, every
//! access is ordered by a wait and barrier (the sync analysis finds nothing to insert), and
//! allocs that are alive together do not overlap and fit the shared-memory limit.

use super::program::{GpuBlock, GpuOp, GpuProgram, OperandSource};
use crate::ir::Function;

/// Largest dynamic shared memory one block may have on any supported GPU (sm_90: 227 KiB).
pub const MAX_SHARED_BYTES: usize = 227 * 1024;

/// Checks `p` (lowered from `f`); the error says what is wrong.
pub fn verify(f: &Function, p: &GpuProgram) -> Result<(), String> {
    let mut err = None;
    super::program::walk_block(&p.body, &mut |op| {
        if err.is_none() {
            err = check_op(f, p, op).err();
        }
    });
    if let Some(e) = err {
        return Err(e);
    }
    if let Some(u) = super::sync::check(&p.body).first() {
        return Err(format!("%a{}: {}", u.alloc.0, u.what));
    }
    for b in p.copying_blocks() {
        check_tma_landings(b)?;
    }
    if p.alloc_bytes > MAX_SHARED_BYTES {
        return Err(format!(
            "allocs take {} bytes of shared memory; at most {MAX_SHARED_BYTES}",
            p.alloc_bytes
        ));
    }
    for a in &p.allocs {
        if a.offset % 16 != 0 || a.offset + a.bytes() > p.alloc_bytes {
            return Err(format!("alloc {} misplaced at {}", a.name, a.offset));
        }
    }
    Ok(())
}

fn check_op(f: &Function, p: &GpuProgram, op: &GpuOp) -> Result<(), String> {
    match op {
        GpuOp::Mma { dot, a, b, .. } => {
            let d = f.op(*dot);
            for (i, src) in [a, b].into_iter().enumerate() {
                if let OperandSource::Shared { alloc, map, .. } = src {
                    let shape = &f.ty(d.operands[i]).shape;
                    let al = p.alloc(*alloc);
                    let want = if map.contiguous_axis == 1 {
                        (shape[0], shape[1])
                    } else {
                        (shape[1], shape[0])
                    };
                    if (al.rows, al.cols) != want {
                        return Err(format!(
                            "mma operand {i} of shape {shape:?} read from alloc {} of {}x{}",
                            al.name, al.rows, al.cols
                        ));
                    }
                }
            }
            Ok(())
        }
        GpuOp::AsyncCopy(c) => {
            let res = f.op(c.load).results[0];
            if f.ty(res).num_elements() != p.alloc(c.dst).rows * p.alloc(c.dst).cols {
                return Err(format!("copy of %{} does not fill its alloc", res.0));
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Every pipelined loop that reads a TMA-filled ring, or hands its stages over to consumers
/// (a producer's `filled`), marks where the current stage's boxes landed (`tma_landed`)
/// before its first op that reads it or the hand-over: the sync analysis orders the
/// `cp.async` form, this the TMA form of the same copies.
fn check_tma_landings(b: &GpuBlock) -> Result<(), String> {
    for op in &b.ops {
        if let GpuOp::For {
            body,
            pipelined: true,
            ..
        } = op
        {
            let mut landed = Vec::new();
            for o in &body.ops {
                match o {
                    GpuOp::TmaLanded { alloc, .. } => landed.push(*alloc),
                    GpuOp::Stage(super::program::StageSync::Filled) => {
                        if let Some(alloc) = tma_allocs_in(body).find(|a| !landed.contains(a)) {
                            return Err(format!(
                                "%a{}: handed over before its TMA boxes are known to have landed",
                                alloc.0
                            ));
                        }
                    }
                    GpuOp::Mma { a, b, .. } => {
                        for (alloc, _) in [a.alloc(), b.alloc()].into_iter().flatten() {
                            if tma_filled(body, alloc) && !landed.contains(&alloc) {
                                return Err(format!(
                                    "%a{}: read before its TMA boxes are known to have landed",
                                    alloc.0
                                ));
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
        for inner in super::program::nested(op) {
            check_tma_landings(inner)?;
        }
    }
    Ok(())
}

/// Whether a copy in `body` fills `alloc` by TMA.
fn tma_filled(body: &GpuBlock, alloc: super::program::AllocId) -> bool {
    tma_allocs_in(body).any(|a| a == alloc)
}

/// The allocs copies in `body` fill by TMA.
fn tma_allocs_in(body: &GpuBlock) -> impl Iterator<Item = super::program::AllocId> + '_ {
    body.ops.iter().filter_map(|o| match o {
        GpuOp::AsyncCopy(c) if matches!(c.engine, super::program::CopyEngine::Tma { .. }) => {
            Some(c.dst)
        }
        _ => None,
    })
}

/// Number of barriers directly in `b` (not in nested blocks): pinned per loop body by tests.
pub fn barriers_in(b: &GpuBlock) -> usize {
    b.ops
        .iter()
        .filter(|o| matches!(o, GpuOp::Barrier { .. }))
        .count()
}
