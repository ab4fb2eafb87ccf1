//! `mma` of the GPU IR: a tensor-core dot whose accumulator lives in `Mma` fragments and whose
//! B operand (and possibly A) sits in a shared alloc. Each 16-wide k-step loads its fragments
//! with `ldmatrix` (`.x4`: two 8-column B tiles or one 16×16 A tile per instruction; `.trans`
//! when the alloc holds the operand with its non-K axis contiguous, as V is), so operands
//! never pass through registers as f32 or through a per-element staging loop.
//!
//! Addresses, per lane `l` (matrix `j = l / 8`, row `i = l % 8` of it), for operand tiles
//! stored `[outer][K]` (no transpose) or `[K][outer]` (transpose):
//! - A 16×16 (a0..a3 = rows 0-7/8-15 × k 0-7/8-15, row halves first): no transpose: row
//!   `16·slab + l % 16`, column `k0 + 8·(l / 16)`; transpose: row `k0 + 8·(j / 2) + i`,
//!   column `16·slab + 8·(j % 2)`.
//! - B, two n-tiles (b0, b1 of tile `nt`, then of `nt + 1`): no transpose: row
//!   `8·tile(nt + j / 2) + i`, column `k0 + 8·(j % 2)`; transpose: row `k0 + 8·(j % 2) + i`,
//!   column `8·tile(nt + j / 2)`.

use super::dot::MmaPlan;
use super::emitter::Emitter;
use super::tile_map::MmaMap;
use super::CodegenError;
use crate::gpu_ir::{GpuOp, OperandSource, StageSync};
use crate::ir::{Op, ScalarType, ValueId};

type Res<T> = Result<T, CodegenError>;

/// How the A fragments of each k-step are obtained.
pub(crate) enum AFrom {
    Held(String),
    Repacked(MmaMap),
    Staged,
    Shared {
        base: String,
        alloc: crate::gpu_ir::LocalAlloc,
        trans: bool,
    },
}

/// What the k-step loop of a shared-operand dot needs, whichever instructions it issues.
#[derive(Clone, Copy)]
pub(crate) struct SharedSteps<'a> {
    pub(crate) a: ValueId,
    pub(crate) a_from: &'a AFrom,
    pub(crate) p: &'a MmaPlan,
    pub(crate) t: ScalarType,
    pub(crate) map: &'a MmaMap,
    /// The accumulator's register array.
    pub(crate) acc: &'a str,
    /// The B alloc's stage base (an `unsigned short*` expression) and the alloc.
    pub(crate) b_base: &'a str,
    pub(crate) b_al: &'a crate::gpu_ir::LocalAlloc,
    /// B is read transposed (`ldmatrix.trans`): the alloc's rows are K (MN-major).
    pub(crate) b_trans: bool,
    /// The accumulator starts at +0 (a fresh dot, not a chained one): a warpgroup MMA's
    /// first k-step can ignore it instead of reading the zeros.
    pub(crate) zero_acc: bool,
    /// The register array a [`crate::gpu_ir::GpuOp::PackA`] packed A's fragments into.
    pub(crate) packed_a: Option<&'a str>,
    /// The fragments of A's first k-steps a [`crate::gpu_ir::GpuOp::HoldA`] loaded: the
    /// array and its k-steps.
    pub(crate) held_a: Option<(&'a str, usize)>,
}

/// A tensor-core dot's values, element type and MMA plan.
struct MmaOperands {
    a: ValueId,
    acc: ValueId,
    res: ValueId,
    t: ScalarType,
    p: MmaPlan,
}

impl<'f> Emitter<'f> {
    fn mma_operands(&self, op: &Op) -> Res<MmaOperands> {
        let (a, b, acc) = (
            Self::operand(op, 0)?,
            Self::operand(op, 1)?,
            Self::operand(op, 2)?,
        );
        let res = Self::result(op)?;
        let (m, k, n) = match (self.shape(a), self.shape(b)) {
            ([m, k], [_, n]) => (*m, *k, *n),
            _ => return Err(CodegenError::Malformed("mma of non-2D operands".into())),
        };
        let (t, p) = (self.scalar(a)?, MmaPlan::new(m, n, k));
        Ok(MmaOperands { a, acc, res, t, p })
    }

