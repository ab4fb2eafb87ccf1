// Host stand-in for attn_prelude.cuh: lets g++ run an emitted kernel on the CPU, one
// std::thread per CUDA thread, so the emitter's data movement (shared memory, barriers,
// warp exchanges, mma fragments) is checked against the CPU executor without a GPU.
// Numerics follow the device helpers: round-to-nearest-even conversions, no FMA contraction
// (compile with -ffp-contract=off), mma as an f32 FMA chain over k ascending.
#pragma once
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

struct attn_dim3 {
    unsigned x, y, z;
};
extern thread_local attn_dim3 threadIdx;
extern thread_local attn_dim3 blockIdx;
extern attn_dim3 gridDim;
extern attn_dim3 blockDim;
extern std::barrier<>* attn_block_barrier;
extern std::barrier<>* attn_warp_barriers[32];

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__
#define __builtin_assume(x) ((void)0)
#define __align__(n) alignas(n)
#define __grid_constant__

inline void __syncthreads() { attn_block_barrier->arrive_and_wait(); }

// The proxies of shared memory (sim_wgmma.h checks them): a generic-proxy write (a landed
// `cp.async`, a store through a helper) stamps its 4-byte words with its writer and a logical
// time; `fence.proxy.async` stamps its thread; the tensor cores (the async proxy) may read a
// word only once its writer or the reader fenced after the write. Plain C++ stores of the
// emitted code are not seen (no stamp: nothing to check), so the check misses, never invents.
extern unsigned char attn_smem[];
constexpr unsigned ATTN_SIM_SMEM_BYTES = 232448;
inline std::atomic<unsigned long long> attn_sim_clock{0};
inline std::atomic<unsigned long long> attn_sim_word_stamp[ATTN_SIM_SMEM_BYTES / 4];
inline std::atomic<unsigned long long> attn_sim_fence_time[1024];
// Writer + 1 in the low 12 bits, the time above.
inline void attn_sim_stamp(const void* p, unsigned bytes, bool generic) {
    const auto* c = (const unsigned char*)p;
    if (c < attn_smem || c >= attn_smem + ATTN_SIM_SMEM_BYTES) return;
    const unsigned first = (unsigned)(c - attn_smem) / 4, last = ((unsigned)(c - attn_smem) + bytes - 1) / 4;
    const unsigned long long v = generic ? (++attn_sim_clock << 12) | (threadIdx.x + 1) : 0;
    for (unsigned w = first; w <= last; ++w) attn_sim_word_stamp[w].store(v);
}
// Whether the word at shared byte `addr` may be read by the async proxy from this thread.
inline bool attn_sim_async_visible(unsigned addr) {
    const unsigned long long v = attn_sim_word_stamp[addr / 4].load();
    if (v == 0) return true;
    const unsigned long long t = v >> 12, writer = (v & 0xfff) - 1;
    return attn_sim_fence_time[writer].load() > t || attn_sim_fence_time[threadIdx.x].load() > t;
}
inline void attn_warp_sync() { attn_warp_barriers[threadIdx.x / 32]->arrive_and_wait(); }

