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
  L   absorbed MLA decode (d_qk 576, d_v 512, 1 KV head)  FlashMLA, vLLM's Triton MLA decode, an
                                                           unfused torch reference (bmm + softmax + bmm)
  copy  2 GiB bf16 device-to-device copy: the memory floor of the same call

With `.peers/vllm` present (`scripts/fetch-peers`, run where the package registry is reached,
then carried to the device), the vLLM release pinned to the host's PyTorch adds its compiled
FlashMLA (`flashmla`, L rows, paged 64-key blocks) and FlashAttention-3 (`fa3`: P0, P1 with its
window, D1) and its Triton MLA decode (`vllm-triton-mla`, L rows, the TRITON_MLA backend's
split count); each one's output is checked against a reference computed here before it is
timed (a wrong one is skipped, saying so). Without the directory they are skipped, saying why.
SDPA has no sliding-window or image-range mask short of a dense one (which falls back to the
math kernel), so P1/P3 have no SDPA row; no peer here has P3's image ranges but FlexAttention.
Contiguous K/V (the peers have no paged layout); the same bytes and useful FLOPs as our rows.
FlexAttention's block masks are built (and the kernel compiled) outside the timed region. Time (`--regime sustained`, the default): after --warmup-s seconds of
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
import os
import statistics
import sys
import types
from pathlib import Path

WINDOW = 1024
IMAGES = [(100 + 270 * i, 100 + 270 * i + 255) for i in range(30)]
COPY_BYTES = 2 << 30
# DeepSeek-V3's softmax scale (192^-0.5 with the YaRN factor), as the MLA bench.
MLA_SCALE = 0.1352337788608801
MLA_PAGE = 64
# The prefill rows: (query heads, KV heads), head size, sequence length, softmax scale (None:
# 1/sqrt(head size)).
PREFILL_SHAPES = {
    "P0": ((16, 16), 128, 16384, None),
    "P1": ((16, 8), 256, 8192, 1.0),
    "P3": ((16, 8), 256, 8192, 1.0),
}
# FlashAttention-3's (left, right) window of the rows whose mask it has: P0's causal one and
# P1's causal window of WINDOW keys (not P3's image ranges).
FA3_WINDOWS = {"P0": (-1, -1), "P1": (WINDOW - 1, 0)}
# Where scripts/fetch-peers puts the vLLM release's peers.
VLLM_PEERS = Path(os.environ.get("ATTN_VLLM_PEERS", Path(__file__).resolve().parents[2] / ".peers" / "vllm"))


_LOADED = set()


class PeerMissing(Exception):
    """A peer that cannot be loaded here (not fetched, or it does not load)."""


def vllm_ops(name):
    """The torch ops namespace of the vLLM extension `name` (`_flashmla_C`, `_vllm_fa3_C`) from
    VLLM_PEERS, its `.so.xz` unpacked next to it first; loaded once."""
    lib = VLLM_PEERS / f"{name}.so"
    packed = Path(f"{lib}.xz")
    if not lib.exists() and not packed.exists():
        raise PeerMissing(f"{lib} not fetched (scripts/fetch-peers)")
    import torch

    if name in _LOADED:
        return getattr(torch.ops, name)
    if not lib.exists():
        import lzma

        lib.write_bytes(lzma.decompress(packed.read_bytes()))
    try:
        torch.ops.load_library(str(lib))
    except OSError as e:
        raise PeerMissing(f"{lib.name} does not load: {e}") from e
    _LOADED.add(name)
    return getattr(torch.ops, name)


