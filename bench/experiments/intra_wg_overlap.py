#!/usr/bin/env python3
"""Rewrites a generated warp-specialized P0 source into the intra-warpgroup overlap
(FlashAttention-3's "softmax under PV"), to time that schedule on the GPU before the
compiler learns it (docs/gpu_ir.md, "What bounds P0").

    intra_wg_overlap.py IN.cu OUT.cu

The consumers' loop of one QK dot, the softmax and one PV dot becomes

    prologue:  QK(0); wait 0; softmax(0) -> P, m, l
    loop j:    [turn] QK(j); PV(j-1) from the carried P [pass]; wait 1 (QK(j) done);
               softmax(j); wait 0 (PV(j-1) done); free stage j-1; acc *= alpha(j); P = P(j)
    epilogue:  [turn] PV(last) [pass]; wait 0; free its stage

P is carried packed (bf16 pairs), the queries' rows and the ring are the generated ones. The
result is exact (same arithmetic, reordered), so the rewritten kernel can be checked for
parity as well as timed. Fails loudly when the source does not have the expected shape.
"""
import re
import sys

TAKE = "// turn Take"
PASS = "// turn Pass"
DONE = "// the MMAs of %"


def die(msg):
    sys.exit(f"intra_wg_overlap: {msg}")


def find(lines, pred, start=0, what=""):
    for i in range(start, len(lines)):
        if pred(lines[i]):
            return i
    die(f"not found: {what}")


def consumer_loops(lines):
    """(header index, closing brace index) of each consumers' tile loop."""
    loops = []
    for i, l in enumerate(lines):
        if re.match(r"\s*for \(int j_\w+ = ", l) and any(
            "attn_mbar_wait(&attn_ws_bar[attn_stage__]" in x for x in lines[i : i + 4]
        ):
            indent = l[: len(l) - len(l.lstrip())]
            loops.append((i, find(lines, lambda x: x == indent + "}", i + 1, "loop end")))
    if not loops:
        die("no consumer loop (warp-specialized source?)")
    return loops


def split_body(body):
    t1 = find(body, lambda l: TAKE in l, 0, "first take")
    p1 = find(body, lambda l: PASS in l, t1, "first pass")
    w1 = find(body, lambda l: DONE in l, p1, "first wait")
    w1e = find(body, lambda l: l.strip() == "#endif", w1, "first wait end")
    t2 = find(body, lambda l: TAKE in l, w1e, "second take")
    p2 = find(body, lambda l: PASS in l, t2, "second pass")
    w2 = find(body, lambda l: DONE in l, p2, "second wait")
    w2e = find(body, lambda l: l.strip() == "#endif", w2, "second wait end")
    return dict(
        head=body[:t1],
        take=body[t1 : t1 + 3],
        qk=body[t1 + 3 : p1],
        pass_=body[p1 : p1 + 3],
        # what the body computes between the pass and the scores' wait (the mask's test)
        softmax=body[p1 + 3 : w1] + body[w1e + 1 : t2],
        pv=body[t2 + 3 : p2],
        tail=body[w2e + 1 :],
    )


def split_softmax(sm):
    """(core, rescale, cast): the rescale of acc is what must wait for PV(j-1)."""
    r0 = find(sm, lambda l: "acc = mul(acc" in l, 0, "acc rescale")
    c0 = find(sm, lambda l: "= cast::<bf16>(p)" in l, r0, "cast of p")
    return sm[:r0], sm[r0:c0], sm[c0:]


def drop_else(block):
    """The sm_80 branches of a dot: dead on sm_90a, and they name what moved."""
    out, skip = [], False
    for l in block:
        s = l.strip()
        if s == "#else":
            skip = True
            continue
        if skip and s == "#endif":
            skip = False
        if not skip:
            out.append(l)
    return out


def main(src, dst):
    lines = open(src).read().split("\n")
    for h, e in reversed(consumer_loops(lines)):
        lines = rewrite(lines, h, e)
    open(dst, "w").write("\n".join(lines))


