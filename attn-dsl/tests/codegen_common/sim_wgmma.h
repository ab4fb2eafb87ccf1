// Hopper's warpgroup MMA on the simulator: what the sm_90a branch of an emitted source needs
// beyond the mma.sync branch (`-D__CUDA_ARCH_FEAT_SM90_ALL`; `sim_wgmma.rs` rewrites each
// inline `wgmma.mma_async` statement into `attn_sim_wgmma`). Written from the PTX ISA's
// semantics, not from the emitter's layouts, so it checks them:
// - operands in shared memory are read through the matrix descriptor (start, leading and
//   stride byte offsets, the 128-byte swizzle applied to the absolute address);
// - the instructions run asynchronously: the hardware may read the operands at any time
//   between the issue and the `wgmma.wait_group` that retires their group, and the
//   accumulator registers are undefined meanwhile. So the simulator reads the shared operands
//   at the issue and again at the wait and stops if they changed (a stage refilled before its
//   MMAs completed, or filled after they were issued); it writes a poison NaN into the
//   accumulators at the issue and the results only at the wait (a read before the wait sees
//   NaN; a write in between is caught at the wait). Chained instructions on one accumulator
//   (the k-steps) take the previous one's result, in issue order.
#pragma once
#include <cstdio>
#include <deque>

inline unsigned long long attn_wgmma_desc(unsigned addr, unsigned lbo, unsigned sbo) {
    return (unsigned long long)((addr & 0x3FFFFu) >> 4) |
           ((unsigned long long)((lbo >> 4) & 0x3FFFu) << 16) |
           ((unsigned long long)((sbo >> 4) & 0x3FFFu) << 32) | (1ull << 62);
}
// A 32-bit add to the descriptor's low word, as the device helper does.
inline unsigned long long attn_wgmma_desc_add(unsigned long long d, unsigned bytes) {
    const unsigned lo = (unsigned)d + (bytes >> 4);
    return (d & 0xFFFFFFFF00000000ull) | lo;
}
inline void attn_reg_fence(float&) {}

[[noreturn]] inline void attn_sim_fail(const char* what) {
    std::fprintf(stderr, "simulator: thread %u of block (%u, %u, %u): %s\n", threadIdx.x,
                 blockIdx.x, blockIdx.y, blockIdx.z, what);
    std::fflush(stderr);
    std::abort();
}

// A matrix descriptor's fields (PTX ISA, "Matrix Descriptor Format").
struct attn_sim_desc {
    unsigned start, lbo, sbo;
};
inline attn_sim_desc attn_sim_decode(unsigned long long d) {
    if ((d >> 62) != 1) attn_sim_fail("wgmma descriptor: only the 128-byte swizzle is simulated");
    if (((d >> 49) & 7) != 0) attn_sim_fail("wgmma descriptor: a base offset is not simulated");
    return {(unsigned)(d & 0x3FFF) << 4, (unsigned)((d >> 16) & 0x3FFF) << 4,
            (unsigned)((d >> 32) & 0x3FFF) << 4};
}
// The shared address of element (mn, k) of an operand: K-major, rows of the M/N index with
// K contiguous (128 bytes a row, 8-row atoms `sbo` apart); MN-major, rows of K with 64 M/N
// values contiguous (8-row atoms `sbo` apart along K, 64-wide column blocks `lbo` apart).
// The 128-byte swizzle XORs the address's 16-byte chunk (bits 4-6) with its row in the
// 1024-byte atom (bits 7-9).
inline unsigned attn_sim_operand_addr(const attn_sim_desc& d, int mn, int k, bool mn_major) {
    unsigned a;
    if (mn_major) {
        a = d.start + (mn / 64) * d.lbo + (k / 8) * d.sbo + (k % 8) * 128 + (mn % 64) * 2;
    } else {
        if ((d.start & 127) + 32 > 128) attn_sim_fail("wgmma descriptor: a k-step crosses a line");
        a = d.start + (mn / 8) * d.sbo + (mn % 8) * 128 + k * 2;
    }
    return a ^ (((a >> 7) & 7u) << 4);
}
template <bool BF16>
inline float attn_sim_half(unsigned short h) {
    return BF16 ? attn_bf16_bits_to_f32(h) : attn_f16_bits_to_f32(h);
}
// One operand element through `desc`; at the issue (`issue`) its bytes must be visible to
// the async proxy.
template <bool BF16>
inline float attn_sim_operand(unsigned long long desc, int mn, int k, bool mn_major, bool issue) {
    const unsigned a = attn_sim_operand_addr(attn_sim_decode(desc), mn, k, mn_major);
    if (a + 2 > ATTN_SIM_SMEM_BYTES) attn_sim_fail("wgmma operand outside shared memory");
    if (issue && !attn_sim_async_visible(a))
        attn_sim_fail("a wgmma reads shared bytes a generic-proxy write left without a "
                      "fence.proxy.async (by the writer or this thread) since");
    unsigned short h;
    std::memcpy(&h, attn_smem + a, 2);
    return attn_sim_half<BF16>(h);
}

