//! Tile IR → GPU IR: the op tree is mirrored, and every tensor-core dot whose operand tiles
//! are loaded for it alone reads them from shared memory: the load becomes an asynchronous
//! copy into a `local_alloc` (16-byte `cp.async` chunks along the contiguous global axis,
//! masked chunks zero-filled, addresses recomputed per chunk) and the dot an `mma` that
//! fetches its fragments with `ldmatrix`. Everything else stays a tile op.
//!
//! A B tile may also feed several dots of one block, directly or through `trans` (MLA's
//! latent tile is the keys of QKᵀ and, transposed, the values of PV): it is copied once and
//! each `mma` reads the same alloc with its own `ldmatrix` orientation, provided every one of
//! those dots becomes an `mma` (otherwise the tile stays in registers for all of them).

use super::program::{
    AllocId, AsyncCopy, GpuBlock, GpuOp, GpuProgram, LocalAlloc, OperandSource, Stage, TileInAlloc,
};
use super::remat::{defining_ops, is_zero, recomputable_chunks};
use crate::ir::{Block, Function, Layout, OpId, OpKind, ScalarType, ValueId};
use crate::passes::axis_info::AxisAnalysis;
use std::collections::BTreeMap;

/// Lanes per row of a swizzled alloc's copy: a quarter-warp stores one row's 128-byte line.
const SWIZZLE_LANES: usize = 8;

/// Whether an alloc of a `rows × cols` tile is swizzled instead of padded, for a copy whose
/// rows take at least `min_lanes` lanes. Swizzled rows are stored a line per quarter-warp,
/// which streaming copies (few rows per program) want anyway; an issue-bound copy (128 rows
/// and more, 2 lanes per row) would pay 4× the per-row address work. Measured on the H200
/// (2026-12-01T19:30Z, one binary, `scripts/ab-h200`): D1 283 → 257 µs (4.17 TB/s), L2
/// 1365 → 1157 µs, L1 915 → 864 µs, P1 737 → 708 µs, P3 1252 → 1214 µs, but P0 (128 rows)
/// 4.32 → 4.70 ms. `ATTN_CODEGEN_DISABLE=swizzle` pads every alloc, `ATTN_CODEGEN_ENABLE=
/// swizzle` swizzles the issue-bound ones too.
fn swizzles(rows: usize, cols: usize, min_lanes: usize, warpgroup: bool) -> bool {
    // Warpgroup MMAs read their operands through descriptors of the swizzled layout only.
    let forced = crate::features::enabled("swizzle") || warpgroup;
    let wanted = min_lanes >= SWIZZLE_LANES || forced;
    wanted && !crate::features::disabled("swizzle") && LocalAlloc::can_swizzle(rows, cols)
}

/// Row padding of every alloc, in 16-bit elements: one 16-byte bank group, so the eight row
/// addresses of an `ldmatrix` (pitch ≡ 16 mod 128 bytes) fall in distinct bank groups.
pub const ROW_PAD: usize = 8;
/// Elements of a 16-byte chunk of a 16-bit type.
pub const CHUNK: usize = 8;
/// Widest reduction dimension whose loop-invariant A operand is held as register fragments
/// (16 rows × K per warp: 32 registers at K = 128); wider ones are read from shared memory
/// per k-step, which is what keeps a D = 256 attention loop out of local memory.
pub const MAX_HELD_A_K: usize = 128;

/// A load that can become an async copy for a dot operand, and how that operand views it.
#[derive(Clone, Copy)]
struct Candidate {
    load: OpId,
    map: TileInAlloc,
    /// The operand is `trans` of the loaded tile: the same alloc read the other way.
    view_trans: bool,
    /// The alloc's rows are XOR-swizzled instead of padded (see [`swizzles`]).
    swizzled: bool,
}

