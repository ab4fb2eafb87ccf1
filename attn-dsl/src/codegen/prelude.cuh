// attn-dsl prelude: device helpers used by generated kernels.
// Self-contained on purpose (no system includes, no cuda_fp16.h / cuda_bf16.h): NVRTC receives it as
// an in-memory header, so kernels compile the same everywhere without a CUDA toolkit install.
#pragma once

// ---------------------------------------------------------------------------------------------
// 16-bit float storage types. Their memory layout matches Rust's `half::bf16` / `half::f16`.
// In registers, bf16/f16 values live in `float`s that hold an exactly representable value
// (arithmetic is done in f32 and rounded back after every op, like the CPU executor).
// ---------------------------------------------------------------------------------------------
struct __align__(2) bf16 {
    unsigned short bits;
};
struct __align__(2) f16 {
    unsigned short bits;
};

__device__ __forceinline__ float attn_bf16_bits_to_f32(unsigned short b) {
    return __uint_as_float(((unsigned)b) << 16);
}
__device__ __forceinline__ unsigned short attn_f32_to_bf16_bits(float x) {
    unsigned short r;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(x));
    return r;
}
__device__ __forceinline__ float attn_f16_bits_to_f32(unsigned short b) {
    float r;
    asm("cvt.f32.f16 %0, %1;" : "=f"(r) : "h"(b));
    return r;
}
__device__ __forceinline__ unsigned short attn_f32_to_f16_bits(float x) {
    unsigned short r;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(x));
    return r;
}
/// Rounds an f32 to the nearest bf16 (ties to even) and returns it as f32.
__device__ __forceinline__ float attn_round_bf16(float x) {
    return attn_bf16_bits_to_f32(attn_f32_to_bf16_bits(x));
}
/// `fast_math` e^x: `ex2.approx.ftz` of x·log2(e), one multiply and one MUFU op. Flushing
/// results below 2^-126 to zero is what drops the denormal fix-up `__expf` carries (a compare
/// and two multiplies per call); a softmax weight that small is zero next to its row's 1.
__device__ __forceinline__ float attn_fast_exp(float x) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x * 1.4426950408889634f));
    return r;
}
/// `fast_math` e^(x - y) (a softmax weight: a score less its row max): x·log2(e) − y·log2(e)
/// is one FMA per element, since y·log2(e) is shared by the row (FlashAttention's exp2 form).
__device__ __forceinline__ float attn_fast_exp_sub(float x, float y) {
    const float l = 1.4426950408889634f;
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(__fmaf_rn(x, l, -(y * l))));
    return r;
}
/// `attn_fast_exp_sub` that is exactly 1 where x == y: the FMA form leaves x·log2(e)'s
/// rounding error in the exponent (|m·log2 e| ≥ 2 gives a factor other than 1 for most
/// maxima), so a running max that did not move would still rescale. The accumulator's skip
/// (`codegen::row_scale`) fires only on factors of exactly 1.
__device__ __forceinline__ float attn_fast_exp_sub_exact(float x, float y) {
    return x == y ? 1.0f : attn_fast_exp_sub(x, y);
}
/// `fast_math` e^(a·c − y): one FMA into the exponent. `c·log2(e)` is loop-invariant where `c`
/// is a per-program scale and `y·log2(e)` is one per row, so a scaled score costs no multiply
/// of its own (`SCALE_AFTER_MAX`).
__device__ __forceinline__ float attn_fast_exp_fma(float a, float c, float y) {
    const float l = 1.4426950408889634f;
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(__fmaf_rn(a, c * l, -(y * l))));
    return r;
}
/// A masked fill, `keep ? x : fill`, as one `selp` the C++ compiler cannot see through. As a
/// plain `?:` inside a branch (the mask of a partial tile) NVVM speculated the fill into
/// fresh registers before testing the condition, so the branch's result could not share
/// the scores' registers: every full tile then paid a register copy per element (64 moves
/// a tile in P0's loop) and the consumers spilled.
__device__ __forceinline__ float attn_fill_select(bool keep, float x, float fill) {
    float r;
    asm("{\n.reg .pred k;\nsetp.ne.b32 k, %3, 0;\nselp.f32 %0, %1, %2, k;\n}"
        : "=f"(r)
        : "f"(x), "f"(fill), "r"((int)keep));
    return r;
}
/// `fast_math` tanh: the hardware `tanh.approx.f32` (sm_75 on; relative error below
/// 2^-10.9), one MUFU op where `tanhf` runs an exponential and a division.
__device__ __forceinline__ float attn_fast_tanh(float x) {
    float r;
    asm("tanh.approx.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}
/// `fast_math` division by a divisor a whole tile shares: the IEEE reciprocal (one MUFU op
/// and its refinement, hoisted where the divisor is loop-invariant) times the dividend.
__device__ __forceinline__ float attn_mul_rcp(float a, float b) { return a * __frcp_rn(b); }
/// Rounds an f32 to the nearest f16 (ties to even) and returns it as f32.
__device__ __forceinline__ float attn_round_f16(float x) {
    return attn_f16_bits_to_f32(attn_f32_to_f16_bits(x));
}

// ---------------------------------------------------------------------------------------------
// Global memory. Pointers in registers are `const T*`; stores cast the constness away (only
// pointers derived from mutable kernel parameters are ever stored through).
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ float attn_ld(const bf16* p) { return attn_bf16_bits_to_f32(p->bits); }
__device__ __forceinline__ float attn_ld(const f16* p) { return attn_f16_bits_to_f32(p->bits); }
__device__ __forceinline__ float attn_ld(const float* p) { return *p; }
__device__ __forceinline__ int attn_ld(const int* p) { return *p; }
__device__ __forceinline__ long long attn_ld(const long long* p) { return *p; }
__device__ __forceinline__ bool attn_ld(const bool* p) { return *p; }

__device__ __forceinline__ void attn_st(const bf16* p, float v) {
    const_cast<bf16*>(p)->bits = attn_f32_to_bf16_bits(v);
}
__device__ __forceinline__ void attn_st(const f16* p, float v) {
    const_cast<f16*>(p)->bits = attn_f32_to_f16_bits(v);
}
__device__ __forceinline__ void attn_st(const float* p, float v) { *const_cast<float*>(p) = v; }
__device__ __forceinline__ void attn_st(const int* p, int v) { *const_cast<int*>(p) = v; }
__device__ __forceinline__ void attn_st(const long long* p, long long v) {
    *const_cast<long long*>(p) = v;
}
__device__ __forceinline__ void attn_st(const bool* p, bool v) { *const_cast<bool*>(p) = v; }
// Two adjacent elements in one access (the pair `p` points at is aligned to its size).
__device__ __forceinline__ void attn_st2(const float* p, float a, float b) {
    *reinterpret_cast<float2*>(const_cast<float*>(p)) = make_float2(a, b);
}
__device__ __forceinline__ void attn_st2(const bf16* p, float a, float b) {
    *reinterpret_cast<unsigned*>(const_cast<bf16*>(p)) =
        attn_f32_to_bf16_bits(a) | ((unsigned)attn_f32_to_bf16_bits(b) << 16);
}
__device__ __forceinline__ void attn_st2(const f16* p, float a, float b) {
    *reinterpret_cast<unsigned*>(const_cast<f16*>(p)) =
        attn_f32_to_f16_bits(a) | ((unsigned)attn_f32_to_f16_bits(b) << 16);
}

// A staged tile's 16 bytes (shared memory) to global memory in one access, and two packed
// 16-bit elements into shared memory (`codegen::staged_store`).
template <class T>
__device__ __forceinline__ void attn_st16(const T* dst, const unsigned short* src) {
    *reinterpret_cast<uint4*>(const_cast<T*>(dst)) = *reinterpret_cast<const uint4*>(src);
}
__device__ __forceinline__ void attn_sts2(unsigned short* p, unsigned v) {
    *reinterpret_cast<unsigned*>(p) = v;
}

// ---------------------------------------------------------------------------------------------
// Integer arithmetic wraps (two's complement), as in the CPU executor; done in unsigned
// arithmetic because signed overflow is undefined in C++. Shift amounts are taken modulo the
// bit width (like Rust's wrapping shifts); `>>` on signed values is arithmetic.
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ int attn_wadd(int a, int b) { return (int)((unsigned)a + (unsigned)b); }
__device__ __forceinline__ int attn_wsub(int a, int b) { return (int)((unsigned)a - (unsigned)b); }
__device__ __forceinline__ int attn_wmul(int a, int b) { return (int)((unsigned)a * (unsigned)b); }
__device__ __forceinline__ int attn_wneg(int a) { return (int)(0u - (unsigned)a); }
__device__ __forceinline__ int attn_wabs(int a) { return a < 0 ? attn_wneg(a) : a; }
__device__ __forceinline__ int attn_shl(int a, int b) { return (int)((unsigned)a << (b & 31)); }
__device__ __forceinline__ int attn_shr(int a, int b) { return a >> (b & 31); }
__device__ __forceinline__ long long attn_wadd(long long a, long long b) {
    return (long long)((unsigned long long)a + (unsigned long long)b);
}
__device__ __forceinline__ long long attn_wsub(long long a, long long b) {
    return (long long)((unsigned long long)a - (unsigned long long)b);
}
__device__ __forceinline__ long long attn_wmul(long long a, long long b) {
    return (long long)((unsigned long long)a * (unsigned long long)b);
}
// A page's row in bytes from the thread's row in the page (codegen's `page_row`): one
// `mad.wide.s32`, the stride in bytes promised to fit an `int`.
template <class T>
__device__ __forceinline__ T* attn_page_row(T* row, int page, int stride) {
    long long r;
    asm("mad.wide.s32 %0, %1, %2, %3;"
        : "=l"(r)
        : "r"(page), "r"(stride * (int)sizeof(T)), "l"(reinterpret_cast<long long>(row)));
    return reinterpret_cast<T*>(r);
}
// The 64-bit product of two `int`s (exact, so equal to the wrapped one): one `mul.wide.s32`.
// Written as a C++ product of two sign-extended `int`s, NVRTC 13.0 still multiplied all 64
// bits of a paged producer's page stride (codegen's `wide_mul`).
__device__ __forceinline__ long long attn_mul_wide(int a, int b) {
    long long r;
    asm("mul.wide.s32 %0, %1, %2;" : "=l"(r) : "r"(a), "r"(b));
    return r;
}
__device__ __forceinline__ long long attn_wneg(long long a) {
    return (long long)(0ull - (unsigned long long)a);
}
__device__ __forceinline__ long long attn_wabs(long long a) { return a < 0 ? attn_wneg(a) : a; }
__device__ __forceinline__ long long attn_shl(long long a, long long b) {
    return (long long)((unsigned long long)a << (b & 63));
}
__device__ __forceinline__ long long attn_shr(long long a, long long b) { return a >> (b & 63); }
__device__ __forceinline__ int attn_min(int a, int b) { return a < b ? a : b; }
__device__ __forceinline__ int attn_max(int a, int b) { return a > b ? a : b; }
__device__ __forceinline__ long long attn_min(long long a, long long b) { return a < b ? a : b; }
__device__ __forceinline__ long long attn_max(long long a, long long b) { return a > b ? a : b; }

// ---------------------------------------------------------------------------------------------
// Float constants that have no literal spelling.
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ float attn_inf() { return __uint_as_float(0x7f800000u); }
__device__ __forceinline__ float attn_nan() { return __uint_as_float(0x7fc00000u); }

// ---------------------------------------------------------------------------------------------
// Tensor cores: D = A·B + C with A 16x16 (row), B 16x8 (col), f32 accumulators, per warp.
// Fragment ownership (g = lane / 4, t = lane % 4), two 16-bit values per 32-bit register,
// lower address in the low half:
//   a0: A[g][2t..2t+1]   a1: A[g+8][2t..2t+1]   a2: A[g][2t+8..]   a3: A[g+8][2t+8..]
//   b0: B[2t..2t+1][g]   b1: B[2t+8..2t+9][g]
//   c0,c1: C[g][2t], C[g][2t+1]    c2,c3: C[g+8][2t], C[g+8][2t+1]
// ---------------------------------------------------------------------------------------------
// The accumulators are `c[0..4]`: a `float[4]` fragment, or 4 consecutive slots of a flat
// register array (the `Mma` distribution stores fragment (slab, column tile) at `c + 4 * index`).
__device__ __forceinline__ void attn_mma_bf16_16816(float* c, unsigned a0, unsigned a1, unsigned a2,
                                                    unsigned a3, unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void attn_mma_f16_16816(float* c, unsigned a0, unsigned a1, unsigned a2,
                                                   unsigned a3, unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// ---------------------------------------------------------------------------------------------
// Warp shuffles (all 32 lanes take part: control flow is uniform). Row reductions of mma
// fragments combine the 4 lanes of a quad with xor 1 and xor 2.
// ---------------------------------------------------------------------------------------------
/// Whether `p` holds in any lane of the warp (every lane must call it).
__device__ __forceinline__ bool attn_warp_any(bool p) { return __any_sync(0xffffffffu, p); }
__device__ __forceinline__ float attn_shfl_xor(float v, int m) {
    return __shfl_xor_sync(0xffffffffu, v, m);
}
__device__ __forceinline__ int attn_shfl_xor(int v, int m) {
    return __shfl_xor_sync(0xffffffffu, v, m);
}
__device__ __forceinline__ long long attn_shfl_xor(long long v, int m) {
    return __shfl_xor_sync(0xffffffffu, v, m);
}
__device__ __forceinline__ bool attn_shfl_xor(bool v, int m) {
    return __shfl_xor_sync(0xffffffffu, (int)v, m) != 0;
}

// Lane 0's `v` in every lane: a value the compiler then knows is the same across the warp, so
// it can live in a uniform register instead of being recomputed from the thread index where
// vector registers are short (the warpgroup index of the turns' named barriers).
__device__ __forceinline__ int attn_warp_uniform(int v) { return __shfl_sync(0xffffffffu, v, 0); }

// Named barrier `id` over `n` threads: wait for the others (sync) or only count in (arrive).
// Any target: the warpgroup turns (sm_90a) and the owned regions (every target) use them.
__device__ __forceinline__ void attn_bar_sync(int id, int n) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void attn_bar_arrive(int id, int n) {
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(n) : "memory");
}

// ---------------------------------------------------------------------------------------------
// Two 16-bit floats (held in f32 registers, already rounded) packed into one 32-bit mma
// operand register, `lo` in the low half: accumulator fragments become A fragments this way.
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ unsigned attn_pack_bf16(float lo, float hi) {
    return (unsigned)attn_f32_to_bf16_bits(lo) | ((unsigned)attn_f32_to_bf16_bits(hi) << 16);
}
__device__ __forceinline__ unsigned attn_pack_f16(float lo, float hi) {
    return (unsigned)attn_f32_to_f16_bits(lo) | ((unsigned)attn_f32_to_f16_bits(hi) << 16);
}

// ---------------------------------------------------------------------------------------------
// Asynchronous global -> shared copies and fragment loads (sm_80+). A copy moves one 16-byte
// chunk; `ok == false` reads nothing and zero-fills the chunk (src-size 0). Copies complete in
// commit groups: `attn_cp_wait<N>` returns once at most N of this thread's groups are in flight;
// other threads' copies are visible after a following barrier.
// ---------------------------------------------------------------------------------------------
// The compiler's own conversion, not inline asm: it sees through it, so a row base plus the
// unrolled loops' constant offsets stays one 32-bit register plus an immediate per access.
__device__ __forceinline__ unsigned attn_smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
template <class T>
__device__ __forceinline__ void attn_cp_async16(unsigned short* dst, const T* src, bool ok) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                 :
                 : "r"(attn_smem_addr(dst)), "l"(src), "r"(ok ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void attn_cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void attn_cp_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
// ldmatrix: lanes 8j..8j+7 give the row addresses of 8x8 matrix j; register j receives the
// lane's two elements of matrix j (row lane/4, columns 2(lane%4)..; `.trans`: transposed).
__device__ __forceinline__ void attn_ldsm_x4(unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3,
                                             const unsigned short* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(attn_smem_addr(p))
                 : "memory");
}
__device__ __forceinline__ void attn_ldsm_x4_trans(unsigned& r0, unsigned& r1, unsigned& r2,
                                                   unsigned& r3, const unsigned short* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(attn_smem_addr(p))
                 : "memory");
}
__device__ __forceinline__ void attn_ldsm_x2(unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3,
                                             const unsigned short* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];"
                 : "=r"(r0), "=r"(r1)
                 : "r"(attn_smem_addr(p))
                 : "memory");
    r2 = r3 = 0u;
}
__device__ __forceinline__ void attn_ldsm_x2_trans(unsigned& r0, unsigned& r1, unsigned& r2,
                                                   unsigned& r3, const unsigned short* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];"
                 : "=r"(r0), "=r"(r1)
                 : "r"(attn_smem_addr(p))
                 : "memory");
    r2 = r3 = 0u;
}

