#!/usr/bin/env python3
"""The MLA step's current part on few SMs, as a rewrite of the generated `mla_current`: what a
persistent current part would buy, timed and checked for parity before the compiler learns it.

    mla_current_persistent.py IN.cu OUT.cu PROGRAMS

The current part runs on the side stream, enqueued before the history so that its programs
reach the SMs first. At L1 its grid is (128 tokens, 4 head blocks): 512 programs of 54 KB, four
an SM, so for its ~20 us every SM holds some of them and none can take a history program
(217 KB). The history's first wave waits for them.

The history's 256 programs leave 132 * 2 - 256 = 8 SM-slots of slack in its two waves. Here
only the first PROGRAMS programs of the launched grid work: each loops over the grid's
(token, head block) items with stride PROGRAMS (item = y * gridDim.x + x, as the grid would
have numbered them), and every other program returns at once. So the launch is unchanged
(the plan's grid), the results are the same, and the part holds PROGRAMS SMs for longer
instead of every SM for ~20 us. PROGRAMS = 0 returns from every program: the bound of a
current part that costs nothing (wrong results, timing only). Write each variant to its own
directory: a variant written over its input (PROGRAMS 0 first) leaves every later one empty.

Measured (H200, 2026-12-04): correct (`gpu_mla_op` 15/15 down to PROGRAMS = 1) and slower.
The programs are latency-bound, and looping makes the latency serial: on 16 programs the
part took 118 us and L1's step 442 us (351 as generated). The bound (PROGRAMS = 0): L1's
graph-replayed step 339 -> 329 us (docs/gpu_ir.md, "What the current part costs the step").
"""
import re
import sys


def die(msg):
    sys.exit(f"mla_current_persistent.py: {msg}")


def rewrite(text, programs):
    head = re.search(r"\n    int (t_\d+) = \(int\)blockIdx\.x;\n", text)
    if not head:
        die("no `t = program_id(0)` of the current part")
    ys = re.findall(r"\n    int (v\d+) = \(int\)blockIdx\.y;\n", text)
    if len(ys) != 1 or text.count("blockIdx") != 2:
        die("expected exactly program_id(0) and program_id(1)")
    if programs == 0:
        return text[: head.start()] + "\n    return;" + text[head.start():]
    loop = (
        f"\n    const int attn_items = (int)(gridDim.x * gridDim.y);"
        f"\n    const int attn_first = (int)(blockIdx.y * gridDim.x + blockIdx.x);"
        f"\n    if (attn_first >= {programs}) return;"
        f"\n    for (int attn_item = attn_first; attn_item < attn_items; attn_item += {programs}) {{"
        f"\n    int {head.group(1)} = attn_item % (int)gridDim.x;\n"
    )
    text = text[: head.start()] + loop + text[head.end():]
    text = text.replace(f"int {ys[0]} = (int)blockIdx.y;", f"int {ys[0]} = attn_item / (int)gridDim.x;")
    end = text.rstrip().rfind("}")
    # the next item's copies overwrite the buffers this item's staged store reads
    return text[:end] + "    __syncthreads();\n    }\n}\n"


def main(src, dst, programs):
    text = open(src).read()
    if re.search(r"__global__ void (__launch_bounds__\([^)]*\) )?mla_current_", text):
        text = rewrite(text, int(programs))
    open(dst, "w").write(text)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        die("usage: mla_current_persistent.py IN.cu OUT.cu PROGRAMS")
    main(*sys.argv[1:])