/// What the lowering decided for the loads and dots it turns into GPU ops.
#[derive(Default)]
struct Decisions {
    copies: BTreeMap<OpId, AsyncCopy>,
    mmas: BTreeMap<OpId, (OperandSource, OperandSource)>,
    allocs: Vec<LocalAlloc>,
}

/// Whether dot result `res` can be issued as warpgroup MMAs with one warpgroup column (the
/// function targets them, [`Function::warpgroup_mma`]): rows over whole warpgroups of 4
/// warps (`[W, 1]`, `W` a multiple of 4) and whole 64-row blocks.
pub fn warpgroup_shaped(f: &Function, res: ValueId) -> bool {
    warpgroup_grid_columns(f, res) == Some(1)
}

/// Whether the dot producing `res` runs as warpgroup MMAs on any warp grid whose rows are
/// whole warpgroups (a grid column is one warpgroup holding every row of its column block,
/// as `codegen::wgmma` takes it): MLA's `[4, 2]` grid splits the columns over two
/// warpgroups.
fn warpgroup_mma_dot(f: &Function, res: ValueId) -> bool {
    warpgroup_grid_columns(f, res).is_some()
}

/// The warp grid's columns of dot result `res` on a warpgroup target when its rows are
/// whole warpgroups over whole 64-row blocks.
fn warpgroup_grid_columns(f: &Function, res: ValueId) -> Option<usize> {
    let t = f.ty(res);
    // An owned tile's grid spans its warpgroup, whose MMAs it issues alone.
    let Layout::Mma {
        warps_per_cta: [w, c],
    } = *t.layout.unowned()
    else {
        return None;
    };
    let rows = w % 4 == 0 && t.shape.first().is_some_and(|m| m % 64 == 0);
    (f.warpgroup_mma && rows).then_some(c as usize)
}

/// Lowers a laid-out tile function, whose axis facts the program keeps for the emitter.
pub fn lower(f: &Function, axis: AxisAnalysis) -> GpuProgram {
    let defs = defining_ops(f);
    let uses = f.use_counts();
    let mut d = Decisions::default();
    let mut ctx = Ctx {
        f,
        axis: &axis,
        defs: &defs,
        uses: &uses,
        enclosing: Vec::new(),
    };
    ctx.decide_block(&f.body, &mut d);
    GpuProgram {
        body: build_block(f, &f.body, &d),
        allocs: d.allocs,
        alloc_bytes: 0,
        axis,
        tensor_maps: Vec::new(),
        tma_offset: 0,
        specialization: None,
    }
}

struct Ctx<'a> {
    f: &'a Function,
    axis: &'a AxisAnalysis,
    defs: &'a [Option<OpId>],
    uses: &'a [u32],
    /// Blocks enclosing the one being decided, outermost first.
    enclosing: Vec<&'a Block>,
}

impl<'a> Ctx<'a> {
    fn decide_block(&mut self, b: &'a Block, d: &mut Decisions) {
        for &o in &b.ops {
            let op = self.f.op(o);
            if op.kind == OpKind::Dot {
                self.decide_dot(o, b, d);
            }
            self.enclosing.push(b);
            for r in &op.regions {
                self.decide_block(r, d);
            }
            self.enclosing.pop();
        }
    }