// One thread's part of one instruction: its accumulators (rows g and g + 8 of its warp's 16,
// two columns of every 8), and the operand values they need as read at the issue.
struct attn_sim_wgmma_op {
    int n;
    bool bf16, a_in_regs, trans_a, trans_b, scale_d;
    float sign;
    unsigned long long adesc, bdesc;
    std::vector<float*> d;
    float a[2][16];
    std::vector<float> b;  // [column n/4][k 16]
};
inline thread_local std::deque<std::vector<attn_sim_wgmma_op>> attn_sim_wgmma_groups;
inline thread_local std::vector<attn_sim_wgmma_op> attn_sim_wgmma_open;
// Accumulators in flight: the value so far (the snapshot at the first issue, then each
// retired instruction's result).
inline thread_local std::map<float*, float> attn_sim_wgmma_acc;
constexpr unsigned ATTN_SIM_ACC_POISON = 0x7fd15ea5u;

// The rows this thread holds within the warpgroup's 64, and its first column in each 8.
inline int attn_sim_row(int h) { return 16 * ((threadIdx.x % 128) / 32) + (threadIdx.x % 32) / 4 + 8 * h; }
inline int attn_sim_col(int c) { return 8 * (c / 2) + 2 * (threadIdx.x % 4) + c % 2; }

template <bool BF16>
inline void attn_sim_read_shared(attn_sim_wgmma_op& op, float (&a)[2][16], std::vector<float>& b,
                                 bool issue) {
    if (!op.a_in_regs)
        for (int h = 0; h < 2; ++h)
            for (int k = 0; k < 16; ++k)
                a[h][k] = attn_sim_operand<BF16>(op.adesc, attn_sim_row(h), k, op.trans_a, issue);
    b.resize(op.n / 4 * 16);
    for (int c = 0; c < op.n / 4; ++c)
        for (int k = 0; k < 16; ++k)
            b[c * 16 + k] = attn_sim_operand<BF16>(op.bdesc, attn_sim_col(c), k, op.trans_b, issue);
}

// A from registers: the m16n8k16 A fragment of each warp's 16 rows (four words a thread:
// rows g / g + 8, columns 2t.. / 2t + 8..), read across the quad at the issue.
template <bool BF16>
inline void attn_sim_read_a_regs(const unsigned* regs, float (&a)[2][16]) {
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int i = 0; i < 4; ++i) attn_warp_regs[w][lane].a[i] = regs[i];
    attn_warp_sync();
    for (int h = 0; h < 2; ++h)
        for (int k = 0; k < 16; ++k) {
            const unsigned word = attn_warp_regs[w][(lane / 4) * 4 + (k % 8) / 2].a[h + (k >= 8 ? 2 : 0)];
            a[h][k] = attn_sim_half<BF16>((unsigned short)(k % 2 ? word >> 16 : word & 0xffff));
        }
    attn_warp_sync();
}

