#!/usr/bin/env bash
# ON THE GPU HOST (after packing): P0 ours against the PyTorch peers' P0 (cuDNN's SDPA, SDPA's
# FlashAttention-2, FlexAttention), all timed under sustained load (criterion's 1 s warm-up and
# 2 s of batches; bench/peers/peers.py's default regime), twice each, alternating, each with
# its median SM clock and power (scripts/with-clocks). A short call for the P0 ratio when a
# whole table run does not fit the device time left.
set -uo pipefail
cd "$(dirname "$0")/../.."
bench=$(ls .device/bin/bench-unified_attention-* | head -1)
for round in 1 2; do
  echo "--- round $round: ours"
  scripts/with-clocks "$bench" --bench 'unified_attention/P0$' --warm-up-time 1 --measurement-time 2 2>&1 \
    | grep -E '^(BENCH|CLOCK)'
  echo "--- round $round: peers"
  scripts/with-clocks python3 bench/peers/peers.py --rows P0 2>/dev/null | grep -E '^\{|^CLOCK'
done
