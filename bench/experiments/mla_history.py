#!/usr/bin/env python3
"""Rewrites the generated sm_90a MLA history kernel (two consumer warpgroups, each a column
half of the scores and of the output), to time on the GPU what a compiler change would buy
before writing it. Timings only: an edited kernel is never checked for parity here.

    mla_history.py VARIANT[,VARIANT...] IN.cu OUT.cu

Variants (`bars`, the loop's exchanges without their leading barrier, went in session 28:
the code generator's scratch ledger now emits that loop):
  chains2 the scores' 32 latent MMAs of a warpgroup as two interleaved accumulator chains
          (even and odd k-steps, added after the wait) instead of one chain of dependent
          m64n32k16: whether the chain's latency, not the tensor cores or shared memory,
          bounds the scores.
  n64     each warpgroup's scores MMAs as m64n64k16 over the whole key tile (both warpgroups
          compute all 64 columns; each keeps its own half): twice the tensor work and a third
          more shared-memory reads per instruction, the same instruction count. Whether the
          m64n32k16 scores are bound by the instruction count (then n64 costs the same), by
          shared memory (+33 %) or by the tensor cores (+100 %).
  splitk  the scores split along their 576-wide reduction instead of their columns: each
          warpgroup m64n64k16 over its half of the latent and rope columns (144 KB of shared
          reads a tile instead of 216), then each writes the other's column half of its f32
          partial (warpgroup 0 into the scratch buffer, 1 into the stage's rope columns, dead
          once both warpgroups' scores completed: a barrier first), a barrier, and each adds
          the other's half to its own.
  qregsK  the first K of the 32 latent k-steps of the scores (K = 4, 8, 12...) take the
          queries' A fragments from registers (loaded once before the loop with ldmatrix,
          `wgmma` RS form) instead of shared memory: each such k-step reads 2 KB less shared
          memory a warpgroup, if the registers are there (the accumulator half holds 128).
          Shipped as `gpu_ir::hold_a` (12 k-steps); on its output this holds more.
  nocopy  the producer warpgroup's copies of the key tiles removed (its waits and arrivals
          kept): the loop's time with copies that cost nothing and land at once, the bound
          of any ring (results garbage). `mla_seesaw.py IN OUT fine nocopy` is the same bound
          for FlashMLA's schedule.
  prefetchN  the producer also asks L2 for the page of the key tile N tiles ahead of the
          one it copies (`cp.async.bulk.prefetch.L2`, one thread, the page's 72 KB): a ring
          N tiles deeper in L2 instead of shared memory, whose copies then miss DRAM less.
  nocurrent  (applies to the current-part kernel) it returns at once: what the side
          stream's kernel, enqueued first, costs the history beside it.
  stamps  clock64() phase sums of the consumers (prologue, stage wait, scores' MMAs, row max,
          softmax, P staging, PV's MMAs, loop tail, epilogue), printed by thread 0 of each
          consumer warpgroup of a few programs: `PH block wg cycles...`. The printf makes
          ptxas serialize every wgmma of the kernel (C7510): read the phases' shares.
"""
import re
import sys

CONSUMER_START = "attn_setmaxnreg_inc<ATTN_WS_CONSUMER_REGS>();"
CONSUMER_END = "\n    }\n    #else\n    if (threadIdx.x >= 256) return;"


def die(msg):
    sys.exit(f"mla_history.py: {msg}")


def consumer(text):
    a = text.find(CONSUMER_START)
    b = text.find(CONSUMER_END, a)
    if a < 0 or b < 0:
        die("no warp-specialized consumer section")
    return a, b


def once(text, old, new, what):
    if old not in text:
        die(f"no {what}")
    return text.replace(old, new, 1)


