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

use super::dot_shared::{AFrom, SharedSteps};
use super::emitter::Emitter;
use super::CodegenError;
use crate::gpu_ir::{SWIZZLE_ATOM_BYTES, SWIZZLE_COLS};
use crate::ir::ScalarType;

/// Warps of a warpgroup: one instruction covers 4 × 16 rows.
const WARPGROUP: usize = 4;
/// The widest N of one instruction.
const MAX_N: usize = 256;

/// One dot's warpgroup MMA: the instruction's N and the B descriptor.
pub(crate) struct WgmmaPlan {
    n: usize,
    /// B's rows are K (`trans-b`: V of PV, N contiguous) instead of N (K of QKᵀ).
    mn_major: bool,
    /// Descriptor byte offsets: leading (between column blocks along N, MN-major only) and
    /// stride (between 8-row groups: one swizzle atom).
    lbo: usize,
    sbo: usize,
    /// Bytes of one column block of the B alloc.
    block_bytes: usize,
}

/// The warpgroup plan of a shared-operand dot, when the feature is on (`ATTN_CODEGEN_ENABLE=
/// wgmma`) and the dot fits: row map over whole warpgroups, no ragged slabs, A in registers
/// (held, repacked or `ldmatrix`ed), B a swizzled alloc holding exactly the operand, N within
/// one instruction (whole column blocks when MN-major), 16-bit types.
pub(crate) fn plan(st: &SharedSteps<'_>) -> Option<WgmmaPlan> {
    if !crate::features::enabled("wgmma") {
        return None;
    }
    let (map, b) = (st.map, st.b_al);
    let n = map.tiles_n * 8;
    let rows = map.col_warps == 1
        && map.row_warps.is_multiple_of(WARPGROUP)
        && !map.ragged_slabs()
        && map.m == map.slabs * 16;
    let a = !matches!(st.a_from, AFrom::Staged);
    let ty = matches!(st.t, ScalarType::Bf16 | ScalarType::F16);
    let mn_major = st.b_trans;
    let n_ok = n == map.n
        && n <= MAX_N
        && if mn_major {
            n.is_multiple_of(SWIZZLE_COLS) && b.cols == n && b.rows >= st.p.kp
        } else {
            b.rows == n && b.cols >= st.p.kp
        };
    if !(rows && a && ty && b.swizzled && n_ok) {
        return None;
    }
    let block_bytes = b.block_elems() * b.elem.size_bytes();
    Some(WgmmaPlan {
        n,
        mn_major,
        lbo: if mn_major { block_bytes } else { 16 },
        sbo: SWIZZLE_ATOM_BYTES,
        block_bytes,
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
            format!("(k0 >> 6) * {} + (k0 & 63) * 2", self.block_bytes)
        }
    }

    /// The instruction for slab `j` (inline PTX: N/2 accumulators, 4 A words, B descriptor).
    fn instruction(&self, t: ScalarType, acc: &str, per_slab: usize) -> String {
        let regs = self.n / 2;
        let ty = if t == ScalarType::Bf16 { "bf16" } else { "f16" };
        let d: Vec<String> = (0..regs).map(|i| format!("%{i}")).collect();
        let asm = format!(
            "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{scale}, 0;\\nwgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ty}.{ty} {{{d}}}, {{%{a0}, %{a1}, %{a2}, %{a3}}}, %{desc}, p, 1, 1, {tb};\\n}}\\n",
            scale = regs + 5,
            n = self.n,
            d = d.join(", "),
            a0 = regs,
            a1 = regs + 1,
            a2 = regs + 2,
            a3 = regs + 3,
            desc = regs + 4,
            tb = u8::from(self.mn_major),
        );
        let outs: Vec<String> = (0..regs)
            .map(|i| format!("\"+f\"({acc}[j * {per_slab} + {i}])"))
            .collect();
        format!(
            "asm volatile(\"{asm}\" : {} : \"r\"(attn_a[j][0]), \"r\"(attn_a[j][1]), \"r\"(attn_a[j][2]), \"r\"(attn_a[j][3]), \"l\"(attn_bd), \"r\"(1));",
            outs.join(", ")
        )
    }
}

impl<'f> Emitter<'f> {
    /// The k-step loop on warpgroup MMAs: A fragments as for `mma.sync`, one instruction per
    /// slab and k-step, then one commit and wait.
    pub(crate) fn emit_wgmma_steps(
        &mut self,
        st: &SharedSteps<'_>,
        wg: &WgmmaPlan,
    ) -> Result<(), CodegenError> {
        let map = st.map;
        let spw = map.slabs_per_warp;
        self.w.line(format!(
            "const unsigned attn_bdesc = attn_smem_addr({});",
            st.b_base
        ));
        // The accumulators were written by ordinary instructions (zeros, the rescale).
        self.w.line("attn_wgmma_fence();");
        self.w.line("#pragma unroll");
        self.w
            .open(format!("for (int k0 = 0; k0 < {}; k0 += 16)", st.p.kp));
        self.w.line(format!("unsigned attn_a[{spw}][4];"));
        self.w.open_unrolled("j", spw);
        self.w.line(format!("const int slab = {};", map.slab("j")));
        self.emit_a_step(st.a, st.a_from, st.p, st.t)?;
        self.w
            .line("attn_a[j][0] = a0; attn_a[j][1] = a1; attn_a[j][2] = a2; attn_a[j][3] = a3;");
        self.w.close("");
        self.w.line(format!(
            "const unsigned long long attn_bd = attn_wgmma_desc(attn_bdesc + {}, {}, {});",
            wg.k_step_offset(),
            wg.lbo,
            wg.sbo
        ));
        self.w.open_unrolled("j", spw);
        self.w.line(wg.instruction(st.t, st.acc, 4 * map.tiles_n));
        self.w.close("");
        self.w.close("");
        self.w.line("attn_wgmma_commit();");
        self.w.line("attn_wgmma_wait<0>();");
        self.w.open_unrolled("s", map.slots());
        self.w.line(format!("attn_reg_fence({}[s]);", st.acc));
        self.w.close("");
        Ok(())
    }
}
