#!/usr/bin/env python3
"""The KV tiles of P0's loop visited last to first (a timing only: the online softmax's
previous-stage PV then pairs the wrong tiles, the results are garbage). Asks whether the
order matters: walking 0, 1, 2, ... every program of a wave reads the same K/V tiles of
its head at about the same time; from its diagonal down, neighbouring query blocks are a
tile apart. Rewrites every dumped kernel source of DIR into OUT:

    kv_reverse.py DIR OUT

The producer's tile `X` (the prologue's `lo`, `lo + step`, the loop's `j + 2 step`) and the
consumers' `j` become `max(num_tiles - 1 - (X - lo), 0)` where they scale to a key
(`attn_wmul(X, TILE)`); loop control is left alone.
"""
import os
import re
import sys


def rev(x, sfx):
    return f"attn_max(num_tiles_140{sfx} - 1 - (({x}) - v40{sfx}), 0)"


def rewrite(text):
    n = 0
    # Producer (no suffix) and consumers (`_`): the key scale is `v65`.
    for sfx, tiles in (("", r"v40|\(v40 \+ v35\)|\(j_142 \+ 2 \* v35\)"), ("_", r"j_142_")):
        pat = re.compile(r"attn_wmul\((" + tiles + r"), v65" + re.escape(sfx) + r"\)")
        text, k = pat.subn(lambda m: f"attn_wmul({rev(m.group(1), sfx)}, v65{sfx})", text)
        n += k
    return text, n


def main():
    src, dst = sys.argv[1:3]
    os.makedirs(dst, exist_ok=True)
    for f in sorted(os.listdir(src)):
        text, n = rewrite(open(os.path.join(src, f)).read())
        print(f"{f}: {n} tile indices reversed")
        open(os.path.join(dst, f), "w").write(text)


if __name__ == "__main__":
    main()
