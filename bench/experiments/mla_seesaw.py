#!/usr/bin/env python3
"""FlashMLA's schedule for the sm_90a MLA history, as a rewrite of the generated kernel: what
the GPU-IR plan of docs/gpu_ir.md ("Where L1's history time goes, by phase") would buy,
timed and checked for parity before the compiler learns it.

    mla_seesaw.py IN.cu OUT.cu [fine [nocopy|prefetch|tma|tma_ef]]

The generated history splits every 64-key tile's scores between its two consumer
warpgroups (each `m64n32k16` over the 576 latent and rope columns, the queries read by
both), then meets twice a tile: the row max, and P staged for PV. Here the tiles of a pair
go to one warpgroup each (tile `lo + 2i` to warpgroup 0, `lo + 2i + 1` to warpgroup 1):

  - each warpgroup computes the full `m64n64k16` scores of its own tile (a third fewer
    shared-memory reads a key), and its own softmax;
  - the running max is a token passed along: warpgroup 1's softmax of tile b starts from
    the maximum after tile a, which warpgroup 0 hands over with P(a); warpgroup 0 takes the
    maximum after b back with P(b) (one named barrier each way, no meeting);
  - each warpgroup keeps its column half of the output (the generated layout) and runs PV
    for both tiles: its own P from registers, the other's read from a thread-indexed
    exchange slot (thread i of one warpgroup holds the same rows and columns as thread i of
    the other, so P's A fragments cross as 64 bytes a thread, no reshuffle);
  - each keeps per-lane row sums of its own tiles, rescaled by both tiles' factors; the
    epilogue already adds the two warpgroups' sums.

The producer, the prologue and the epilogue stay as generated. Applies to every two-warpgroup
history specialization (names are read from the text), so a parity test can run it.

`fine` gives the ring the granularity FlashMLA's schedule needs to keep a copy lead with two
stages: each 64-column block of a stage (8 of the latent, 1 of rope) has its own full
mbarrier, which every producer thread arrives on when its copies of that block land
(`cp.async.mbarrier.arrive.noinc`), so the scores start on the first block while the rest
land; a stage is released in two halves, each by the warpgroup whose PV reads it (the
owner's half with the rope block, then the other), and the producer refills a half as soon
as it is free; each warpgroup's scores read its own half first (the half it released
earliest), then the other, then the rope block. The consumers fence the async proxy after
each wait (the copies are generic-proxy writes read by `wgmma`).

Measured (H200, 2026-12-03): correct (`gpu_mla_op` 14/14 with every two-warpgroup history
rewritten) and slower (L1's history 339 -> 356 us): two stages beside the queries hold just
the pair being computed, so nothing is prefetched (docs/gpu_ir.md, "FlashMLA's schedule,
measured"). `fine` (H200, 2026-12-04, one call): correct (`gpu_mla_op` 15/15), and it wins
back the seesaw's loss but no more: L1's history 373 / 377 us as generated, 375 / 375 fine,
391 with whole-stage waits (docs/gpu_ir.md, "The seesaw with a fine ring"). `fine nocopy`
(the producer's copies removed, its waits and arrivals kept; garbage results) bounds what a
deeper ring would give it: L1's history 257 us against 292 for the split schedule without
copies and 318 as generated (docs/gpu_ir.md, "The history's budget"). `fine prefetch` (the
producer also asks L2 for the page two tiles ahead) changed nothing (323 against 319 us).
`fine tma` (FlashMLA's copies: a TMA box a 64-column block, each on its own mbarrier; the
history generated with its tiles as boxes, as the plan gives L1) wins (H200, 2026-12-04, one
call, `gpu_mla_op` 15/15): L1's history 297 / 296 us against 315 / 314 as generated and 310
for the split with TMA, its step 328 / 327 against 352 / 350; 32 x 8192's history 156 / 154
against 169 / 171; `tma_ef` (evict-first boxes) the same (docs/gpu_ir.md, "The seesaw with
FlashMLA's copies").
"""
import re
import sys

from mla_history import PREFETCH


def die(msg):
    sys.exit(f"mla_seesaw.py: {msg}")