def chains2(body):
    decl = "float v134[16];"
    body = once(body, decl, decl + " float v134b[16];", "scores accumulator")
    # The k-step's line: the asm, or (queries held, `gpu_ir::hold_a`) an if/else of two.
    m = re.search(r"\n(\s*)((?:if \(ks < \d+\) \{ )?asm volatile\([^\n]*\"r\"\(\(int\)\(ks != 0\)\)\);(?: \})?)\n", body)
    if not m or "v134[" not in m.group(2):
        die("no latent score MMA")
    a = m.group(2)
    if a.startswith("if") and "else" not in a:
        die("no latent score MMA")
    b = a.replace("v134[", "v134b[").replace("(int)(ks != 0)", "(int)(ks >= 2)")
    a = a.replace("(int)(ks != 0)", "(int)(ks >= 2)")
    body = body[:m.start(2)] + "if (ks & 1) { " + b + " } else { " + a + " }" + body[m.end(2):]
    w = "attn_wgmma_wait<0>();"
    i = body.find(w)
    if i < 0:
        die("no scores wait")
    add = " #pragma unroll\n for (int s = 0; s < 16; ++s) v134[s] += v134b[s];\n"
    return body[:i + len(w)] + "\n" + add + body[i + len(w):]


def scores_into_n64(body):
    """The scores' latent and rope MMAs as m64n64k16 into `attn_s64[32]` (declared beside
    the scores' accumulator); each warpgroup's B descriptor is left for the caller."""
    decl = "float v134[16];"
    body = once(body, decl, decl + " float attn_s64[32];", "scores accumulator")
    outs = ", ".join(f"%{i}" for i in range(32))
    ops = ", ".join(f'"+f"(attn_s64[{i}])' for i in range(32))
    asm = re.compile(r'asm volatile\("\{\\n\.reg \.pred p;\\nsetp\.ne\.b32 p, %18, 0;\\n'
                     r'wgmma\.mma_async\.sync\.aligned\.m64n32k16[^"]*"[^;]*"r"\(([^;]*)\)\);')
    ms = list(asm.finditer(body))
    if len(ms) < 2 or "v134[" not in ms[0].group(0) or "v134[" not in ms[1].group(0):
        die("no m64n32k16 scores MMAs")
    for m in reversed(ms[:2]):
        new = ('asm volatile("{\\n.reg .pred p;\\nsetp.ne.b32 p, %34, 0;\\n'
               'wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {' + outs + '}, %32, %33, p, 1, 1, 0, 0;\\n}\\n" : '
               + ops + ' : "l"(attn_ad), "l"(attn_bd), "r"(' + m.group(1) + '));')
        body = body[:m.start()] + new + body[m.end():]
    return body


def n64(body):
    body = scores_into_n64(body)
    for buf in ("attn_buf1 + attn_stage__ * 32768", "attn_buf3 + attn_stage__ * 4096"):
        body = once(body, f"attn_smem_addr(({buf})) + attn_warp_uniform((attn_warp / 4) * 4096);",
                    f"attn_smem_addr(({buf}));", "scores B descriptor")
    w = "attn_wgmma_wait<0>();"
    i = body.find(w)
    pick = (" #pragma unroll\n for (int s = 0; s < 16; ++s) v134[s] = (attn_warp / 4) ? "
            "attn_s64[16 + s] : attn_s64[s];\n")
    return body[:i + len(w)] + "\n" + pick + body[i + len(w):]


