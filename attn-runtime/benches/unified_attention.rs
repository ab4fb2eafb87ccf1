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
//! Each row also prints `BENCH <row> time=<us> rate=<..> floor%=<..>` (median of the
//! per-iteration times criterion sampled) against the spec's floor. Timing uses
//! `run_plan` on a plan validated once, so host-side validation is not in the loop.
//!
//! Run: `cargo bench -p attn-runtime --features gpu --bench unified_attention --
//! --warm-up-time 1 --measurement-time 2` (append a row id, e.g. `P1`, to filter).

use std::sync::Arc;

use attn_runtime::bench::measurement::{criterion_on_device0, CudaEventTime};
use attn_runtime::launch::CudaDevice;
use attn_runtime::ops::unified_attention::args::{
    Metadata, MmPrefixRanges, TokenLayout, Tokens, UnifiedAttentionArgs,
};
use attn_runtime::ops::unified_attention::gpu::{
    run_plan, ContextOptions, UnifiedAttentionContext, WorkspaceCapacity,
};
use attn_runtime::ops::unified_attention::mask::{allowed, MaskConfig, SequenceMask};
use attn_runtime::ops::unified_attention::paged_cache::{CacheGeometry, PagedKvCache};
use attn_runtime::ops::unified_attention::plan::PathChoice;
use attn_runtime::problem::SplitMix64;
use attn_runtime::timing::EventTimer;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use cudarc::driver::{CudaSlice, CudaStream};
use half::bf16;

const BLOCK_SIZE: usize = 16;

/// What a row's rate is measured in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rate {
    /// Useful TFLOP/s (prefill: compute-bound).
    Flops,
    /// GB/s of KV bytes (decode: memory-bound).
    KvBytes,
}

/// One benchmark row of `performance.md`.
#[derive(Clone, Debug)]
struct Row {
    id: &'static str,
    /// `(query_len, seq_len)` per sequence.
    seqs: Vec<(usize, usize)>,
    heads: (usize, usize),
    head_size: usize,
    sliding_window: i32,
    /// `None`: `D^-0.5`.
    scale: Option<f32>,
    /// Inclusive ranges of the (single) sequence.
    mm_ranges: Vec<[i32; 2]>,
    clamp: bool,
    path: PathChoice,
    rate: Rate,
    /// The spec's floor for the row, in µs.
    floor_us: f64,
}

fn rows() -> Vec<Row> {
    let p1 = Row {
        id: "P1",
        seqs: vec![(8192, 8192)],
        heads: (16, 8),
        head_size: 256,
        sliding_window: 1024,
        scale: Some(1.0),
        mm_ranges: vec![],
        clamp: false,
        path: PathChoice::Heuristic,
        rate: Rate::Flops,
        floor_us: 163.0,
    };
    let images: Vec<[i32; 2]> = (0..30)
        .map(|i| [100 + 270 * i, 100 + 270 * i + 255])
        .collect();
    let p3 = Row {
        id: "P3",
        mm_ranges: images,
        clamp: true,
        floor_us: 183.0,
        ..p1.clone()
    };
    let d1 = Row {
        id: "D1-2D",
        seqs: vec![(1, 4096); 64],
        heads: (32, 8),
        head_size: 128,
        sliding_window: 0,
        scale: None,
        mm_ranges: vec![],
        clamp: false,
        path: PathChoice::Force2d,
        rate: Rate::KvBytes,
        floor_us: 250.0,
    };
    let p0 = Row {
        id: "P0",
        seqs: vec![(16384, 16384)],
        heads: (16, 16),
        head_size: 128,
        sliding_window: 0,
        scale: None,
        mm_ranges: vec![],
        clamp: false,
        path: PathChoice::Heuristic,
        rate: Rate::Flops,
        floor_us: 1441.0,
    };
    vec![
        p0.clone(),
        p1.clone(),
        p3.clone(),
        Row {
            id: "P3-noclamp",
            clamp: false,
            ..p3
        },
        d1.clone(),
        Row {
            id: "D1-3D",
            path: PathChoice::Force3d { num_segments: 16 },
            ..d1.clone()
        },
    ]
    .into_iter()
    .chain(sweep_rows(&p0, &p1, &d1))
    .collect()
}

