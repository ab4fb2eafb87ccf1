//! `mma` of the GPU IR on Hopper's warpgroup MMA (`wgmma.mma_async`, sm_90a): the four warps
//! of a warpgroup issue one instruction per 64-row block and k-step, with B read by the
//! tensor cores straight from the swizzled alloc through a matrix descriptor (no `ldmatrix`
//! of B, no B registers) and A from the same registers the `mma.sync` path builds.
//!
//! Why it fits the `Mma` distribution unchanged: with the row map on `W` warps (`W` a multiple
//! of 4), slab `j` of warps `4g..4g+3` is rows `16·(4g + jW) .. +64`, one contiguous 64-row
//! block, and warp `i` of the warpgroup holds rows `16i..16i+15` of it in exactly the
//! `m16n8` accumulator layout, column tile after column tile: the `N/2` registers of one
//! `m64nNk16` are the slots `(j · tiles_n + nt) · 4 + q` of that slab, in order.
//!
//! The instructions run asynchronously: the loop issues them all, commits one group and
//! waits for it before anything reads the accumulators (each register is then fenced, so
//! the compiler cannot hoist a read above the wait). The copies that filled the alloc were
//! made visible to the tensor cores' async proxy at the pipeline's wait
//! (`attn_fence_proxy_async` before the barrier).
//!
//! A K-major dot (attention's scores) whose N is also the N of a transposed-B dot of the
//! same program (PV: the key tile as wide as the padded head) issues each k-step as two
//! instructions of N/2 columns. Issued whole, the pair gives wrong results on the H200,
//! deterministically and whatever the ring's depth, while either dot alone on warpgroup
//! MMAs (the other on `mma.sync`) is right; the SASS of both looked right, so the cause
//! is not known. Split, they match the reference (`gpu_unified --ignored
//! warpgroup_tilings_by_head_size`), and P0 at 128 × 128 ran 2.50 ms against 2.61 at
//! 128 × 64 (2026-12-02).

use super::dot_shared::{AFrom, SharedSteps};
use super::emitter::Emitter;
use super::CodegenError;
use crate::gpu_ir::{GpuOp, GpuProgram, OperandSource};
use crate::gpu_ir::{SWIZZLE_ATOM_BYTES, SWIZZLE_COLS};
use crate::ir::{Function, OpId, ScalarType, ValueId};

/// Warps of a warpgroup: one instruction covers 4 × 16 rows.
const WARPGROUP: usize = 4;
/// The widest N of one instruction.
const MAX_N: usize = 256;

/// One dot's warpgroup MMA: the instruction's N and the B descriptor.
pub(crate) struct WgmmaPlan {
    /// The instruction's N: the warpgroup's columns, or half of them when split.
    n: usize,
    /// Instructions per k-step and slab (2 when split, see the module note).
    parts: usize,
    /// B's rows are K (`trans-b`: V of PV, N contiguous) instead of N (K of QKᵀ).
    mn_major: bool,
    /// Descriptor byte offsets: leading (between column blocks along N, MN-major only) and
    /// stride (between 8-row groups: one swizzle atom).
    lbo: usize,
    sbo: usize,
    /// Bytes of one column block of the B alloc.
    block_bytes: usize,
    /// On a warp grid, the byte offset of this warpgroup's column block of B (an
    /// expression).
    col_offset: Option<String>,
}

