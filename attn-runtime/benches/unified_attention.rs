//! Criterion benches of the GPU unified-attention op (feature `gpu`), CUDA-event timed, on
//! the `specs/performance.md` rows:
//!
//! - P0: dense causal, 1 × 16384, Hq16/Hkv16, D128, block 16;
//! - P1: Gemma4 sliding layer, 1 × 8192, 16/8/256, W 1024, causal, scale 1.0;
//! - P3: P1 + 30 image ranges of 256 tokens at 100 + 270·i, clamp on (and P3-noclamp);
//! - D1: decode 64 × 4096, 32/8/128, 2D path (and D1-3D, split-KV forced).
//!
//! Prefill rows report TFLOP/s on useful FLOPs (4·Hq·D per (q, k) pair the mask allows,
//! counted with `ops::unified_attention::mask::allowed`), decode rows GB/s of KV bytes.
//! Each row also prints `BENCH <row> time=<us> rate=<..> floor%=<..> ... span=<t0>-<t1>`
//! (median of the per-iteration times criterion sampled, against the spec's floor; the
//! span the wall-clock seconds its warm-up and samples ran in, for the clock sampled then).
//! Timing uses `run_plan` on a plan validated once, so host-side validation is not in the
//! loop.
//!
//! Run: `cargo bench -p attn-runtime --features gpu --bench unified_attention --
//! --warm-up-time 1 --measurement-time 2` (append a row id, e.g. `P1`, to filter).

use attn_runtime::bench::measurement::{criterion_on_device0, CudaEventTime};
use attn_runtime::bench::unified::{context_options, rows, Prepared, Rate, Row};
use attn_runtime::bench::Span;
use attn_runtime::launch::CudaDevice;
use attn_runtime::ops::unified_attention::gpu::{run_plan, UnifiedAttentionContext};
use attn_runtime::timing::EventTimer;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

/// The criterion throughput and the BENCH line's `(amount per run, unit scale, unit)`.
fn work(row: &Row) -> (Throughput, f64, f64, &'static str) {
    match row.rate {
        Rate::Flops => {
            let f = row.useful_flops();
            (Throughput::Elements(f as u64), f, 1e-12, "TFLOP/s")
        }
        Rate::KvBytes => {
            let b = row.kv_bytes();
            (Throughput::Bytes(b as u64), b, 1e-9, "GB/s")
        }
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => 0.5 * (v[n / 2 - 1] + v[n / 2]),
    }
}

fn bench_unified(c: &mut Criterion<CudaEventTime>) {
    let dev = CudaDevice::new(0).expect("benches need a CUDA device");
    let ctx = UnifiedAttentionContext::new(&dev, dev.default_stream(), context_options())
        .expect("context");
    let stream = ctx.stream().clone();
    let mut group = c.benchmark_group("unified_attention");
    group.sample_size(10);
    for row in rows() {
        let (throughput, amount, unit_scale, unit) = work(&row);
        group.throughput(throughput);
        let mut prepared: Option<Prepared> = None;
        let mut per_iter_us: Vec<f64> = vec![];
        let mut span = None;
        let mut chosen = String::new();
        group.bench_function(row.id, |b| {
            // Built on first use, so rows filtered out on the command line cost nothing.
            let p = prepared.get_or_insert_with(|| {
                Prepared::build(&stream, &row).unwrap_or_else(|e| panic!("{e}"))
            });
            let mut args = p.args(&row);
            let plan = ctx
                .plan(&args)
                .unwrap_or_else(|e| panic!("{}: {e}", row.id));
            let report = run_plan(&ctx, &plan, &mut args).expect("first call (compiles)");
            chosen = format!(
                "path={} tile={} block_m={}",
                report.path_name(),
                report.config.tile_size,
                report.config.block_m
            );
            b.iter_custom(|iters| {
                let timer = EventTimer::new(&stream).expect("events");
                timer.start(&stream).expect("record start");
                for _ in 0..iters {
                    run_plan(&ctx, &plan, &mut args).expect("launch");
                }
                timer.stop(&stream).expect("record stop");
                let ns = f64::from(timer.elapsed_ms().expect("elapsed")) * 1e6;
                per_iter_us.push(ns / iters.max(1) as f64 / 1e3);
                Span::cover(&mut span);
                ns
            });
        });
        drop(prepared);
        if !per_iter_us.is_empty() {
            let t_us = median(&mut per_iter_us);
            let rate = amount / (t_us * 1e-6) * unit_scale;
            println!(
                "BENCH {} time={t_us:.1}us rate={rate:.2}{unit} floor%={:.1} floor={}us {chosen} {}",
                row.id,
                100.0 * row.floor_us / t_us,
                row.floor_us,
                span.unwrap_or_default()
            );
        }
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = criterion_on_device0();
    targets = bench_unified
}
criterion_main!(benches);
