#!/usr/bin/env python3
"""Where the warp-specialized MLA history hands a TMA stage to its consumers, as a rewrite of
the generated kernel: what the compiler change would buy, timed before it is written.

    mla_tma_handoff.py VARIANT IN_DIR OUT_DIR

Every file of IN_DIR (an `ATTN_SOURCE_DUMP` directory) is copied to OUT_DIR; the split MLA
histories whose key tiles move as TMA boxes are rewritten. As generated, the producer's
iteration `j` waits for tile `j`'s boxes to land, arrives on the stage's *full* barrier,
then waits for the other stage to be released and issues tile `j + 1` into it: tile `j + 1`
is issued no earlier than tile `j` landed, so while the consumers wait for keys only one
tile is in flight, and the landing reaches the consumers through a second barrier.

Variants:
  issue_first    the producer issues tile `j + 1` (once its stage is free) before it waits
                 for tile `j`: two tiles in flight, the hop kept.
  consumer_wait  the producer hands a stage over when it issued its boxes; the consumers
                 wait on the boxes' own mbarriers (FlashAttention-3's and FlashMLA's
                 handoff): no hop, two tiles in flight.

Timings only: tiles past the history's end are not zero-filled in these variants (the
generated producer zero-fills them after they land), so a ragged history computes garbage;
L1's histories are whole tiles.
"""
import os
import re
import sys

PRODUCER_START = "if (threadIdx.x >= 256) {"
PRODUCER_END = "        return;\n    }\n    attn_setmaxnreg_inc<ATTN_WS_CONSUMER_REGS>();"
ARRIVE_FULL = "if ((tid & 31) == 0) attn_mbar_arrive(&attn_ws_bar[attn_stage_]);\n"
COMMIT = "attn_cp_commit();\n            attn_stage_ ^= 1;"
LANDED = re.compile(
    r"            #if defined\(__CUDA_ARCH_FEAT_SM90_ALL\)\n            \{\n"
    r"                const int attn_mb = \d+ \+ attn_stage_;\n.*?\n            #endif\n",
    re.S,
)


def die(msg):
    sys.exit(f"mla_tma_handoff.py: {msg}")


def producer_loop(text):
    """(start, end) of the producer's loop body: from after its `for` line to its stage flip."""
    p0 = text.index(PRODUCER_START)
    p1 = text.index(PRODUCER_END, p0)
    m = re.compile(r"        for \(int j_\d+ = [^\n]*\{\n").search(text, p0, p1)
    if not m:
        die("no producer loop")
    end = text.index(COMMIT, m.end(), p1) + len(COMMIT)
    return m.end(), end


def rewrite(text, variant):
    start, end = producer_loop(text)
    body = text[start:end]
    split = body.index(ARRIVE_FULL) + len(ARRIVE_FULL)
    handoff, issue = body[:split], body[split:]
    if variant == "issue_first":
        flip = "            attn_stage_ ^= 1;"
        assert issue.endswith(flip)
        body = issue[: -len(flip)] + handoff + flip
    elif variant == "consumer_wait":
        landed = LANDED.findall(handoff)
        if len(landed) != 2:
            die(f"{len(landed)} landed waits in the producer")
        body = LANDED.sub("", handoff) + issue
        text = text[:start] + body + text[end:]
        return consumer_waits(text, landed)
    else:
        die(f"unknown variant {variant}")
    return text[:start] + body + text[end:]


def consumer_waits(text, landed):
    """The consumers wait on the boxes' mbarriers after the stage's full barrier."""
    c0 = text.index(PRODUCER_END) + len(PRODUCER_END)
    m = re.compile(r"        for \(int j_\d+_ = [^\n]*\{\n").search(text, c0)
    if not m:
        die("no consumer loop")
    wait_end = text.index("attn_ws_phase ^= 1u << attn_s;\n            }\n", m.end())
    wait_end += len("attn_ws_phase ^= 1u << attn_s;\n            }\n")
    waits = []
    for block in landed:
        mb = re.search(r"const int attn_mb = (\d+) \+ attn_stage_;", block).group(1)
        waits.append(
            "            #if defined(__CUDA_ARCH_FEAT_SM90_ALL)\n"
            "            {\n"
            f"                const int attn_mb = {mb} + attn_stage__;\n"
            "                attn_mbar_wait(&attn_mbar[attn_mb], (attn_tma_phase_c >> attn_mb) & 1u);\n"
            "                attn_tma_phase_c ^= 1u << attn_mb;\n"
            "            }\n"
            "            #endif\n"
        )
    decl = "        unsigned attn_tma_phase_c = 0u;\n"
    return text[: m.start()] + decl + text[m.start() : wait_end] + "".join(waits) + text[wait_end:]


def main():
    if len(sys.argv) != 4:
        die("usage: mla_tma_handoff.py VARIANT IN_DIR OUT_DIR")
    variant, src, dst = sys.argv[1:]
    os.makedirs(dst, exist_ok=True)
    for f in sorted(os.listdir(src)):
        text = open(os.path.join(src, f)).read()
        if "mla_history" in text and PRODUCER_START in text and "attn_tma_load_2d" in text:
            text = rewrite(text, variant)
            print(f"{f}: {variant}")
        open(os.path.join(dst, f), "w").write(text)


if __name__ == "__main__":
    main()