    fn decide_dot(&mut self, dot: OpId, b: &Block, d: &mut Decisions) {
        let op = self.f.op(dot);
        let (a, bv, acc, res) = (
            op.operands[0],
            op.operands[1],
            op.operands[2],
            op.results[0],
        );
        if !self.fragment_result(acc, res) {
            return;
        }
        let (m, k) = (self.f.ty(a).shape[0], self.f.ty(a).shape[1]);
        let min_lanes = TileInAlloc::min_lanes_for_rows(m);
        // A warpgroup MMA reads A from shared memory through a descriptor: a held A would
        // be loaded element by element into a blocked layout and repacked (MLA's 64-column
        // rope queries were: ~20 % of the 1 × 32768 history's stall samples, H200).
        let warpgroup = warpgroup_mma_dot(self.f, res);
        // A B tile another dot already copies (a shared latent tile) is read from that copy:
        // every consumer becomes an `mma` once one does.
        let Some(bc) = self
            .copied(bv, d)
            .or_else(|| self.copyable_operand(bv, b, true, min_lanes, warpgroup))
        else {
            return;
        };
        // Registers a held A takes per thread grow with the slabs each warp owns.
        // An owned dot's warps are its warpgroup's.
        let warps = match self.f.ty(res).layout.owner() {
            Some(_) => 4,
            None => self.f.num_warps as usize,
        };
        let slabs_per_warp = (m / 16).div_ceil(warps).max(1);
        let a_src = match self.copyable_operand(a, b, false, min_lanes, warpgroup) {
            Some(ac) if self.a_from_shared(ac.load, b, k * slabs_per_warp, warpgroup) => {
                Some(self.add_copy(ac, d, false))
            }
            _ => None,
        };
        let b_src = self.add_copy(bc, d, true);
        d.mmas
            .insert(dot, (a_src.unwrap_or(OperandSource::Registers), b_src));
    }

    /// A loop-invariant A stays in registers unless the warp's share (K × its slabs) is
    /// too wide to hold, or the dot is warpgroup-shaped: the MMA's descriptor reads A from
    /// shared memory without registers or `ldmatrix`.
    fn a_from_shared(&self, load: OpId, b: &Block, k_per_warp: usize, warpgroup: bool) -> bool {
        b.ops.contains(&load) || k_per_warp > MAX_HELD_A_K || warpgroup
    }

    fn add_copy(&self, c: Candidate, d: &mut Decisions, is_b: bool) -> OperandSource {
        let Candidate {
            load,
            map,
            view_trans,
            swizzled,
        } = c;
        let id = match d.copies.get(&load) {
            Some(c) => c.dst,
            None => self.new_copy(load, map, swizzled, d, is_b),
        };
        // The operand's view of the alloc: a `trans` view swaps which of its axes is the
        // alloc's column axis.
        let map = TileInAlloc {
            contiguous_axis: map.contiguous_axis ^ usize::from(view_trans),
            ..map
        };
        // B [K, N] is contiguous along K (axis 0) as a transposed K tile: its rows are the
        // fragment's N rows, no transpose. A [M, K] is the other way round.
        let trans = if is_b {
            map.contiguous_axis == 1
        } else {
            map.contiguous_axis == 0
        };
        OperandSource::Shared {
            alloc: id,
            stage: Stage::Only,
            map,
            trans,
        }
    }

    /// Adds the alloc and the copy of `load` into it.
    fn new_copy(
        &self,
        load: OpId,
        map: TileInAlloc,
        swizzled: bool,
        d: &mut Decisions,
        is_b: bool,
    ) -> AllocId {
        let res = self.f.op(load).results[0];
        let t = self.f.ty(res);
        let (rows, cols) = if map.contiguous_axis == 1 {
            (t.shape[0], t.shape[1])
        } else {
            (t.shape[1], t.shape[0])
        };
        let elem = t.elem.scalar().unwrap_or(ScalarType::Bf16);
        let id = AllocId(d.allocs.len() as u32);
        let name = self
            .f
            .value(res)
            .name
            .clone()
            .unwrap_or_else(|| format!("{}{}", if is_b { "b" } else { "a" }, id.0));
        d.allocs.push(LocalAlloc {
            name,
            elem,
            rows,
            cols,
            pad: if swizzled { 0 } else { ROW_PAD },
            swizzled,
            stages: 1,
            offset: 0,
        });
        d.copies.insert(
            load,
            AsyncCopy {
                load,
                dst: id,
                stage: Stage::Only,
                map,
                loop_op: None,
                at: super::program::CopyAt::InPlace,
                engine: super::program::CopyEngine::Threads,
                behind: None,
            },
        );
        id
    }

