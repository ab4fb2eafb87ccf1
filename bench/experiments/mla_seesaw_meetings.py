"""What the generated seesaw's meetings cost (timings only: the edits break them).

`ATTN_CODEGEN_ENABLE=seesaw` hands the running max and sum from one warpgroup to the other,
and P and the rescale factor to every warp. Since session 30 the handoffs go in runs, each
run's writes then one barrier over both warpgroups (codegen/handoff.rs): four meetings a
pair of tiles in L1's history, two of them the max-and-sum runs on the warpgroup pair's
barrier (named barrier 7), two the P runs on the consumers' barrier; FlashMLA's schedule
meets twice and passes the max one way (the writer arrives, the reader waits). Two edits
of the MLA history bound what fewer meetings could buy:

- `halfmeet`: every barrier a handoff still has before its writes dropped (since session
  29 the scratch ledger leaves those only outside the loop);
- `nomeet`: besides, the pair barrier dropped: the max and sum cross with no meeting, the
  two P runs still meet (FlashMLA's count: the bound for one-way max-and-sum handoffs).

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