// `wgmma.mma_async.sync.aligned.m64n{N}k16.f32.{T}.{T}`: `d` the N/2 accumulators, A from
// `a_regs` (four words) or, when null, through `adesc`; B through `bdesc`.
template <int N, bool BF16>
inline void attn_sim_wgmma(float* const* d, const unsigned* a_regs, unsigned long long adesc,
                           unsigned long long bdesc, bool scale_d, int scale_a, int scale_b,
                           bool trans_a, bool trans_b) {
    attn_sim_wgmma_op op;
    op.n = N, op.bf16 = BF16, op.a_in_regs = a_regs != nullptr, op.trans_a = trans_a;
    op.trans_b = trans_b, op.scale_d = scale_d, op.sign = (float)(scale_a * scale_b);
    op.adesc = adesc, op.bdesc = bdesc;
    op.d.assign(d, d + N / 2);
    if (a_regs) attn_sim_read_a_regs<BF16>(a_regs, op.a);
    attn_sim_read_shared<BF16>(op, op.a, op.b, true);
    for (float* p : op.d) {
        if (attn_sim_wgmma_acc.count(p)) continue;
        attn_sim_wgmma_acc[p] = *p;
        std::memcpy(p, &ATTN_SIM_ACC_POISON, 4);
    }
    attn_sim_wgmma_open.push_back(std::move(op));
}

inline void attn_wgmma_fence() {}
inline void attn_wgmma_commit() {
    attn_sim_wgmma_groups.push_back(std::move(attn_sim_wgmma_open));
    attn_sim_wgmma_open.clear();
}

template <bool BF16>
inline void attn_sim_wgmma_retire(attn_sim_wgmma_op& op) {
    float a[2][16];
    std::vector<float> b;
    std::memcpy(a, op.a, sizeof a);
    attn_sim_read_shared<BF16>(op, a, b, false);
    if (std::memcmp(a, op.a, sizeof a) != 0 || std::memcmp(b.data(), op.b.data(), b.size() * 4) != 0)
        attn_sim_fail("a wgmma's shared operand changed between its issue and its wait");
    for (int i = 0; i < op.n / 2; ++i) {
        const int nt = i / 4, q = i % 4, h = q >> 1, c = nt * 2 + (q & 1);
        float acc = op.scale_d ? attn_sim_wgmma_acc.at(op.d[i]) : 0.0f;
        for (int k = 0; k < 16; ++k) acc = std::fma(op.sign * op.a[h][k], op.b[c * 16 + k], acc);
        attn_sim_wgmma_acc[op.d[i]] = acc;
    }
}

// Whether an instruction not yet retired still writes `p`.
inline bool attn_sim_acc_pending(float* p) {
    auto writes = [p](const std::vector<attn_sim_wgmma_op>& ops) {
        for (const auto& op : ops)
            for (float* q : op.d)
                if (q == p) return true;
        return false;
    };
    for (const auto& g : attn_sim_wgmma_groups)
        if (writes(g)) return true;
    return writes(attn_sim_wgmma_open);
}

template <int N>
inline void attn_wgmma_wait() {
    while (attn_sim_wgmma_groups.size() > (size_t)N) {
        std::vector<attn_sim_wgmma_op> g = std::move(attn_sim_wgmma_groups.front());
        attn_sim_wgmma_groups.pop_front();
        for (auto& op : g) op.bf16 ? attn_sim_wgmma_retire<true>(op) : attn_sim_wgmma_retire<false>(op);
    }
    for (auto it = attn_sim_wgmma_acc.begin(); it != attn_sim_wgmma_acc.end();) {
        if (attn_sim_acc_pending(it->first)) {
            ++it;
            continue;
        }
        if (std::memcmp(it->first, &ATTN_SIM_ACC_POISON, 4) != 0)
            attn_sim_fail("an accumulator was written while its wgmma was in flight");
        *it->first = it->second;
        it = attn_sim_wgmma_acc.erase(it);
    }
}