    /// The MMA plan of the next dot after a handoff to `res` (past a warpgroup's wait for
    /// its stage or a stage's release, MMA waits and elementwise ops: the accumulator's
    /// rescale) when that dot reads `res`
    /// as its A operand, and nothing else does, staged in the scratch buffer (not from
    /// shared memory, held or repacked fragments): the handoff can write the tile there in
    /// the staged layout, and the dot read it as it lies (one pass through shared memory,
    /// not two, and two barriers fewer). The dot checks that the ops between kept off the
    /// scratch buffer (an operand converted through it would overwrite the tile).
    pub(crate) fn dot_staging_a_next(&self, res: ValueId) -> Option<MmaPlan> {
        let between = |g: &&GpuOp| match g {
            GpuOp::Stage(StageSync::Wait { .. } | StageSync::Release { .. })
            | GpuOp::MmaWait { .. } => true,
            GpuOp::Tile(o) => self.f.op(*o).kind.is_register_only(),
            _ => false,
        };
        let Some(GpuOp::Mma { dot, a, b, .. }) = self.following.iter().find(|g| !between(g)) else {
            return None;
        };
        let op = self.f.op(*dot);
        let shared = |s: &OperandSource| matches!(s, OperandSource::Shared { .. });
        // An owned dot's region names its warpgroup's slice `attn_scratch`.
        let owned = self.f.ty(op.results[0]).layout.owner().is_some();
        if op.operands.first() != Some(&res)
            || self.use_count(res) != 1
            || shared(a)
            || !shared(b)
            || owned
        {
            return None;
        }
        let MmaOperands {
            acc, res: out, p, ..
        } = self.mma_operands(op).ok()?;
        let map = self.fragment_map(acc, out)?;
        let other_source = self.held_a_fragments(res).is_some()
            || self.repackable_a(res, &map, &p).is_some()
            || self.packed_a.contains_key(&out.0);
        (!other_source).then_some(p)
    }