def find(pattern, text, what):
    m = re.search(pattern, text)
    if not m:
        die(f"no {what}")
    return m


def wgmma_helpers(ty):
    """`ss_scores_mma` (m64n64k16, A and B from shared memory) and `ss_pv_mma` (m64n256k16,
    A from registers) for the element type `ty` (bf16 or f16)."""
    outs32 = ", ".join(f"%{i}" for i in range(32))
    ops32 = ", ".join(f'"+f"(d[{i}])' for i in range(32))
    outs128 = ", ".join(f"%{i}" for i in range(128))
    ops128 = ", ".join(f'"+f"(d[{i}])' for i in range(128))
    return (
        "#if defined(__CUDA_ARCH_FEAT_SM90_ALL)\n"
        "__device__ __forceinline__ void ss_scores_mma(float (&d)[32], unsigned long long a, "
        "unsigned long long b, int accumulate) {\n"
        '    asm volatile("{\\n.reg .pred p;\\nsetp.ne.b32 p, %34, 0;\\n'
        f"wgmma.mma_async.sync.aligned.m64n64k16.f32.{ty}.{ty} {{{outs32}}}, %32, %33, p, 1, 1, 0, 0;"
        f'\\n}}\\n" : {ops32} : "l"(a), "l"(b), "r"(accumulate));\n'
        "}\n"
        "__device__ __forceinline__ void ss_pv_mma(float (&d)[128], const unsigned (&a)[4], "
        "unsigned long long b) {\n"
        '    asm volatile("{\\n.reg .pred p;\\nsetp.ne.b32 p, %133, 0;\\n'
        f"wgmma.mma_async.sync.aligned.m64n256k16.f32.{ty}.{ty} {{{outs128}}}, "
        "{%128, %129, %130, %131}, %132, p, 1, 1, 1;"
        f'\\n}}\\n" : {ops128} : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));\n'
        "}\n"
        "#endif\n"
    )


