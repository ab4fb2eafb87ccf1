#!/usr/bin/env python3
"""Rewrites a generated warp-specialized source so the producer's copies complete on the
stage's mbarrier (`cp.async.mbarrier.arrive.noinc`) instead of the producer waiting for
them (`cp.async.wait_group`, then a plain arrive), to time that on the GPU first.

    copy_arrive.py IN.cu OUT.cu

As generated, the producer announces stage j only after it issued tile j + S - 1's copies,
so a consumer that frees stage j - S + 1 late (the intra-warpgroup overlap frees it one
iteration later) waits for the producer's whole next issue. With the copies arriving on
their own, the producer only ever waits for free stages. The consumers fence the async
proxy after the full-barrier wait (their MMAs read what the copies wrote).
"""
import re
import sys

HELPER = (
    '#include "attn_prelude.cuh"\n'
    "__device__ __forceinline__ void attn_cp_mbar_arrive(unsigned long long* bar) {\n"
    '    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" '
    ':: "r"(attn_smem_addr(bar)) : "memory");\n}\n'
)


def die(msg):
    sys.exit(f"copy_arrive: {msg}")


def main(src, dst):
    text = open(src).read()
    m = re.search(r"attn_mbar_init\(&attn_ws_bar\[s\], (\d+)u\);", text)
    if not m:
        die("no warp-specialized ring")
    producer_warps = int(m.group(1))
    text = text.replace(m.group(0), f"attn_mbar_init(&attn_ws_bar[s], {32 * producer_warps}u);", 1)
    text = text.replace('#include "attn_prelude.cuh"\n', HELPER, 1)
    # the producer's announce: wait for its copies, fence, one arrive a warp
    announce = re.compile(
        r"\n\s*// this thread's copies of the stage landed, visible to wgmma\n"
        r"\s*attn_cp_wait<\d+>\(\);\n\s*attn_fence_proxy_async\(\);\n\s*attn_warp_sync\(\);\n"
        r"\s*if \(\(tid & 31\) == 0\) attn_mbar_arrive\(&attn_ws_bar\[attn_stage_\]\);"
    )
    text, n = announce.subn("", text)
    if n == 0:
        die("no producer announce")
    sizes = set(re.findall(r"attn_dst = \(attn_buf\d+ \+ \(.*\) \* (\d+)\);", text))
    if len(sizes) != 1:
        die(f"stage sizes {sizes}")
    stage_size = int(sizes.pop())
    lines = text.split("\n")
    out, issues = [], 0
    stage_re = re.compile(r"\s*unsigned short\* const attn_dst = \(attn_buf\d+ \+ (.+)\);$")
    pending = []  # (closing line, stage)
    lo = next(i for i, l in enumerate(lines) if "attn_setmaxnreg_dec" in l)
    hi = next(i for i, l in enumerate(lines) if i > lo and l.strip() == "return;")
    for i, l in enumerate(lines):
        ms = stage_re.match(l)
        if ms and lo < i < hi:
            expr = ms.group(1)
            stage = re.sub(r"^\((.*)\) \* \d+$", r"\1", expr)
            if re.fullmatch(r"\d+", stage):
                stage = str(int(stage) // stage_size)
            head = out[-1]
            indent = head[: len(head) - len(head.lstrip())]
            if not head.strip().startswith("if ("):
                die(f"issue without a guard: {head}")
            pending.append((indent + "}", stage))
        if pending and l == pending[-1][0]:
            close, stage = pending.pop()
            out.append(close[:-1] + f"    attn_cp_mbar_arrive(&attn_ws_bar[{stage}]);")
            issues += 1
        out.append(l)
    if issues < 2:
        die("producer issues not found")
    text = "\n".join(out)
    # consumers: the full wait, then the async-proxy fence
    text, n = re.subn(
        r"(attn_mbar_wait\(&attn_ws_bar\[attn_stage__\], [^;]+;\n\s*attn_ws_phase \^= 1u << attn_s;)",
        r"\1 attn_fence_proxy_async();",
        text,
    )
    if n == 0:
        die("no consumer wait")
    # the producer leaves only after its copies landed
    text = re.sub(r"(\n\s*)return;\n(\s*)\}\n(\s*)attn_setmaxnreg_inc",
                  r"\1attn_cp_wait<0>();\1return;\n\2}\n\3attn_setmaxnreg_inc", text, count=1)
    open(dst, "w").write(text)
    print(f"copy_arrive: {issues} issues arrive on their stage")


if __name__ == "__main__":
    main(*sys.argv[1:3])