def vllm_triton(module):
    """vLLM's Triton file `module` from VLLM_PEERS, imported with the two vLLM modules it reads
    (the platform's `is_rocm`, Triton re-exported) stood in for."""
    import importlib.util

    path = VLLM_PEERS / f"{module}.py"
    if not path.exists():
        raise PeerMissing(f"{path} not fetched (scripts/fetch-peers)")
    import triton
    import triton.language as tl

    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = types.SimpleNamespace(is_rocm=lambda: False, is_cuda=lambda: True)
    utils = types.ModuleType("vllm.triton_utils")
    utils.triton, utils.tl = triton, tl
    sys.modules.setdefault("vllm", types.ModuleType("vllm"))
    sys.modules.setdefault("vllm.platforms", platforms)
    sys.modules.setdefault("vllm.triton_utils", utils)
    spec = importlib.util.spec_from_file_location(f"vllm_peer_{module}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def triton_mla_splits(ctx, sms):
    """The KV splits vLLM's TRITON_MLA backend gives a decode of `ctx` keys: a split per 512
    keys rounded up to a power of two, at most two per SM."""
    return min(1 << (max(1, ctx // 512) - 1).bit_length(), 2 * sms)


def softmax_scale(scale, head_size):
    """`scale`, or attention's default 1/sqrt(head size) when it is None."""
    return scale if scale is not None else head_size**-0.5


def max_error(out, ref):
    """Largest absolute difference; NaN anywhere counts as infinite."""
    d = (out.float() - ref.float()).abs()
    return float("inf") if d.isnan().any() else float(d.max())


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

    def checked(self, row, impl, setup, ref, **work):
        """Times the peer `setup()` returns (a callable giving its output) when that output is
        within 2 % of the largest reference value: `ref(out)` gives the reference and the part
        of the output it covers; skips it, saying why, otherwise."""
        if not self.wanted(impl):
            return
        try:
            fn = setup()
            out = fn()
            want, got = ref(out)
            err, scale = max_error(got, want), float(want.float().abs().max())
        except Exception as e:  # not fetched, does not load, or refuses the shape
            print(f"SKIP {row} {impl}: {type(e).__name__}: {e}".splitlines()[0], file=sys.stderr)
            self.torch.cuda.empty_cache()
            return
        print(f"CHECK {row} {impl}: max abs error {err:.3g} (largest reference value {scale:.3g})", file=sys.stderr)
        if not err <= 0.02 * scale:
            print(f"SKIP {row} {impl}: wrong result", file=sys.stderr)
            return
        self.measure(row, impl, fn, **work)

    def reference_rows(self, q, k, v, mask, scale, rows):
        """f32 attention of query rows `rows` of (b, h, s, d) tensors under `mask(q, k)`, GQA
        heads repeated: (b, h, len(rows), d)."""
        t = self.torch
        group = q.shape[1] // k.shape[1]
        kf, vf = (x.repeat_interleave(group, 1).float() for x in (k, v))
        qi = t.tensor(rows, device=self.dev)
        s = q[:, :, qi].float() @ kf.transpose(-1, -2) * scale
        allowed = mask(qi[:, None], t.arange(k.shape[2], device=self.dev)[None, :])
        return t.softmax(s.masked_fill(~allowed, float("-inf")), dim=-1) @ vf

    def fa3_call(self, q, k, v, scale, causal, window):
        """FlashAttention-3 (vLLM's build) on (b, s, h, d) copies of the (b, h, s, d) `q`, `k`,
        `v`: a callable giving its (b, s, h, d) output."""
        t = self.torch
        ops = vllm_ops("_vllm_fa3_C")
        sc = softmax_scale(scale, q.shape[-1])
        # vLLM's build has only the varlen entry: the batch as packed sequences.
        (b, h, sq, d), skv = q.shape, k.shape[2]
        qb, kb, vb = (x.transpose(1, 2).reshape(-1, x.shape[1], d).contiguous() for x in (q, k, v))
        cu_q, cu_k = (t.arange(0, (b + 1) * n, n, device=self.dev, dtype=t.int32) for n in (sq, skv))
        # The schema's order (`fwd` of the extension): no new keys or values, q_v or out; the
        # sequences' offsets and longest lengths; no pages, rotary or descales; then the
        # scale, the mask, no softcap, splits by its heuristic, no sinks or context parallelism.
        args = [None] * 4 + [cu_q, cu_k, None, None, None, sq, skv] + [None] * 9
        tail = [sc, causal, window[0], window[1], 0.0, True, None, 0, None, 0, None, 1, 0, None]
        return lambda: ops.fwd(qb, kb, vb, *args, *tail)[0].view(b, sq, h, d)

    def fa3(self, row, q, k, v, work, scale, causal, window, mask):
        """FlashAttention-3 on a prefill or decode row, checked on the first and last 64 query
        rows against `mask`."""
        sc = softmax_scale(scale, q.shape[-1])
        rows = [*range(min(64, q.shape[2])), *range(max(64, q.shape[2] - 64), q.shape[2])]

        def ref(out):
            want = self.reference_rows(q, k, v, mask, sc, rows)
            return want, out[:, rows].transpose(1, 2)

        self.checked(row, "fa3", lambda: self.fa3_call(q, k, v, sc, causal, window), ref, **work)

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
        window = FA3_WINDOWS.get(row)
        if window:
            self.fa3(row, q, k, v, work, scale, True, window, mask)

    def decode(self):
        b, hq, hkv, ctx, d = 64, 32, 8, 4096, 128
        work = {"tb_s": b * ctx * hkv * d * 2 * 2 * 1e-12}
        q, k, v = self.qkv(b, hq, hkv, 1, ctx, d)
        for be in ("sdpa-flash", "sdpa-cudnn"):
            self.sdpa("D1", be, q, k, v, work, enable_gqa=True)
        self.flex("D1", "flex", q, k, v, None, work)
        self.fa3("D1", q, k, v, work, None, False, (-1, -1), lambda qi, ki: ki >= 0)

    def mla(self, batch, ctx, heads):
        """Absorbed MLA decode of `batch` requests of `ctx` keys: unfused (S = Q·Kᵀ over 576,
        softmax, O = P·K[:, :512]), FlashMLA and vLLM's Triton decode on the same keys paged in
        64-key blocks (a shuffled block table), the fused ones checked against an f32 reference
        of the first and last request."""
        t = self.torch
        row = f"L {batch}x{ctx} h{heads} dcp1"
        g = t.Generator(device=self.dev).manual_seed(1)
        lat, q = self.mla_inputs(batch, ctx, heads, g)
        flops = 2.0 * batch * heads * ctx * 1088
        rate = {"tb_s": batch * ctx * 1152 * 1e-12} if heads <= 16 else {"tflops": flops * 1e-12}

        def unfused():
            s = t.bmm(q, lat.transpose(1, 2)).float() * MLA_SCALE
            p = t.softmax(s, dim=-1).to(t.bfloat16)
            return t.bmm(p, lat[:, :, :512])

        if self.wanted("torch-unfused"):
            self.measure(row, "torch-unfused", unfused, **rate)
        if self.wanted("flashmla") or self.wanted("vllm-triton-mla"):
            ends = [0, batch - 1]
            s = t.bmm(q[ends].float(), lat[ends].float().transpose(1, 2)) * MLA_SCALE
            want = t.bmm(t.softmax(s, dim=-1), lat[ends, :, :512].float())
            cache, table, lens = self.paged_cache(lat, g)
            ref = lambda out: (want, out[ends].float())
            self.checked(row, "flashmla", lambda: self.flashmla(q, cache, table, lens), ref, **rate)
            self.checked(row, "vllm-triton-mla", lambda: self.triton_mla(q, cache, table, lens, ctx), ref, **rate)
            del cache, table, want
        del lat, q
        t.cuda.empty_cache()

    def mla_inputs(self, batch, ctx, heads, g=None):
        """Random latent keys `[batch, ctx, 576]` and queries `[batch, heads, 576]` (bf16)."""
        t = self.torch
        lat = t.rand(batch, ctx, 576, device=self.dev, dtype=t.bfloat16, generator=g) - 0.5
        q = t.rand(batch, heads, 576, device=self.dev, dtype=t.bfloat16, generator=g) - 0.5
        return lat, q

    def paged_cache(self, lat, g=None):
        """`lat` in 64-key pages of a cache `[pages, 64, 1, 576]` at shuffled places, with the
        block table and the lengths that find them."""
        t = self.torch
        batch, ctx, _ = lat.shape
        pages = batch * ctx // MLA_PAGE
        perm = t.randperm(pages, device=self.dev, generator=g)
        cache = t.empty(pages, MLA_PAGE, 1, 576, device=self.dev, dtype=t.bfloat16)
        cache[perm] = lat.view(pages, MLA_PAGE, 1, 576)
        table = perm.view(batch, -1).to(t.int32)
        lens = t.full((batch,), ctx, device=self.dev, dtype=t.int32)
        return cache, table, lens

    def flashmla(self, q, cache, table, lens):
        """FlashMLA's dense decode (vLLM's build); its tile-scheduler metadata is made by the
        first call and reused, as a serving step reuses it."""
        ops = vllm_ops("_flashmla_C")
        b, h, _ = q.shape
        q4 = q.view(b, 1, h, 576)
        meta = [None, None]

        def run():
            out, _, meta[0], meta[1] = ops.dense_decode_fwd(q4, cache, 512, lens, table, MLA_SCALE, False, *meta, None)
            return out.view(b, h, 512)

        return run

    def triton_mla(self, q, cache, table, lens, ctx):
        """vLLM's Triton MLA decode with the TRITON_MLA backend's split count (a power of two,
        a split per 512 keys, at most two per SM) and its stage-two merge."""
        t = self.torch
        mod = vllm_triton("triton_decode_attention")
        b, h, _ = q.shape
        splits = triton_mla_splits(ctx, t.cuda.get_device_properties(self.dev).multi_processor_count)
        o = t.empty(b, h, 512, device=self.dev, dtype=q.dtype)
        lse = t.empty(b, h, device=self.dev, dtype=q.dtype)
        logits = t.empty(b, h, splits, 513, device=self.dev, dtype=t.float32)
        one = t.tensor(1.0, device=self.dev, dtype=t.float32)
        latent = cache[..., :512]

        def run():
            mod.decode_attention_fwd(
                q, cache, latent, o, lse, table, lens, logits, splits, MLA_SCALE, MLA_PAGE,
                k_scale=one, v_scale=one, is_mla=True,
            )
            return o

        return run

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
        elif r in PREFILL_SHAPES:
            p.prefill(r, *PREFILL_SHAPES[r])
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