# The seesaw loop. `@NAME@` are the generated kernel's names, read from its text.
LOOP = r"""
        // ---- seesaw (bench/experiments/mla_seesaw.py): a pair of tiles, one a warpgroup ----
        {
        const int ss_wg = attn_warp / 4, ss_tid = tid & 127;
        uint4* const ss_p = reinterpret_cast<uint4*>(attn_scratch);            // [4][128]: P's A fragments
        float* const ss_m = reinterpret_cast<float*>(attn_scratch + 8192);     // [64]: the running max a row
        const int ss_row = (attn_warp % 4) * 16 + attn_g;                      // this thread's rows: +0, +8
        const unsigned long long ss_qlat = attn_wgmma_desc(attn_smem_addr(@QLAT@), 16, 1024);
        const unsigned long long ss_qpe = attn_wgmma_desc(attn_smem_addr(@QPE@), 16, 1024);
        float ss_mprev[2] = {@M@[0], @M@[1]};
        for (int ss_j = @LO@; ss_j < @HI@; ss_j += 2) {
            const bool ss_has_b = ss_j + 1 < @HI@;
            const unsigned ss_parity = (unsigned)((ss_j - @LO@) >> 1) & 1u;
            const int ss_tile = ss_j + ss_wg;          // this warpgroup's tile, in stage ss_wg
            float ss_s[32];
            unsigned ss_own[4][4], ss_other[4][4];
            float ss_mown[2], ss_mother[2], ss_alpha_own[2], ss_alpha_other[2], ss_rowsum[2];
            if (ss_wg == 0 || ss_has_b) {
@SCORES@
            }
            if (ss_wg == 0) {
                // tile a: softmax from the maximum after the last pair, P(a) handed over, PV(a)
                attn_wgmma_wait<0>();
                ss_softmax(ss_mprev);
                attn_bar_arrive(5, 256);
                ss_rescale(@ACC@, @L@, ss_alpha_own);
                #pragma unroll
                for (int r = 0; r < 2; ++r) @L@[r] += ss_rowsum[r];
                ss_pv(@ACC@, ss_own, @KLAT@, 0, 0);
                ss_pv_done(@ACC@, 0);
                if (ss_has_b) {
                    // tile b: P(b) and the maximum after b from warpgroup 1
                    attn_bar_sync(6, 256);
                    ss_take_other(ss_mown);
                    ss_other_stage_landed(1);
                    ss_rescale(@ACC@, @L@, ss_alpha_other);
                    ss_pv(@ACC@, ss_other, @KLAT@, 1, 0);
                    ss_pv_done(@ACC@, 1);
                    ss_mprev[0] = ss_mother[0]; ss_mprev[1] = ss_mother[1];
                } else {
                    ss_mprev[0] = ss_mown[0]; ss_mprev[1] = ss_mown[1];
                }
            } else {
                // tile a: P(a) and the maximum after a from warpgroup 0 (taken while the
                // scores of b run); PV(a) under the softmax of b. (The accumulator's rescale
                // cannot sit between the scores' issue and their wait: ptxas then serializes
                // every wgmma of the kernel.)
                attn_bar_sync(5, 256);
                ss_take_other(ss_mprev);
                ss_other_stage_landed(0);
                attn_wgmma_wait<0>();
                ss_rescale(@ACC@, @L@, ss_alpha_other);
                ss_pv(@ACC@, ss_other, @KLAT@, 0, 1);
                if (ss_has_b) {
                    ss_softmax(ss_mother);
                    attn_bar_arrive(6, 256);
                    ss_pv_done(@ACC@, 0);
                    ss_rescale(@ACC@, @L@, ss_alpha_own);
                    #pragma unroll
                    for (int r = 0; r < 2; ++r) @L@[r] += ss_rowsum[r];
                    ss_pv(@ACC@, ss_own, @KLAT@, 1, 1);
                    ss_pv_done(@ACC@, 1);
                    ss_mprev[0] = ss_mown[0]; ss_mprev[1] = ss_mown[1];
                } else {
                    ss_pv_done(@ACC@, 0);
                    ss_mprev[0] = ss_mother[0]; ss_mprev[1] = ss_mother[1];
                }
            }
        }
        @M@[0] = ss_mprev[0]; @M@[1] = ss_mprev[1];
        }
"""

SCORES_WHOLE = r"""
                attn_mbar_wait(&attn_ws_bar[ss_wg], ss_parity);
                const unsigned long long kl = attn_wgmma_desc(attn_smem_addr(@KLAT@ + ss_wg * 32768), 16, 1024);
                const unsigned long long kp = attn_wgmma_desc(attn_smem_addr(@KPE@ + ss_wg * 4096), 16, 1024);
                attn_wgmma_fence();
                #pragma unroll
                for (int ks = 0; ks < 32; ++ks) {
                    const unsigned off = ((ks * 16) >> 6) * 8192 + ((ks * 16) & 63) * 2;
                    ss_scores_mma(ss_s, attn_wgmma_desc_add(ss_qlat, off), attn_wgmma_desc_add(kl, off), ks != 0);
                }
                #pragma unroll
                for (int ks = 0; ks < 4; ++ks) {
                    ss_scores_mma(ss_s, attn_wgmma_desc_add(ss_qpe, ks * 32), attn_wgmma_desc_add(kp, ks * 32), 1);
                }
                attn_wgmma_commit();
"""

# `fine`: a block's copies are waited for just before its k-steps; the own half first.
SCORES_FINE = r"""
                const unsigned long long kl = attn_wgmma_desc(attn_smem_addr(@KLAT@ + ss_wg * 32768), 16, 1024);
                const unsigned long long kp = attn_wgmma_desc(attn_smem_addr(@KPE@ + ss_wg * 4096), 16, 1024);
                #pragma unroll
                for (int bb = 0; bb < 8; ++bb) {
                    const int b = (bb + 4 * ss_wg) & 7;
                    ss_block_landed(ss_wg, b);
                    attn_wgmma_fence();
                    #pragma unroll
                    for (int kk = 0; kk < 4; ++kk) {
                        const unsigned off = b * 8192 + kk * 32;
                        ss_scores_mma(ss_s, attn_wgmma_desc_add(ss_qlat, off), attn_wgmma_desc_add(kl, off), bb + kk != 0);
                    }
                }
                ss_block_landed(ss_wg, 8);
                attn_wgmma_fence();
                #pragma unroll
                for (int ks = 0; ks < 4; ++ks) {
                    ss_scores_mma(ss_s, attn_wgmma_desc_add(ss_qpe, ks * 32), attn_wgmma_desc_add(kp, ks * 32), 1);
                }
                attn_wgmma_commit();
"""

