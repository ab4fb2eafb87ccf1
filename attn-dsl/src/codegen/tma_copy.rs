//! TMA copies as CUDA (sm_90a branch; the `#else` branch keeps the `cp.async` form):
//! tensor-map parameters, one mbarrier per ring stage, the boxes issued by thread 0, and,
//! where the boxes land, the masked chunks zeroed by the threads that found them masked.
//!
//! Every thread still evaluates the copy's mask in the `cp.async` distribution (cheap: no
//! addresses) and keeps one bit per masked chunk in a register (`attn_zb<alloc>`); after
//! the stage's mbarrier completes it zeroes those chunks and fences them for the tensor
//! cores' async proxy, before the barrier that precedes the first read. A full tile has no
//! bit set and pays one compare. The mbarrier phase of each stage is a bit of
//! `attn_tma_phase`, flipped at every wait (each issued stage is waited for exactly once:
//! the loop waits for its current stage every iteration, and copies are issued only for
//! iterations that run).

use super::emitter::Emitter;
use super::remat::Scope;
use super::{CodegenError, RowStride, TensorMapParam};
use crate::gpu_ir::{
    AllocId, AsyncCopy, CopyEngine, GpuOp, Stage, TmaStride, SWIZZLE_COLS, TMA_STAGES,
};

type Res<T> = Result<T, CodegenError>;

/// The preprocessor test of the TMA branch (the `wgmma` one).
pub(crate) const SM90A: &str = "#if defined(__CUDA_ARCH_FEAT_SM90_ALL)";

/// The register of an alloc's masked-chunk bits.
fn zero_bits(a: AllocId) -> String {
    format!("attn_zb{}", a.0)
}

fn tensor_map(m: usize) -> String {
    format!("attn_tmap{m}")
}

impl<'f> Emitter<'f> {
    /// The TMA-copied allocs, in a fixed order (their mbarriers are `2k`, `2k + 1`).
    pub(crate) fn tma_allocs(&self) -> Vec<AllocId> {
        self.prog.tma_allocs()
    }

    /// A TMA copy into `a` (each alloc's copies share one map and distribution).
    fn tma_copy_of(&self, a: AllocId) -> Option<AsyncCopy> {
        let mut found = None;
        crate::gpu_ir::walk_block(&self.prog.body, &mut |op| {
            if let GpuOp::AsyncCopy(c) = op {
                if found.is_none() && c.dst == a && matches!(c.engine, CopyEngine::Tma { .. }) {
                    found = Some(c.clone());
                }
            }
        });
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
        let allocs = self.tma_allocs();
        if allocs.is_empty() {
            return Ok(());
        }
        let (bars, maps) = (TMA_STAGES * allocs.len(), self.prog.tensor_maps.len());
        self.w.line(SM90A);
        self.w.line(format!(
            "unsigned long long* const attn_mbar = reinterpret_cast<unsigned long long*>(attn_smem + {});",
            self.prog.tma_offset
        ));
        self.w.line(format!(
            "unsigned long long* const attn_tma_inv = attn_mbar + {bars};"
        ));
        self.w.open("if (tid == 0)");
        self.w.line(format!(
            "for (int i = 0; i < {bars}; ++i) attn_mbar_init(&attn_mbar[i], 1u);"
        ));
        for m in 0..maps {
            let s = self.tma_stride(m)?;
            self.w.line(format!(
                "attn_tma_inv[{m}] = ~0ull / (unsigned long long){s};"
            ));
        }
        self.w.line("attn_mbar_init_fence();");
        self.w.close("");
        self.w.line("__syncthreads();");
        self.w.line("unsigned attn_tma_phase = 0u;");
        for a in allocs {
            self.w.line(format!("unsigned {} = 0u;", zero_bits(a)));
        }
        self.w.line("#endif");
        Ok(())
    }

