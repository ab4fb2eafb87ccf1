#!/usr/bin/env python3
"""Peers of the attn-dsl benches, measured on the GPU host's PyTorch in the same device call.

Shapes and masks are those of `attn-runtime/benches/unified_attention.rs` and
`attn-runtime/benches/mla_decode.rs` (specs/performance.md):

  P0  dense causal 1 x 16384, Hq16/Hkv16, D128            SDPA flash, SDPA cuDNN, FlexAttention
  P1  Gemma4 sliding 1 x 8192, Hq16/Hkv8, D256, W1024,    FlexAttention (default, tuned)
      causal, scale 1.0
  P3  P1 + 30 images of 256 tokens at 100 + 270 i,        FlexAttention (default, tuned)
      bidirectional inside an image, clamped to the window
  D1  decode 64 x 4096, Hq32/Hkv8, D128, q_len 1          SDPA flash / cuDNN (GQA), FlexAttention
  L   absorbed MLA decode (d_qk 576, d_v 512, 1 KV head)  an unfused torch reference (bmm + softmax
                                                           + bmm): no fused peer here handles 576
  copy  2 GiB bf16 device-to-device copy: the memory floor of the same call

SDPA has no sliding-window or image-range mask short of a dense one (which falls back to the
math kernel), so P1/P3 have no SDPA row. vLLM is not installed on the host, so its Triton
kernels are not peers here. Contiguous K/V (the peers have no paged layout); the same bytes
and useful FLOPs as our rows. FlexAttention's block masks are built (and the kernel compiled)
outside the timed region. Time (`--regime sustained`, the default): after --warmup-s seconds of
back-to-back calls, batches of about 10 ms of calls between two CUDA events for --measure-s
seconds, the median of the batches' per-call times: the regime criterion times our rows in (its
1 s warm-up and 2 s of batched iterations, scripts/bench-h200). Under the board's 700 W limit the
SM clock settles lower within a fraction of a second of a heavy kernel (H100, P0: cuDNN 1740 MHz,
ours 1545-1560 MHz, both at the limit), so a burst of a few dozen synchronized calls times a
cooler, faster GPU than a sustained run: before 2026-12-05 the peers were timed so
(`--regime burst`: CUDA events around one call, median of --runs after --warmup calls) and
our rows sustained, which no ratio may mix.

Output: one JSON object per line on --out (and stdout):
  {"row", "impl", "ms", "tflops" | "tb_s", "date", "commit", "regime"}
A peer that fails (unsupported backend, out of memory) prints `SKIP <row> <impl>: <why>` on
stderr and writes nothing.
"""

import argparse
import datetime
import json
import statistics
import sys

WINDOW = 1024
IMAGES = [(100 + 270 * i, 100 + 270 * i + 255) for i in range(30)]
COPY_BYTES = 2 << 30


def sustained_ms(fn, warmup_s, measure_s):
    """Median per-call ms of `fn()` over batches of back-to-back calls (about 10 ms each, two
    CUDA events around a batch) for `measure_s` seconds, after `warmup_s` seconds of calls."""
    import time

    import torch

    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    per_batch = max(1, int(0.01 / max(time.perf_counter() - t0, 1e-6)))
    until = time.perf_counter() + warmup_s
    while time.perf_counter() < until:
        for _ in range(per_batch):
            fn()
        torch.cuda.synchronize()
    times = []
    until = time.perf_counter() + measure_s
    while time.perf_counter() < until or len(times) < 5:
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(per_batch):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / per_batch)
    return statistics.median(times)