# Per-thread helpers of the loop, defined inside the consumer section as lambdas would be
# unreadable; macros keep the loop short. `ss_pv` issues PV over stage `st`'s latent columns
# of warpgroup `wg`'s half (MN-major V: 4 column blocks of 8 KB a half), A from registers.
MACROS = r"""
// The softmax of this warpgroup's tile (its scores complete): masked and scaled scores, the
// maximum from `start` (the running max before the tile), P in place of the scores, its
// A fragments, the per-lane row sums; then P and the new maximum into the exchange slot.
#define ss_softmax(start) do { \
    _Pragma("unroll") for (int i = 0; i < 32; ++i) attn_reg_fence(ss_s[i]); \
    float x[32], rmax[2] = {-attn_inf(), -attn_inf()}; \
    _Pragma("unroll") for (int i = 0; i < 32; ++i) { \
        const int key = ss_tile * 64 + (i >> 2) * 8 + 2 * attn_t4 + (i & 1); \
        x[i] = key < @NHIST@ ? ss_s[i] * softmax_scale : -attn_inf(); \
        rmax[(i >> 1) & 1] = fmaxf(rmax[(i >> 1) & 1], x[i]); \
    } \
    float mnew[2]; \
    _Pragma("unroll") for (int r = 0; r < 2; ++r) { \
        rmax[r] = fmaxf(rmax[r], attn_shfl_xor(rmax[r], 1)); \
        rmax[r] = fmaxf(rmax[r], attn_shfl_xor(rmax[r], 2)); \
        ss_mown[r] = fmaxf((start)[r], rmax[r]); \
        mnew[r] = ss_mown[r] == -attn_inf() ? 0.0f : ss_mown[r]; \
        ss_alpha_own[r] = attn_fast_exp_sub((start)[r], mnew[r]); \
        ss_rowsum[r] = 0.0f; \
    } \
    _Pragma("unroll") for (int i = 0; i < 32; ++i) { \
        x[i] = attn_fast_exp_sub(x[i], mnew[(i >> 1) & 1]); \
        ss_rowsum[(i >> 1) & 1] += x[i]; \
    } \
    _Pragma("unroll") for (int ks = 0; ks < 4; ++ks) { \
        _Pragma("unroll") for (int q = 0; q < 4; ++q) ss_own[ks][q] = @PACK@(x[8 * ks + 2 * q], x[8 * ks + 2 * q + 1]); \
        ss_p[ks * 128 + ss_tid] = make_uint4(ss_own[ks][0], ss_own[ks][1], ss_own[ks][2], ss_own[ks][3]); \
    } \
    if (attn_t4 == 0) { ss_m[ss_row] = ss_mown[0]; ss_m[ss_row + 8] = ss_mown[1]; } \
} while (0)
// The other warpgroup's P and maximum from the exchange slot; its factor from `prev`.
#define ss_take_other(prev) do { \
    _Pragma("unroll") for (int v = 0; v < 4; ++v) { \
        const uint4 x = ss_p[v * 128 + ss_tid]; \
        ss_other[v][0] = x.x; ss_other[v][1] = x.y; ss_other[v][2] = x.z; ss_other[v][3] = x.w; \
    } \
    ss_mother[0] = ss_m[ss_row]; ss_mother[1] = ss_m[ss_row + 8]; \
    _Pragma("unroll") for (int r = 0; r < 2; ++r) \
        ss_alpha_other[r] = attn_fast_exp_sub((prev)[r], ss_mother[r] == -attn_inf() ? 0.0f : ss_mother[r]); \
} while (0)
#define ss_rescale(acc, l, alpha) do { \
    if (attn_warp_any((alpha)[0] != 1.0f || (alpha)[1] != 1.0f)) { \
        _Pragma("unroll") for (int s = 0; s < 128; ++s) (acc)[s] *= (alpha)[(s >> 1) & 1]; \
    } \
    (l)[0] *= (alpha)[0]; (l)[1] *= (alpha)[1]; \
} while (0)
#define ss_pv(acc, a, klat, st, wg) do { \
    const unsigned long long vd = attn_wgmma_desc(attn_smem_addr((klat) + (st) * 32768) + (wg) * 32768, 8192, 1024); \
    attn_wgmma_fence(); \
    _Pragma("unroll") for (int ks = 0; ks < 4; ++ks) ss_pv_mma(acc, (a)[ks], attn_wgmma_desc_add(vd, ks * 16 * 128)); \
    attn_wgmma_commit(); \
} while (0)
#define ss_pv_done(acc, st) do { \
    attn_wgmma_wait<0>(); \
    _Pragma("unroll") for (int s = 0; s < 128; ++s) attn_reg_fence((acc)[s]); \
    attn_warp_sync(); \
    if ((tid & 31) == 0) attn_mbar_arrive(ss_release_bar(st)); \
} while (0)
"""

