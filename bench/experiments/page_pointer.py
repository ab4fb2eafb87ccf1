#!/usr/bin/env python3
"""P0's producer reading each page's block-table entry at an immediate offset from one
pointer a tile (docs/gpu_ir.md, "Fewer producer instructions"), as a rewrite of the
generated kernel: what the page-index arithmetic still costs.

    page_pointer.py IN_DIR OUT_DIR

With `run_rows` each pass's block-table address is `bt_row + (tile · TILE + first) / PAGE`
for the pass's first row `first`, a multiple of the page: the signed division's fix-ups,
a sign extension and a 64-bit add a page, since the compiler can neither prove the key
non-negative nor split the wrapping add. Rewritten, `(bt_row + tile · (TILE / PAGE)) +
first / PAGE`: the tile's pointer once, a constant a pass. The results stay exact for
tiles whose first key fits an `int` (TILE a multiple of PAGE, keys non-negative).
"""
import re
import sys

from rewrite_dir import rewrite_dir

PRODUCER_START = "if (threadIdx.x >= 256) {"
CONSUMER_START = "attn_setmaxnreg_inc<ATTN_WS_CONSUMER_REGS>();"
# attn_ld((BT + (attn_wadd(attn_wmul(TILE_INDEX, TILE), (p * PP / RUN) * RUN) / PAGE)))
PAGE_LOAD = re.compile(
    r"attn_ld\(\((?P<bt>\w+) \+ \(attn_wadd\(attn_wmul\((?P<tile>[^,]+), (?P<size>\w+)\), "
    r"\(p \* (?P<pp>\d+) / (?P<run>\d+)\) \* (?P=run)\) / (?P<page>\d+)\)\)\)"
)


def die(msg):
    sys.exit(f"page_pointer.py: {msg}")


def per_tile(m):
    run, page = int(m["run"]), int(m["page"])
    if run != page:
        die(f"runs of {run} rows over pages of {page}")
    return (
        f"attn_ld(((({m['bt']}) + attn_wmul({m['tile']}, {m['size']} / {page})) "
        f"+ p * {m['pp']} / {run}))"
    )


def rewrite(text):
    p0 = text.index(PRODUCER_START)
    c0 = text.index(CONSUMER_START)
    prod, n = PAGE_LOAD.subn(per_tile, text[p0:c0])
    if n == 0:
        die("no page loads addressed from a run's first row in the producer")
    return text[:p0] + prod + text[c0:]


def main():
    rewrite_dir(
        "page_pointer.py",
        lambda text: PRODUCER_START in text and "(p * 16 / 16) * 16" in text,
        rewrite,
        "block-table entries at a constant from the tile's",
    )


if __name__ == "__main__":
    main()
