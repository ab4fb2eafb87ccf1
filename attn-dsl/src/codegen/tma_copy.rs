//! TMA copies as CUDA (sm_90a branch; the `#else` branch keeps the `cp.async` form):
//! tensor-map parameters, one mbarrier per ring stage, the boxes issued by the first lane of
//! each warp, and, where the boxes land, the masked chunks zeroed by the threads that found
//! them masked.
//!
//! Every thread still evaluates the copy's mask in the `cp.async` distribution (cheap: no
//! addresses) and keeps one bit per masked chunk in a register (`attn_zb<alloc>`, one per
//! fill in flight: `S − 1` in a ring of `S` stages, see [`zero_bits_slot`]); after the
//! stage's mbarrier completes it zeroes those chunks and fences them for the tensor
//! cores' async proxy, before the barrier that precedes the first read. A full tile has no
//! bit set and pays one compare. The mbarrier phase of each stage is a bit of
//! `attn_tma_phase`, flipped at every wait (each issued stage is waited for exactly once:
//! the loop waits for its current stage every iteration, and copies are issued only for
//! iterations that run).

use super::elem_index::ElemIndex;
use super::emitter::Emitter;
use super::remat::Scope;
use super::{CodegenError, RowStride, TensorMapParam};
use crate::gpu_ir::row_affine::RowAffineCtx;
use crate::gpu_ir::{
    AllocId, AsyncCopy, CopyEngine, GpuOp, Landing, Stage, TmaStride, SWIZZLE_COLS,
};
use crate::ir::{BinaryOp, CmpPred, OpKind, ValueId};

type Res<T> = Result<T, CodegenError>;

/// The preprocessor test of the TMA branch (the `wgmma` one).
pub(crate) const SM90A: &str = "#if defined(__CUDA_ARCH_FEAT_SM90_ALL)";

/// The register of an alloc's masked-chunk bits for the fill `slot` fills ahead of the one
/// landing next (0: the next to land). A ring of `S` stages keeps `S − 1` fills in flight,
/// each with its bits: the prologue's fill `k` records into slot `k`, the loop's into the
/// last, and each landing takes slot 0 and shifts the others down.
fn zero_bits_slot(a: AllocId, slot: usize) -> String {
    match slot {
        0 => format!("attn_zb{}", a.0),
        k => format!("attn_zb{}_{k}", a.0),
    }
}

/// A box slot whose coordinates a warp computed: the copy's base pointer and row-start
/// expression, the map's row stride, its (boxes, column blocks), the slot variable.
pub(crate) struct TmaSlot {
    base: String,
    start: String,
    row_stride: TmaStride,
    boxes: (usize, usize),
    var: String,
}

fn tensor_map(m: usize) -> String {
    format!("attn_tmap{m}")
}

impl<'f> Emitter<'f> {
    /// A TMA copy into `a` (each alloc's copies share one map and distribution).
    fn tma_copy_of(&self, a: AllocId) -> Option<AsyncCopy> {
        let mut found = None;
        for b in self.prog.copying_blocks() {
            crate::gpu_ir::walk_block(b, &mut |op| {
                if let GpuOp::AsyncCopy(c) = op {
                    if found.is_none() && c.dst == a && matches!(c.engine, CopyEngine::Tma { .. }) {
                        found = Some(c.clone());
                    }
                }
            });
        }
        found
    }

    /// The tensor-map parameter declarations, and what the launcher encodes for each.
    pub(crate) fn tma_params(&self) -> Res<(Vec<String>, Vec<TensorMapParam>)> {
        let index_of = |v| {
            self.f
                .params
                .iter()
                .position(|p| p.value == v)
                .ok_or_else(|| {
                    CodegenError::Malformed(format!("tensor map over %{}: not a parameter", v.0))
                })
        };
        let mut decls = Vec::new();
        let mut maps = Vec::new();
        for (m, view) in self.prog.tensor_maps.iter().enumerate() {
            let name = tensor_map(m);
            decls.push(format!("const __grid_constant__ attn_tensor_map {name}"));
            let row_stride = match view.row_stride {
                TmaStride::Const(k) => RowStride {
                    param: None,
                    coeff: k,
                },
                TmaStride::Param { value, coeff } => RowStride {
                    param: Some(index_of(value)?),
                    coeff,
                },
            };
            maps.push(TensorMapParam {
                name,
                base_param: index_of(view.base)?,
                elem: view.elem,
                row_stride,
                box_rows: view.box_rows as u32,
                box_cols: view.box_cols as u32,
            });
        }
        Ok((decls, maps))
    }