    pub(crate) fn emit_mma_shared(
        &mut self,
        op: &'f Op,
        a_src: &OperandSource,
        b_src: &OperandSource,
        inline_wait: bool,
        chained_from: Option<crate::ir::OpId>,
    ) -> Res<()> {
        let MmaOperands { a, acc, res, t, p } = self.mma_operands(op)?;
        let map = self.fragment_map(acc, res).ok_or_else(|| {
            CodegenError::Malformed("mma result is not an accumulator in fragments".into())
        })?;
        let OperandSource::Shared {
            alloc: b_alloc,
            stage: b_stage,
            trans: b_trans,
            ..
        } = b_src
        else {
            return Err(CodegenError::Malformed(
                "mma B operand not in shared memory".into(),
            ));
        };
        let b_base = self.stage_base(*b_alloc, *b_stage, None)?;
        let b_al = self.prog.alloc(*b_alloc).clone();
        // A chained dot accumulates into its predecessor's array (the predecessor's result
        // has no other reader), so its MMAs continue the ones in flight.
        let chained = chained_from.filter(|_| self.map(acc) == super::tile_map::TileMap::Mma(map));
        if let (Some(d1), None) = (chained_from, chained) {
            // Another layout: the predecessor completes before its result is copied.
            self.emit_wgmma_wait(d1);
        }
        let zero_acc = chained.is_none() && crate::gpu_ir::remat::is_zero(self.f, &self.defs, acc);
        let name = match (chained, self.carried_acc.get(&res.0).copied()) {
            (Some(_), _) => self.alias_tile(res, acc)?,
            (None, Some(into)) => self.init_carried_accumulator(acc, res, into, map)?,
            (None, None) => self.init_accumulator(acc, res, map)?,
        };
        self.w.open("");
        self.w.line("const int attn_lane = tid & 31;");
        let a_from = self.a_fragments_source(a, a_src, &map, &p)?;
        if let AFrom::Staged = a_from {
            // A's rows in the scratch buffer, read back by `ldmatrix` (synchronous reads the
            // ledger can follow: `scratch_ledger`); a handoff right before may have put them
            // there already.
            let bytes = p.staged_a_bytes();
            let by_handoff = self.staged_by_handoff.remove(&a.0);
            if by_handoff.is_some_and(|(_, done)| self.scratch_named_since(done)) {
                return Err(CodegenError::Malformed(
                    "the ops between a handoff staging a dot's A and the dot touched the scratch buffer".into(),
                ));
            }
            let at = by_handoff.map_or(0, |(at, _)| at);
            self.need_scratch(at + bytes);
            self.w.line(staged_a_pointer(at));
            if by_handoff.is_none() {
                let sync = self.block_sync();
                self.write_between_barriers(Some(0..bytes), &sync, |e| e.stage_a(a, &p))?;
            }
            self.note_scratch_read(at..at + bytes);
        }
        let packed_a = self.packed_a.get(&res.0).cloned();
        let held_a = self.held_shared_a.get(&res.0).cloned();
        let steps = SharedSteps {
            a,
            a_from: &a_from,
            p: &p,
            t,
            map: &map,
            acc: &name,
            b_base: &b_base,
            b_al: &b_al,
            b_trans: *b_trans,
            zero_acc,
            packed_a: packed_a.as_deref(),
            held_a: held_a.as_ref().map(|(n, k)| (n.as_str(), *k)),
        };
        let wg = super::wgmma::plan(self.f.warpgroup_mma, &steps, &self.trans_b_widths);
        if let Some(d1) = chained {
            if wg.is_some() {
                // This dot's wait completes the predecessor's MMAs too.
                let first = self.f.op(d1).results[0].0;
                self.pending_mma.retain(|p| p.0 != first);
            } else {
                self.emit_wgmma_wait(d1);
            }
        }
        match wg {
            Some(wg) => {
                // One source, both paths: sm_90a compiles the warpgroup MMA, every other
                // target the mma.sync steps (the layouts and accumulators are the same).
                self.w.line("#if defined(__CUDA_ARCH_FEAT_SM90_ALL)");
                self.emit_wgmma_steps(&steps, &wg)?;
                if inline_wait {
                    self.emit_wgmma_complete(&name, map.slots(), 0);
                } else {
                    self.pending_mma
                        .push((op.results[0].0, name.clone(), map.slots()));
                }
                self.w.line("#else");
                self.emit_mma_steps(&steps)?;
                self.w.line("#endif");
            }
            None => self.emit_mma_steps(&steps)?,
        }
        self.w.close("");
        Ok(())
    }

    /// A `PackA`: tile `from` (zeros when `None`) as the k-steps' A fragments of warpgroup
    /// MMA `dot`, in the array that MMA then reads (sm_90a; declared by the dot's first
    /// `PackA`). Nothing when A is not repacked registers.
    pub(crate) fn emit_pack_a(
        &mut self,
        dot: crate::ir::OpId,
        from: Option<crate::ir::ValueId>,
    ) -> Res<()> {
        let MmaOperands { a, acc, res, p, .. } = self.mma_operands(self.f.op(dot))?;
        let Some(map) = self.fragment_map(acc, res) else {
            return Ok(());
        };
        if !matches!(
            self.a_fragments_source(a, &OperandSource::Registers, &map, &p)?,
            AFrom::Repacked(_)
        ) {
            return Ok(());
        }
        let (steps, spw) = (p.kp / 16, map.slabs_per_warp);
        let name = format!("attn_pa{}", res.0);
        self.w.line("#if defined(__CUDA_ARCH_FEAT_SM90_ALL)");
        if self.packed_a.insert(res.0, name.clone()).is_none() {
            let zeros = if from.is_none() { " = {}" } else { "" };
            self.w
                .line(format!("unsigned {name}[{steps}][{spw}][4]{zeros};"));
        } else if from.is_none() {
            return Err(CodegenError::Malformed(
                "zeros packed into declared fragments".into(),
            ));
        }
        if let Some(v) = from {
            let src = self.a_fragments_source(v, &OperandSource::Registers, &map, &p)?;
            self.in_lane_block(|e| e.emit_a_fragment_array(&name, v, &src, &p, &map, steps))?;
        }
        self.w.line("#endif");
        Ok(())
    }