// ---------------------------------------------------------------------------------------------
// Hopper warpgroup MMA (sm_90a only: the emitter guards every use with
// `__CUDA_ARCH_FEAT_SM90_ALL`, and the mma.sync path is the other branch of the same source).
// B operands are read from shared memory through a 64-bit matrix descriptor:
//   bits 0-13 start address >> 4, 16-29 leading byte offset >> 4, 32-45 stride byte offset
//   >> 4, 62-63 swizzle (1 = 128 B).
// The allocs are 128-byte-swizzled column blocks (see `LocalAlloc`): each block of 8 rows is
// a 1024-byte atom, so SBO = 1024 in both majors; K-major (B rows = N, e.g. K of QK^T) steps
// K inside a line, MN-major (B rows = K, e.g. V of PV) has LBO = the column block's bytes.
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ unsigned long long attn_wgmma_desc(unsigned addr, unsigned lbo,
                                                              unsigned sbo) {
    return (unsigned long long)((addr & 0x3FFFFu) >> 4) |
           ((unsigned long long)((lbo >> 4) & 0x3FFFu) << 16) |
           ((unsigned long long)((sbo >> 4) & 0x3FFFu) << 32) | (1ull << 62);
}
/// The descriptor `d` with its start address advanced by `bytes` (a multiple of 16): a 32-bit
/// add to the low word, since a shared address (< 256 KB) never carries out of the 14-bit
/// field. The k-steps of a dot advance one descriptor built once, instead of each building
/// its own from an address (masks, shifts, both words: ~8 uniform instructions a step).
/// The words are split and joined with `mov.b64` so the compiler keeps them 32-bit (as a
/// 64-bit add it propagates a carry into the high word).
__device__ __forceinline__ unsigned long long attn_wgmma_desc_add(unsigned long long d,
                                                                  unsigned bytes) {
    unsigned lo, hi;
    asm("mov.b64 {%0, %1}, %2;" : "=r"(lo), "=r"(hi) : "l"(d));
    unsigned long long r;
    asm("mov.b64 %0, {%1, %2};" : "=l"(r) : "r"(lo + (bytes >> 4)), "r"(hi));
    return r;
}
/// Makes this thread's completed generic-proxy shared writes (cp.async) visible to the async
/// proxy that `wgmma` reads through; a barrier after it covers the other threads' writes.
__device__ __forceinline__ void attn_fence_proxy_async() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void attn_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void attn_wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int N>
__device__ __forceinline__ void attn_wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
/// Orders a register after the wait: the compiler must not read an accumulator before it.
__device__ __forceinline__ void attn_reg_fence(float& r) { asm volatile("" : "+f"(r)::"memory"); }
#endif