def rewrite(lines, h, e):
    indent = lines[h][: len(lines[h]) - len(lines[h].lstrip())]
    m = re.match(r"\s*for \(int (j_\w+) = (\w+); \1 < (\w+); \1 \+= (\w+)\) \{", lines[h])
    if not m:
        die(f"loop header: {lines[h]}")
    j, lo, hi, step = m.groups()
    b = split_body(lines[h + 1 : e])
    core, rescale, cast = split_softmax(b["softmax"])
    scores, n_s = re.search(r"float ((?:v|s_)\d+_*)\[(\d+)\];", "\n".join(b["qk"])).groups()
    mr = re.search(r"(acc_\d+_*)\[s\] = \((acc_\d+_*)\[s\] \*", "\n".join(rescale))
    acc_scaled, acc_in = mr.groups()
    pv = drop_else(b["pv"])
    pv_text = "\n".join(pv)
    acc_out, n_acc = re.search(r"float (acc_\d+_*)\[(\d+)\];", pv_text).groups()
    # PV reads the carried, packed P and the previous tile's V stage, onto the carried acc.
    pack0 = find(pv, lambda l: "unsigned attn_a[" in l, 0, "P pack")
    pack_end = find(pv, lambda l: "attn_wgmma_desc(" in l, pack0, "P pack end")
    pack = pv[pack0 + 1 : pack_end]
    decl = pv[pack0].strip()
    ks, js = re.search(r"attn_a\[(\d+)\]\[(\d+)\]\[4\]", decl).groups()
    pv = pv[:pack0] + pv[pack_end:]
    pv_text = "\n".join(pv).replace("attn_a[", "attn_pp[")
    pv_text = pv_text.replace(f"= {acc_scaled}[s];", f"= {acc_in}[s];")
    pv_text = pv_text.replace("attn_stage__ *", "attn_prev_stage *")
    pv = pv_text.split("\n")
    pack = [l.replace("attn_a[", "attn_pp[") for l in pack]
    # the tail: free the stage, carry m and l (acc is carried below), next stage
    tail = "\n".join(b["tail"])
    free = [l for l in b["tail"] if "attn_warp_sync()" in l or "attn_mbar_arrive" in l]
    free = [l.replace("attn_stage__", "attn_prev_stage") for l in free]
    carry_ml = re.findall(r"(\s*#pragma unroll\n\s*for \(int s = 0; s < 2; \+\+s\) \{\n[^\n]*\n\s*\})", tail)
    if len(carry_ml) != 2:
        die("m and l carries")
    carry_ml = "\n".join(carry_ml).split("\n")
    step_stage = [l for l in b["tail"] if re.match(r"\s*attn_stage__ (\^=|= )", l)]
    if len(step_stage) != 1:
        die("stage step")
    carry_acc = [
        indent + "    #pragma unroll",
        indent + f"    for (int s = 0; s < {n_acc}; ++s) {{ {acc_in}[s] = {acc_scaled}[s]; }}",
    ]
    wait = lambda n, regs, size: [
        indent + "    #if defined(__CUDA_ARCH_FEAT_SM90_ALL)",
        indent + f"    attn_wgmma_wait<{n}>();",
        indent + "    #pragma unroll",
        indent + f"    for (int s = 0; s < {size}; ++s) {{ attn_reg_fence({regs}[s]); }}",
        indent + "    #endif",
    ]
    fence_pp = [
        indent + "    #pragma unroll",
        indent + f"    for (int k = 0; k < {ks}; ++k) for (int j = 0; j < {js}; ++j) {{ asm volatile(\"\" : \"+r\"(attn_pp[k][j][0]), \"+r\"(attn_pp[k][j][1]), \"+r\"(attn_pp[k][j][2]), \"+r\"(attn_pp[k][j][3]) :: \"memory\"); }}",
    ]
    rescale_after = [l.replace(f"{acc_in}[s]", f"{acc_out}[s]") for l in rescale]
    to_prev = [indent + "    attn_prev_stage = attn_stage__;"]
    out = lines[:h] + [indent + "{"]
    out += [indent + f"unsigned {decl.split(' ', 1)[1].replace('attn_a', 'attn_pp')}",
            indent + "int attn_prev_stage = 0;",
            indent + f"int {j} = {lo};",
            indent + f"if ({j} < {hi}) {{"]
    out += b["head"] + b["take"] + b["qk"] + b["pass_"] + wait(0, scores, n_s)
    out += core + rescale + cast + pack + carry_ml + carry_acc + to_prev + step_stage
    out += [indent + "}",
            indent + f"for ({j} += {step}; {j} < {hi}; {j} += {step}) {{"]
    out += b["head"] + b["take"] + b["qk"] + pv + b["pass_"] + wait(1, scores, n_s)
    out += core + wait(0, acc_out, n_acc) + fence_pp + free + rescale_after + cast + pack
    out += carry_ml + carry_acc + to_prev + step_stage
    out += [indent + "}",
            indent + f"if ({lo} < {hi}) {{"]
    out += b["take"] + pv + b["pass_"] + wait(0, acc_out, n_acc) + fence_pp + free
    out += [indent + "    #pragma unroll",
            indent + f"    for (int s = 0; s < {n_acc}; ++s) {{ {acc_in}[s] = {acc_out}[s]; }}",
            indent + "}", indent + "}"]
    return out + lines[e + 1 :]


if __name__ == "__main__":
    main(*sys.argv[1:3])