    /// A `HoldA`: the first `steps` k-steps of warpgroup MMA `dot`'s A, read from its
    /// alloc (`a_src`) into an array its k-steps then take A from (sm_90a only: the
    /// `mma.sync` path keeps reading the alloc).
    pub(crate) fn emit_hold_a(
        &mut self,
        dot: crate::ir::OpId,
        a_src: &OperandSource,
        steps: usize,
    ) -> Res<()> {
        let MmaOperands { a, acc, res, p, .. } = self.mma_operands(self.f.op(dot))?;
        let Some(map) = self.fragment_map(acc, res) else {
            return Ok(());
        };
        let from = self.a_fragments_source(a, a_src, &map, &p)?;
        if !matches!(from, AFrom::Shared { trans: false, .. }) || steps == 0 || steps > p.kp / 16 {
            return Err(CodegenError::Malformed(
                "held A fragments of an operand not in a shared alloc".into(),
            ));
        }
        let name = held_a_name(res);
        self.w.line("#if defined(__CUDA_ARCH_FEAT_SM90_ALL)");
        self.w.line(format!(
            "// (the first {steps} k-steps of %{}'s A, held in registers across the loop)",
            res.0
        ));
        // An owned dot's region declared them before it opened (they outlive it).
        if !self.predeclared.remove(&res.0) {
            self.w.line(held_a_declaration(&name, steps, &map));
        }
        self.in_lane_block(|e| e.emit_a_fragment_array(&name, a, &from, &p, &map, steps))?;
        self.w.line("#endif");
        self.held_shared_a.insert(res.0, (name, steps));
        Ok(())
    }

    /// Declares, before an owned region, the held fragments of `dot`'s A that a
    /// [`crate::gpu_ir::GpuOp::HoldA`] in it loads.
    pub(crate) fn predeclare_held_a(&mut self, dot: crate::ir::OpId, steps: usize) -> Res<()> {
        let MmaOperands { acc, res, .. } = self.mma_operands(self.f.op(dot))?;
        let Some(map) = self.fragment_map(acc, res) else {
            return Ok(());
        };
        self.w.line("#if defined(__CUDA_ARCH_FEAT_SM90_ALL)");
        self.w
            .line(held_a_declaration(&held_a_name(res), steps, &map));
        self.w.line("#endif");
        self.predeclared.insert(res.0);
        Ok(())
    }

    /// `body` in a C++ block of its own that declares the lane the fragment loads read
    /// (outside a dot's emission, which declares it).
    fn in_lane_block(&mut self, body: impl FnOnce(&mut Self) -> Res<()>) -> Res<()> {
        self.w.open("");
        self.w.line("const int attn_lane = tid & 31;");
        body(self)?;
        self.w.close("");
        Ok(())
    }