def qregs(body, k):
    """Scores' k-steps below `k` with A (the latent queries) from registers."""
    if "attn_warp_uniform((attn_warp / 4) * 4096);" not in body:
        die("not the two-warpgroup history")
    frags = (
        f" unsigned attn_qa[{k}][4];\n"
        " {\n const int attn_lane = tid & 31; const int slab = attn_warp % 4;\n"
        " #pragma unroll\n"
        f" for (int ks = 0; ks < {k}; ++ks) {{\n const int k0 = ks * 16;\n"
        " attn_ldsm_x4(attn_qa[ks][0], attn_qa[ks][1], attn_qa[ks][2], attn_qa[ks][3], attn_buf0 + "
        "((k0 + (attn_lane >> 4) * 8) >> 6) * 4096 + (slab * 16 + (attn_lane & 15)) * 64 + "
        "(((((k0 + (attn_lane >> 4) * 8) >> 3) & 7) ^ ((slab * 16 + (attn_lane & 15)) & 7)) << 3));\n"
        " }\n }\n"
    )
    body = once(body, "attn_bar_sync(4, 256); // CopiesVisible\n",
                "attn_bar_sync(4, 256); // CopiesVisible\n" + frags, "prologue end")
    asm = re.compile(r'asm volatile\("\{\\n\.reg \.pred p;\\nsetp\.ne\.b32 p, %18, 0;\\n'
                     r'wgmma\.mma_async\.sync\.aligned\.m64n32k16\.f32\.(b?f16)\.b?f16 \{[^}]*\}, %16, %17, p, 1, 1, 0, 0;\\n\}\\n" : '
                     r'([^:]*) : "l"\(attn_ad\), "l"\(attn_bd\), "r"\(\(int\)\(ks != 0\)\)\);')
    m = asm.search(body)
    if not m:
        die("no latent scores MMA")
    ty = m.group(1)
    outs = ", ".join(f"%{i}" for i in range(16))
    rs = ('asm volatile("{\\n.reg .pred p;\\nsetp.ne.b32 p, %21, 0;\\n'
          f'wgmma.mma_async.sync.aligned.m64n32k16.f32.{ty}.{ty} {{' + outs + '}, {%16, %17, %18, %19}, %20, p, 1, 1, 0;\\n}\\n" : '
          + m.group(2) + ' : "r"(attn_qa[ks][0]), "r"(attn_qa[ks][1]), "r"(attn_qa[ks][2]), "r"(attn_qa[ks][3]), '
          '"l"(attn_bd), "r"((int)(ks != 0)));')
    new = f"if (ks < {k}) {{ {rs} }} else {{ {m.group(0)} }}"
    return body[:m.start()] + new + body[m.end():]


def splitk(body):
    body = scores_into_n64(body)
    # Each warpgroup's half of the reduction: latent columns 256 w.., rope columns 32 w..
    body = once(body, "attn_smem_addr((attn_buf1 + attn_stage__ * 32768)) + attn_warp_uniform((attn_warp / 4) * 4096);",
                "attn_smem_addr((attn_buf1 + attn_stage__ * 32768)) + attn_warp_uniform((attn_warp / 4) * 32768);", "latent B")
    body = once(body, "const unsigned attn_adesc = attn_smem_addr(attn_buf0);",
                "const unsigned attn_adesc = attn_smem_addr(attn_buf0) + (attn_warp / 4) * 32768;", "latent A")
    body = once(body, "for (int ks = 0; ks < 32; ++ks)", "for (int ks = 0; ks < 16; ++ks)", "latent k-steps")
    body = once(body, "attn_smem_addr((attn_buf3 + attn_stage__ * 4096)) + attn_warp_uniform((attn_warp / 4) * 4096);",
                "attn_smem_addr((attn_buf3 + attn_stage__ * 4096)) + attn_warp_uniform((attn_warp / 4) * 64);", "rope B")
    body = once(body, "const unsigned attn_adesc = attn_smem_addr(attn_buf2);",
                "const unsigned attn_adesc = attn_smem_addr(attn_buf2) + (attn_warp / 4) * 64;", "rope A")
    body = once(body, "for (int ks = 0; ks < 4; ++ks)", "for (int ks = 0; ks < 2; ++ks)", "rope k-steps")
    fence = "attn_reg_fence(v134[s]);"
    body = once(body, "for (int s = 0; s < 16; ++s) {\n                    " + fence,
                "for (int s = 0; s < 32; ++s) {\n                    attn_reg_fence(attn_s64[s]);", "register fence")
    w = "attn_wgmma_wait<0>();"
    i = body.find(w)
    j = body.find("}", body.find("attn_reg_fence(attn_s64[s]);", i)) + 1
    swap = """
    {
        const int attn_w = attn_warp / 4, attn_t = tid & 127;
        float* attn_rope_free = reinterpret_cast<float*>(attn_buf3 + attn_stage__ * 4096);
        float* attn_mine = attn_w ? attn_rope_free : reinterpret_cast<float*>(attn_scratch);
        float* attn_theirs = attn_w ? reinterpret_cast<float*>(attn_scratch) : attn_rope_free;
        attn_bar_sync(4, 256);
        #pragma unroll
        for (int s = 0; s < 16; ++s) attn_mine[s * 128 + attn_t] = attn_w ? attn_s64[s] : attn_s64[16 + s];
        attn_bar_sync(4, 256);
        #pragma unroll
        for (int s = 0; s < 16; ++s) v134[s] = (attn_w ? attn_s64[16 + s] : attn_s64[s]) + attn_theirs[s * 128 + attn_t];
    }
"""
    return body[:j] + swap + body[j:]