def median_ms(fn, runs, warmup):
    """Median CUDA-event time of `fn()` in ms, each call synchronized (the burst regime)."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def allowed_pairs(mask, seq_len, device, chunk=1024):
    """(q, k) pairs `mask(q, k)` allows (the useful-FLOP count), evaluated in row chunks."""
    import torch

    k = torch.arange(seq_len, device=device)[None, :]
    total = 0
    for lo in range(0, seq_len, chunk):
        q = torch.arange(lo, min(lo + chunk, seq_len), device=device)[:, None]
        total += int(mask(q, k).sum().item())
    return total


def image_ids(seq_len):
    """Per token: the index of the image range holding it, or -1 (a list)."""
    ids = [-1] * seq_len
    for i, (s, e) in enumerate(IMAGES):
        ids[s : e + 1] = [i] * (e + 1 - s)
    return ids


def masks(img):
    """The row masks as (q, k) predicates, written with operators that work on torch index
    tensors (FlexAttention's mask_mod, the pair count) and on Python ints (the unit tests);
    `img` is `image_ids(8192)` as a tensor or a list. Same rules as the op's `mask::allowed`."""

    def causal(q, k):
        return k <= q

    def sliding(q, k):
        return (k <= q) & (q - k < WINDOW)

    def images_clamped(q, k):
        # Bidirectional inside one image range, clamped to the window's left edge.
        same = (img[q] == img[k]) & (img[q] >= 0)
        return sliding(q, k) | (same & (q - k < WINDOW))

    return {"P0": causal, "P1": sliding, "P3": images_clamped}


class Peers:
    def __init__(self, args):
        import torch

        self.torch = torch
        self.args = args
        self.dev = torch.device("cuda")
        self.masks = masks(torch.tensor(image_ids(8192), dtype=torch.int32, device=self.dev))
        self.rows_out = []

    def emit(self, row, impl, ms, span=None, **rate):
        rec = {"row": row, "impl": impl, "ms": round(ms, 5)}
        rec.update({k: round(v, 3) for k, v in rate.items()})
        if span:
            rec["span"] = span
        rec.update({"date": self.args.date, "commit": self.args.commit, "regime": self.args.regime})
        self.rows_out.append(rec)
        print(json.dumps(rec), flush=True)

    def measure(self, row, impl, fn, **rate_of_ms):
        """Times `fn`; `rate_of_ms` maps a rate name to amount (its value at 1 ms = amount).
        The record's `span` is the wall-clock seconds the timing ran in (for the clocks
        `bench/results.py ingest --clocks` reads)."""
        import time

        try:
            fn()  # compile / first call outside the timed region
            t0 = time.time()
            if self.args.regime == "burst":
                ms = median_ms(fn, self.args.runs, self.args.warmup)
            else:
                ms = sustained_ms(fn, self.args.warmup_s, self.args.measure_s)
        except Exception as e:  # a peer that cannot run this row is skipped, not fatal
            print(f"SKIP {row} {impl}: {type(e).__name__}: {e}".splitlines()[0], file=sys.stderr)
            self.torch.cuda.empty_cache()
            return
        span = [round(t0, 3), round(time.time(), 3)]
        self.emit(row, impl, ms, span=span, **{k: v / (ms * 1e-3) for k, v in rate_of_ms.items()})

    def qkv(self, b, hq, hkv, sq, skv, d):
        t = self.torch
        g = t.Generator(device=self.dev).manual_seed(0)
        mk = lambda h, s: t.rand(b, h, s, d, device=self.dev, dtype=t.bfloat16, generator=g) * 2 - 1
        return mk(hq, sq), mk(hkv, skv), mk(hkv, skv)

    def wanted(self, impl):
        """Whether `--impls` (all peers when absent) names `impl`: checked before a peer's
        setup, so a filtered-out FlexAttention compiles nothing."""
        impls = getattr(self.args, "impls", None)
        return not impls or impl in impls.split(",")

    def sdpa(self, row, backend, q, k, v, work, **kw):
        if not self.wanted(backend):
            return
        t = self.torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
        from torch.nn.functional import scaled_dot_product_attention as sdpa

        be = {"sdpa-flash": SDPBackend.FLASH_ATTENTION, "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION}

        def run():
            with sdpa_kernel(be[backend]):
                return sdpa(q, k, v, **kw)

        self.measure(row, backend, run, **work)

    def flex(self, row, impl, q, k, v, mask, work, scale=None, kernel_options=None):
        if not self.wanted(impl):
            return
        t = self.torch
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        try:
            block_mask = None
            if mask is not None:
                mm = lambda b, h, qi, ki: mask(qi, ki)
                block_mask = create_block_mask(mm, None, None, q.shape[2], k.shape[2], device=self.dev)
        except Exception as e:
            print(f"SKIP {row} {impl}: block mask: {e}".splitlines()[0], file=sys.stderr)
            return
        compiled = t.compile(flex_attention, dynamic=False)
        gqa = q.shape[1] != k.shape[1]
        run = lambda: compiled(
            q, k, v, block_mask=block_mask, scale=scale, enable_gqa=gqa, kernel_options=kernel_options
        )
        self.measure(row, impl, run, **work)

    def prefill(self, row, heads, d, seq, scale):
        mask = self.masks[row]
        pairs = allowed_pairs(mask, seq, self.dev)
        work = {"tflops": 4.0 * heads[0] * d * pairs * 1e-12}
        q, k, v = self.qkv(1, heads[0], heads[1], seq, seq, d)
        if row == "P0":
            for be in ("sdpa-flash", "sdpa-cudnn"):
                self.sdpa(row, be, q, k, v, work, is_causal=True)
        self.flex(row, "flex", q, k, v, mask, work, scale=scale)
        if row != "P0":
            tuned = {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2}
            self.flex(row, "flex-tuned", q, k, v, mask, work, scale=scale, kernel_options=tuned)

    def decode(self):
        b, hq, hkv, ctx, d = 64, 32, 8, 4096, 128
        work = {"tb_s": b * ctx * hkv * d * 2 * 2 * 1e-12}
        q, k, v = self.qkv(b, hq, hkv, 1, ctx, d)
        for be in ("sdpa-flash", "sdpa-cudnn"):
            self.sdpa("D1", be, q, k, v, work, enable_gqa=True)
        self.flex("D1", "flex", q, k, v, None, work)

    def mla(self, batch, ctx, heads):
        """Absorbed MLA decode, unfused: S = Q·Kᵀ over 576, softmax, O = P·K[:, :512]."""
        if not self.wanted("torch-unfused"):
            return
        t = self.torch
        row = f"L {batch}x{ctx} h{heads} dcp1"
        scale = 0.1352337788608801  # DeepSeek-V3 (192^-0.5 with the YaRN factor), as the bench
        g = t.Generator(device=self.dev).manual_seed(1)
        lat = t.rand(batch, ctx, 576, device=self.dev, dtype=t.bfloat16, generator=g) - 0.5
        q = t.rand(batch, heads, 576, device=self.dev, dtype=t.bfloat16, generator=g) - 0.5

        def run():
            s = t.bmm(q, lat.transpose(1, 2)).float() * scale
            p = t.softmax(s, dim=-1).to(t.bfloat16)
            return t.bmm(p, lat[:, :, :512])

        flops = 2.0 * batch * heads * ctx * 1088
        rate = {"tb_s": batch * ctx * 1152 * 1e-12} if heads <= 16 else {"tflops": flops * 1e-12}
        self.measure(row, "torch-unfused", run, **rate)
        del lat, q
        t.cuda.empty_cache()

    def copy(self):
        if not self.wanted("torch-copy"):
            return
        t = self.torch
        n = COPY_BYTES // 2
        src = t.empty(n, device=self.dev, dtype=t.bfloat16).uniform_()
        dst = t.empty_like(src)
        self.measure("copy 2GiB", "torch-copy", lambda: dst.copy_(src), tb_s=2 * COPY_BYTES * 1e-12)
        del src, dst
        t.cuda.empty_cache()


ALL_ROWS = ["copy", "P0", "P1", "P3", "D1", "L"]
L_ROWS = [(1, 32768, 128), (32, 8192, 128), (128, 4096, 128), (128, 32768, 16)]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default=",".join(ALL_ROWS), help="comma list of " + ",".join(ALL_ROWS))
    ap.add_argument("--regime", choices=["sustained", "burst"], default="sustained")
    ap.add_argument("--warmup-s", type=float, default=1.0, help="sustained: seconds of calls first")
    ap.add_argument("--measure-s", type=float, default=2.0, help="sustained: seconds of timed batches")
    ap.add_argument("--runs", type=int, default=30, help="burst: timed calls")
    ap.add_argument("--warmup", type=int, default=5, help="burst: untimed calls first")
    ap.add_argument("--date", default=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ"))
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--out", help="JSON-lines file to write")
    ap.add_argument("--impls", help="comma list: time only these peers (e.g. sdpa-cudnn,flex-tuned)")
    args = ap.parse_args(argv)
    rows = [r for r in args.rows.split(",") if r]
    unknown = [r for r in rows if r not in ALL_ROWS]
    if unknown:
        ap.error(f"unknown rows {unknown}")
    p = Peers(args)
    print(f"peers on {p.torch.cuda.get_device_name()} torch {p.torch.__version__}", file=sys.stderr)
    for r in rows:
        if r == "copy":
            p.copy()
        elif r == "P0":
            p.prefill("P0", (16, 16), 128, 16384, None)
        elif r in ("P1", "P3"):
            p.prefill(r, (16, 8), 256, 8192, 1.0)
        elif r == "D1":
            p.decode()
        elif r == "L":
            for b, ctx, h in L_ROWS:
                p.mla(b, ctx, h)
    if args.out:
        with open(args.out, "w") as f:
            for rec in p.rows_out:
                f.write(json.dumps(rec) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