    /// Fills array `name[k-steps][slabs per warp][4]` with the A fragments of the first
    /// `steps` k-steps and every slab of this warp (`a` read from `from`).
    pub(crate) fn emit_a_fragment_array(
        &mut self,
        name: &str,
        a: ValueId,
        from: &AFrom,
        p: &MmaPlan,
        map: &MmaMap,
        steps: usize,
    ) -> Res<()> {
        // A's element type: the dot's (a repacked tile is of A's type).
        let t = self.scalar(a)?;
        self.w.open_unrolled("ks", steps);
        self.w.line("const int k0 = ks * 16;");
        self.w.open_unrolled("j", map.slabs_per_warp);
        self.w.line(format!("const int slab = {};", map.slab("j")));
        self.emit_a_step(a, from, p, t)?;
        self.w.line(format!(
            "{name}[ks][j][0] = a0; {name}[ks][j][1] = a1; {name}[ks][j][2] = a2; {name}[ks][j][3] = a3;"
        ));
        self.w.close("");
        self.w.close("");
        Ok(())
    }

    /// The k-step loop on `mma.sync`: `ldmatrix` B fragments, one `mma` per slab and column
    /// tile.
    fn emit_mma_steps(&mut self, st: &SharedSteps<'_>) -> Res<()> {
        let SharedSteps {
            a,
            a_from,
            p,
            t,
            map,
            acc: name,
            b_base,
            b_al,
            b_trans,
            ..
        } = *st;
        // k-step outer, slabs inner: each B fragment pair loaded once feeds the mma of every
        // slab this warp owns (two 16-row slabs per warp halve the shared-memory reads of B).
        let spw = map.slabs_per_warp;
        let guarded = map.ragged_slabs();
        let ways = k_split_ways(map, p);
        let part_slots = map.slots();
        if ways > 1 {
            self.w.line(format!(
                "// ({ways} partial accumulators over alternating k-steps: independent mma chains)"
            ));
            self.w.line(format!(
                "float attn_kpart[{}] = {{}};",
                (ways - 1) * part_slots
            ));
        }
        self.w.line("#pragma unroll");
        self.w
            .open(format!("for (int k0 = 0; k0 < {}; k0 += 16)", p.kp));
        self.w.line(format!("unsigned attn_a[{spw}][4];"));
        self.w.open_unrolled("j", spw);
        self.w.line(format!("const int slab = {};", map.slab("j")));
        if guarded {
            self.w.open(format!("if (slab < {})", map.slabs));
        }
        self.emit_a_step(a, a_from, p, t)?;
        self.w
            .line("attn_a[j][0] = a0; attn_a[j][1] = a1; attn_a[j][2] = a2; attn_a[j][3] = a3;");
        if guarded {
            self.w.close("");
        }
        self.w.close("");
        let frag = |nt: &str| format!("&{name}[(j * {} + {nt}) * 4]", map.tiles_n);
        let mma = if t == ScalarType::Bf16 {
            "attn_mma_bf16_16816"
        } else {
            "attn_mma_f16_16816"
        };
        let pairs = map.tiles_n.is_multiple_of(2);
        let step = if pairs { 2 } else { 1 };
        self.w.line("#pragma unroll");
        self.w.open(format!(
            "for (int nt = 0; nt < {}; nt += {step})",
            map.tiles_n
        ));
        let lane_tile = if pairs {
            map.col_tile("(nt + (attn_lane >> 4))")
        } else {
            map.col_tile("nt")
        };
        let (row, col) = if b_trans {
            (
                "k0 + ((attn_lane >> 3) & 1) * 8 + (attn_lane & 7)".to_string(),
                format!("{lane_tile} * 8"),
            )
        } else {
            (
                format!("{lane_tile} * 8 + (attn_lane & 7)"),
                "k0 + ((attn_lane >> 3) & 1) * 8".to_string(),
            )
        };
        let ld = match (pairs, b_trans) {
            (true, false) => "attn_ldsm_x4",
            (true, true) => "attn_ldsm_x4_trans",
            (false, false) => "attn_ldsm_x2",
            (false, true) => "attn_ldsm_x2_trans",
        };
        self.w.line(format!(
            "unsigned b0, b1, b2, b3; {ld}(b0, b1, b2, b3, {b_base} + {});",
            b_al.offset(&row, &col)
        ));
        self.w.open_unrolled("j", spw);
        if guarded {
            self.w.line(format!("const int slab = {};", map.slab("j")));
            self.w.open(format!("if (slab < {})", map.slabs));
        }
        let a_regs = "attn_a[j][0], attn_a[j][1], attn_a[j][2], attn_a[j][3]";
        let tn = map.tiles_n;
        // The mma of column tile `nt` (B registers `b_lo`, `b_hi`), into the main accumulator
        // or, on alternating k-steps, into a partial one.
        let issue = |w: &mut super::writer::SourceWriter, nt: &str, (b_lo, b_hi): (u8, u8)| {
            let main = format!("{mma}({}, {a_regs}, b{b_lo}, b{b_hi});", frag(nt));
            if ways == 1 {
                w.line(main);
                return;
            }
            let part = format!(
                "{mma}(&attn_kpart[((k0 / 16) % {ways} - 1) * {part_slots} + (j * {tn} + {nt}) * 4], {a_regs}, b{b_lo}, b{b_hi});"
            );
            w.line(format!("if ((k0 / 16) % {ways} == 0) {main} else {part}"));
        };
        issue(&mut self.w, "nt", (0, 1));
        if pairs {
            issue(&mut self.w, "nt + 1", (2, 3));
        }
        if guarded {
            self.w.close("");
        }
        self.w.close("");
        self.w.close("");
        self.w.close("");
        if ways > 1 {
            self.w.open_unrolled("s", part_slots);
            let sum: Vec<String> = (0..ways - 1)
                .map(|w| format!("attn_kpart[{} + s]", w * part_slots))
                .collect();
            self.w.line(format!("{name}[s] += {};", sum.join(" + ")));
            self.w.close("");
        }
        Ok(())
    }

