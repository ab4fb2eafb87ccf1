#!/usr/bin/env bash
# ON THE GPU HOST (after packing): the same `ncu` metrics for cuDNN's SDPA kernel and ours on
# P0 (dense causal 1 x 16384, 16 heads, D 128, bf16): launch shape (grid, block, cluster,
# registers, shared memory), bytes from L2 into the SMs, tensor-pipe activity, instructions.
# What it answers: whether cuDNN moves fewer bytes a FLOP (a larger query tile or a
# cluster's multicast) or moves the same bytes faster. One launch each, past the warm-up.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-device-out}; mkdir -p "$out"
metrics=gpu__time_duration.sum,launch__grid_size,launch__block_size,launch__cluster_dim_x,launch__cluster_dim_y,\
launch__registers_per_thread,launch__shared_mem_per_block_dynamic,launch__occupancy_limit_shared_mem,\
l1tex__m_xbar2l1tex_read_bytes.sum,lts__t_bytes.sum,dram__bytes_read.sum,\
sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,\
sm__inst_executed.sum,smsp__inst_executed_op_ldgsts.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,\
lts__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__throughput.avg.pct_of_peak_sustained_elapsed
cat > /tmp/cudnn_p0.py <<'PY'
import torch
from torch.nn.attention import sdpa_kernel, SDPBackend
# The peers' inputs (uniform in [-1, 1), bench/peers/peers.py), as our bench's: the data the
# tensor cores see sets their power. (The 2026-12-05 run of this script drew normal ones.)
g = torch.Generator(device="cuda").manual_seed(0)
q, k, v = (torch.rand(1, 16, 16384, 128, device="cuda", dtype=torch.bfloat16, generator=g) * 2 - 1
           for _ in range(3))
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    for _ in range(4):
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
torch.cuda.synchronize()
PY
echo "=== cuDNN P0"
ncu --clock-control none --metrics "$metrics" -k regex:'cudnn|sdpa|fmha|flash' --launch-skip 2 --launch-count 1 \
  python3 /tmp/cudnn_p0.py > "$out/ncu_cudnn_p0.txt" 2>&1
grep -E '^\s+[a-z_]+__|==PROF==|  [A-Za-z_].*\(' "$out/ncu_cudnn_p0.txt" | tail -24
echo "=== ours P0"
bench=$(ls .device/bin/bench-unified_attention-* | head -1)
ncu --clock-control none --metrics "$metrics" -k regex:unified_attention --launch-skip 2 --launch-count 1 \
  "$bench" --bench 'unified_attention/P0$' --warm-up-time 0.1 --measurement-time 0.2 > "$out/ncu_ours_p0.txt" 2>&1
grep -E '^\s+[a-z_]+__|  [A-Za-z_].*\(' "$out/ncu_ours_p0.txt" | tail -24