# The whole-stage ring, as generated: one full and one empty mbarrier a stage.
MACROS_WHOLE = r"""
#define ss_release_bar(st) (&attn_ws_bar[2 + (st)])
#define ss_other_stage_landed(st) attn_mbar_wait(&attn_ws_bar[st], ss_parity)
"""

# `fine`: full[stage * 9 + block], then empty[stage * 2 + half] (a half is released by the
# warpgroup whose PV reads it), in the scratch after P's slot and the running max.
MACROS_FINE = r"""
#define ss_release_bar(st) (&ss_fine_bar[18 + (st) * 2 + ss_wg])
#define ss_block_landed(st, b) do { \
    attn_mbar_wait(&ss_fine_bar[(st) * 9 + (b)], ss_parity); \
    attn_fence_proxy_async(); \
} while (0)
#define ss_other_stage_landed(st) do { \
    _Pragma("unroll") for (int b = 0; b < 4; ++b) ss_block_landed(st, 4 * ss_wg + b); \
} while (0)
__device__ __forceinline__ void ss_cp_arrive(unsigned long long* bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(attn_smem_addr(bar)) : "memory");
}
"""

# `fine`: the producer's loop. Tile j goes to stage (j - lo) & 1; its owner's half (and the
# rope block) is copied once that warpgroup released it, the other half once the other did.
PRODUCER_FINE = r"""
        for (int fj = @PLO@; fj < @PHI@; ++fj) {
            const int fs = (fj - @PLO@) & 1, fk = (fj - @PLO@) >> 1;
            const int page = attn_ld(@BT@ + fj);
@PREFETCH@            #pragma unroll
            for (int fh = 0; fh < 2; ++fh) {
                const int half = fh == 0 ? fs : 1 - fs;
                if (fk > 0) attn_mbar_wait(&ss_fine_bar[18 + fs * 2 + half], (unsigned)(fk - 1) & 1u);
                #pragma unroll
                for (int bb = 0; bb < 5; ++bb) {
                    if (bb == 4 && fh != 0) break;
                    const int b = bb == 4 ? 8 : 4 * half + bb;
@CHUNKS@
                    ss_cp_arrive(&ss_fine_bar[fs * 9 + b]);
                }
            }
        }
        return;
"""


