#!/usr/bin/env bash
# ON THE GPU HOST (after packing): P0 ours against cuDNN's SDPA (and the other PyTorch peers)
# in both timing regimes, alternating, twice: `burst` (after 3 s idle, a few dozen calls:
# criterion with a 0.01 s warm-up and 0.05 s of samples; peers.py --regime burst, 35 calls)
# and `sustained` (criterion's 1 s warm-up and 2 s of batches; peers.py's default), each with
# its median SM clock and power. Ratios only within one regime (docs/performance.md).
set -uo pipefail
cd "$(dirname "$0")/../.."
bench=$(ls .device/bin/bench-unified_attention-* | head -1)
"$bench" --bench 'unified_attention/P0$' --warm-up-time 0.01 --measurement-time 0.05 > /dev/null 2>&1  # JIT
for round in 1 2; do
  for regime in burst sustained; do
    if [ "$regime" = burst ]; then c=(--warm-up-time 0.01 --measurement-time 0.05); else c=(--warm-up-time 1 --measurement-time 2); fi
    sleep 3
    echo "--- round $round $regime: ours"
    scripts/with-clocks "$bench" --bench 'unified_attention/P0$' "${c[@]}" 2>&1 | grep -E '^(BENCH|CLOCK)'
    sleep 3
    echo "--- round $round $regime: cuDNN"
    scripts/with-clocks python3 - "$regime" <<'PY' 2>/dev/null | grep -E '^\{|^CLOCK'
import sys
sys.path.insert(0, "bench/peers")
import peers
p = peers.Peers(peers.argparse.Namespace(regime=sys.argv[1], warmup_s=1.0, measure_s=2.0, runs=30, warmup=5,
                                         date="regimes", commit="-"))
q, k, v = p.qkv(1, 16, 16, 16384, 16384, 128)
work = {"tflops": 4.0 * 16 * 128 * (16384 * 16385 // 2) * 1e-12}
p.sdpa("P0", "sdpa-cudnn", q, k, v, work, is_causal=True)
PY
  done
done
