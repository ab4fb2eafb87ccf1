#!/usr/bin/env python3
"""P0's split ring (`ATTN_CODEGEN_ENABLE=split_ring`: K and V rings of their own, K
released at the scores' wait) with V's copy reusing the row offsets K's copy of the same
tile computed, as a rewrite of the generated kernel: whether the split's cost was the
producer computing every row's address twice (docs/gpu_ir.md, "What bounds P0 and P1
now"). A timing, but the results stay exact: V's rows are K's rows in the other cache.

    split_ring_shared_rows.py IN_DIR OUT_DIR

Sources of commit 34fdff2 and before: since 9ddea31 the compiler emits this form itself
(`async_copy::SharedRows`), and a current split ring's V copy has no address of its own
left to replace (the script says so and stops).

In the producer, K's copy of a tile keeps each pass's element offset (`attn_src -
k_cache`, 32-bit: a cache of fewer than 2^31 elements) in `attn_row_off[p]`; V's copy of
the same tile, issued after V's part is acquired in the same iteration, reads it back.
"""
import re
import sys

from rewrite_dir import rewrite_dir

PRODUCER_START = "if (threadIdx.x >= 256) {"
CONSUMER_START = "attn_setmaxnreg_inc<ATTN_WS_CONSUMER_REGS>();"
K_SRC = re.compile(r"(const auto attn_src = \(\(k_cache \+ (.*?)\) \+ 0\) \+ attn_lane_in_row \* 8;)")
V_SRC = re.compile(r"const auto attn_src = \(\(v_cache \+ (.*?)\) \+ 0\) \+ attn_lane_in_row \* 8;")
TID = re.compile(r"(\n( *)const int tid = \(int\)threadIdx\.x - 256;\n)")


def die(msg):
    sys.exit(f"split_ring_shared_rows.py: {msg}")


def rewrite(text):
    p0 = text.index(PRODUCER_START)
    c0 = text.index(CONSUMER_START)
    prod = text[p0:c0]
    ks = [m.group(2) for m in K_SRC.finditer(prod)]
    vs = [m.group(1) for m in V_SRC.finditer(prod)]
    if not ks or ks != vs:
        die(f"{len(ks)} K and {len(vs)} V copies, rows {'equal' if ks == vs else 'differ'}")
    prod, n = TID.subn(lambda m: m.group(1) + f"{m.group(2)}int attn_row_off[8];\n", prod)
    if n != 1:
        die("no producer thread index")
    prod = K_SRC.sub(lambda m: m.group(1) + " attn_row_off[p] = (int)(attn_src - k_cache);", prod)
    prod = V_SRC.sub("const auto attn_src = v_cache + attn_row_off[p];", prod)
    return text[:p0] + prod + text[c0:]


def main():
    rewrite_dir(
        "split_ring_shared_rows.py",
        lambda text: PRODUCER_START in text and "attn_ws_bar[9 +" in text,
        rewrite,
        "V reuses K's row offsets",
    )


if __name__ == "__main__":
    main()