    /// The mbarrier of `stage` of alloc `a`.
    fn tma_barrier(&self, a: AllocId, stage: Stage, counter: Option<&str>) -> Res<String> {
        let k = self
            .tma_allocs()
            .iter()
            .position(|&x| x == a)
            .ok_or_else(|| CodegenError::Malformed(format!("%a{} has no TMA copy", a.0)))?;
        let counter = || {
            counter
                .map(str::to_string)
                .or_else(|| self.stage_vars.last().cloned())
                .ok_or_else(|| {
                    CodegenError::Malformed(format!("{stage:?} stage outside a pipelined loop"))
                })
        };
        let s = match stage {
            Stage::Only => "0".to_string(),
            Stage::Fixed(j) => j.to_string(),
            Stage::Current => counter()?,
            Stage::Next => format!("({} ^ 1)", counter()?),
        };
        Ok(format!("{} + {s}", TMA_STAGES * k))
    }

    /// The statement recording chunk `(p, s)`'s mask in the copy's bits (the TMA form of
    /// its `cp.async`).
    pub(crate) fn tma_zero_bit(&self, c: &AsyncCopy, mask: &str) -> String {
        let al = self.prog.alloc(c.dst);
        let slots = (al.cols / c.map.chunk).div_ceil(c.map.lanes);
        format!(
            "{} |= (({mask}) ? 0u : 1u) << (p * {slots} + s);",
            zero_bits(c.dst)
        )
    }

    /// Clears the copies' bits before their passes record the new tile's.
    pub(crate) fn tma_clear_bits(&mut self, cs: &[&AsyncCopy]) {
        for c in cs {
            self.w.line(format!("{} = 0u;", zero_bits(c.dst)));
        }
    }