/// The warpgroup plan of a shared-operand dot of a function that targets warpgroup MMAs
/// ([`crate::ir::Function::warpgroup_mma`]), when the dot fits: grid rows in whole
/// warpgroups (so a grid column is one warpgroup, see [`super::tile_map::MmaMap`]), no
/// ragged slabs, B a swizzled alloc holding exactly the operand, each warpgroup's N within
/// one instruction (whole column blocks when MN-major), 16-bit types. A comes from
/// registers (held, repacked or staged fragments) or, from a swizzled alloc, through a
/// descriptor. `trans_b_widths` are the N of the program's transposed-B dots (see the
/// module note).
pub(crate) fn plan(
    warpgroup_mma: bool,
    st: &SharedSteps<'_>,
    trans_b_widths: &[usize],
) -> Option<WgmmaPlan> {
    if !warpgroup_mma {
        return None;
    }
    let (map, b) = (st.map, st.b_al);
    // The warpgroup's N: its grid column's block (the whole width on a row map).
    let n = map.tiles_n * 8;
    let rows =
        map.row_warps.is_multiple_of(WARPGROUP) && !map.ragged_slabs() && map.m == map.slabs * 16;
    let ty = matches!(st.t, ScalarType::Bf16 | ScalarType::F16);
    let mn_major = st.b_trans;
    let n_ok = n * map.col_warps == map.n
        && n <= MAX_N
        && if mn_major {
            n.is_multiple_of(SWIZZLE_COLS) && b.cols == map.n && b.rows >= st.p.kp
        } else {
            b.rows == map.n && b.cols >= st.p.kp
        };
    if !(rows && ty && b.swizzled && n_ok) {
        return None;
    }
    let block_bytes = b.block_bytes();
    // A grid column's B starts `n` rows (K-major: 128-byte lines, whole 8-row atoms) or
    // `n / 64` column blocks (MN-major) into the alloc.
    let col_bytes = if mn_major {
        n / SWIZZLE_COLS * block_bytes
    } else {
        n * SWIZZLE_COLS * 2
    };
    let parts = if !mn_major
        && trans_b_widths.contains(&map.n)
        && n.is_multiple_of(16)
        && crate::features::on("wgmma_split")
    {
        2
    } else {
        1
    };
    Some(WgmmaPlan {
        n: n / parts,
        parts,
        mn_major,
        lbo: if mn_major { block_bytes } else { 16 },
        sbo: SWIZZLE_ATOM_BYTES,
        block_bytes,
        col_offset: map
            .col_split()
            .then(|| format!("{} * {col_bytes}", map.warp_col())),
    })
}

impl WgmmaPlan {
    /// Byte offset of k-step `k0`'s B in the alloc: K-major, the step's 32 bytes within the
    /// line of its column block (the hardware swizzles the absolute address, so a start
    /// inside the atom is what it expects); MN-major, its first row (128 bytes per row).
    fn k_step_offset(&self) -> String {
        if self.mn_major {
            format!("k0 * {}", SWIZZLE_COLS * 2)
        } else {
            k_major_step(self.block_bytes)
        }
    }

    /// The instruction for slab `j` and column part `part` (inline PTX: N/2 accumulators
    /// from the part's first, then A — four words of `attn_a[ks][j]` or the descriptor
    /// `attn_ad` — then the B descriptor `bd`, then `scale_d`: whether it adds to the
    /// accumulators, an expression).
    fn instruction(
        &self,
        t: ScalarType,
        acc: &str,
        per_slab: usize,
        (part, bd): (usize, &str),
        a: &WgmmaA,
        scale_d: &str,
    ) -> String {
        let regs = self.n / 2;
        let ty = if t == ScalarType::Bf16 { "bf16" } else { "f16" };
        let d: Vec<String> = (0..regs).map(|i| format!("%{i}")).collect();
        let tb = u8::from(self.mn_major);
        // Shared A is K-major (no transpose); registers take no A transpose operand.
        let (a_ops, a_inputs, next, trans) = match a {
            WgmmaA::Registers => (
                format!("{{%{}, %{}, %{}, %{}}}", regs, regs + 1, regs + 2, regs + 3),
                "\"r\"(attn_a[ks][j][0]), \"r\"(attn_a[ks][j][1]), \"r\"(attn_a[ks][j][2]), \"r\"(attn_a[ks][j][3])".to_string(),
                regs + 4,
                format!("{tb}"),
            ),
            WgmmaA::Shared { .. } => (
                format!("%{regs}"),
                "\"l\"(attn_ad)".to_string(),
                regs + 1,
                format!("0, {tb}"),
            ),
        };
        let asm = format!(
            "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{scale}, 0;\\nwgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ty}.{ty} {{{d}}}, {a_ops}, %{desc}, p, 1, 1, {trans};\\n}}\\n",
            scale = next + 1,
            n = self.n,
            d = d.join(", "),
            desc = next,
        );
        let outs: Vec<String> = (0..regs)
            .map(|i| format!("\"+f\"({acc}[j * {per_slab} + {}])", part * regs + i))
            .collect();
        format!(
            "asm volatile(\"{asm}\" : {} : {a_inputs}, \"l\"({bd}), \"r\"({scale_d}));",
            outs.join(", ")
        )
    }
}

/// The N of every dot of `prog` whose B is read transposed (MN-major).
pub(crate) fn trans_b_widths(f: &Function, prog: &GpuProgram) -> Vec<usize> {
    let mut out = Vec::new();
    crate::gpu_ir::walk_block(&prog.body, &mut |op| {
        if let GpuOp::Mma {
            dot,
            b: OperandSource::Shared { trans: true, .. },
            ..
        } = op
        {
            out.extend(f.ty(f.op(*dot).results[0]).shape.get(1).copied());
        }
    });
    out
}

