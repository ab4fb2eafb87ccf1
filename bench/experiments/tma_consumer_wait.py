#!/usr/bin/env python3
"""The unified-attention kernels' TMA previous-stage form with the consumers waiting on the
boxes' own mbarriers, as a rewrite of the generated kernel (`ATTN_CODEGEN_ENABLE=tma`):
what the compiler change would buy, timed before it is written.

    tma_consumer_wait.py IN_DIR OUT_DIR

As generated (the `filled` handoff), the producer's iteration `j` waits for tile `j`'s K
and V boxes to land, zeroes their masked chunks, arrives on the stage's *full* barrier, and
only then waits for the oldest stage's release and issues tile `j + 2`: the landing of
every tile sits between the boxes and the consumers, and tile `j + 2` is issued no earlier
than tile `j` landed. The rewrite drops the producer's landing waits (it hands a stage over
once its boxes are issued) and has the consumers wait on the K and V boxes' mbarriers after
the stage's full barrier, each with a phase bit of its own.

Timings only: the masked chunks of a ragged last tile are not zeroed (the bench's P0 and P1
tiles are whole), so a ragged sequence computes garbage.
"""
import os
import re
import sys

PRODUCER_START = "if (threadIdx.x >= 256) {"
CONSUMER_START = "attn_setmaxnreg_inc<ATTN_WS_CONSUMER_REGS>();"
# One landing wait of the producer: the box mbarrier of an alloc's current stage, then the
# zeroing of its masked chunks, up to the bits' shift.
LANDED = re.compile(
    r"( *)#if defined\(__CUDA_ARCH_FEAT_SM90_ALL\)\n\1\{\n"
    r"\1    const int attn_mb = (\d+) \+ attn_stage_;\n.*?\n\1\}\n\1#endif\n",
    re.S,
)
CONSUMER_LOOP = re.compile(r"\n( *)for \(int j_\d+_ = [^\n]*\{\n")
FULL_WAIT_END = "attn_ws_phase ^= 1u << attn_s;\n"


def die(msg):
    sys.exit(f"tma_consumer_wait.py: {msg}")


def rewrite(text):
    p0 = text.index(PRODUCER_START)
    c0 = text.index(CONSUMER_START)
    producer = text[p0:c0]
    mbars = [m.group(2) for m in LANDED.finditer(producer)]
    if len(mbars) != 2:
        die(f"{len(mbars)} landing waits in the producer (K and V expected)")
    producer = LANDED.sub("", producer)
    consumer = text[c0:]
    m = CONSUMER_LOOP.search(consumer)
    if not m:
        die("no consumer loop")
    indent = m.group(1)
    wait_end = consumer.index(FULL_WAIT_END, m.end())
    wait_end = consumer.index("}\n", wait_end) + 2
    waits = "".join(
        f"{indent}    attn_mbar_wait(&attn_mbar[{mb} + attn_stage__], (attn_tma_phase_c >> ({mb} + attn_stage__)) & 1u);\n"
        f"{indent}    attn_tma_phase_c ^= 1u << ({mb} + attn_stage__);\n"
        for mb in mbars
    )
    consumer = (
        consumer[: m.start()]
        + f"\n{indent}unsigned attn_tma_phase_c = 0u;"
        + consumer[m.start() : wait_end]
        + waits
        + consumer[wait_end:]
    )
    return text[:p0] + producer + consumer


def main():
    if len(sys.argv) != 3:
        die("usage: tma_consumer_wait.py IN_DIR OUT_DIR")
    src, dst = sys.argv[1:]
    os.makedirs(dst, exist_ok=True)
    for f in sorted(os.listdir(src)):
        text = open(os.path.join(src, f)).read()
        if PRODUCER_START in text and "attn_tma_load_2d" in text and "attn_stage__" in text:
            text = rewrite(text)
            print(f"{f}: consumers wait on the boxes")
        open(os.path.join(dst, f), "w").write(text)


if __name__ == "__main__":
    main()
