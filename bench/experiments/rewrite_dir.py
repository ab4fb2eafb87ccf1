"""The driver the source-rewrite experiments share: every file of IN_DIR (an
`ATTN_SOURCE_DUMP` directory) is copied to OUT_DIR, the kernels `applies` picks rewritten
by `rewrite` (which calls `sys.exit` with its reason when the source is not what it
expects)."""
import os
import sys


def rewrite_dir(name, applies, rewrite, done):
    if len(sys.argv) != 3:
        sys.exit(f"{name}: usage: {name} IN_DIR OUT_DIR")
    src, dst = sys.argv[1:]
    os.makedirs(dst, exist_ok=True)
    for f in sorted(os.listdir(src)):
        text = open(os.path.join(src, f)).read()
        if applies(text):
            text = rewrite(text)
            print(f"{f}: {done}")
        open(os.path.join(dst, f), "w").write(text)