// Warp-specialized kernels run their producer/consumer split here (the consumers' MMAs on
// the mma.sync branch): mbarriers as (expected, pending, phase) under one lock, named
// barriers as std::barriers made on first use, setmaxnreg a no-op.
#define ATTN_WARP_SPECIALIZED 1
inline std::mutex attn_sim_sync_lock;
// An mbarrier's phase completes when its pending arrivals and its transaction bytes (TMA
// copies announced with `expect_tx`, counted down as they land) both reach zero.
struct attn_sim_mbar {
    unsigned short expected, pending, phase;
    short tx;  // bytes / 16 still to land
};
static_assert(sizeof(attn_sim_mbar) == 8, "an mbarrier is 8 bytes of shared memory");
inline void attn_mbar_init(unsigned long long* bar, unsigned count) {
    std::lock_guard<std::mutex> g(attn_sim_sync_lock);
    *reinterpret_cast<attn_sim_mbar*>(bar) = {(unsigned short)count, (unsigned short)count, 0, 0};
}
inline void attn_mbar_init_fence() {}
// Under the lock: one arrival (`arrivals`) and `bytes` of transactions (+ announced, - landed).
inline void attn_sim_mbar_update(unsigned long long* bar, int arrivals, int bytes) {
    auto* b = reinterpret_cast<attn_sim_mbar*>(bar);
    b->pending -= arrivals;
    b->tx += bytes / 16;
    if (b->pending == 0 && b->tx == 0) {
        b->pending = b->expected;
        b->phase += 1;
    }
}
inline void attn_mbar_arrive(unsigned long long* bar) {
    std::lock_guard<std::mutex> g(attn_sim_sync_lock);
    attn_sim_mbar_update(bar, 1, 0);
}
// Returns once the phase of this parity completed: the phase in progress has the other one.
// What lands before a wait checks its barrier: `sim_tma.h` puts its late boxes here.
inline void (*attn_sim_before_wait)(unsigned long long* bar) = nullptr;
// What lands once a wait observed its phase: the copies `attn_cp_mbar_arrive` announced
// (defined with them, below).
inline void attn_sim_land_observed(unsigned long long* bar);
inline void attn_mbar_wait(unsigned long long* bar, unsigned parity) {
    for (;;) {
        if (attn_sim_before_wait) attn_sim_before_wait(bar);
        {
            std::lock_guard<std::mutex> g(attn_sim_sync_lock);
            if ((reinterpret_cast<attn_sim_mbar*>(bar)->phase & 1u) != parity) {
                attn_sim_land_observed(bar);
                return;
            }
        }
        std::this_thread::yield();
    }
}
template <int N>
inline void attn_setmaxnreg_dec() {}
template <int N>
inline void attn_setmaxnreg_inc() {}
// Named barrier `id` of `n` threads, made on first use.
inline std::barrier<>* attn_sim_named_barrier(int id, int n) {
    static std::map<int, std::unique_ptr<std::barrier<>>> bars;
    std::lock_guard<std::mutex> g(attn_sim_sync_lock);
    auto& slot = bars[id];
    if (!slot) slot.reset(new std::barrier<>(n));
    return slot.get();
}
inline void attn_bar_sync(int id, int n) { attn_sim_named_barrier(id, n)->arrive_and_wait(); }
// Counts in without waiting (a warpgroup passing its turn to another).
inline void attn_bar_arrive(int id, int n) { (void)attn_sim_named_barrier(id, n)->arrive(); }

// A tensor map as the simulator's driver fills it (`sim_tma.h` reads it): the buffer, its
// row stride and rows in elements, the box, the element's bytes.
struct alignas(64) attn_tensor_map {
    unsigned long long words[16];
};
inline attn_tensor_map attn_sim_map(const void* base, unsigned long long bytes, long long stride,
                                    unsigned box_rows, unsigned box_cols, unsigned elem) {
    attn_tensor_map m{};
    const unsigned long long len = bytes / elem;
    m.words[0] = (unsigned long long)(uintptr_t)base;
    m.words[1] = (unsigned long long)stride;
    m.words[2] = stride > 0 ? (len + stride - 1) / stride : 0;
    m.words[3] = box_rows, m.words[4] = box_cols, m.words[5] = elem, m.words[6] = len;
    return m;
}

struct alignas(2) bf16 {
    unsigned short bits;
};
struct alignas(2) f16 {
    unsigned short bits;
};