// ---------------------------------------------------------------------------------------------
// TMA (sm_90a): a tile copied as 2D boxes through a tensor map the launcher encodes
// (`CUtensorMap`, passed as a `__grid_constant__` parameter), completing on an mbarrier whose
// transaction count the issuing thread raises by the boxes' bytes.
// ---------------------------------------------------------------------------------------------
struct __align__(64) attn_tensor_map {
    unsigned long long words[16];
};
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void attn_mbar_init(unsigned long long* bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(attn_smem_addr(bar)), "r"(count)
                 : "memory");
}
/// Makes initialized mbarriers visible to the async proxy (the TMA unit completes on them).
__device__ __forceinline__ void attn_mbar_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
/// The issuing thread's arrival, announcing `bytes` of TMA transactions on `bar`.
__device__ __forceinline__ void attn_mbar_expect_tx(unsigned long long* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(attn_smem_addr(bar)),
                 "r"(bytes)
                 : "memory");
}
/// Waits until the phase of `bar` with this parity completed (its boxes landed and are
/// visible to this thread and to the tensor cores).
__device__ __forceinline__ void attn_mbar_wait(unsigned long long* bar, unsigned parity) {
    unsigned done = 0u;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(attn_smem_addr(bar)), "r"(parity)
                     : "memory");
    } while (!done);
}
/// A plain arrival on `bar` (release: this thread's earlier writes, and what it observed,
/// are visible to the threads its phase completion releases).
__device__ __forceinline__ void attn_mbar_arrive(unsigned long long* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(attn_smem_addr(bar)) : "memory");
}
/// This thread's `cp.async` copies issued so far arrive on `bar` once they landed (the
/// phase's pending count was set at init: no increment here).
__device__ __forceinline__ void attn_cp_mbar_arrive(unsigned long long* bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(attn_smem_addr(bar))
                 : "memory");
}
/// The lanes of a warp meet (before one of them arrives on an mbarrier for the warp).
__device__ __forceinline__ void attn_warp_sync() { __syncwarp(); }
/// A warpgroup's registers per thread, lowered (the producer) or raised (the consumers)
/// from the launch's budget: the block's pool moves between warpgroups.
template <int N>
__device__ __forceinline__ void attn_setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void attn_setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}
/// One box at element coordinates (x, y) of `map` into `dst` (1024-byte aligned for the
/// 128-byte swizzle), completing on `bar`.
__device__ __forceinline__ void attn_tma_load_2d(void* dst, const attn_tensor_map* map, int x,
                                                 int y, unsigned long long* bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
        ::"r"(attn_smem_addr(dst)), "l"(reinterpret_cast<unsigned long long>(map)), "r"(x), "r"(y),
        "r"(attn_smem_addr(bar))
        : "memory");
}
/// The box coordinates of element offset `off` in a view of rows of `s` elements:
/// (off % s, off / s), dividing by the reciprocal `inv = floor((2^64 - 1) / s)` computed
/// once per program. A negative `off` (the garbage base of a run the copy's mask drops
/// whole) gives some coordinate: the map's bounds make any box safe, and the run is zeroed.
__device__ __forceinline__ void attn_tma_coords(long long off, long long s, unsigned long long inv,
                                                int& x, int& y) {
    const unsigned long long u = (unsigned long long)off, us = (unsigned long long)s;
    unsigned long long q = __umul64hi(u, inv);
    unsigned long long r = u - q * us;
    while (r >= us) {
        q += 1;
        r -= us;
    }
    x = (int)r;
    y = (int)q;
}
/// Zeroes 16 bytes of shared memory (a masked chunk of a TMA-copied tile).
__device__ __forceinline__ void attn_st_zero16(void* p) {
    asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};" ::"r"(attn_smem_addr(p)), "r"(0u)
                 : "memory");
}
#endif

/// Whether a warp-specialized kernel runs its producer/consumer split (sm_90a: mbarriers,
/// `setmaxnreg`) or its unsplit program on the consumers' threads.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define ATTN_WARP_SPECIALIZED 1
#else
#define ATTN_WARP_SPECIALIZED 0
#endif

/// Dynamic shared memory: one scratch buffer reused by every op that moves data between threads.
extern __shared__ __align__(1024) unsigned char attn_smem[];