# Block `b` of tile `fj` into stage `fs` by the producer's 128 threads, a 16-byte row chunk
# each (the keys past the history zero-filled): the fine producer's copies, and the `tma`
# producer's for a partial tile. Indented to where it goes.
def chunk_copies(indent):
    lines = [
        "#pragma unroll",
        "for (int p = 0; p < 4; ++p) {",
        "    const int row = p * 16 + tid / 8, chunk = tid % 8;",
        "    const bool ok = fj * 64 + row < @PNHIST@;",
        "    const bf16* src = cache + (long long)(ok ? page : 0) * cache_stride_block"
        " + (long long)row * 576 + (b == 8 ? 512 : b * 64) + chunk * 8;",
        "    unsigned short* dst = (b == 8 ? @KPE@ + fs * 4096 : @KLAT@ + fs * 32768 + b * 4096)"
        " + row * 64 + ((chunk ^ (row & 7)) * 8);",
        "    @COPY@",
        "}",
    ]
    return "\n".join(" " * indent + l for l in lines)


# What the fine producer does with each 16-byte chunk: copy it, or (`nocopy`: the bound of
# any ring) nothing, the arrivals kept. `tma` and `tma_ef` copy by TMA boxes instead
# (PRODUCER_FINE_TMA); their partial tiles still take these copies.
COPY = {
    "copy": "attn_cp_async16(dst, src, ok);",
    "nocopy": "(void)dst; (void)src; (void)ok;",
    "prefetch": "attn_cp_async16(dst, src, ok);",
    "tma": "attn_cp_async16(dst, src, ok);",
    "tma_ef": "attn_cp_async16(dst, src, ok);",
}

# `tma`: FlashMLA's copies, one 64 x 64 box a block (8 KB), each completing on its own
# block's full mbarrier (count 1: the issuing thread's arrive.expect_tx), so the scores of a
# block start as soon as its box lands. The history must be generated with its tiles as TMA
# boxes (the plan does for long programs such as L1's, `TMA = true`; every history does
# under `ATTN_CODEGEN_ENABLE=tma`): the kernel then takes the cache's tensor map,
# `attn_tmap0`, and keeps 1 / 576 in `attn_tma_inv`. A tile with keys past the history (the last, when the
# history is ragged) is copied by every producer thread with `cp.async`, the keys past the
# end zero-filled (a box would bring the page's stale rows: 0 * NaN in PV), then the copies
# waited for, made visible to the async proxy, and arrived on once. `tma_ef` also marks the
# boxes evict-first in L2 (FlashMLA's cache hint).
PRODUCER_FINE_TMA = r"""
        unsigned long long fpol = 0ull;
        asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(fpol));
        for (int fj = @PLO@; fj < @PHI@; ++fj) {
            const int fs = (fj - @PLO@) & 1, fk = (fj - @PLO@) >> 1;
            const int page = attn_ld(@BT@ + fj);
            const bool tail = fj * 64 + 63 >= @PNHIST@;
            int fx = 0, fy = 0;
            if (!tail && tid == 0) attn_tma_coords((long long)page * cache_stride_block, 576ll, attn_tma_inv[0], fx, fy);
            #pragma unroll
            for (int fh = 0; fh < 2; ++fh) {
                const int half = fh == 0 ? fs : 1 - fs;
                if (fk > 0) attn_mbar_wait(&ss_fine_bar[18 + fs * 2 + half], (unsigned)(fk - 1) & 1u);
                if (!tail) {
                    if (tid == 0) {
                        #pragma unroll
                        for (int bb = 0; bb < 5; ++bb) {
                            if (bb == 4 && fh != 0) break;
                            const int b = bb == 4 ? 8 : 4 * half + bb;
                            unsigned short* dst = b == 8 ? @KPE@ + fs * 4096 : @KLAT@ + fs * 32768 + b * 4096;
                            attn_mbar_expect_tx(&ss_fine_bar[fs * 9 + b], 8192u);
                            ss_tma_box(dst, &attn_tmap0, fx + (b == 8 ? 512 : b * 64), fy, &ss_fine_bar[fs * 9 + b], fpol);
                        }
                    }
                } else {
                    #pragma unroll
                    for (int bb = 0; bb < 5; ++bb) {
                        if (bb == 4 && fh != 0) break;
                        const int b = bb == 4 ? 8 : 4 * half + bb;
@CHUNKS@
                    }
                    attn_cp_commit();
                    attn_cp_wait<0>();
                    attn_fence_proxy_async();
                    attn_bar_sync(7, 128);
                    if (tid == 0) {
                        #pragma unroll
                        for (int bb = 0; bb < 5; ++bb) {
                            if (bb == 4 && fh != 0) break;
                            attn_mbar_arrive(&ss_fine_bar[fs * 9 + (bb == 4 ? 8 : 4 * half + bb)]);
                        }
                    }
                }
            }
        }
        return;
"""