def stamps(body):
    body = once(body, CONSUMER_START, CONSUMER_START
                + " long long attn_t0 = clock64(); long long attn_ph[9] = {0};", "consumer start")
    body = once(body, "attn_bar_sync(4, 256); // CopiesVisible",
                "attn_bar_sync(4, 256); // CopiesVisible\n ATTN_PH(0);", "prologue end")
    wait = re.compile(r"(attn_mbar_wait\(&attn_ws_bar\[attn_stage__\], \(attn_ws_phase >> attn_s\) & 1u\);\n"
                      r"\s*attn_ws_phase \^= 1u << attn_s;\n\s*\})")
    body, n = wait.subn(r"\1 ATTN_PH(1);", body, count=1)
    if n != 1:
        die("no full-stage wait")
    waits = [m.start() for m in re.finditer(r"attn_wgmma_wait<0>\(\);", body)]
    if len(waits) < 2:
        die("fewer than two MMA waits")
    w = "attn_wgmma_wait<0>();"
    # PV's wait first (later offset), so the first offset stays valid.
    body = body[:waits[1]] + w + " ATTN_PH(6);" + body[waits[1] + len(w):]
    body = body[:waits[0]] + w + " ATTN_PH(2);" + body[waits[0] + len(w):]
    body, n = re.subn(r"(// L\d+: m_raw = max\(m_i,)", r"ATTN_PH(3);\n\1", body, count=1)
    if n != 1:
        die("no row max")
    body = once(body, "unsigned short* sa = reinterpret_cast<unsigned short*>(attn_scratch);",
                "ATTN_PH(4); unsigned short* sa = reinterpret_cast<unsigned short*>(attn_scratch);",
                "P staging")
    body = once(body, "const unsigned long long attn_bd0 = attn_wgmma_desc(attn_bdesc, 8192, 1024);",
                "ATTN_PH(5); const unsigned long long attn_bd0 = attn_wgmma_desc(attn_bdesc, 8192, 1024);",
                "PV issue")
    body = once(body, "attn_stage__ ^= 1;\n", "ATTN_PH(7); attn_stage__ ^= 1;\n", "loop end")
    return body + (
        "\n ATTN_PH(8);"
        " if ((threadIdx.x & 127) == 0 && (blockIdx.x == 0 || blockIdx.x == 131 || blockIdx.x == 200))"
        ' printf("PH %d %d %lld %lld %lld %lld %lld %lld %lld %lld %lld\\n", (int)blockIdx.x,'
        " (int)(threadIdx.x >> 7), attn_ph[0], attn_ph[1], attn_ph[2], attn_ph[3], attn_ph[4],"
        " attn_ph[5], attn_ph[6], attn_ph[7], attn_ph[8]);"
    )


HEADER = (
    '#include "attn_prelude.cuh"\n'
    "#define ATTN_PH(k) do { long long attn_n = clock64(); attn_ph[k] += attn_n - attn_t0; "
    "attn_t0 = attn_n; } while (0)\n"
)


NOCOPY = (
    "template <class T>\n"
    "__device__ __forceinline__ void attn_nocopy16(unsigned short*, const T*, bool) {}\n"
)

PREFETCH = (
    "__device__ __forceinline__ void attn_l2_prefetch(const void* p, unsigned bytes) {\n"
    "#if defined(__CUDA_ARCH_FEAT_SM90_ALL)\n"
    '    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");\n'
    "#endif\n"
    "}\n"
)


