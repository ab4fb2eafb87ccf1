#!/usr/bin/env python3
"""P0's K/V tiles multicast into a cluster of two programs, as a rewrite of the generated
kernel in its TMA form (`ATTN_CODEGEN_ENABLE=tma`, the consumers waiting on the boxes):
what a cluster would buy, timed before it is built.

    tma_multicast.py IN_DIR OUT_DIR        # then run with ATTN_EXPERIMENT_GRID_X_MULTIPLE=2

Two neighbouring query blocks of one head (program ids `2m`, `2m + 1` along x: query
blocks `N - 1 - 2m` and `N - 2 - 2m`) run as a cluster of two. A causal program reads
every K/V tile up to its diagonal, so the pair shares all tiles but the larger block's
last one. Each shared tile's boxes are issued half by each program, every box multicast
into both programs' stages (half the bytes from L2); the rest each program issues alone.
Each program's consumers release a stage on both programs' *empty* barriers (16 arrivals
a phase), so a box is never multicast into a stage its peer still reads; the mbarriers'
initialization is published to the cluster before any box, and neither program exits
before its peer is done with its shared memory.

Timings only, and only for the bench's P0 (one sequence, whole tiles, the causal pairing
above hard-coded): a varlen batch or a sliding window pairs programs that share nothing.
"""
import re
import sys

from rewrite_dir import rewrite_dir

HELPERS = r"""
__device__ __forceinline__ unsigned attn_cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ void attn_cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
/// This thread's arrival on `bar` and on the same mbarrier of the cluster's other program.
__device__ __forceinline__ void attn_mbar_arrive_pair(unsigned long long* bar, unsigned peer) {
    attn_mbar_arrive(bar);
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(attn_smem_addr(bar)), "r"(peer));
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}
/// A box into this program's stage, or (`both`) into both programs' at the same offsets,
/// completing on each program's own mbarrier.
__device__ __forceinline__ void attn_tma_load_2d_mc(bool both, void* dst, const attn_tensor_map* map,
                                                    int x, int y, unsigned long long* bar) {
    if (!both) {
        attn_tma_load_2d(dst, map, x, y, bar);
        return;
    }
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;"
        ::"r"(attn_smem_addr(dst)), "l"(reinterpret_cast<unsigned long long>(map)), "r"(x), "r"(y),
        "r"(attn_smem_addr(bar)), "h"((unsigned short)3)
        : "memory");
}
"""

PRODUCER_START = "if (threadIdx.x >= 256) {"
CONSUMER_START = "attn_setmaxnreg_inc<ATTN_WS_CONSUMER_REGS>();"


def die(msg):
    sys.exit(f"tma_multicast.py: {msg}")


def sub1(pattern, repl, text, count=1, flags=0):
    out, n = re.subn(pattern, repl, text, flags=flags)
    if n != count:
        die(f"{n} matches (expected {count}) of {pattern!r}")
    return out


def rewrite(text):
    text = sub1(r'(#include "attn_prelude.cuh"\n)', lambda m: m.group(1) + HELPERS, text)
    text = sub1(r"__launch_bounds__\(384, 1\)", "__launch_bounds__(384, 1) __cluster_dims__(2, 1, 1)", text)
    # Both programs' consumers release a stage: 16 arrivals a phase.
    text = sub1(r"attn_mbar_init\(&attn_ws_bar\[3 \+ s\], 8u\);", "attn_mbar_init(&attn_ws_bar[3 + s], 16u);", text)
    # The barriers' initialization reaches the peer before its first box or arrival.
    text = sub1(r"(        attn_mbar_init_fence\(\);\n    \}\n)    __syncthreads\(\);\n",
                lambda m: m.group(1) + "    attn_cluster_sync();\n    const unsigned attn_rank = attn_cluster_rank();\n", text)
    p0 = text.index(PRODUCER_START)
    c0 = text.index(CONSUMER_START)
    producer, consumer = text[p0:c0], text[c0:]
    # Shared tiles: all but the larger query block's last (and the loop's tile past the end).
    producer = sub1(r"(\n( *)int num_tiles_(\d+) = [^\n]*\n)",
                    lambda m: m.group(1) + f"{m.group(2)}const int attn_shared_tiles = num_tiles_{m.group(3)} - (attn_rank == 0 ? 1 : 0);\n",
                    producer)
    # Each issue block knows whether its tile is shared.
    producer, n = re.subn(
        r"(\n( *)if \(([^\n]*?) < v\d+\) \{\n(?:[^\n]*\n){1,4}?\2    if \(tid == 0\) \{\n)",
        lambda m: m.group(1).replace(
            "    if (tid == 0) {\n",
            f"    const bool attn_mc = ({m.group(3)}) < attn_shared_tiles;\n{m.group(2)}    if (tid == 0) {{\n", 1),
        producer)
    if n != 3:
        die(f"{n} TMA issue blocks (3 expected: two in the prologue, one in the loop)")
    # A shared tile's box k goes out from program ((k >> 2) ^ k) & 1, multicast.
    producer, n = re.subn(
        r"if \((attn_k\d+_\d+) < (\d+)\) attn_tma_load_2d\(",
        r"if (\1 < \2 && (!attn_mc || (((\1 >> 2) ^ \1) & 1) == (int)attn_rank)) attn_tma_load_2d_mc(attn_mc, ",
        producer)
    if n == 0:
        die("no boxes")
    # Neither program leaves while its peer may still touch its shared memory.
    producer = sub1(r"\n(        )return;\n    \}\n    $", "\n\\1attn_cluster_sync();\n\\1return;\n    }\n    ", producer)
    consumer = sub1(r"attn_mbar_arrive\(&attn_ws_bar\[3 \+ ([^\n]*)\]\);",
                    r"attn_mbar_arrive_pair(&attn_ws_bar[3 + \1], attn_rank ^ 1u);", consumer)
    consumer = sub1(r"\n    \}\n    #else\n", "\n        attn_cluster_sync();\n    }\n    #else\n", consumer)
    return text[:p0] + producer + consumer


def main():
    rewrite_dir(
        "tma_multicast.py",
        lambda text: PRODUCER_START in text and "attn_tma_load_2d" in text and "attn_stage__" in text,
        rewrite,
        "a cluster of two, K/V multicast",
    )


if __name__ == "__main__":
    main()
