#!/usr/bin/env bash
# ON THE GPU HOST (after packing): unified rows (ours) against their peer in both timing
# regimes, alternating, twice: `burst` (after 3 s idle, a few dozen calls: criterion with a
# 0.01 s warm-up and 0.05 s of samples; peers.py --regime burst, 35 calls) and `sustained`
# (criterion's 1 s warm-up and 2 s of batches; peers.py's default), each with its median SM
# clock and power. Ratios only within one regime (docs/performance.md).
#
#   bash bench/experiments/regimes.sh            # P0 against cuDNN's SDPA
#   bash bench/experiments/regimes.sh P0 P1 P3   # P1 and P3 against FlexAttention tuned
set -uo pipefail
cd "$(dirname "$0")/../.."
rows=("$@"); [ ${#rows[@]} -gt 0 ] || rows=(P0)
bench=$(ls .device/bin/bench-unified_attention-* | head -1)
peer_of() { case "$1" in P0) echo sdpa-cudnn ;; P1|P3) echo flex-tuned ;; *) echo "no peer for $1" >&2; exit 2 ;; esac; }
for row in "${rows[@]}"; do
  peer=$(peer_of "$row")
  "$bench" --bench "unified_attention/$row\$" --warm-up-time 0.01 --measurement-time 0.05 > /dev/null 2>&1  # JIT
  for round in 1 2; do
    for regime in burst sustained; do
      if [ "$regime" = burst ]; then c=(--warm-up-time 0.01 --measurement-time 0.05); else c=(--warm-up-time 1 --measurement-time 2); fi
      sleep 3
      echo "--- $row round $round $regime: ours"
      scripts/with-clocks "$bench" --bench "unified_attention/$row\$" "${c[@]}" 2>&1 | grep -E '^(BENCH|CLOCK)'
      sleep 3
      echo "--- $row round $round $regime: $peer"
      scripts/with-clocks python3 bench/peers/peers.py --rows "$row" --impls "$peer" --regime "$regime" \
        --date regimes --commit - 2>/dev/null | grep -E '^\{|^CLOCK'
    done
  done
done
