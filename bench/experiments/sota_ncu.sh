#!/usr/bin/env bash
# ON THE GPU HOST (after packing, with .peers carried: scripts/fetch-peers): the same `ncu`
# metrics for the state-of-the-art peers and ours, one call each past the warm-up, on
#   L1  FlashMLA's dense decode      against our MLA history (128 x 4096, 128 heads)
#   P0  FlashAttention-3 (causal)    against our unified kernel (1 x 16384, 16 heads, D 128)
#   P1  FlashAttention-3 (window)    against our unified kernel (1 x 8192, 16/8 heads, D 256)
# What it answers: how the fastest hand-written kernels of each row spend the same work
# (launch shape, registers, shared memory, tensor-pipe activity, shared-memory wavefronts,
# instructions, bytes), so the gap to them is read from counters, not guessed.
#
#   bash bench/experiments/sota_ncu.sh [ROW...]     # default: L1 P0 P1
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-device-out}; mkdir -p "$out"
metrics=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,launch__grid_size,launch__block_size,\
launch__cluster_dim_x,launch__registers_per_thread,launch__shared_mem_per_block_dynamic,\
launch__shared_mem_per_block_static,sm__warps_active.avg.pct_of_peak_sustained_active,\
sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,\
sm__inst_executed_pipe_tensor_op_gmma.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,\
sm__inst_executed.sum,smsp__inst_executed_op_ldgsts.sum,l1tex__m_xbar2l1tex_read_bytes.sum,\
dram__bytes_read.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,\
l1tex__throughput.avg.pct_of_peak_sustained_elapsed,lts__throughput.avg.pct_of_peak_sustained_elapsed
show() { grep -E '^\s+[a-z_]+__|^  [A-Za-z_].*\(' "$1" | sed 's/^ *//' | cut -c1-150; }
for row in ${@:-L1 P0 P1}; do
  echo "=== $row peer"
  ncu --clock-control none --profile-from-start off --metrics "$metrics" \
    python3 bench/experiments/sota_peer_call.py "$row" > "$out/ncu_peer_$row.txt" 2>&1
  show "$out/ncu_peer_$row.txt"
  echo "=== $row ours"
  case $row in
    L1) bin=$(ls .device/bin/bench-mla_decode-* | head -1); k=mla_history
        args=(--bench 'mla_decode/128x4096 h128 dcp1$'); export MLA_BENCH_ROWS='128x4096 h128 dcp1' ;;
    *)  bin=$(ls .device/bin/bench-unified_attention-* | head -1); k=unified_attention
        args=(--bench "unified_attention/$row\$") ;;
  esac
  ncu --clock-control none --metrics "$metrics" -k regex:$k --launch-skip 3 --launch-count 1 \
    "$bin" "${args[@]}" --warm-up-time 0.1 --measurement-time 0.2 > "$out/ncu_ours_$row.txt" 2>&1
  show "$out/ncu_ours_$row.txt"
done