    /// The row stride of map `m` in elements, as a C++ expression.
    fn tma_stride(&self, m: usize) -> Res<String> {
        Ok(match self.prog.tensor_maps[m].row_stride {
            TmaStride::Const(k) => format!("{k}ll"),
            TmaStride::Param { value, coeff } => {
                format!("({coeff}ll * (long long){})", self.name(value)?)
            }
        })
    }

    /// At the kernel's start: the mbarriers (initialized by thread 0 before a barrier), the
    /// stride reciprocals, the phase bits and the masked-chunk bits.
    pub(crate) fn emit_tma_setup(&mut self) -> Res<()> {
        self.emit_tma_part(|e| {
            e.emit_tma_pointers();
            e.w.open("if (tid == 0)");
            e.emit_tma_init()?;
            e.w.close("");
            e.emit_block_sync();
            e.emit_tma_state();
            Ok(())
        })
    }

    /// Emits `part` for the sm_90a branch when the program copies by TMA (nothing else).
    pub(crate) fn emit_tma_part(&mut self, part: impl FnOnce(&mut Self) -> Res<()>) -> Res<()> {
        if self.prog.tma_allocs().is_empty() {
            return Ok(());
        }
        self.w.line(SM90A);
        part(self)?;
        self.w.line("#endif");
        Ok(())
    }

    /// The pointers to the TMA mbarriers and the stride reciprocals (every thread's).
    pub(crate) fn emit_tma_pointers(&mut self) {
        let bars = self.prog.tma_stages() * self.prog.tma_allocs().len();
        self.w.line(format!(
            "unsigned long long* const attn_mbar = reinterpret_cast<unsigned long long*>(attn_smem + {});",
            self.prog.tma_offset
        ));
        self.w.line(format!(
            "unsigned long long* const attn_tma_inv = attn_mbar + {bars};"
        ));
    }

    /// One thread's initialization of the mbarriers and the reciprocals (a barrier must
    /// follow before any use).
    pub(crate) fn emit_tma_init(&mut self) -> Res<()> {
        let bars = self.prog.tma_stages() * self.prog.tma_allocs().len();
        self.w.line(format!(
            "for (int i = 0; i < {bars}; ++i) attn_mbar_init(&attn_mbar[i], 1u);"
        ));
        for m in 0..self.prog.tensor_maps.len() {
            let s = self.tma_stride(m)?;
            self.w.line(format!(
                "attn_tma_inv[{m}] = ~0ull / (unsigned long long){s};"
            ));
        }
        self.w.line("attn_mbar_init_fence();");
        Ok(())
    }

    /// The issuing threads' state: the stages' phase bits and each alloc's masked-chunk bits.
    pub(crate) fn emit_tma_state(&mut self) {
        self.w.line("unsigned attn_tma_phase = 0u;");
        for a in self.prog.tma_allocs() {
            for slot in 0..self.prog.tma_stages().saturating_sub(1).max(1) {
                self.w
                    .line(format!("unsigned {} = 0u;", zero_bits_slot(a, slot)));
            }
        }
    }

    /// The bits register copy `c` records its masked chunks in (see [`zero_bits_slot`]).
    fn zero_bits(&self, c: &AsyncCopy) -> String {
        let last = self.prog.tma_stages().saturating_sub(2);
        let slot = match c.at {
            crate::gpu_ir::CopyAt::Prologue(k) => k.min(last),
            _ => last,
        };
        zero_bits_slot(c.dst, slot)
    }

    /// The mbarrier of `stage` of alloc `a`.
    fn tma_barrier(&self, a: AllocId, stage: Stage, counter: Option<&str>) -> Res<String> {
        let k = self
            .prog
            .tma_allocs()
            .iter()
            .position(|&x| x == a)
            .ok_or_else(|| CodegenError::Malformed(format!("%a{} has no TMA copy", a.0)))?;
        let stages = self.prog.tma_stages();
        let s = self.stage_index(stages, stage, counter)?;
        Ok(format!("{} + {s}", stages * k))
    }

    /// The statement recording chunk `(p, s)`'s mask in the copy's bits (the TMA form of
    /// its `cp.async`).
    pub(crate) fn tma_zero_bit(&self, c: &AsyncCopy, mask: &str) -> String {
        let slots = c.map.slots_per_row(self.prog.alloc(c.dst).cols);
        format!(
            "{} |= (({mask}) ? 0u : 1u) << (p * {slots} + s);",
            self.zero_bits(c)
        )
    }