    /// Whether the dot's result can be an accumulator in fragments: an `Mma` tile with more
    /// than one column whose accumulator is a splat or in the same layout.
    fn fragment_result(&self, acc: ValueId, res: ValueId) -> bool {
        let (rt, at) = (self.f.ty(res), self.f.ty(acc));
        let mma = matches!(rt.layout.unowned(), Layout::Mma { .. })
            && rt.shape.len() == 2
            && rt.shape[1] > 1;
        let splat = self.defs[acc.0 as usize]
            .map(|o| matches!(self.f.op(o).kind, OpKind::Splat { .. }))
            .unwrap_or(false);
        mma && (splat || at.layout == rt.layout)
    }

    /// The load defining operand `v` (directly or through `trans`) and its placement, when
    /// it can become an async copy: a 16-bit tile loaded only for this dot (in the dot's
    /// block, or for A outside the loop around it) or only for B operands of `mma`s of this
    /// block, 16-element multiples, 16-byte chunks along a contiguous axis, a mask uniform
    /// over each chunk, zero `other`, pointer and mask recomputable per chunk.
    fn copyable_operand(
        &self,
        v: ValueId,
        b: &Block,
        is_b: bool,
        min_lanes: usize,
        warpgroup: bool,
    ) -> Option<Candidate> {
        let (v, view_trans) = if is_b {
            self.through_trans(v)
        } else {
            (v, false)
        };
        let load = self.defs[v.0 as usize]?;
        let op = self.f.op(load);
        let OpKind::Load {
            has_mask,
            has_other,
        } = op.kind
        else {
            return None;
        };
        let in_block = b.ops.contains(&load);
        let enclosing = self.enclosing.iter().any(|e| e.ops.contains(&load));
        let single = self.uses[v.0 as usize] == 1 && !view_trans;
        let consumers_ok = single
            || (is_b && in_block && self.only_mma_b_operands(v, b))
            || (!is_b && self.only_mma_a_operands(v));
        if !consumers_ok || !(in_block || (!is_b && enclosing)) {
            return None;
        }
        let t = self.f.ty(v);
        let sixteen = matches!(t.elem.scalar(), Some(ScalarType::Bf16 | ScalarType::F16));
        if !sixteen || t.shape.len() != 2 || t.shape.iter().any(|&n| n % 16 != 0) {
            return None;
        }
        let ptr = op.operands[0];
        let ax = self.axis.contiguous_axis(ptr);
        let access = (ptr, has_mask.then(|| op.operands[1]));
        if !recomputable_chunks(self.f, self.defs, self.axis, access, ax, CHUNK) {
            return None;
        }
        if has_other && !is_zero(self.f, self.defs, op.operands[2]) {
            return None;
        }
        let (rows, cols) = (t.shape[1 - ax], t.shape[ax]);
        let threads = 32 * self.f.num_warps as usize;
        // A swizzled row is stored a whole 128-byte line per quarter-warp (8 lanes).
        let swizzled = swizzles(rows, cols, min_lanes, warpgroup);
        let min_lanes = if swizzled {
            min_lanes.max(SWIZZLE_LANES)
        } else {
            min_lanes
        };
        let lanes = TileInAlloc::lanes_for(rows, cols / CHUNK, threads, min_lanes)?;
        let row_contiguous =
            self.axis.get(ptr).contiguity.get(ax).copied().unwrap_or(1) >= cols as u64;
        Some(Candidate {
            load,
            map: TileInAlloc {
                contiguous_axis: ax,
                chunk: CHUNK,
                lanes,
                row_contiguous,
            },
            view_trans,
            swizzled,
        })
    }