def producer(text):
    """The warp-specialized producer section: from its register drop to the consumers."""
    a = text.find("attn_setmaxnreg_dec<ATTN_WS_PRODUCER_REGS>();")
    b = text.find(CONSUMER_START, a)
    if a < 0 or b < 0:
        die("no warp-specialized producer section")
    return a, b


def with_producer(text, helper, edit):
    """`text` with its producer section edited by `edit` and `helper` defined before the
    kernel."""
    a, b = producer(text)
    kernel = text.find('extern "C" __global__')
    return text[:kernel] + helper + text[kernel:a] + edit(text[a:b]) + text[b:]


def no_copy(text):
    """The producer's `cp.async` copies replaced by a no-op (it still waits and arrives)."""

    def edit(prod):
        if "attn_cp_async16(" not in prod:
            die("no producer copies")
        return prod.replace("attn_cp_async16(", "attn_nocopy16(")

    return with_producer(text, NOCOPY, edit)


def prefetch(text, ahead):
    """The producer's loop, at each tile j, asks L2 for the page of tile j + ahead."""

    def edit(prod):
        loop = re.search(r"for \(int (j_\w+) = (lo_\w+); \1 < (hi_\w+); \1 \+= (\w+)\) \{\n", prod)
        bt = re.search(r"const int\* (bt_row_\w+) = ", prod)
        if not loop or not bt:
            die("no producer loop")
        j, hi, step = loop.group(1), loop.group(3), loop.group(4)
        ask = (
            f"            if (tid == 0 && {j} + {ahead} * {step} < {hi}) attn_l2_prefetch(cache + "
            f"(long long)attn_ld({bt.group(1)} + {j} + {ahead} * {step}) * cache_stride_block, "
            f"(unsigned)(cache_stride_block * 2));\n"
        )
        return prod[:loop.end()] + ask + prod[loop.end():]

    return with_producer(text, PREFETCH, edit)


def producer_variant(v):
    """The rewrite of the producer section that variant `v` names, or None."""
    if v == "nocopy":
        return no_copy
    if v.startswith("prefetch"):
        return lambda text: prefetch(text, int(v[len("prefetch"):]))
    return None


def no_current(text):
    """The current-part kernel returning at once (what the side stream's kernel costs the
    history it runs beside)."""
    m = re.search(r'extern "C" __global__ void [^{]*mla_current_\w+\([^{]*\{\n', text)
    if not m:
        die("no mla_current entry")
    return text[:m.end()] + "    return;\n" + text[m.end():]


def main(variants, src, dst):
    text = open(src).read()
    if "nocurrent" in variants.split(",") and "mla_current" in text:
        open(dst, "w").write(no_current(text))
        return
    variants = ",".join(v for v in variants.split(",") if v != "nocurrent")
    consumer_variants = []
    for v in variants.split(","):
        edit = producer_variant(v)
        if edit is None:
            consumer_variants.append(v)
        elif "mla_history" in text:
            try:
                text = edit(text)
            except SystemExit as e:
                print(f"{src}: left unchanged by {v} ({e})", file=sys.stderr)
    variants = ",".join(consumer_variants)
    if "mla_history" not in text or not variants:
        open(dst, "w").write(text)
        return
    try:
        a, b = consumer(text)
        body = text[a:b]
        for v in variants.split(","):
            if v.startswith("qregs"):
                body = qregs(body, int(v[len("qregs"):]))
                continue
            body = {"chains2": chains2, "n64": n64, "splitk": splitk, "stamps": stamps}[v](body)
    except SystemExit as e:
        # Another specialization of the kernel (the generated text differs): left as is.
        print(f"{src}: left unchanged ({e})", file=sys.stderr)
        open(dst, "w").write(text)
        return
    text = text[:a] + body + text[b:]
    text = text.replace('#include "attn_prelude.cuh"\n', HEADER, 1)
    open(dst, "w").write(text)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        die("usage: mla_history.py VARIANT[,VARIANT...] IN.cu OUT.cu")
    main(*sys.argv[1:])