/// Launch-table sweep: the same workloads under other tilings and split counts (rows named
/// `<row>-m<BLOCK_M>t<TILE>` and `D1-3D-<segments>`).
fn sweep_rows(p0: &Row, p1: &Row, d1: &Row) -> Vec<Row> {
    let tiled = |r: &Row, id: &'static str, block_m: i32, tile_size: i32| Row {
        id,
        path: PathChoice::Force2dTiled { block_m, tile_size },
        ..r.clone()
    };
    let split = |id: &'static str, num_segments: i32| Row {
        id,
        path: PathChoice::Force3d { num_segments },
        ..d1.clone()
    };
    vec![
        tiled(p0, "P0-m64t64", 64, 64),
        tiled(p0, "P0-m128t32", 128, 32),
        tiled(p0, "P0-m128t64", 128, 64),
        tiled(p1, "P1-m128t32", 128, 32),
        tiled(p1, "P1-m64t16", 64, 16),
        split("D1-3D-4", 4),
        split("D1-3D-8", 8),
        split("D1-3D-32", 32),
    ]
}

impl Row {
    fn mask_config(&self) -> MaskConfig {
        MaskConfig {
            sliding_window: self.sliding_window,
            use_mm_prefix: !self.mm_ranges.is_empty(),
            mm_prefix_clamp_sw: self.clamp,
            ..MaskConfig::full()
        }
    }

    /// Allowed (q, k) pairs over the batch, counted with the op's mask predicate.
    fn allowed_pairs(&self) -> u64 {
        let cfg = self.mask_config();
        let rows: Vec<(usize, i64)> = self
            .seqs
            .iter()
            .flat_map(|&(q, l)| (0..q).map(move |t| (l, (l - q + t) as i64)))
            .collect();
        parallel_sum(rows.len(), |i| {
            let (l, q_abs) = rows[i];
            let seq = SequenceMask {
                seq_len: l as i64,
                causal: true,
                rswa_prefix_len: 0,
                mm_ranges: &self.mm_ranges,
            };
            (0..l as i64)
                .filter(|&k| allowed(&cfg, &seq, q_abs, k))
                .count() as u64
        })
    }

    fn useful_flops(&self) -> f64 {
        4.0 * (self.heads.0 * self.head_size) as f64 * self.allowed_pairs() as f64
    }

    fn kv_bytes(&self) -> f64 {
        let tokens: usize = self.seqs.iter().map(|&(_, l)| l).sum();
        (tokens * self.heads.1 * self.head_size * 2 * std::mem::size_of::<bf16>()) as f64
    }

    /// The criterion throughput and the BENCH line's `(amount per run, unit scale, unit)`.
    fn work(&self) -> (Throughput, f64, f64, &'static str) {
        match self.rate {
            Rate::Flops => {
                let f = self.useful_flops();
                (Throughput::Elements(f as u64), f, 1e-12, "TFLOP/s")
            }
            Rate::KvBytes => {
                let b = self.kv_bytes();
                (Throughput::Bytes(b as u64), b, 1e-9, "GB/s")
            }
        }
    }
}

/// `Σ f(i)` for `i < n` over all cores.
fn parallel_sum(n: usize, f: impl Fn(usize) -> u64 + Sync) -> u64 {
    let threads = std::thread::available_parallelism().map_or(4, |t| t.get());
    let chunk = n.div_ceil(threads).max(1);
    std::thread::scope(|s| {
        let f = &f;
        let handles: Vec<_> = (0..n)
            .step_by(chunk)
            .map(|lo| s.spawn(move || (lo..(lo + chunk).min(n)).map(f).sum::<u64>()))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("counting thread"))
            .sum()
    })
}

/// Uniform bf16 in `[-1, 1)` from SplitMix64, generated on all cores (a 1 GB cache in
/// well under a second).
fn random_bf16(n: usize, seed: u64) -> Vec<bf16> {
    let mut v = vec![bf16::ZERO; n];
    let threads = std::thread::available_parallelism().map_or(4, |t| t.get());
    let chunk = n.div_ceil(threads).max(1);
    std::thread::scope(|s| {
        for (i, part) in v.chunks_mut(chunk).enumerate() {
            s.spawn(move || {
                let mut rng = SplitMix64(seed ^ (i as u64).wrapping_mul(0xA076_1D64_78BD_642F));
                for x in part {
                    *x = bf16::from_f64(rng.uniform(-1.0, 1.0));
                }
            });
        }
    });
    v
}

/// A row's problem on the device, built once.
struct Prepared {
    q: CudaSlice<bf16>,
    out: CudaSlice<bf16>,
    cache: PagedKvCache<bf16>,
    cu_seqlens_q: (CudaSlice<i32>, Vec<i32>),
    seq_lens: (CudaSlice<i32>, Vec<i32>),
    block_table: (CudaSlice<i32>, Vec<i32>),
    block_table_stride: usize,
    ranges: Option<(CudaSlice<i32>, Vec<i32>)>,
    layout: TokenLayout,
}