/// Byte offset of k-step `k0` in a K-major swizzled alloc whose column blocks take
/// `block_bytes`: its block, then its 32 bytes within the line.
fn k_major_step(block_bytes: usize) -> String {
    format!("(k0 >> 6) * {block_bytes} + (k0 & 63) * 2")
}

/// Where a warpgroup MMA reads A.
pub(crate) enum WgmmaA {
    /// Fragment registers, all k-steps built before the first instruction (registers an
    /// instruction in flight reads must not be rewritten: building them between the
    /// instructions would serialize them).
    Registers,
    /// A K-major swizzled alloc through a descriptor (no registers, no `ldmatrix`).
    Shared { base: String, block_bytes: usize },
}

impl WgmmaA {
    fn of(from: &AFrom) -> WgmmaA {
        match from {
            AFrom::Shared {
                base,
                alloc,
                trans: false,
            } if alloc.swizzled => WgmmaA::Shared {
                base: base.clone(),
                block_bytes: alloc.block_bytes(),
            },
            _ => WgmmaA::Registers,
        }
    }
}

impl<'f> Emitter<'f> {
    /// The k-step loop on warpgroup MMAs: A fragments first (or A descriptors), one
    /// instruction per slab and k-step, then one commit and wait.
    pub(crate) fn emit_wgmma_steps(
        &mut self,
        st: &SharedSteps<'_>,
        wg: &WgmmaPlan,
    ) -> Result<(), CodegenError> {
        let map = st.map;
        let spw = map.slabs_per_warp;
        let steps = st.p.kp / 16;
        let a = WgmmaA::of(st.a_from);
        let b_col = wg
            .col_offset
            .as_ref()
            .map_or(String::new(), |off| format!(" + {}", warp_uniform(off)));
        self.w.line(format!(
            "const unsigned attn_bdesc = attn_smem_addr({}){b_col};",
            st.b_base
        ));
        match (&a, st.packed_a) {
            (WgmmaA::Registers, Some(packed)) => {
                self.w
                    .line(format!("unsigned (&attn_a)[{steps}][{spw}][4] = {packed};"));
            }
            (WgmmaA::Registers, None) => {
                self.w.line(format!("unsigned attn_a[{steps}][{spw}][4];"));
                self.emit_a_fragment_array("attn_a", st.a, st.a_from, st.p, map, steps)?;
            }
            (WgmmaA::Shared { base, .. }, _) => {
                if let Some((held, k)) = st.held_a {
                    self.w
                        .line(format!("unsigned (&attn_a)[{k}][{spw}][4] = {held};"));
                }
                self.w.line(format!(
                    "const unsigned attn_adesc = attn_smem_addr({base});"
                ));
                // The warpgroup's first row: its first warp's slab, 16 rows each.
                self.w.line(format!(
                    "const int attn_wg_row = {} & ~{};",
                    warp_uniform(&map.warp_row()),
                    WARPGROUP - 1
                ));
            }
        }
        // One descriptor per operand (per slab for A), built once; each k-step advances it
        // by a constant.
        self.w.line(format!(
            "const unsigned long long attn_bd0 = attn_wgmma_desc(attn_bdesc, {}, {});",
            wg.lbo, wg.sbo
        ));
        if let WgmmaA::Shared { .. } = &a {
            self.w.line(format!("unsigned long long attn_ad0[{spw}];"));
            self.w.open_unrolled("j", spw);
            let first_slab = map.slab_of("attn_wg_row", "j");
            self.w.line(format!(
                "attn_ad0[j] = attn_wgmma_desc(attn_adesc + {first_slab} * {}, 16, {});",
                16 * SWIZZLE_COLS * 2,
                wg.sbo
            ));
            self.w.close("");
        }
        // The accumulators were written by ordinary instructions (zeros, the rescale).
        self.w.line("attn_wgmma_fence();");
        self.w.open_unrolled("ks", steps);
        self.w.line("const int k0 = ks * 16;");
        self.w.line(format!(
            "const unsigned long long attn_bd = attn_wgmma_desc_add(attn_bd0, {});",
            wg.k_step_offset()
        ));
        self.w.open_unrolled("j", spw);
        if let WgmmaA::Shared { block_bytes, .. } = &a {
            self.w.line(format!(
                "const unsigned long long attn_ad = attn_wgmma_desc_add(attn_ad0[j], {});",
                k_major_step(*block_bytes)
            ));
        }
        let per_slab = 4 * map.tiles_n;
        // A zero accumulator is not read: the first k-step overwrites it. (Read, its zeros
        // are register writes among the first instructions in flight, and ptxas then waits
        // for the first before issuing the next: P0's scores, second column part.)
        let scale_d = if st.zero_acc { "(int)(ks != 0)" } else { "1" };
        for part in 0..wg.parts {
            let bd = if part == 0 {
                "attn_bd".to_string()
            } else {
                // The part's first row of B: K-major, 128-byte lines.
                self.w.line(format!(
                    "const unsigned long long attn_bd{part} = attn_wgmma_desc_add(attn_bd, {});",
                    part * wg.n * SWIZZLE_COLS * 2
                ));
                format!("attn_bd{part}")
            };
            let instr = wg.instruction(st.t, st.acc, per_slab, (part, &bd), &a, scale_d);
            match (&a, st.held_a) {
                // The held k-steps take A from registers (`ks` is a constant once unrolled).
                (WgmmaA::Shared { .. }, Some((_, k))) => {
                    let held = wg.instruction(
                        st.t,
                        st.acc,
                        per_slab,
                        (part, &bd),
                        &WgmmaA::Registers,
                        scale_d,
                    );
                    self.w
                        .line(format!("if (ks < {k}) {{ {held} }} else {{ {instr} }}"));
                }
                _ => self.w.line(instr),
            }
        }
        self.w.close("");
        self.w.close("");
        self.w.line("attn_wgmma_commit();");
        Ok(())
    }