    /// A uniform condition under which every element of the copies' masks holds, when one
    /// follows from their form: a full tile (`k < seq_len` at the tile's last key, the V
    /// guard's `full`) then skips the per-chunk mask evaluation the TMA form needs only for
    /// the zeroes.
    pub(crate) fn tma_masks_all_true(
        &self,
        cs: &[&AsyncCopy],
        scope: &Scope,
    ) -> Res<Option<String>> {
        let mut conds = Vec::new();
        for c in cs {
            let load = self.f.op(c.load);
            if !matches!(load.kind, OpKind::Load { has_mask: true, .. }) {
                continue;
            }
            let ctx = RowAffineCtx::new(self.f, &self.defs, &self.prog.axis, None, 0);
            match self.all_true(load.operands[1], scope, &ctx, 0)? {
                Some(cond) => conds.push(cond),
                None => return Ok(None),
            }
        }
        Ok(Some(if conds.is_empty() {
            "true".into()
        } else {
            conds.join(" && ")
        }))
    }

    /// A uniform C++ condition implying every element of `m` true (see
    /// [`Self::tma_masks_all_true`]): `&` needs both sides, `|` either, a comparison
    /// `x < u` (or `<=`, `u > x`, `u >= x`) of a uniform `u` holds everywhere when it holds
    /// at the element where `x`, stepping by a non-negative constant along every axis, is
    /// largest.
    fn all_true(
        &self,
        m: ValueId,
        scope: &Scope,
        ctx: &RowAffineCtx,
        depth: usize,
    ) -> Res<Option<String>> {
        let anywhere = ElemIndex::Flat("0".into());
        if self.f.ty(m).is_scalar() {
            return Ok(Some(format!("({})", self.remat_expr(m, &anywhere, scope)?)));
        }
        let Some(op) = self.def_op(m) else {
            return Ok(None);
        };
        if depth > 16 {
            return Ok(None);
        }
        let (a, b) = (op.operands.first().copied(), op.operands.get(1).copied());
        Ok(match &op.kind {
            OpKind::Splat { .. } | OpKind::Broadcast { .. } | OpKind::ExpandDims { .. } => {
                self.all_true(op.operands[0], scope, ctx, depth + 1)?
            }
            OpKind::Binary(BinaryOp::And) => {
                match (
                    self.all_true(op.operands[0], scope, ctx, depth + 1)?,
                    self.all_true(op.operands[1], scope, ctx, depth + 1)?,
                ) {
                    (Some(x), Some(y)) => Some(format!("({x} && {y})")),
                    _ => None,
                }
            }
            OpKind::Binary(BinaryOp::Or) => {
                match (
                    self.all_true(op.operands[0], scope, ctx, depth + 1)?,
                    self.all_true(op.operands[1], scope, ctx, depth + 1)?,
                ) {
                    (Some(x), Some(y)) => Some(format!("({x} || {y})")),
                    (x, y) => x.or(y),
                }
            }
            OpKind::Cmp(pred) => {
                let (Some(a), Some(b)) = (a, b) else {
                    return Ok(None);
                };
                let (x, u, sym) = match pred {
                    CmpPred::Lt => (a, b, "<"),
                    CmpPred::Le => (a, b, "<="),
                    CmpPred::Gt => (b, a, "<"),
                    CmpPred::Ge => (b, a, "<="),
                    _ => return Ok(None),
                };
                if self.uniform_scalar(u).is_none() {
                    return Ok(None);
                }
                let shape = self.f.ty(x).shape.clone();
                let mut at = Vec::new();
                for (axis, &n) in shape.iter().enumerate() {
                    if n == 1 {
                        at.push("0".to_string());
                        continue;
                    }
                    let Some(r) = ctx.affine(x, axis) else {
                        return Ok(None);
                    };
                    match r.stride.as_konst() {
                        Some(s) if s >= 0 && r.run >= n as u64 => at.push(if s > 0 {
                            (n - 1).to_string()
                        } else {
                            "0".into()
                        }),
                        _ => return Ok(None),
                    }
                }
                let at = match at.as_slice() {
                    [r] => ElemIndex::Coords {
                        row: r.clone(),
                        col: "0".into(),
                    },
                    [r, c] => ElemIndex::Coords {
                        row: r.clone(),
                        col: c.clone(),
                    },
                    _ => return Ok(None),
                };
                let xs = self.remat_expr(x, &at, scope)?;
                let us = self.remat_expr(u, &at, scope)?;
                Some(format!("({xs} {sym} {us})"))
            }
            _ => None,
        })
    }

