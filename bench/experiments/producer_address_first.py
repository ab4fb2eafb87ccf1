#!/usr/bin/env python3
"""The producer's copy addresses (block-table loads included) computed before it waits for
the stage to be free, not after (docs/gpu_ir.md, "The producer's addresses before its
wait"). Rewrites every dumped kernel source of DIR into OUT:

    producer_address_first.py DIR OUT [identity_pages]

In the generated producer a fill is `if (c) { wait for the stage's release } if (c) { for
each row: address (a block-table load), copies }`: the asm wait keeps the compiler from
moving the block-table loads above it, so each fill waits for their latency after the
stage frees. Rewritten: `if (c) { addresses of every row; wait; copies }`. The results are
exact (only the order changes), so parity tests can run on the rewrite.

`identity_pages` instead drops every block-table load (a page is its logical block: wrong
pages, a timing only): what hiding those loads could buy at most.
"""
import os
import re
import sys

FILL = re.compile(
    r"(?P<ind>[ ]*)if \((?P<cond>[^\n]*)\) \{\n"
    r"(?P<wait>[ ]*\{\n[ ]*const unsigned attn_s = [^\n]*\n[ ]*attn_mbar_wait\([^\n]*\n"
    r"[ ]*attn_ws_phase \^= [^\n]*\n[ ]*\}\n)"
    r"[ ]*\}\n"
    r"(?P<comment>[ ]*// L\d+: [^\n]*\n)"
    r"(?P=ind)if \((?P=cond)\) \{\n"
    r"(?P<dsts>(?:[ ]*(?:unsigned short\* const attn_dst[^\n]*|// [^\n]*)\n)+)"
    r"(?P<pragma>[ ]*#pragma unroll\n)"
    r"(?P<loop>[ ]*for \(int p = 0; p < (?P<rows>\d+); \+\+p\) \{\n)"
    r"(?P<row>[ ]*const int attn_row = [^\n]*\n)"
    r"(?P<src>[ ]*)const auto attn_src = (?P<expr>[^\n]*);\n"
)


def closing(s, i):
    """The index of the parenthesis that closes the one at `s[i]`."""
    depth = 0
    for j in range(i, len(s)):
        depth += {"(": 1, ")": -1}.get(s[j], 0)
        if depth == 0:
            return j
    raise ValueError("unbalanced")


def opening(s, j):
    """The index of the parenthesis that opens the one closing at `s[j]`."""
    depth = 0
    for i in range(j, -1, -1):
        depth += {")": 1, "(": -1}.get(s[i], 0)
        if depth == 0:
            return i
    raise ValueError("unbalanced")


def rewrite(m):
    """The fill with its block-table loads (one a row, under the row's guard) into
    `attn_pages` before the wait: 32-bit page numbers, not 64-bit addresses, so the
    40-register producer does not spill."""
    g = m.groupdict()
    expr = g["expr"]
    q = expr.index(" ? attn_ld(")
    cond = expr[opening(expr, q - 1) : q]
    ld_start = q + 3
    ld_end = closing(expr, ld_start + len("attn_ld"))
    ld = expr[ld_start : ld_end + 1]
    expr = expr[:ld_start] + "attn_pages[p]" + expr[ld_end + 1 :]
    return (
        f"{g['comment']}{g['ind']}if ({g['cond']}) {{\n{g['dsts']}"
        f"{g['src'][:-4]}int attn_pages[{g['rows']}];\n"
        f"{g['pragma']}{g['loop']}{g['row']}"
        f"{g['src']}attn_pages[p] = {cond} ? {ld} : 0;\n"
        f"{g['src'][:-4]}}}\n"
        f"{g['wait']}"
        f"{g['pragma']}{g['loop']}{g['row']}"
        f"{g['src']}const auto attn_src = {expr};\n"
    )


def identity_pages(text):
    """Every `attn_ld((bt_row_N + (IDX)))` replaced by `(IDX)`."""
    n = 0
    while (k := text.find("attn_ld((bt_row")) >= 0:
        end = closing(text, k + len("attn_ld"))
        inner = text[k + len("attn_ld") + 1 : end]
        text = text[:k] + "(" + inner[inner.index(" + ") + 3 : -1] + ")" + text[end + 1 :]
        n += 1
    return text, n


def main():
    src, dst = sys.argv[1:3]
    mode = sys.argv[3] if len(sys.argv) > 3 else "address_first"
    os.makedirs(dst, exist_ok=True)
    for f in sorted(os.listdir(src)):
        text = open(os.path.join(src, f)).read()
        if mode == "identity_pages":
            text, n = identity_pages(text)
            print(f"{f}: {n} block-table loads gone")
        else:
            text, n = FILL.subn(rewrite, text)
            print(f"{f}: {n} fills with their addresses first")
        open(os.path.join(dst, f), "w").write(text)


if __name__ == "__main__":
    main()