    fn a_fragments_source(
        &self,
        a: ValueId,
        src: &OperandSource,
        map: &MmaMap,
        p: &MmaPlan,
    ) -> Res<AFrom> {
        if let OperandSource::Shared {
            alloc,
            stage,
            trans,
            ..
        } = src
        {
            return Ok(AFrom::Shared {
                base: self.stage_base(*alloc, *stage, None)?,
                alloc: self.prog.alloc(*alloc).clone(),
                trans: *trans,
            });
        }
        if let Some(frag) = self.held_a_fragments(a) {
            return Ok(AFrom::Held(frag));
        }
        if let Some(am) = self.repackable_a(a, map, p) {
            return Ok(AFrom::Repacked(am));
        }
        Ok(AFrom::Staged)
    }

    /// Declares `a0..a3`, the A fragments of k-step `k0` for slab `slab`.
    pub(crate) fn emit_a_step(
        &mut self,
        a: ValueId,
        from: &AFrom,
        p: &MmaPlan,
        t: ScalarType,
    ) -> Res<()> {
        let word =
            |base: &str, off: String| format!("*reinterpret_cast<const unsigned*>({base} + {off})");
        let line = match from {
            AFrom::Held(frag) => {
                let at = format!("{frag}[(j * {} + k0 / 16) * 4", p.kp / 16);
                format!(
                    "const unsigned a0 = {at}], a1 = {at} + 1], a2 = {at} + 2], a3 = {at} + 3];"
                )
            }
            AFrom::Repacked(am) => {
                let pack = if t == ScalarType::Bf16 {
                    "attn_pack_bf16"
                } else {
                    "attn_pack_f16"
                };
                let mut words = Vec::new();
                for (tile, q) in [(0, 0), (0, 2), (1, 0), (1, 2)] {
                    let slot = |dq: usize| {
                        format!("(j * {} + k0 / 8 + {tile}) * 4 + {}", am.tiles_n, q + dq)
                    };
                    words.push(format!(
                        "{pack}({}, {})",
                        self.at(a, &slot(0))?,
                        self.at(a, &slot(1))?
                    ));
                }
                format!(
                    "const unsigned a0 = {}, a1 = {}, a2 = {}, a3 = {};",
                    words[0], words[1], words[2], words[3]
                )
            }
            // Rows of 16-byte multiples: one `ldmatrix.x4` per 16×16 step (lane `l` points
            // at row `16·slab + l % 16`, column `k0 + 8·(l / 16)`), not four 32-bit loads.
            AFrom::Staged if p.ld.is_multiple_of(8) => {
                self.w.line(format!(
                    "const unsigned short* pa = sa + (slab * 16 + (tid & 15)) * {} + ((tid >> 4) & 1) * 8;",
                    p.ld
                ));
                "unsigned a0, a1, a2, a3; attn_ldsm_x4(a0, a1, a2, a3, pa + k0);".to_string()
            }
            AFrom::Staged => {
                let ld = p.ld;
                self.w.line(format!(
                    "const unsigned short* pa = sa + (slab * 16 + attn_g) * {ld} + 2 * attn_t4;"
                ));
                format!(
                    "const unsigned a0 = {}, a1 = {}, a2 = {}, a3 = {};",
                    word("pa", "k0".into()),
                    word("pa", format!("{} + k0", 8 * ld)),
                    word("pa", "k0 + 8".into()),
                    word("pa", format!("{} + k0 + 8", 8 * ld)),
                )
            }
            AFrom::Shared { base, alloc, trans } => {
                let (row, col, ld) = if *trans {
                    (
                        "k0 + (attn_lane >> 4) * 8 + (attn_lane & 7)",
                        "slab * 16 + ((attn_lane >> 3) & 1) * 8",
                        "attn_ldsm_x4_trans",
                    )
                } else {
                    (
                        "slab * 16 + (attn_lane & 15)",
                        "k0 + (attn_lane >> 4) * 8",
                        "attn_ldsm_x4",
                    )
                };
                format!(
                    "unsigned a0, a1, a2, a3; {ld}(a0, a1, a2, a3, {base} + {});",
                    alloc.offset(row, col)
                )
            }
        };
        self.w.line(line);
        Ok(())
    }
}

