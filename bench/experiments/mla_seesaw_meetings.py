"""What the generated seesaw's two-sided handoffs cost (timings only: the edits break them).

`ATTN_CODEGEN_ENABLE=seesaw` hands the running max and sum from one warpgroup to the other,
and P and the rescale factor to every warp, each between two barriers over both sides'
threads (codegen/handoff.rs): the first keeps the writers from overwriting what the last
readers have not read, the second publishes the writes. So the two warpgroups meet twice a
handoff, about sixteen times a pair of tiles, where FlashMLA's schedule passes the max one
way (the writer arrives, the reader waits). Two edits of the MLA history bound what one-way
handoffs could buy:

- `halfmeet`: every handoff's first barrier dropped (what a buffer per handoff, written
  again only after its readers arrived, would leave: one meeting a handoff; since session
  29 the generator's scratch ledger drops those in the loop itself, so this edit changes
  only the handoffs after it);
- `nomeet`: besides, the pair barrier of the warpgroup-to-warpgroup handoffs dropped (the
  max and sum then cross with no meeting at all: the bound for a one-way handoff).

Both read stale or torn values: garbage results, for timing only. Usage (on the GPU host):

    ATTN_CODEGEN_ENABLE=seesaw ATTN_SOURCE_DUMP=gen  <mla_decode bench> ...
    python3 bench/experiments/mla_seesaw_meetings.py gen out halfmeet
    ATTN_CODEGEN_ENABLE=seesaw ATTN_SOURCE_OVERRIDE=out <mla_decode bench> ...
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rewrite_dir import rewrite_dir  # noqa: E402

# A handoff's block: its comment, the result's declaration, the buffer pointer, then the
# barrier before the writes.
FIRST = re.compile(
    r"(= handoff\([^\n]*\n(?:[^\n]*\n){1,3}?[^\n]*attn_hb = [^\n]*\n[ \t]*)attn_bar_sync\((\d+), (\d+)\);\n"
)
# The pair barrier of warpgroups 0 and 1 (named barrier 7: after the block's and the two
# owned regions'), used by the handoffs between them alone.
PAIR = re.compile(r"[ \t]*attn_bar_sync\(7, 256\);\n")


def applies(text):
    return "mla_history" in text and "handoff(" in text and "attn_setmaxnreg_inc" in text


def edit(variant):
    def run(text):
        text, n = FIRST.subn(r"\1", text)
        if n == 0:
            sys.exit("no handoff barrier found")
        if variant == "nomeet":
            text, k = PAIR.subn("", text)
            if k == 0:
                sys.exit("no pair barrier found")
        return text

    return run


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[3] not in ("halfmeet", "nomeet"):
        sys.exit("usage: mla_seesaw_meetings.py IN_DIR OUT_DIR halfmeet|nomeet")
    variant = sys.argv.pop()
    rewrite_dir("mla_seesaw_meetings.py", applies, edit(variant), f"{variant} applied")
