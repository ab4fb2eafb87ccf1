//! Stores of fragment tiles through shared memory ([`StagedStore`]). An accumulator's rows
//! are spread over the warps two columns a lane, so a store straight from the fragments
//! writes, per warp instruction, eight rows by 16 bytes: half sectors of eight lines. At
//! the end of a program the ring's shared memory is free; written there first, each row
//! leaves in 16-byte chunks, a warp's store covering whole lines. Measured before it was
//! written (H200, the epilogue's stores edited out of the generated source): P1 and P3
//! spent 7 % of their time in them, a program's epilogue 6.3 of its 55 µs.
//!
//! A store qualifies when its tile is a 16-bit fragment tile (`Mma` layout) whose pointer
//! is contiguous in 16-byte chunks along its columns, mask uniform over each chunk, both
//! recomputable per chunk; when it sits in no loop (the staging bytes overlap buffers a
//! loop may still use) of a program of a warpgroup or more; and when the staged tile is no
//! larger than the shared memory the program takes already (staging must not cost
//! occupancy). `ATTN_CODEGEN_DISABLE=staged_store` leaves every store in place.

use super::lower::CHUNK;
use super::program::{AllocId, GpuBlock, GpuOp, GpuProgram, LocalAlloc, StagedStore, TileInAlloc};
use super::remat::{defining_ops, recomputable_chunks};
use crate::ir::{Function, Layout, OpId, OpKind, ScalarType};
use crate::passes::axis_info::AxisAnalysis;

/// Row pad of the staging alloc: a fragment pair's eight rows (lane / 4) and four column
/// pairs (lane % 4) then fall in 32 distinct banks.
const PAD: usize = 8;
/// The fewest threads a staged store pays for its two barriers with.
const MIN_THREADS: usize = 128;

/// Replaces each qualifying store of the body (and of a split program's unsplit form) by a
/// [`GpuOp::StagedStore`] with an alloc of its own.
pub fn run(f: &Function, p: &mut GpuProgram) {
    let threads = 32 * f.num_warps as usize;
    if !crate::features::on("staged_store") || threads < MIN_THREADS {
        return;
    }
    let budget: usize = p.allocs.iter().map(LocalAlloc::bytes).sum();
    let defs = defining_ops(f);
    let stager = Stager {
        f,
        axis: &p.axis,
        defs: &defs,
        threads,
        budget,
    };
    let mut staged: Vec<(OpId, LocalAlloc, TileInAlloc)> = Vec::new();
    let first = p.allocs.len();
    stager.block(&mut p.body, &mut staged, first);
    if let Some(ws) = p.specialization.as_mut() {
        stager.block(&mut ws.unsplit, &mut staged, first);
    }
    p.allocs.extend(staged.into_iter().map(|(_, a, _)| a));
}

struct Stager<'a> {
    f: &'a Function,
    axis: &'a AxisAnalysis,
    defs: &'a [Option<OpId>],
    threads: usize,
    budget: usize,
}

impl Stager<'_> {
    /// Rewrites the stores of `b` outside loops; a store seen before (the unsplit form of
    /// the same program) reuses its alloc.
    fn block(
        &self,
        b: &mut GpuBlock,
        staged: &mut Vec<(OpId, LocalAlloc, TileInAlloc)>,
        first: usize,
    ) {
        for op in &mut b.ops {
            match op {
                GpuOp::Tile(o) => {
                    let o = *o;
                    let known = staged.iter().position(|(s, _, _)| *s == o);
                    let (i, map) = match known {
                        Some(i) => (i, staged[i].2),
                        None => {
                            let Some((alloc, map)) = self.candidate(o) else {
                                continue;
                            };
                            staged.push((o, alloc, map));
                            (staged.len() - 1, map)
                        }
                    };
                    *op = GpuOp::StagedStore(StagedStore {
                        store: o,
                        buf: AllocId((first + i) as u32),
                        map,
                    });
                }
                GpuOp::If {
                    then_block,
                    else_block,
                    ..
                } => {
                    self.block(then_block, staged, first);
                    self.block(else_block, staged, first);
                }
                // Loops keep their stores: the staging bytes may be a buffer their next
                // iteration still reads.
                _ => {}
            }
        }
    }

    /// The staging alloc and chunk distribution of store `o`, when it qualifies.
    fn candidate(&self, o: OpId) -> Option<(LocalAlloc, TileInAlloc)> {
        let op = self.f.op(o);
        let OpKind::Store { has_mask } = op.kind else {
            return None;
        };
        let ptr = op.operands[0];
        let t = self.f.ty(ptr);
        let elem = t.elem.pointee()?;
        let access = (ptr, has_mask.then(|| op.operands[2]));
        if !matches!(elem, ScalarType::Bf16 | ScalarType::F16)
            || !matches!(t.layout, Layout::Mma { .. })
            || t.shape.len() != 2
            || !t.shape[1].is_multiple_of(CHUNK)
            || self.axis.contiguous_axis(ptr) != 1
            || !recomputable_chunks(self.f, self.defs, self.axis, access, 1, CHUNK)
        {
            return None;
        }
        let (rows, cols) = (t.shape[0], t.shape[1]);
        let per_row = cols / CHUNK;
        let lanes = TileInAlloc::lanes_for(rows, per_row, self.threads, per_row.min(32))?;
        let alloc = LocalAlloc {
            name: format!("staged_store_{}", o.0),
            elem,
            rows,
            cols,
            pad: PAD,
            swizzled: false,
            stages: 1,
            offset: 0,
        };
        if alloc.bytes() > self.budget {
            return None;
        }
        let row_contiguous =
            self.axis.get(ptr).contiguity.get(1).copied().unwrap_or(1) >= cols as u64;
        let map = TileInAlloc {
            contiguous_axis: 1,
            chunk: CHUNK,
            lanes,
            row_contiguous,
        };
        Some((alloc, map))
    }
}
