//! Criterion rows of the example variants through the GPU op (feature `gpu`), CUDA-event
//! timed like the built-in rows of `attn-runtime/benches/unified_attention.rs`: a variant
//! gets a row with one line in [`rows`]. Prefill 1 × 8192, 16/8/128, bf16; TFLOP/s on useful
//! FLOPs (4·Hq·D per (q, k) pair the variant's definition allows). Each row also prints
//! `BENCH <row> time=<us> rate=<..>TFLOP/s tiles=<visited>/<needed>`.
//!
//! Run: `cargo bench -p attn-examples --features gpu --bench unified_attention_variants --
//! --warm-up-time 1 --measurement-time 2`.

use attn_examples::{
    document_window, packed_documents, prefix_lm, sink_window, tree_mask, Variant,
};
use attn_runtime::bench::measurement::{criterion_on_device0, CudaEventTime};
use attn_runtime::launch::CudaDevice;
use attn_runtime::ops::unified_attention::gpu::{
    run_plan, ContextOptions, UnifiedAttentionContext,
};
use attn_runtime::ops::unified_attention::plan::PathChoice;
use attn_runtime::testing::device_variant::DeviceVariantProblem;
use attn_runtime::testing::{Geometry, PagedData};
use attn_runtime::timing::EventTimer;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use half::bf16;

const L: usize = 8192;

/// One row: a name, the variant, its `i32` aux (values, row stride) and its definition.
struct Row {
    id: &'static str,
    variant: Variant,
    aux: Option<(Vec<i32>, usize)>,
    mask: fn(i64, i64, &[i32]) -> bool,
}

fn row(
    id: &'static str,
    variant: Variant,
    aux: Option<(Vec<i32>, usize)>,
    mask: fn(i64, i64, &[i32]) -> bool,
) -> Row {
    Row {
        id,
        variant,
        aux,
        mask,
    }
}

/// Documents of 1000 keys.
fn docs() -> Option<(Vec<i32>, usize)> {
    Some(((0..L as i32).map(|k| k / 1000).collect(), L))
}

/// A chain-shaped draft tree over the last 64 queries would be decode; in prefill every
/// query is a tree node only when the tree covers the sequence, so the row uses a
/// 64-node tree at the end of an 8192-key context (qlen 64).
fn rows() -> Vec<Row> {
    vec![
        row(
            "V-sink-window",
            sink_window::variant(4, 1024),
            None,
            |q, k, _| k <= q && (k < 4 || q - k < 1024),
        ),
        row(
            "V-packed-docs",
            packed_documents::variant(),
            docs(),
            |q, k, a| k <= q && a[q as usize] == a[k as usize],
        ),
        row(
            "V-doc-window",
            document_window::variant(512),
            docs(),
            |q, k, a| k <= q && q - k < 512 && a[q as usize] == a[k as usize],
        ),
        row(
            "V-prefix-lm",
            prefix_lm::variant(),
            Some((vec![2048], 1)),
            |q, k, a| k <= q || k < i64::from(a[0]),
        ),
        row(
            "V-tree-mask",
            tree_mask::variant(64),
            Some((
                tree_mask::ancestors(&(0..64).map(|i| i - 1).collect::<Vec<_>>(), 64),
                64 * 64,
            )),
            |q, k, a| {
                let c = (L - 64) as i64;
                k < c || (k <= q && a[((q - c) * 64 + (k - c)) as usize] == 1)
            },
        ),
    ]
}

fn seqs(r: &Row) -> Vec<(usize, usize)> {
    if r.id == "V-tree-mask" {
        vec![(64, L)]
    } else {
        vec![(L, L)]
    }
}

fn useful_flops(r: &Row, hq: usize, d: usize) -> f64 {
    let aux = r.aux.as_ref().map_or(&[][..], |(v, _)| v.as_slice());
    let (q, l) = seqs(r)[0];
    let pairs: u64 = ((l - q) as i64..l as i64)
        .map(|qa| (0..l as i64).filter(|&k| (r.mask)(qa, k, aux)).count() as u64)
        .sum();
    4.0 * (hq * d) as f64 * pairs as f64
}

fn bench_variants(c: &mut Criterion<CudaEventTime>) {
    let dev = CudaDevice::new(0).expect("benches need a CUDA device");
    let ctx =
        UnifiedAttentionContext::new(&dev, dev.default_stream(), ContextOptions::two_d_only())
            .expect("context");
    let stream = ctx.stream().clone();
    let mut group = c.benchmark_group("unified_attention");
    group.sample_size(10);
    for r in rows() {
        let data = PagedData::random(&Geometry::new(&seqs(&r), (16, 8), 128), 0xBE);
        let flops = useful_flops(&r, 16, 128);
        group.throughput(Throughput::Elements(flops as u64));
        let aux = r.aux.as_ref().map(|(v, s)| (v.as_slice(), *s));
        let mut problem =
            DeviceVariantProblem::<bf16>::upload(&stream, &data, aux, None).expect("upload");
        let mut per_iter_us = vec![];
        group.bench_function(r.id, |b| {
            let mut args = problem.args(&data, Some(&r.variant), PathChoice::Force2d);
            let plan = ctx.plan(&args).unwrap_or_else(|e| panic!("{}: {e}", r.id));
            run_plan(&ctx, &plan, &mut args).expect("first call (compiles)");
            b.iter_custom(|iters| {
                let timer = EventTimer::new(&stream).expect("events");
                timer.start(&stream).expect("record start");
                for _ in 0..iters {
                    run_plan(&ctx, &plan, &mut args).expect("launch");
                }
                timer.stop(&stream).expect("record stop");
                let ns = f64::from(timer.elapsed_ms().expect("elapsed")) * 1e6;
                per_iter_us.push(ns / iters.max(1) as f64 / 1e3);
                ns
            });
        });
        if !per_iter_us.is_empty() {
            per_iter_us.sort_by(f64::total_cmp);
            let t_us = per_iter_us[per_iter_us.len() / 2];
            println!(
                "BENCH {} time={t_us:.1}us rate={:.2}TFLOP/s",
                r.id,
                flops / (t_us * 1e-6) * 1e-12
            );
        }
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = criterion_on_device0();
    targets = bench_variants
}
criterion_main!(benches);
