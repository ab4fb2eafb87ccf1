#!/usr/bin/env bash
# Where the generated seesaw stands against the split schedule and FlashMLA's (hand-written)
# one, in one process tree on one GPU: L1's step and history stage for
#   split      the history as shipped (split scores, `cp.async`)
#   seesaw     ATTN_CODEGEN_ENABLE=seesaw as generated (four meetings a pair of tiles)
#   halfmeet   the same, the barriers before handoff writes dropped } mla_seesaw_meetings.py:
#   nomeet     and the warpgroup pair's barrier too (two meetings)  } timings only
#   split_tma  the split with its tiles as TMA boxes (ATTN_CODEGEN_ENABLE=tma)
#   hand_tma   that history rewritten by `mla_seesaw.py fine tma` (FlashMLA's schedule)
# ON THE GPU HOST after packing (the mla_decode bench binary in .device/bin). ROUNDS (default
# 2) repeats split, seesaw and hand_tma; ROW the bench row (default L1).
#
#   bash bench/experiments/mla_seesaw_ab.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
m=$(ls .device/bin/bench-mla_decode-* 2>/dev/null | head -1)
[ -n "$m" ] || { echo "no packed mla_decode bench in .device/bin" >&2; exit 1; }
row=${ROW:-128x4096 h128 dcp1}
export MLA_BENCH_ROWS=$row
work=$(mktemp -d)
ex=bench/experiments
run() {
  local name=$1; shift
  echo "=== $name"
  env "$@" scripts/with-clocks "$m" --bench "mla_decode/$row\$" --warm-up-time 0.5 \
    --measurement-time 1.5 2>&1 | grep -E '^(BENCH|CLOCK)' | sed "s/^/$name /"
}
rewrite_each() {  # SCRIPT IN OUT ARGS...: mla_seesaw.py takes one file at a time
  local script=$1 in=$2 out=$3; shift 3
  mkdir -p "$out"
  for f in "$in"/*.cu; do python3 "$script" "$f" "$out/$(basename "$f")" "$@"; done
}
{
  run split ATTN_SOURCE_DUMP="$work/split"
  run seesaw ATTN_CODEGEN_ENABLE=seesaw ATTN_SOURCE_DUMP="$work/seesaw"
  for v in halfmeet nomeet; do
    python3 $ex/mla_seesaw_meetings.py "$work/seesaw" "$work/$v" $v \
      && run $v ATTN_CODEGEN_ENABLE=seesaw ATTN_SOURCE_OVERRIDE="$work/$v"
  done
  run split_tma ATTN_CODEGEN_ENABLE=tma ATTN_SOURCE_DUMP="$work/tma"
  rewrite_each $ex/mla_seesaw.py "$work/tma" "$work/hand_tma" fine tma \
    && run hand_tma ATTN_CODEGEN_ENABLE=tma ATTN_SOURCE_OVERRIDE="$work/hand_tma"
  for r in $(seq 2 "${ROUNDS:-2}"); do
    run split
    run seesaw ATTN_CODEGEN_ENABLE=seesaw
    run hand_tma ATTN_CODEGEN_ENABLE=tma ATTN_SOURCE_OVERRIDE="$work/hand_tma"
  done
} 2>&1 | tee "$work/log"
# Last, a table: each variant's step time and history stage, run by run.
python3 - "$work/log" <<'PY'
import re, sys
rows = {}
for line in open(sys.argv[1]):
    m = re.match(r"(\w+) BENCH \S+ .*?time=([0-9.]+).* hist=([0-9.]+)", line)
    if m:
        rows.setdefault(m.group(1), []).append(f"{m.group(2)} / {m.group(3)}")
    c = re.match(r"(\w+) CLOCK (\d+) MHz", line)
    if c:
        rows.setdefault(c.group(1), []).append(f"({c.group(2)} MHz)")
print("\n| variant | step / history (µs), each run |")
print("| --- | --- |")
for v, runs in rows.items():
    print(f"| {v} | " + ", ".join(runs) + " |")
PY
rm -rf "$work"