inline float __uint_as_float(unsigned u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline unsigned attn_float_bits(float f) {
    unsigned u;
    std::memcpy(&u, &f, 4);
    return u;
}
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline int __float2int_rz(float x) {
    if (std::isnan(x)) return 0;
    if (x >= 2147483647.0f) return 2147483647;
    if (x <= -2147483648.0f) return (-2147483647 - 1);
    return (int)x;
}
inline long long __float2ll_rz(float x) {
    if (std::isnan(x)) return 0;
    if (x >= 9.2233720368547758e18f) return 9223372036854775807LL;
    if (x <= -9.2233720368547758e18f) return (-9223372036854775807LL - 1LL);
    return (long long)x;
}
inline int __ffs(int x) { return __builtin_ffs(x); }
inline float __int2float_rn(int x) { return (float)x; }
inline float __ll2float_rn(long long x) { return (float)x; }

inline float attn_bf16_bits_to_f32(unsigned short b) { return __uint_as_float(((unsigned)b) << 16); }
inline unsigned short attn_f32_to_bf16_bits(float x) {
    unsigned u = attn_float_bits(x);
    if (std::isnan(x)) return (unsigned short)((u >> 16) | 0x40);
    unsigned lsb = (u >> 16) & 1;
    return (unsigned short)((u + 0x7fff + lsb) >> 16);
}
inline float attn_f16_bits_to_f32(unsigned short b) {
    _Float16 h;
    std::memcpy(&h, &b, 2);
    return (float)h;
}
inline unsigned short attn_f32_to_f16_bits(float x) {
    _Float16 h = (_Float16)x;
    unsigned short b;
    std::memcpy(&b, &h, 2);
    return b;
}
// `ex2.approx.ftz` of x·log2(e): results below 2^-126 flush to zero.
inline float attn_fast_exp(float x) {
    const float r = std::exp2(x * 1.4426950408889634f);
    return std::fabs(r) < 1.17549435e-38f ? 0.0f : r;
}
inline float attn_fast_exp_sub(float x, float y) {
    const float l = 1.4426950408889634f;
    const float r = std::exp2(std::fma(x, l, -(y * l)));
    return std::fabs(r) < 1.17549435e-38f ? 0.0f : r;
}
inline float attn_fast_exp_sub_exact(float x, float y) {
    return x == y ? 1.0f : attn_fast_exp_sub(x, y);
}
inline float attn_fast_exp_fma(float a, float c, float y) {
    const float l = 1.4426950408889634f;
    const float r = std::exp2(std::fma(a, c * l, -(y * l)));
    return std::fabs(r) < 1.17549435e-38f ? 0.0f : r;
}
// `selp.f32` of a masked fill.
inline float attn_fill_select(bool keep, float x, float fill) { return keep ? x : fill; }
// `tanh.approx.f32`: the simulator computes it exactly (the hardware's error is below 2^-10.9).
inline float attn_fast_tanh(float x) { return std::tanh(x); }
// `attn_mul_rcp`: the reciprocal rounded to f32, then the product, as the device computes it.
inline float attn_mul_rcp(float a, float b) { return a * (1.0f / b); }
inline float attn_round_bf16(float x) { return attn_bf16_bits_to_f32(attn_f32_to_bf16_bits(x)); }
inline float attn_round_f16(float x) { return attn_f16_bits_to_f32(attn_f32_to_f16_bits(x)); }

inline float attn_ld(const bf16* p) { return attn_bf16_bits_to_f32(p->bits); }
inline float attn_ld(const f16* p) { return attn_f16_bits_to_f32(p->bits); }
inline float attn_ld(const float* p) { return *p; }
inline int attn_ld(const int* p) { return *p; }
inline long long attn_ld(const long long* p) { return *p; }
inline bool attn_ld(const bool* p) { return *p; }
// The DSL's `store` (global memory). A scalar is every thread's, so every thread stores it,
// the same value to the same address: benign on the GPU, a data race to ThreadSanitizer
// (`ATTN_SIM_RACECHECK`). Relaxed atomic stores (a plain store on x86) keep its reports on
// what barriers order: shared memory.
template <class T>
inline void attn_sim_store(const T* p, T v) { __atomic_store(const_cast<T*>(p), &v, __ATOMIC_RELAXED); }
inline void attn_st(const bf16* p, float v) {
    attn_sim_store(&p->bits, (decltype(p->bits))attn_f32_to_bf16_bits(v));
}
inline void attn_st(const f16* p, float v) {
    attn_sim_store(&p->bits, (decltype(p->bits))attn_f32_to_f16_bits(v));
}
inline void attn_st(const float* p, float v) { attn_sim_store(p, v); }
inline void attn_st(const int* p, int v) { attn_sim_store(p, v); }
inline void attn_st(const long long* p, long long v) { attn_sim_store(p, v); }
inline void attn_st2(const float* p, float a, float b) { attn_st(p, a); attn_st(p + 1, b); }
inline void attn_st2(const bf16* p, float a, float b) { attn_st(p, a); attn_st(p + 1, b); }
inline void attn_st2(const f16* p, float a, float b) { attn_st(p, a); attn_st(p + 1, b); }
inline void attn_st(const bool* p, bool v) { attn_sim_store(p, v); }
template <class T>
inline void attn_st16(const T* dst, const unsigned short* src) {
    std::memcpy(const_cast<T*>(dst), src, 16);
    attn_sim_stamp(dst, 16, true);
}
inline void attn_sts2(unsigned short* p, unsigned v) {
    std::memcpy(p, &v, 4);
    attn_sim_stamp(p, 4, true);
}

inline int attn_wadd(int a, int b) { return (int)((unsigned)a + (unsigned)b); }
inline int attn_wsub(int a, int b) { return (int)((unsigned)a - (unsigned)b); }
inline int attn_wmul(int a, int b) { return (int)((unsigned)a * (unsigned)b); }
inline int attn_wneg(int a) { return (int)(0u - (unsigned)a); }
inline int attn_wabs(int a) { return a < 0 ? attn_wneg(a) : a; }
inline int attn_shl(int a, int b) { return (int)((unsigned)a << (b & 31)); }
inline int attn_shr(int a, int b) { return a >> (b & 31); }
inline long long attn_wadd(long long a, long long b) {
    return (long long)((unsigned long long)a + (unsigned long long)b);
}
inline long long attn_wsub(long long a, long long b) {
    return (long long)((unsigned long long)a - (unsigned long long)b);
}
inline long long attn_wmul(long long a, long long b) {
    return (long long)((unsigned long long)a * (unsigned long long)b);
}
inline long long attn_mul_wide(int a, int b) { return (long long)a * (long long)b; }
template <class T>
inline T* attn_page_row(T* row, int page, int stride) {
    return (T*)((const char*)row + (long long)page * stride * (long long)sizeof(T));
}
inline long long attn_wneg(long long a) { return (long long)(0ull - (unsigned long long)a); }
inline long long attn_wabs(long long a) { return a < 0 ? attn_wneg(a) : a; }
inline long long attn_shl(long long a, long long b) {
    return (long long)((unsigned long long)a << (b & 63));
}
inline long long attn_shr(long long a, long long b) { return a >> (b & 63); }
inline int attn_min(int a, int b) { return a < b ? a : b; }
inline int attn_max(int a, int b) { return a > b ? a : b; }
inline long long attn_min(long long a, long long b) { return a < b ? a : b; }
inline long long attn_max(long long a, long long b) { return a > b ? a : b; }
inline float attn_inf() { return __uint_as_float(0x7f800000u); }
inline float attn_nan() { return __uint_as_float(0x7fc00000u); }

// Warp exchange: every lane publishes, all wait, every lane reads, all wait again.
struct attn_lane_regs {
    unsigned a[4], b[2];
    float f;
    unsigned long long bits;
};
extern attn_lane_regs attn_warp_regs[32][32];

// Lane `src_lane`'s `v`, in every lane (the shuffles and the broadcast below).
template <class T>
inline T attn_lane_read(T v, int src_lane) {
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    std::memcpy(&attn_warp_regs[w][lane].bits, &v, sizeof(T));
    attn_warp_sync();
    T r;
    std::memcpy(&r, &attn_warp_regs[w][src_lane].bits, sizeof(T));
    attn_warp_sync();
    return r;
}

template <class T>
inline T attn_shfl_xor(T v, int mask) {
    return attn_lane_read(v, threadIdx.x % 32 ^ mask);
}

inline int attn_warp_uniform(int v) { return attn_lane_read(v, 0); }

inline bool attn_warp_any(bool p) {
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    attn_warp_regs[w][lane].bits = p ? 1 : 0;
    attn_warp_sync();
    bool r = false;
    for (int i = 0; i < 32; ++i) r = r || attn_warp_regs[w][i].bits != 0;
    attn_warp_sync();
    return r;
}

template <bool BF16>
inline void attn_mma_emulated(float (&c)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                              unsigned b0, unsigned b1) {
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    attn_lane_regs& me = attn_warp_regs[w][lane];
    me.a[0] = a0, me.a[1] = a1, me.a[2] = a2, me.a[3] = a3, me.b[0] = b0, me.b[1] = b1;
    attn_warp_sync();
    auto half_at = [](unsigned word, int hi) -> float {
        unsigned short h = (unsigned short)(hi ? word >> 16 : word & 0xffff);
        return BF16 ? attn_bf16_bits_to_f32(h) : attn_f16_bits_to_f32(h);
    };
    auto A = [&](int r, int k) {
        const attn_lane_regs& o = attn_warp_regs[w][(r % 8) * 4 + (k % 8) / 2];
        return half_at(o.a[(r >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0)], k % 2);
    };
    auto B = [&](int k, int n) {
        const attn_lane_regs& o = attn_warp_regs[w][n * 4 + (k % 8) / 2];
        return half_at(o.b[k >= 8 ? 1 : 0], k % 2);
    };
    const int g = lane / 4, t = lane % 4;
    float out[4];
    for (int q = 0; q < 4; ++q) {
        const int r = g + (q >> 1) * 8, n = 2 * t + (q & 1);
        float acc = c[q];
        for (int k = 0; k < 16; ++k) acc = std::fma(A(r, k), B(k, n), acc);
        out[q] = acc;
    }
    attn_warp_sync();
    for (int q = 0; q < 4; ++q) c[q] = out[q];
}
inline void attn_mma_bf16_16816(float* c, unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                unsigned b0, unsigned b1) {
    attn_mma_emulated<true>(*reinterpret_cast<float(*)[4]>(c), a0, a1, a2, a3, b0, b1);
}
inline void attn_mma_f16_16816(float* c, unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                               unsigned b0, unsigned b1) {
    attn_mma_emulated<false>(*reinterpret_cast<float(*)[4]>(c), a0, a1, a2, a3, b0, b1);
}

inline unsigned attn_pack_bf16(float lo, float hi) {
    return (unsigned)attn_f32_to_bf16_bits(lo) | ((unsigned)attn_f32_to_bf16_bits(hi) << 16);
}
inline unsigned attn_pack_f16(float lo, float hi) {
    return (unsigned)attn_f32_to_f16_bits(lo) | ((unsigned)attn_f32_to_f16_bits(hi) << 16);
}

// cp.async: the source is read at issue, the destination written only when a wait retires
// the group (the latest moment the hardware may), so a fragment load that is not ordered
// after its wait and barrier reads stale bytes and the test fails.
struct attn_pending_copy {
    unsigned short* dst;
    unsigned char bytes[16];
};
extern thread_local std::vector<std::vector<attn_pending_copy>> attn_copy_groups;
extern thread_local std::vector<attn_pending_copy> attn_open_copies;
template <class T>
inline void attn_cp_async16(unsigned short* dst, const T* src, bool ok) {
    attn_pending_copy c;
    c.dst = dst;
    if (ok) {
        std::memcpy(c.bytes, src, 16);
    } else {
        std::memset(c.bytes, 0, 16);
    }
    attn_open_copies.push_back(c);
}
inline void attn_cp_commit() {
    attn_copy_groups.push_back(attn_open_copies);
    attn_open_copies.clear();
}
// `ATTN_SIM_LANDING_DELAY_US`: copies land that much later, so a reader that does not wait
// for them (a missing handshake between threads) reads the stage's old bytes.
inline int attn_sim_landing_delay_us() {
    static const int us = [] {
        const char* v = std::getenv("ATTN_SIM_LANDING_DELAY_US");
        return v ? std::atoi(v) : 0;
    }();
    return us;
}
inline void attn_sim_sleep_landing_delay() {
    if (attn_sim_landing_delay_us() > 0) {
        std::this_thread::sleep_for(std::chrono::microseconds(attn_sim_landing_delay_us()));
    }
}
template <int N>
inline void attn_cp_wait() {
    if (attn_copy_groups.size() > (size_t)N) attn_sim_sleep_landing_delay();
    while (attn_copy_groups.size() > (size_t)N) {
        for (auto& c : attn_copy_groups.front()) {
            std::memcpy(c.dst, c.bytes, 16);
            attn_sim_stamp(c.dst, 16, true);
        }
        attn_copy_groups.erase(attn_copy_groups.begin());
    }
}
// cp.async.mbarrier.arrive.noinc: the hardware arrives on `bar` once this thread's copies
// so far landed. Here they land at the latest moment a reader that waits can see them: when
// the first wait observes the phase their arrival completes (under the lock, so every other
// waiter of that phase sees them too). A reader that never waits on the stage's barrier
// reads its old bytes, whatever the threads' timing.
struct attn_sim_landing {
    unsigned long long* bar;
    unsigned short phase;  // the barrier's completed-phase count once these copies arrived
    std::vector<attn_pending_copy> copies;
};
inline std::vector<attn_sim_landing> attn_sim_landings;  // under attn_sim_sync_lock
// Under the lock: lands the copies whose phase `bar` completed.
inline void attn_sim_land_observed(unsigned long long* bar) {
    const unsigned short done = reinterpret_cast<attn_sim_mbar*>(bar)->phase;
    for (auto it = attn_sim_landings.begin(); it != attn_sim_landings.end();) {
        if (it->bar == bar && (short)(done - it->phase) >= 0) {
            for (auto& c : it->copies) {
                std::memcpy(c.dst, c.bytes, 16);
                attn_sim_stamp(c.dst, 16, true);
            }
            it = attn_sim_landings.erase(it);
        } else {
            ++it;
        }
    }
}
inline void attn_cp_mbar_arrive(unsigned long long* bar) {
    attn_cp_commit();
    attn_sim_sleep_landing_delay();
    std::vector<attn_pending_copy> all;
    for (auto& group : attn_copy_groups) all.insert(all.end(), group.begin(), group.end());
    attn_copy_groups.clear();
    std::lock_guard<std::mutex> g(attn_sim_sync_lock);
    const unsigned short next = reinterpret_cast<attn_sim_mbar*>(bar)->phase + 1;
    attn_sim_landings.push_back({bar, next, std::move(all)});
    attn_sim_mbar_update(bar, 1, 0);
}
// The async-proxy fence: memory is one on the host, so it only stamps the thread's time
// (what `attn_sim_async_visible` checks a `wgmma`'s shared operands against).
inline void attn_fence_proxy_async() { attn_sim_fence_time[threadIdx.x].store(++attn_sim_clock); }

// ldmatrix as a warp exchange of row addresses.
template <bool TRANS>
inline void attn_ldsm(unsigned* r, int count, const unsigned short* p) {
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    attn_warp_regs[w][lane].bits = (unsigned long long)(uintptr_t)p;
    attn_warp_sync();
    auto row_ptr = [&](int l) {
        return (const unsigned short*)(uintptr_t)attn_warp_regs[w][l].bits;
    };
    for (int j = 0; j < count; ++j) {
        unsigned short lo, hi;
        if (TRANS) {
            lo = row_ptr(8 * j + 2 * (lane % 4))[lane / 4];
            hi = row_ptr(8 * j + 2 * (lane % 4) + 1)[lane / 4];
        } else {
            const unsigned short* row = row_ptr(8 * j + lane / 4);
            lo = row[2 * (lane % 4)];
            hi = row[2 * (lane % 4) + 1];
        }
        r[j] = (unsigned)lo | ((unsigned)hi << 16);
    }
    attn_warp_sync();
}
inline void attn_ldsm_x4(unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3,
                         const unsigned short* p) {
    unsigned r[4];
    attn_ldsm<false>(r, 4, p);
    r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3];
}
inline void attn_ldsm_x4_trans(unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3,
                               const unsigned short* p) {
    unsigned r[4];
    attn_ldsm<true>(r, 4, p);
    r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3];
}
inline void attn_ldsm_x2(unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3,
                         const unsigned short* p) {
    unsigned r[2];
    attn_ldsm<false>(r, 2, p);
    r0 = r[0], r1 = r[1], r2 = r3 = 0u;
}
inline void attn_ldsm_x2_trans(unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3,
                               const unsigned short* p) {
    unsigned r[2];
    attn_ldsm<true>(r, 2, p);
    r0 = r[0], r1 = r[1], r2 = r3 = 0u;
}

inline unsigned attn_smem_addr(const void* p) {
    return (unsigned)((const unsigned char*)p - attn_smem);
}