    /// Whether every use of `v` is the B operand of a dot of block `b` that becomes an
    /// `mma` (its result an accumulator in fragments), directly or through one `trans` used
    /// only that way: then one copy serves all of them.
    fn only_mma_b_operands(&self, v: ValueId, b: &Block) -> bool {
        let users = self.users_in(v, b);
        users.len() == self.uses[v.0 as usize] as usize
            && users.iter().all(|&u| {
                let op = self.f.op(u);
                match op.kind {
                    OpKind::Dot => {
                        op.operands[1] == v
                            && op.operands[0] != v
                            && self.fragment_result(op.operands[2], op.results[0])
                    }
                    OpKind::Trans => {
                        let t = op.results[0];
                        let inner = self.users_in(t, b);
                        !inner.is_empty()
                            && inner.len() == self.uses[t.0 as usize] as usize
                            && inner.iter().all(|&w| {
                                let d = self.f.op(w);
                                d.kind == OpKind::Dot
                                    && d.operands[1] == t
                                    && d.operands[0] != t
                                    && self.fragment_result(d.operands[2], d.results[0])
                            })
                    }
                    _ => false,
                }
            })
    }

    /// Whether every use of `v` is the A operand of a dot that becomes an `mma` (a query
    /// tile read by a rotated loop's first scores and by its loop): one copy serves all.
    fn only_mma_a_operands(&self, v: ValueId) -> bool {
        let mut all = true;
        self.f.walk(&mut |_, op| {
            if op.operands.contains(&v) {
                all &= op.kind == OpKind::Dot
                    && op.operands[0] == v
                    && op.operands[1] != v
                    && op.operands[2] != v
                    && self.fragment_result(op.operands[2], op.results[0]);
            }
        });
        all
    }

    /// The ops directly in `b` that read `v`, once each.
    fn users_in(&self, v: ValueId, b: &Block) -> Vec<OpId> {
        b.ops
            .iter()
            .copied()
            .filter(|&o| self.f.op(o).operands.contains(&v))
            .collect()
    }

    /// The copy already decided for B operand `v`'s load (directly or through `trans`).
    fn copied(&self, v: ValueId, d: &Decisions) -> Option<Candidate> {
        let (v, view_trans) = self.through_trans(v);
        let load = self.defs[v.0 as usize]?;
        d.copies.get(&load).map(|c| Candidate {
            load,
            map: c.map,
            view_trans,
            swizzled: d.allocs[c.dst.0 as usize].swizzled,
        })
    }

    /// `x` and `true` when `v = trans(x)`, else `v` and `false`.
    fn through_trans(&self, v: ValueId) -> (ValueId, bool) {
        match self.def(v) {
            Some(t) if t.kind == OpKind::Trans => (t.operands[0], true),
            _ => (v, false),
        }
    }

    fn def(&self, v: ValueId) -> Option<&'a crate::ir::Op> {
        self.defs[v.0 as usize].map(|o| self.f.op(o))
    }
}

/// Mirrors `b`, replacing decided loads by copy + commit and decided dots by `mma`.
fn build_block(f: &Function, b: &Block, d: &Decisions) -> GpuBlock {
    let mut out = GpuBlock::default();
    for &o in &b.ops {
        let op = f.op(o);
        let region = |i: usize| build_block(f, &op.regions[i], d);
        let g = match op.kind {
            OpKind::For => GpuOp::For {
                op: o,
                body: region(0),
                pipelined: false,
            },
            OpKind::If => GpuOp::If {
                op: o,
                then_block: region(0),
                else_block: region(1),
            },
            OpKind::While => GpuOp::While {
                op: o,
                before: region(0),
                after: region(1),
            },
            _ => match (d.copies.get(&o), d.mmas.get(&o)) {
                (Some(c), _) => {
                    out.ops.push(GpuOp::AsyncCopy(c.clone()));
                    GpuOp::Commit
                }
                (None, Some((a, bs))) => GpuOp::Mma {
                    dot: o,
                    a: a.clone(),
                    b: bs.clone(),
                    inline_wait: true,
                    chained_from: None,
                },
                (None, None) => GpuOp::Tile(o),
            },
        };
        out.ops.push(g);
    }
    out
}
