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
        b, ctx, h = 128, 4096, 128
        lat = torch.rand(b, ctx, 576, device=p.dev, dtype=torch.bfloat16) - 0.5
        q = torch.rand(b, h, 576, device=p.dev, dtype=torch.bfloat16) - 0.5
        pages = b * ctx // peers.MLA_PAGE
        perm = torch.randperm(pages, device=p.dev)
        cache = torch.empty(pages, peers.MLA_PAGE, 1, 576, device=p.dev, dtype=torch.bfloat16)
        cache[perm] = lat.view(pages, peers.MLA_PAGE, 1, 576)
        table = perm.view(b, -1).to(torch.int32)
        lens = torch.full((b,), ctx, device=p.dev, dtype=torch.int32)
        call = p.flashmla(q, cache, table, lens)
    else:
        heads, d, seq, scale = ((16, 16), 128, 16384, None) if row == "P0" else ((16, 8), 256, 8192, 1.0)
        q, k, v = p.qkv(1, heads[0], heads[1], seq, seq, d)
        window = (-1, -1) if row == "P0" else (peers.WINDOW - 1, 0)
        call = p.fa3_call(q, k, v, scale, True, window)
    for _ in range(5):
        call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main(sys.argv[1])
