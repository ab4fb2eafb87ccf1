#!/usr/bin/env bash
# ON THE GPU HOST (after packing): SM clock and board power while P0 runs back to back, ours
# (the bench binary) and cuDNN's SDPA (PyTorch), sampled by nvidia-smi every 50 ms. What it
# answers: whether the steady-state gap to cuDNN (bench timings) that one isolated launch
# under `ncu` does not show is the clock the power limit leaves each kernel.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-device-out}; mkdir -p "$out"
cat > /tmp/cudnn_p0_loop.py <<'PY'
import time, torch
from torch.nn.attention import sdpa_kernel, SDPBackend
# The inputs bench/peers/peers.py and our bench take (uniform in [-1, 1)): under the power
# limit the clock depends on the data the tensor cores toggle, so only equal inputs compare.
g = torch.Generator(device="cuda").manual_seed(0)
q, k, v = (torch.rand(1, 16, 16384, 128, device="cuda", dtype=torch.bfloat16, generator=g) * 2 - 1
           for _ in range(3))
f = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    f(); torch.cuda.synchronize()
    t0 = time.time(); times = []
    while time.time() - t0 < 6:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(20):
            f()
        b.record(); b.synchronize()
        times.append(a.elapsed_time(b) / 20)
times.sort()
print(f"BENCH cudnn-P0 time={times[len(times) // 2] * 1e3:.1f}us")
PY
bench=$(ls .device/bin/bench-unified_attention-* | head -1)
for run in ours cudnn ours cudnn; do
  sleep 2
  echo "--- $run"
  if [ "$run" = ours ]; then
    scripts/with-clocks "$bench" --bench 'unified_attention/P0$' --warm-up-time 1 --measurement-time 5 2>&1 \
      | grep -E '^(BENCH|CLOCK)'
  else
    scripts/with-clocks python3 /tmp/cudnn_p0_loop.py 2>&1 | grep -E '^(BENCH|CLOCK)'
  fi
done