    /// Clears the copies' bits before their passes record the new tile's.
    pub(crate) fn tma_clear_bits(&mut self, cs: &[&AsyncCopy]) {
        for c in cs {
            self.w.line(format!("{} = 0u;", self.zero_bits(c)));
        }
    }

    /// The copies' boxes: thread 0 announces their bytes on the stages' mbarriers, then the
    /// first lane of each warp issues its share (box `k` of a copy, run by run and column
    /// block by column block, by warp `k mod warps`, the copies' boxes numbered on from one
    /// another), each box's run coordinates from the copy's own recomputation of the run's
    /// first row address (its block-table load included). Spread over the warps, no warp
    /// of a warpgroup (whose MMAs issue together) waits for another's boxes; all of a
    /// warp's coordinates come before its first box, so their loads issue together (a box
    /// is an `asm` with a memory clobber no load moves across). The boxes' order does not
    /// matter, only the bytes the mbarrier counts.
    pub(crate) fn emit_tma_boxes(
        &mut self,
        cs: &[&'f AsyncCopy],
        scope: &Scope,
        counter: Option<&str>,
    ) -> Res<()> {
        let mut bars = Vec::new();
        self.w.open("if (tid == 0)");
        for c in cs.iter() {
            let al = self.prog.alloc(c.dst);
            let bytes = al.rows * al.cols * al.elem.size_bytes();
            let bar = format!("&attn_mbar[{}]", self.tma_barrier(c.dst, c.stage, counter)?);
            self.w
                .line(format!("attn_mbar_expect_tx({bar}, {bytes}u);"));
            bars.push(bar);
        }
        self.w.close("");
        self.w.open("if ((tid & 31) == 0)");
        let (mut first, mut issues, mut known) = (0, Vec::new(), Vec::new());
        for (i, c) in cs.iter().enumerate() {
            let boxes = self.tma_slots(i, c, first, scope, &mut known)?;
            let al = self.prog.alloc(c.dst);
            let CopyEngine::Tma { map, group_rows } = c.engine else {
                unreachable!("tma_slots checked the engine")
            };
            let (blocks, count) = (
                al.cols / SWIZZLE_COLS,
                al.rows / group_rows * (al.cols / SWIZZLE_COLS),
            );
            let dst = if i == 0 {
                "attn_dst".to_string()
            } else {
                format!("attn_dst_{i}")
            };
            for k in boxes {
                issues.push(format!(
                    "if ({k} < {count}) attn_tma_load_2d({dst} + ({k} % {blocks}) * {} + ({k} / {blocks}) * {}, &{}, {k}x + ({k} % {blocks}) * {SWIZZLE_COLS}, {k}y, {});",
                    al.block_elems(),
                    group_rows * SWIZZLE_COLS,
                    tensor_map(map),
                    bars[i]
                ));
            }
            first += count;
        }
        for l in issues {
            self.w.line(l);
        }
        self.w.close("");
        Ok(())
    }

    /// Declares this warp's box slots of copy `i` (the `k`-th box of the copy lies at
    /// `k`'s slot variable, its coordinates at `<slot>x`, `<slot>y`) and returns their
    /// variables; a slot whose address is an earlier copy's but for the base pointer (V
    /// beside K) reuses that copy's variables.
    fn tma_slots(
        &mut self,
        i: usize,
        c: &AsyncCopy,
        first: usize,
        scope: &Scope,
        known: &mut Vec<TmaSlot>,
    ) -> Res<Vec<String>> {
        let CopyEngine::Tma { map, group_rows } = c.engine else {
            return Err(CodegenError::Malformed(
                "a thread copy among TMA ones".into(),
            ));
        };
        let warps = self.threads / 32;
        let al = self.prog.alloc(c.dst);
        let blocks = al.cols / SWIZZLE_COLS;
        let count = al.rows / group_rows * blocks;
        let load = self.f.op(c.load);
        let base = self.root_pointer(load.operands[0]).ok_or_else(|| {
            CodegenError::Malformed("a TMA copy's pointer has no parameter base".into())
        })?;
        let stride = self.tma_stride(map)?;
        let mut out = Vec::new();
        for t in 0..count.div_ceil(warps) {
            let k_expr = format!(
                "(((tid >> 5) + {}) % {warps} + {})",
                warps - first % warps,
                t * warps
            );
            // Past the copy's boxes the coordinates of its last are computed, unused.
            let row = format!(
                "(attn_min({k_expr}, {}) / {blocks}) * {group_rows}",
                count - 1
            );
            let at = if c.map.contiguous_axis == 1 {
                ElemIndex::Coords {
                    row,
                    col: "0".into(),
                }
            } else {
                ElemIndex::Coords {
                    row: "0".into(),
                    col: row,
                }
            };
            let start = self.remat_expr(load.operands[0], &at, scope)?;
            let row_stride = self.prog.tensor_maps[map].row_stride;
            let same = known.iter().find(|s| {
                s.boxes == (count, blocks)
                    && s.row_stride == row_stride
                    && super::shared_rows::replace_ident(&start, &base, &s.base) == s.start
            });
            if let Some(s) = same {
                out.push(s.var.clone());
                continue;
            }
            let k = format!("attn_k{i}_{t}");
            self.w.line(format!("const int {k} = {k_expr};"));
            self.w.line(format!("int {k}x, {k}y;"));
            self.w.line(format!(
                "attn_tma_coords((long long)({start} - {base}), {stride}, attn_tma_inv[{map}], {k}x, {k}y);"
            ));
            known.push(TmaSlot {
                base: base.clone(),
                start,
                row_stride,
                boxes: (count, blocks),
                var: k.clone(),
            });
            out.push(k);
        }
        Ok(out)
    }

    /// Where `stage` of alloc `a` must have landed: wait on its mbarrier (the threads `by`
    /// names), flip its phase, and zero the chunks this thread found masked (in the copy's
    /// own distribution; not a consumer's, which copies nothing).
    pub(crate) fn emit_tma_landed(&mut self, a: AllocId, stage: Stage, by: Landing) -> Res<()> {
        let bar = self.tma_barrier(a, stage, None)?;
        let wait = "attn_mbar_wait(&attn_mbar[attn_mb], (attn_tma_phase >> attn_mb) & 1u);";
        self.w.line(SM90A);
        self.w.open("");
        self.w.line(format!("const int attn_mb = {bar};"));
        if by == Landing::Consumers {
            self.w.line(wait);
            self.w.line("attn_tma_phase ^= 1u << attn_mb;");
            self.w.close("");
            self.w.line("#endif");
            return Ok(());
        }
        let c = self
            .tma_copy_of(a)
            .ok_or_else(|| CodegenError::Malformed(format!("%a{} has no TMA copy", a.0)))?;
        let al = self.prog.alloc(a).clone();
        let (lanes, chunk) = (c.map.lanes, c.map.chunk);
        let slots = c.map.slots_per_row(al.cols);
        let dst = self.stage_base(a, stage, None)?;
        let zb = zero_bits_slot(a, 0);
        if by == Landing::Copiers {
            self.w.line(wait);
        }
        // Every thread flips: a stage's phase completes whether or not this thread waited.
        self.w.line("attn_tma_phase ^= 1u << attn_mb;");
        self.w.open(format!("if ({zb} != 0u)"));
        if by == Landing::Zeroers {
            // Parity of the phase flipped above: the one this fill completes.
            self.w.line(
                "attn_mbar_wait(&attn_mbar[attn_mb], ((attn_tma_phase >> attn_mb) & 1u) ^ 1u);",
            );
        }
        self.w
            .line(format!("unsigned short* const attn_dst = {dst};"));
        // A loop over the set bits, not the unrolled chunk loop with a test per chunk:
        // ptxas predicates that one, and a tile without masked chunks (every tile but the
        // last) then still issues its ~300 instructions (P0's producer, 2026-12-04).
        let (row_start, dst_stride) = al.copy_row("attn_row", "attn_lane_in_row", lanes, chunk);
        self.w.line("#pragma unroll 1");
        self.w.open(format!(
            "for (unsigned attn_m = {zb}; attn_m != 0u; attn_m &= attn_m - 1u)"
        ));
        self.w.line(format!(
            "const int attn_bit = __ffs(attn_m) - 1, p = attn_bit / {slots}, s = attn_bit % {slots};"
        ));
        self.bind_pass_row(lanes);
        self.w.line(format!(
            "attn_st_zero16(attn_dst + {row_start} + s * {dst_stride});"
        ));
        self.w.close("");
        self.w.line("attn_fence_proxy_async();");
        self.w.close("");
        // The fills behind this one move up a slot.
        for slot in 1..self.prog.tma_stages().saturating_sub(1) {
            self.w.line(format!(
                "{} = {};",
                zero_bits_slot(a, slot - 1),
                zero_bits_slot(a, slot)
            ));
        }
        self.w.close("");
        self.w.line("#endif");
        Ok(())
    }
}