    /// The copies' boxes: thread 0 announces their bytes on the stages' mbarriers, then the
    /// first lane of each warp issues its share of the boxes (box `i` of the tile by warp
    /// `i % warps`), computing the coordinates of each box's run (the copy's own
    /// recomputation of the run's first row address, block-table load included) before
    /// its first box. Spread over the warps, no warp of a warpgroup (whose MMAs are issued
    /// together) waits for another's box issue; the boxes' order does not matter, only the
    /// bytes the mbarrier counts.
    pub(crate) fn emit_tma_boxes(
        &mut self,
        cs: &[&'f AsyncCopy],
        scope: &Scope,
        counter: Option<&str>,
    ) -> Res<()> {
        let sfx = |i: usize| {
            if i == 0 {
                String::new()
            } else {
                format!("_{i}")
            }
        };
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
        // Every box, run by run: (copy, map, rows per run, run, column block); each warp
        // takes a contiguous share, so a run's coordinates are computed by one warp.
        let mut boxes = Vec::new();
        for (i, c) in cs.iter().enumerate() {
            let CopyEngine::Tma { map, group_rows } = c.engine else {
                return Err(CodegenError::Malformed(
                    "a thread copy among TMA ones".into(),
                ));
            };
            let al = self.prog.alloc(c.dst);
            for g in 0..al.rows / group_rows {
                for cb in 0..al.cols / SWIZZLE_COLS {
                    boxes.push((g, i, map, group_rows, cb));
                }
            }
        }
        boxes.sort_by_key(|b| (b.0, b.1, b.4));
        let warps = (self.threads / 32).min(boxes.len());
        self.w.open("if ((tid & 31) == 0)");
        for w in 0..warps {
            let mine = &boxes[w * boxes.len() / warps..(w + 1) * boxes.len() / warps];
            self.w.open(format!("if ((tid >> 5) == {w})"));
            // Coordinates per (copy, run), all before the first box; a copy whose address
            // is another's but for the base pointer (V beside K) shares them.
            let mut coords: Vec<(usize, usize, String, String, usize, String)> = Vec::new();
            let mut names = std::collections::BTreeMap::new();
            for &(g, i, map, group_rows, _) in mine {
                if names.contains_key(&(i, g)) {
                    continue;
                }
                let c = cs[i];
                let load = self.f.op(c.load);
                let (row, col) = (format!("{}", g * group_rows), "0".to_string());
                let at = if c.map.contiguous_axis == 1 {
                    super::elem_index::ElemIndex::Coords { row, col }
                } else {
                    super::elem_index::ElemIndex::Coords { row: col, col: row }
                };
                let start = self.remat_expr(load.operands[0], &at, scope)?;
                let base = self.root_pointer(load.operands[0]).ok_or_else(|| {
                    CodegenError::Malformed("a TMA copy's pointer has no parameter base".into())
                })?;
                let stride = self.prog.tensor_maps[map].row_stride;
                let shared = coords.iter().find(|(_, cg, b, st, m, _)| {
                    *cg == g
                        && self.prog.tensor_maps[*m].row_stride == stride
                        && super::async_copy::replace_ident(&start, &base, b) == *st
                });
                let name = match shared {
                    Some((.., n)) => n.clone(),
                    None => {
                        let name = format!("attn_t{i}_{g}");
                        let s = self.tma_stride(map)?;
                        self.w.line(format!("int {name}x, {name}y;"));
                        self.w.line(format!(
                            "attn_tma_coords((long long)({start} - {base}), {s}, attn_tma_inv[{map}], {name}x, {name}y);"
                        ));
                        coords.push((i, g, base, start, map, name.clone()));
                        name
                    }
                };
                names.insert((i, g), name);
            }
            for &(g, i, map, group_rows, cb) in mine {
                let al = self.prog.alloc(cs[i].dst);
                let name = &names[&(i, g)];
                self.w.line(format!(
                    "attn_tma_load_2d(attn_dst{} + {}, &{}, {name}x + {}, {name}y, {});",
                    sfx(i),
                    cb * al.block_elems() + g * group_rows * SWIZZLE_COLS,
                    tensor_map(map),
                    cb * SWIZZLE_COLS,
                    bars[i]
                ));
            }
            self.w.close("");
        }
        self.w.close("");
        Ok(())
    }

    /// Where `stage` of alloc `a` must have landed: wait on its mbarrier, flip its phase,
    /// and zero the chunks this thread found masked.
    pub(crate) fn emit_tma_landed(&mut self, a: AllocId, stage: Stage) -> Res<()> {
        let c = self
            .tma_copy_of(a)
            .ok_or_else(|| CodegenError::Malformed(format!("%a{} has no TMA copy", a.0)))?;
        let al = self.prog.alloc(a).clone();
        let (lanes, chunk) = (c.map.lanes, c.map.chunk);
        let rows_per_pass = self.threads / lanes;
        let slots = (al.cols / chunk).div_ceil(lanes);
        let bar = self.tma_barrier(a, stage, None)?;
        let dst = self.stage_base(a, stage, None)?;
        let zb = zero_bits(a);
        self.w.line(SM90A);
        self.w.open("");
        self.w.line(format!("const int attn_mb = {bar};"));
        self.w
            .line("attn_mbar_wait(&attn_mbar[attn_mb], (attn_tma_phase >> attn_mb) & 1u);");
        self.w.line("attn_tma_phase ^= 1u << attn_mb;");
        self.w.open(format!("if ({zb} != 0u)"));
        self.w
            .line(format!("unsigned short* const attn_dst = {dst};"));
        self.w.open_unrolled("p", al.rows.div_ceil(rows_per_pass));
        self.w.line(format!(
            "const int attn_row = p * {rows_per_pass} + tid / {lanes}, attn_lane_in_row = tid % {lanes};"
        ));
        let (row_start, dst_stride) = al.copy_row("attn_row", "attn_lane_in_row", lanes, chunk);
        self.w.line(format!(
            "unsigned short* const attn_dst_row = attn_dst + {row_start};"
        ));
        self.w.open_unrolled("s", slots);
        if !(al.cols / chunk).is_multiple_of(lanes) {
            self.w.line(format!(
                "if ((attn_lane_in_row + s * {lanes}) * {chunk} >= {}) break;",
                al.cols
            ));
        }
        self.w.line(format!(
            "if (({zb} >> (p * {slots} + s)) & 1u) attn_st_zero16(attn_dst_row + s * {dst_stride});"
        ));
        self.w.close("");
        self.w.close("");
        self.w.line("attn_fence_proxy_async();");
        self.w.close("");
        self.w.close("");
        self.w.line("#endif");
        Ok(())
    }
}