# The box copy of `tma` (no cache hint) and `tma_ef` (evict-first).
TMA_BOX = {
    "tma": r"""
__device__ __forceinline__ void ss_tma_box(void* dst, const attn_tensor_map* map, int x, int y,
                                           unsigned long long* bar, unsigned long long pol) {
    (void)pol;
    attn_tma_load_2d(dst, map, x, y, bar);
}
""",
    "tma_ef": r"""
__device__ __forceinline__ void ss_tma_box(void* dst, const attn_tensor_map* map, int x, int y,
                                           unsigned long long* bar, unsigned long long pol) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, %3}], [%4], %5;"
        ::"r"(attn_smem_addr(dst)), "l"(reinterpret_cast<unsigned long long>(map)), "r"(x), "r"(y),
        "r"(attn_smem_addr(bar)), "l"(pol)
        : "memory");
}
""",
}

# `prefetch`: the fine producer also asks L2 for the page two tiles ahead.
PREFETCH_FINE = (
    "            if (tid == 0 && fj + 2 < @PHI@) attn_l2_prefetch(cache + "
    "(long long)attn_ld(@BT@ + fj + 2) * cache_stride_block, (unsigned)(cache_stride_block * 2));\n"
)


def rewrite(text, fine=False, copies="copy"):
    start = "attn_setmaxnreg_inc<ATTN_WS_CONSUMER_REGS>();"
    a = text.find(start)
    if a < 0:
        die("no warp-specialized consumer section")
    head = find(r"for \(int (j_\w+) = (lo_\w+); \1 < (hi_\w+); \1 \+= \w+\) \{\n", text[a:], "consumer loop")
    end = text.find("        // (the loop's per-lane row sums", a + head.end())
    if end < 0:
        die("no end of the consumer loop")
    loop = text[a + head.start():end]
    before = text[a:a + head.start()]
    names = {
        "LO": head.group(2),
        "HI": head.group(3),
        "M": re.findall(r"float (m_i_\w+)\[2\];", before)[-1],
        "L": re.findall(r"float (l_i_\w+)\[2\];", before)[-1],
        "ACC": re.findall(r"float (acc_\w+)\[128\];", before)[-1],
        "NHIST": find(r"\) < (n_hist_\w+)\)(?: \?|,)", loop, "key mask").group(1),
        "QLAT": find(r"(attn_buf\d+) = [^;]*; // lat: 64x512 \(\+0\) x 1\n", text, "query latent buffer").group(1),
        "KLAT": find(r"(attn_buf\d+) = [^;]*; // lat: 64x512 \(\+0\) x 2\n", text, "key latent stages").group(1),
        "QPE": find(r"(attn_buf\d+) = [^;]*; // pe: 64x64 \(\+0\) x 1\n", text, "query rope buffer").group(1),
        "KPE": find(r"(attn_buf\d+) = [^;]*; // pe: 64x64 \(\+0\) x 2\n", text, "key rope stages").group(1),
    }
    if "(attn_warp / 4) * 32768" not in loop or "m64n32k16" not in loop:
        die("not the two-warpgroup history (64 heads, 64-key tiles)")
    ty = "f16" if ".f32.f16.f16" in loop else "bf16"
    names["PACK"] = "attn_pack_f16" if ty == "f16" else "attn_pack_bf16"
    body = LOOP.replace("@SCORES@", (SCORES_FINE if fine else SCORES_WHOLE).strip("\n"))
    for k, v in names.items():
        body = body.replace(f"@{k}@", v)
    if "@" in body:
        die("unbound name in the loop template")
    text = text[:a + head.start()] + body.lstrip("\n") + text[end:]
    kernel = find(r'extern "C" __global__ void __launch_bounds__\(384, 1\) mla_history', text, "history entry")
    macros = MACROS + (MACROS_FINE if fine else MACROS_WHOLE)
    for k, v in names.items():
        macros = macros.replace(f"@{k}@", v)
    helpers = wgmma_helpers(ty) + macros + (PREFETCH if copies == "prefetch" else "")
    if copies in TMA_BOX:
        if "attn_tmap0" not in text or "attn_tma_inv" not in text:
            die("tma needs a history whose tiles move as TMA boxes (the plan's L1, TMA = true; any under ATTN_CODEGEN_ENABLE=tma)")
        helpers += "#if defined(__CUDA_ARCH_FEAT_SM90_ALL)\n" + TMA_BOX[copies] + "#endif\n"
    text = text[:kernel.start()] + helpers + text[kernel.start():]
    return fine_ring(text, names, copies) if fine else text


