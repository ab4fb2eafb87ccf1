#!/usr/bin/env python3
"""One call of a row's state-of-the-art peer between cudaProfilerStart/Stop, after warm-up
calls, for `ncu --profile-from-start off` (bench/experiments/sota_ncu.sh):

    sota_peer_call.py L1|P0|P1

L1: FlashMLA's dense decode, 128 requests x 4096 keys, 128 heads (paged 64-key blocks);
P0/P1: FlashAttention-3 on the peers' P0 and P1. The inputs and calls are bench/peers/peers.py's.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "peers"))
import peers  # noqa: E402


def main(row):
    import torch

    p = peers.Peers(peers.argparse.Namespace(impls=None, date="", commit="", regime="burst"))
    if row == "L1":
        lat, q = p.mla_inputs(128, 4096, 128)
        call = p.flashmla(q, *p.paged_cache(lat))
    else:
        heads, d, seq, scale = peers.PREFILL_SHAPES[row]
        q, k, v = p.qkv(1, heads[0], heads[1], seq, seq, d)
        call = p.fa3_call(q, k, v, scale, True, peers.FA3_WINDOWS[row])
    for _ in range(5):
        call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main(sys.argv[1])
