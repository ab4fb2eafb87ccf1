// TMA bulk copies on the simulator (the sm_90a branch of a source whose tiles move as boxes):
// a box's bytes are counted down on its mbarrier as it lands, its rows stored with the
// 128-byte swizzle on the absolute shared address; elements outside the map's rows of
// `stride` (past a row's end or the buffer's last row) arrive as zeros, as the hardware's
// out-of-bounds fill does. A box lands when issued (the earliest: a stage refilled while
// still read changes under its readers), or, with `ATTN_SIM_LANDING_DELAY_US` set, only when
// a thread first waits on its mbarrier (the latest: a reader that does not wait for the
// box, or a zero-fill of its masked chunks made before it landed, reads or keeps stale bytes).
#pragma once

inline void attn_mbar_expect_tx(unsigned long long* bar, unsigned bytes) {
    std::lock_guard<std::mutex> g(attn_sim_sync_lock);
    attn_sim_mbar_update(bar, 1, (int)bytes);
}

// Copies one box into shared memory and counts its bytes down on `bar`.
inline void attn_sim_land_box(void* dst, const attn_tensor_map* map, int x, int y,
                              unsigned long long* bar) {
    const auto* w = map->words;
    const auto* base = reinterpret_cast<const unsigned char*>((uintptr_t)w[0]);
    const long long stride = (long long)w[1], rows = (long long)w[2];
    const unsigned box_rows = (unsigned)w[3], box_cols = (unsigned)w[4], elem = (unsigned)w[5];
    const unsigned long long len = w[6];
    if (box_cols * elem != 128) attn_sim_fail("a TMA box row is not the 128-byte swizzle's line");
    if (attn_smem_addr(dst) % 1024 != 0) attn_sim_fail("a TMA box's destination is not 1024-byte aligned");
    for (unsigned r = 0; r < box_rows; ++r)
        for (unsigned c = 0; c < box_cols; ++c) {
            const long long gx = (long long)x + c, gy = (long long)y + r;
            unsigned char v[8] = {};
            const unsigned long long at = (unsigned long long)(gy * stride + gx);
            if (gx >= 0 && gx < stride && gy >= 0 && gy < rows && at < len)
                std::memcpy(v, base + at * elem, elem);
            unsigned a = attn_smem_addr(dst) + r * 128 + c * elem;
            a ^= ((a >> 7) & 7u) << 4;
            std::memcpy(attn_smem + a, v, elem);
            attn_sim_stamp(attn_smem + a, elem, false);  // the async proxy's own write
        }
    std::lock_guard<std::mutex> g(attn_sim_sync_lock);
    attn_sim_mbar_update(bar, 0, -(int)(box_rows * box_cols * elem));
}

// Boxes issued and not landed yet (late landing), under `attn_sim_sync_lock`. The map is
// copied: the kernel's parameter may be a thread's own copy.
struct attn_sim_box {
    void* dst;
    attn_tensor_map map;
    int x, y;
    unsigned long long* bar;
};
inline std::vector<attn_sim_box> attn_sim_pending_boxes;

// Lands every pending box of `bar` (called before a wait checks it).
inline void attn_sim_land_pending(unsigned long long* bar) {
    std::vector<attn_sim_box> mine;
    {
        std::lock_guard<std::mutex> g(attn_sim_sync_lock);
        auto& all = attn_sim_pending_boxes;
        for (auto it = all.begin(); it != all.end();) {
            if (it->bar == bar) {
                mine.push_back(*it);
                it = all.erase(it);
            } else {
                ++it;
            }
        }
    }
    for (auto& b : mine) attn_sim_land_box(b.dst, &b.map, b.x, b.y, b.bar);
}

inline void attn_tma_load_2d(void* dst, const attn_tensor_map* map, int x, int y,
                             unsigned long long* bar) {
    if (attn_sim_landing_delay_us() == 0) {
        attn_sim_land_box(dst, map, x, y, bar);
        return;
    }
    std::lock_guard<std::mutex> g(attn_sim_sync_lock);
    attn_sim_before_wait = &attn_sim_land_pending;
    attn_sim_pending_boxes.push_back({dst, *map, x, y, bar});
}

// The device helper's arithmetic (a reciprocal multiply and its fix-up), so a negative
// offset gives the same garbage coordinate.
inline void attn_tma_coords(long long off, long long s, unsigned long long inv, int& x, int& y) {
    const unsigned long long u = (unsigned long long)off, us = (unsigned long long)s;
    unsigned long long q = (unsigned long long)(((unsigned __int128)u * inv) >> 64);
    unsigned long long r = u - q * us;
    while (r >= us) {
        q += 1;
        r -= us;
    }
    x = (int)r;
    y = (int)q;
}

inline void attn_st_zero16(void* p) {
    std::memset(p, 0, 16);
    attn_sim_stamp(p, 16, true);
}