def fine_ring(text, names, copies):
    """The producer's loop replaced by PRODUCER_FINE (copying as `copies` says), and the fine
    ring's 22 mbarriers declared and initialized beside the generated ones."""
    bars = "    unsigned long long* const attn_ws_bar = reinterpret_cast<unsigned long long*>(attn_smem + "
    a = text.find(bars)
    if a < 0:
        die("no warp-specialized mbarriers")
    decl = "    unsigned long long* const ss_fine_bar = reinterpret_cast<unsigned long long*>(attn_scratch + 8448);\n"
    text = text[:a] + decl + text[a:]
    init = "        attn_mbar_init_fence();\n"
    i = text.find(init, a)
    full_count = "1u" if copies in TMA_BOX else "128u"
    fine_init = (
        f"        for (int b = 0; b < 18; ++b) attn_mbar_init(&ss_fine_bar[b], {full_count});\n"
        "        for (int h = 0; h < 4; ++h) attn_mbar_init(&ss_fine_bar[18 + h], 4u);\n"
    )
    text = text[:i] + fine_init + text[i:]
    p0 = text.find("attn_setmaxnreg_dec<ATTN_WS_PRODUCER_REGS>();")
    p1 = text.find("        int attn_stage_ = 0;\n", p0)
    p2 = text.find("        return;\n    }\n", p1)
    if min(p0, p1, p2) < 0:
        die("no producer loop")
    prod = text[p0:p1]
    pn = {
        "PLO": find(r"int (lo_\w+) = attn_wmul", prod, "producer lo").group(1),
        "PHI": find(r"int (hi_\w+) = attn_min", prod, "producer hi").group(1),
        "PNHIST": find(r"int (n_hist_\w+) = attn_max", prod, "producer n_hist").group(1),
        "BT": find(r"const int\* (bt_row_\w+) = ", prod, "producer block-table row").group(1),
        "KLAT": names["KLAT"],
        "KPE": names["KPE"],
    }
    tma = copies in TMA_BOX
    loop = (PRODUCER_FINE_TMA if tma else PRODUCER_FINE).replace("@CHUNKS@", chunk_copies(24 if tma else 20))
    loop = loop.replace("@COPY@", COPY[copies]).replace(
        "@PREFETCH@", PREFETCH_FINE if copies == "prefetch" else ""
    )
    for k, v in pn.items():
        loop = loop.replace(f"@{k}@", v)
    return text[:p1] + loop.lstrip("\n") + text[p2 + len("        return;\n"):]


def main(src, dst, mode="", copies="copy"):
    if mode not in ("", "fine") or copies not in COPY or (copies != "copy" and mode != "fine"):
        die(f"unknown mode {mode!r} {copies!r} (nocopy and prefetch need fine)")
    text = open(src).read()
    if "mla_history" in text and "attn_setmaxnreg_inc" in text and "mla_history_reduce" not in text:
        try:
            text = rewrite(text, mode == "fine", copies)
        except SystemExit as e:
            print(f"{src}: left unchanged ({e})", file=sys.stderr)
    open(dst, "w").write(text)


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4, 5):
        die("usage: mla_seesaw.py IN.cu OUT.cu [fine [nocopy|prefetch|tma|tma_ef]]")
    main(*sys.argv[1:])