impl Prepared {
    fn build(stream: &Arc<CudaStream>, row: &Row) -> Prepared {
        let (hq, hkv) = row.heads;
        let d = row.head_size;
        let t: usize = row.seqs.iter().map(|&(q, _)| q).sum();
        let blocks: Vec<usize> = row
            .seqs
            .iter()
            .map(|&(_, l)| l.div_ceil(BLOCK_SIZE))
            .collect();
        let num_blocks: usize = blocks.iter().sum();
        let stride = blocks.iter().copied().max().unwrap_or(1);
        // A scattered (not sequential) page order, as a serving cache has.
        let mut order: Vec<i32> = (0..num_blocks as i32).collect();
        let mut rng = SplitMix64(0x51);
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i + 1));
        }
        let mut table = vec![0i32; row.seqs.len() * stride];
        let mut next = 0;
        for (s, &n) in blocks.iter().enumerate() {
            for j in 0..n {
                table[s * stride + j] = order[next];
                next += 1;
            }
        }
        let mut cu = vec![0i32];
        for &(q, _) in &row.seqs {
            cu.push(cu.last().copied().unwrap_or(0) + q as i32);
        }
        let seq_lens: Vec<i32> = row.seqs.iter().map(|&(_, l)| l as i32).collect();
        let geometry = CacheGeometry {
            num_blocks,
            block_size: BLOCK_SIZE,
            num_kv_heads: hkv,
            head_size: d,
        };
        let elements = geometry.elements().expect("bench geometry fits");
        let k = random_bf16(elements, 1);
        let v = random_bf16(elements, 2);
        let cache = PagedKvCache::from_host(stream, geometry, &k, &v).expect("upload cache");
        let up = |v: Vec<i32>| (stream.clone_htod(&v).expect("upload metadata"), v);
        let ranges = (!row.mm_ranges.is_empty()).then(|| up(row.mm_ranges.as_flattened().to_vec()));
        Prepared {
            q: stream
                .clone_htod(&random_bf16(t * hq * d, 3))
                .expect("upload q"),
            out: stream.alloc_zeros(t * hq * d).expect("allocate out"),
            cache,
            cu_seqlens_q: up(cu),
            seq_lens: up(seq_lens),
            block_table: up(table),
            block_table_stride: stride,
            ranges,
            layout: TokenLayout::contiguous(t, hq, d),
        }
    }

    fn args(&mut self, row: &Row) -> UnifiedAttentionArgs<'_, bf16> {
        let mut args = UnifiedAttentionArgs::new(
            Tokens {
                data: self.q.as_view(),
                layout: self.layout,
            },
            Tokens {
                data: self.out.as_view_mut(),
                layout: self.layout,
            },
            &self.cache,
            meta(&self.cu_seqlens_q),
            meta(&self.seq_lens),
            meta(&self.block_table),
            self.block_table_stride,
        );
        if let Some(s) = row.scale {
            args.softmax_scale = s;
        }
        args.sliding_window = row.sliding_window;
        args.mm_prefix_clamp_sliding_window = row.clamp;
        args.path = row.path;
        if let Some(r) = &self.ranges {
            args.mm_prefix_ranges = MmPrefixRanges::PerSequence {
                ranges: meta(r),
                max_ranges: row.mm_ranges.len(),
            };
        }
        args
    }
}

/// A device metadata buffer with its host copy, as the op's argument.
fn meta((device, host): &(CudaSlice<i32>, Vec<i32>)) -> Metadata<'_> {
    Metadata {
        device: device.as_view(),
        host,
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
    let options = ContextOptions {
        split_kv: None,
        workspace: Some(WorkspaceCapacity {
            max_tokens: 64,
            max_query_heads: 32,
            max_head_size: 256,
            max_segments: 16,
        }),
    };
    let ctx = UnifiedAttentionContext::new(&dev, dev.default_stream(), options).expect("context");
    let stream = ctx.stream().clone();
    let mut group = c.benchmark_group("unified_attention");
    group.sample_size(10);
    for row in rows() {
        let (throughput, amount, unit_scale, unit) = row.work();
        group.throughput(throughput);
        let mut prepared: Option<Prepared> = None;
        let mut per_iter_us: Vec<f64> = vec![];
        let mut chosen = String::new();
        group.bench_function(row.id, |b| {
            // Built on first use, so rows filtered out on the command line cost nothing.
            let p = prepared.get_or_insert_with(|| Prepared::build(&stream, &row));
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
                ns
            });
        });
        drop(prepared);
        if !per_iter_us.is_empty() {
            let t_us = median(&mut per_iter_us);
            let rate = amount / (t_us * 1e-6) * unit_scale;
            println!(
                "BENCH {} time={t_us:.1}us rate={rate:.2}{unit} floor%={:.1} floor={}us {chosen}",
                row.id,
                100.0 * row.floor_us / t_us,
                row.floor_us
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