    /// Waits for the committed warpgroup MMAs but the newest `in_flight` groups (they
    /// complete in order) and fences each of the `slots` registers of `acc`.
    pub(crate) fn emit_wgmma_complete(&mut self, acc: &str, slots: usize, in_flight: usize) {
        self.w.line(format!("attn_wgmma_wait<{in_flight}>();"));
        self.w.open_unrolled("s", slots);
        self.w.line(format!("attn_reg_fence({acc}[s]);"));
        self.w.close("");
    }

    /// How the turns name this thread's warpgroup: `attn_wg` under `uniform_wg` (declared
    /// by [`Self::emit_warpgroup_index`]), else the thread-index expression.
    fn warpgroup() -> &'static str {
        if crate::features::on("uniform_wg") {
            "attn_wg"
        } else {
            "(tid >> 7)"
        }
    }

    /// `attn_wg`, this thread's warpgroup, where `body`'s warpgroups take turns and the
    /// turns name it so (sm_90a only, as the turns are). Broadcast from lane 0 so ptxas
    /// knows it is warp-uniform and keeps it in a uniform register: as `tid >> 7`, ptxas
    /// re-read `tid` inside P0's loop once the producer's code changed around it (an
    /// `S2R`, and uniform-datapath work moved to vector registers; session 20).
    pub(crate) fn emit_warpgroup_index(&mut self, body: &crate::gpu_ir::GpuBlock) {
        let mut turns = false;
        crate::gpu_ir::walk_block(body, &mut |op| {
            turns |= matches!(op, crate::gpu_ir::GpuOp::Turn(_))
        });
        if turns && Self::warpgroup() == "attn_wg" {
            self.w.line("#if defined(__CUDA_ARCH_FEAT_SM90_ALL)");
            self.w
                .line("const int attn_wg = attn_warp_uniform(tid >> 7);");
            self.w.line("#endif");
        }
    }

    /// A step of the warpgroups' turn-taking (named barriers 1 and 2, warpgroup `g` waits on
    /// `1 + g`), on sm_90a only: elsewhere the MMAs are synchronous and nothing overlaps.
    pub(crate) fn emit_turn(&mut self, t: crate::gpu_ir::Turn) {
        use crate::gpu_ir::Turn;
        let threads = self.threads;
        let wg = Self::warpgroup();
        let line = match t {
            Turn::Begin => format!("if ({wg} == 1) attn_bar_arrive(1, {threads});"),
            Turn::Take => format!("attn_bar_sync(1 + {wg}, {threads});"),
            Turn::Pass => format!("attn_bar_arrive(2 - {wg}, {threads});"),
            // Warpgroup 1 syncs on a barrier of its own warps (3), which completes at once:
            // one unpredicated instruction, so the compiler adds no divergence handling.
            Turn::End => format!(
                "attn_bar_sync({wg} == 0 ? 1 : 3, {wg} == 0 ? {threads} : {});",
                threads / 2
            ),
        };
        self.w.line(format!(
            "#if defined(__CUDA_ARCH_FEAT_SM90_ALL) // turn {t:?}"
        ));
        self.w.line(line);
        self.w.line("#endif");
    }

    /// The `MmaWait` of `dot`: its deferred warpgroup wait on sm_90a (nothing where the
    /// dot ran as synchronous MMAs, or was not warpgroup-shaped).
    pub(crate) fn emit_wgmma_wait(&mut self, dot: OpId) {
        if let Some(wait) = self.take_wgmma_wait(dot) {
            self.emit_pending_wait(&wait);
        }
    }

    /// The `MmaWaitCarried` of `dot` (see `gpu_ir::pv_wait_behind`): its MMAs were issued
    /// in the previous iteration (after the loop: in its last), accumulating in place into
    /// `value`'s array. Every group issued since may stay in flight (they complete in
    /// order); after the loop, the body's pending entry of `dot` is the one completed.
    pub(crate) fn emit_wgmma_wait_carried(
        &mut self,
        dot: OpId,
        value: ValueId,
    ) -> Result<(), CodegenError> {
        let slots = self.map(value).slots();
        let acc = self.name(value)?.to_string();
        let later = match self.take_wgmma_wait(dot) {
            Some(w) => w.later,
            None => self.pending_mma.len(),
        };
        self.w.line(format!(
            "// the MMAs of %{} issued before complete here, into %{}",
            self.f.op(dot).results[0].0,
            value.0
        ));
        self.w.line("#if defined(__CUDA_ARCH_FEAT_SM90_ALL)");
        self.emit_wgmma_complete(&acc, slots, later);
        self.w.line("#endif");
        Ok(())
    }

    /// The `MmaWait` of `dot` placed in the arms of the row scale `scale` that follows
    /// (see `gpu_ir::wait_in_scale`): held for [`Self::emit_row_scale`] where that op
    /// emits its warp-uniform branch, else waited for here.
    pub(crate) fn emit_wgmma_wait_in_scale(&mut self, dot: OpId, scale: OpId) {
        let Some(wait) = self.take_wgmma_wait(dot) else {
            return;
        };
        if self.row_scale_factor(self.f.op(scale)).is_some() {
            self.scale_wait = Some(wait);
        } else {
            self.emit_pending_wait(&wait);
        }
    }

    /// Removes `dot`'s MMAs from the pending ones: where it is still in flight, its wait
    /// (the groups issued after it may stay in flight: they complete in order).
    fn take_wgmma_wait(&mut self, dot: OpId) -> Option<PendingWait> {
        let res = self.f.op(dot).results[0].0;
        let at = self.pending_mma.iter().position(|p| p.0 == res)?;
        let (_, acc, slots) = self.pending_mma.remove(at);
        let later = self.pending_mma.len() - at;
        Some(PendingWait {
            res,
            acc,
            slots,
            later,
        })
    }

    pub(crate) fn emit_pending_wait(&mut self, w: &PendingWait) {
        self.w.line(format!(
            "// the MMAs of %{} complete here (issued above, the ops since ran meanwhile)",
            w.res
        ));
        self.w.line("#if defined(__CUDA_ARCH_FEAT_SM90_ALL)");
        self.emit_wgmma_complete(&w.acc, w.slots, w.later);
        self.w.line("#endif");
    }
}

/// A warpgroup MMA's wait taken off the pending ones: the dot's result, its accumulator
/// array and registers, and how many later groups may stay in flight.
#[derive(Clone, Debug)]
pub(crate) struct PendingWait {
    res: u32,
    acc: String,
    slots: usize,
    later: usize,
}

/// `v` (an `int` expression of the warp's index) as the code generator writes a descriptor's
/// warpgroup-dependent part: through `attn_warp_uniform` (a shuffle from lane 0), which tells
/// ptxas the value is one per warp, so the descriptors live in uniform registers and each
/// `wgmma` takes them without an `R2UR` a k-step (`ATTN_CODEGEN_DISABLE=uniform_desc` writes
/// `v` as it is).
fn warp_uniform(v: &str) -> String {
    if v.parse::<i64>().is_err() && crate::features::on("uniform_desc") {
        format!("attn_warp_uniform({v})")
    } else {
        v.to_string()
    }
}