/// Independent `mma` chains a warp wants in flight: a dependent `mma.sync` waits for the one
/// before it on the same accumulator, so a warp with fewer accumulator tiles than this over
/// a long K (MLA's QKᵀ: 2 tiles over 36 k-steps) stalls on its own results.
const MIN_MMA_CHAINS: usize = 4;

/// Partial accumulators (1 = none) for an `mma` over `p.kp / 16` k-steps with `map`'s
/// accumulator tiles per warp: enough alternating k-step chains for [`MIN_MMA_CHAINS`],
/// when K is long enough (at least 8 k-steps) to pay for the final sums.
fn k_split_ways(map: &MmaMap, p: &MmaPlan) -> usize {
    let chains = map.slabs_per_warp * map.tiles_n;
    let steps = p.kp / 16;
    if chains >= MIN_MMA_CHAINS || steps < 8 || !crate::features::on("k_split") {
        return 1;
    }
    MIN_MMA_CHAINS.div_ceil(chains).min(steps / 4).max(1)
}

/// The array of dot `res`'s held A fragments.
fn held_a_name(res: crate::ir::ValueId) -> String {
    format!("attn_ha{}", res.0)
}

/// `unsigned name[steps][slabs][4];`: four registers a 16 × 16 step of each slab.
fn held_a_declaration(name: &str, steps: usize, map: &super::tile_map::MmaMap) -> String {
    format!("unsigned {name}[{steps}][{}][4];", map.slabs_per_warp)
}

/// The declaration of `sa`, a staged A operand's rows at byte `at` of the scratch buffer.
pub(crate) fn staged_a_pointer(at: usize) -> String {
    let base = match at {
        0 => "attn_scratch".to_string(),
        at => format!("attn_scratch + {at}"),
    };
    format!("unsigned short* sa = reinterpret_cast<unsigned short*>({base});")
}
