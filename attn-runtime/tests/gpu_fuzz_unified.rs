//! GPU fuzz of the unified-attention op (issue 13; feature `gpu`): 2 400 argument sets from
//! the host fuzz's generators (GPU profile: few constexpr values), each turned into real
//! device buffers and passed to `unified_attention`. Malformed sets must come back as typed
//! errors, valid ones must launch and match the f64 reference (outputs poisoned with NaN);
//! every launch is synchronized so a fault is counted as a CUDA error. The run ends with one
//! valid call whose result proves the context is still healthy. The cases and the views
//! come from `fuzz_support::unified_call`, which `fuzz_unified_gpu_cases.rs` runs through
//! the same host path on the CPU: its host-side verdicts are checked in CI without a GPU.
//! `ATTN_FUZZ_SHARD=I/N` checks every N-th case from the I-th (a device call too short for
//! all 2 400 runs them in parts); progress goes to stderr.
#![cfg(feature = "gpu")]

mod fuzz_support;
mod gpu_unified_support;
mod unified_common;

use std::panic::{catch_unwind, AssertUnwindSafe};

use attn_runtime::ops::unified_attention::args::{
    Metadata, TokenLayout, Tokens, UnifiedAttentionArgs,
};
use attn_runtime::ops::unified_attention::gpu::{
    plan_host, unified_attention, AttnError, UnifiedAttentionContext,
};
use attn_runtime::ops::unified_attention::paged_cache::{CacheGeometry, PagedKvCache};
use attn_runtime::reference::unified_attention::{
    unified_attention as reference, AttentionOptions, QqBias as RefQqBias, UnifiedAttentionProblem,
};
use attn_runtime::reference::Dtype;
use attn_runtime::split_mix64::SplitMix64;
use cudarc::driver::{CudaSlice, CudaStream};
use fuzz_support::outcome::{Outcome, Tally};
use fuzz_support::unified_call::{
    cache_elems, gpu_case, gpu_options, host_call, qq_bias_values, view_lens, GPU_CASES as CASES,
};
use fuzz_support::unified_case::UnifiedCase;
use fuzz_support::unified_oracle::check;
use gpu_unified_support::threads;
use half::bf16;
use std::sync::Arc;
use unified_common::{ATOL, RTOL};

/// Host data of a case: q, K, V values, sinks and qq_bias values (all bf16-representable).
struct HostData {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    sinks: Vec<f32>,
    qq_bias: Vec<f32>,
}

fn random_values(rng: &mut SplitMix64, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| Dtype::Bf16.round(rng.uniform(-1.0, 1.0)) as f32)
        .collect()
}

fn host_data(c: &UnifiedCase, cache_elems: usize, seed: u64) -> HostData {
    let mut rng = SplitMix64(seed ^ 0xA5A5);
    HostData {
        q: random_values(&mut rng, c.q_buffer),
        k: random_values(&mut rng, cache_elems),
        v: random_values(&mut rng, cache_elems),
        sinks: random_values(&mut rng, c.sinks_len.unwrap_or(0)),
        qq_bias: random_values(&mut rng, qq_bias_values(c)),
    }
}

fn upload<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
    s: &Arc<CudaStream>,
    v: &[T],
) -> CudaSlice<T> {
    // A zero-length view still needs an allocation.
    if v.is_empty() {
        s.alloc_zeros::<T>(1).expect("alloc")
    } else {
        s.clone_htod(v).expect("upload")
    }
}

fn bf(v: &[f32]) -> Vec<bf16> {
    v.iter().map(|&x| bf16::from_f32(x)).collect()
}

/// What one GPU call did.
enum Run {
    /// The cache itself was refused (a typed error at the API boundary).
    CacheRefused,
    Called(Result<Vec<f32>, AttnError>),
    CudaError(String),
}

/// Builds device buffers for `c` and calls the op; the output (token rows, D contiguous)
/// is downloaded when the call succeeded. Every view handed to the op has the length
/// [`view_lens`] gives (an empty one cut from its 1-element allocation), so the op judges
/// the case the oracle judges and `fuzz_unified_gpu_cases.rs` reproduces its verdict on
/// the CPU.
fn run_on_gpu(ctx: &UnifiedAttentionContext, c: &UnifiedCase, data: &HostData) -> Run {
    let s = ctx.stream().clone();
    let geometry = CacheGeometry {
        num_blocks: c.num_blocks,
        block_size: c.block_size,
        num_kv_heads: c.hkv,
        head_size: c.kv_d,
    };
    let cache = match PagedKvCache::from_host(&s, geometry, &bf(&data.k), &bf(&data.v)) {
        Ok(cache) => cache,
        Err(_) => return Run::CacheRefused,
    };
    let lens = view_lens(c);
    let q = upload(&s, &bf(&data.q));
    let mut out = upload(&s, &vec![bf16::NAN; c.out_buffer]);
    let (cu, seq, table) = (
        upload(&s, &c.cu),
        upload(&s, &c.seq_lens),
        upload(&s, &c.table),
    );
    let sinks = upload(&s, &data.sinks);
    let qq = upload(&s, &data.qq_bias);
    let layout = |tokens, strides: [usize; 3]| TokenLayout {
        num_tokens: tokens,
        num_heads: c.hq,
        head_size: c.d,
        token_stride: strides[0],
        head_stride: strides[1],
    };
    let q_view = q.slice(..lens.q);
    let mut args = UnifiedAttentionArgs::new(
        Tokens {
            data: q_view,
            layout: layout(c.num_tokens, c.q_strides),
        },
        Tokens {
            data: out.slice_mut(..lens.out),
            layout: layout(c.out_tokens, c.out_strides),
        },
        &cache,
        Metadata {
            device: cu.slice(..lens.cu),
            host: &c.cu,
        },
        Metadata {
            device: seq.slice(..lens.seq_lens),
            host: &c.seq_lens,
        },
        Metadata {
            device: table.slice(..lens.table),
            host: &c.table,
        },
        c.table_stride,
    );
    args.softmax_scale = c.scale;
    args.softcap = c.softcap;
    args.sliding_window = c.window;
    args.chunk_lookback = c.lookback;
    args.path = c.path;
    args.sinks = lens.sinks.map(|n| sinks.slice(..n));
    // An empty bias (a `[0, cols]` case) is a 0-length view, not the 1-element allocation
    // behind it: the op derives the rows from the view's length.
    args.qq_bias = c.qq_bias.zip(lens.qq_bias).map(|([_, cols], n)| {
        attn_runtime::ops::unified_attention::args::QqBias {
            values: qq.slice(..n),
            stride0: cols,
        }
    });
    // The CPU mirror must see the call the op sees.
    assert_eq!(
        ctx.plan(&args).map_err(|e| e.to_string()).map(|_| ()),
        plan_host(&host_call(c), ctx.options())
            .map_err(|e| e.to_string())
            .map(|_| ()),
        "fuzz_support::unified_call::host_call differs from the op's view of this call"
    );
    let called = unified_attention(ctx, &mut args);
    if let Err(e) = s.synchronize() {
        return Run::CudaError(e.to_string());
    }
    Run::Called(called.map(|_| {
        let raw: Vec<bf16> = s.clone_dtoh(&out).expect("download");
        let mut rows = Vec::with_capacity(c.num_tokens * c.hq * c.d);
        for t in 0..c.num_tokens {
            for h in 0..c.hq {
                let base = t * c.out_strides[0] + h * c.out_strides[1];
                rows.extend(raw[base..base + c.d].iter().map(|x| x.to_f32()));
            }
        }
        rows
    }))
}

/// The f64 reference of a valid case (q gathered from its strided buffer).
fn expected(c: &UnifiedCase, data: &HostData) -> Vec<f64> {
    let mut q = Vec::with_capacity(c.num_tokens * c.hq * c.d);
    for t in 0..c.num_tokens {
        for h in 0..c.hq {
            let base = t * c.q_strides[0] + h * c.q_strides[1];
            q.extend_from_slice(&data.q[base..base + c.d]);
        }
    }
    let problem = UnifiedAttentionProblem {
        q: &q,
        num_query_heads: c.hq,
        head_size: c.d,
        k_cache: &data.k,
        v_cache: &data.v,
        block_size: c.block_size,
        num_kv_heads: c.hkv,
        block_table: &c.table,
        block_table_stride: c.table_stride,
        cu_seqlens_q: &c.cu,
        seq_lens: &c.seq_lens,
        scale: f64::from(c.scale),
        options: AttentionOptions {
            sliding_window: c.window,
            chunk_lookback: c.lookback,
            softcap: c.softcap.map(f64::from),
            sinks: c.sinks_len.map(|_| data.sinks.as_slice()),
            qq_bias: c.qq_bias.map(|[_, cols]| RefQqBias {
                values: &data.qq_bias,
                stride0: cols,
            }),
            round_p: Some(Dtype::Bf16),
            ..AttentionOptions::default()
        },
    };
    reference(&problem).expect("reference of a valid case")
}

/// Within tolerance and never NaN (a NaN output fails the comparison).
fn close(got: &[f32], want: &[f64]) -> bool {
    got.len() == want.len()
        && got.iter().zip(want).all(|(&g, &w)| {
            let g = f64::from(g);
            g.is_finite() && (g - w).abs() <= ATOL + RTOL * w.abs()
        })
}

fn gpu_context() -> UnifiedAttentionContext {
    let dev = attn_runtime::launch::CudaDevice::new(0).expect("the gpu feature requires a GPU");
    UnifiedAttentionContext::new(&dev, dev.default_stream(), gpu_options()).expect("context")
}

/// The shard of the cases this run checks, from `ATTN_FUZZ_SHARD=I/N` (seeds `s` with
/// `(s - 1) % N == I`): a device call too short for all of them runs them in parts, each
/// part against its share of the floors. All of them when unset.
fn shard() -> (u64, u64) {
    let Ok(v) = std::env::var("ATTN_FUZZ_SHARD") else {
        return (0, 1);
    };
    let parsed = v
        .split_once('/')
        .and_then(|(i, n)| Some((i.parse().ok()?, n.parse().ok()?)));
    match parsed {
        Some((i, n)) if n > 0 && i < n => (i, n),
        _ => panic!("ATTN_FUZZ_SHARD={v}: expected I/N with I < N"),
    }
}

#[test]
fn gpu_fuzz_unified_attention() {
    let ctx = gpu_context();
    let (part, parts) = shard();
    let seeds: Vec<u64> = (1..=CASES).filter(|s| (s - 1) % parts == part).collect();
    // Compile every specialization the valid cases need once, in parallel.
    let plans: Vec<_> = seeds
        .iter()
        .map(|&s| gpu_case(s))
        .filter(|c| check(c).is_ok())
        .filter_map(|c| plan_host(&host_call(&c), ctx.options()).ok())
        .collect();
    let start = std::time::Instant::now();
    let compiled = ctx.precompile(&plans, threads()).expect("precompile");
    // Progress on stderr: a run cut short by a device call's limit says where it was.
    eprintln!(
        "GPU unified fuzz: {compiled} specializations compiled in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    let mut tally = Tally::default();
    for (done, &seed) in seeds.iter().enumerate() {
        if done % 200 == 199 {
            eprintln!(
                "GPU unified fuzz: {} of {} cases (shard {part} of {parts}) at {:.1} s",
                done + 1,
                seeds.len(),
                start.elapsed().as_secs_f64()
            );
        }
        let c = gpu_case(seed);
        let verdict = check(&c);
        let data = host_data(&c, cache_elems(&c), seed);
        let ran = catch_unwind(AssertUnwindSafe(|| run_on_gpu(&ctx, &c, &data)));
        match ran {
            Err(_) => tally.add(Outcome::Panicked),
            Ok(Run::CudaError(e)) => {
                tally.cuda_errors += 1;
                eprintln!("seed {seed}: CUDA error {e}; {c:?}");
                break;
            }
            Ok(Run::CacheRefused) => tally.add(Outcome::of::<(), ()>(Ok(Err(())), verdict.is_ok())),
            Ok(Run::Called(result)) => {
                let outcome = Outcome::of(
                    Ok(result.as_ref().map(|_| ()).map_err(|_| ())),
                    verdict.is_ok(),
                );
                tally.add(outcome);
                if !outcome.is_correct() {
                    eprintln!(
                        "seed {seed}: {outcome:?}, oracle {verdict:?}, op {:?}; {c:?}",
                        result.as_ref().err().map(ToString::to_string)
                    );
                }
                if let (Ok(got), true) = (&result, outcome == Outcome::Accepted) {
                    if !close(got, &expected(&c, &data)) {
                        tally.wrong_results += 1;
                        eprintln!("seed {seed}: wrong result; {c:?}");
                    }
                }
            }
        }
    }
    println!("GPU unified fuzz: {tally}");
    // The context must still work: one valid call, checked against the reference.
    let healthy = (1..)
        .map(gpu_case)
        .find(|c| check(c).is_ok() && c.num_tokens > 0)
        .expect("a valid case");
    let data = host_data(
        &healthy,
        healthy.num_blocks * healthy.block_size * healthy.hkv * healthy.d,
        7,
    );
    match run_on_gpu(&ctx, &healthy, &data) {
        Run::Called(Ok(got)) => assert!(
            close(&got, &expected(&healthy, &data)),
            "final call is wrong"
        ),
        Run::Called(Err(e)) => panic!("final valid call rejected: {e}"),
        Run::CudaError(e) => panic!("context unhealthy after the fuzz: {e}"),
        Run::CacheRefused => panic!("final valid cache refused"),
    }
    println!("GPU unified fuzz: final valid call matches the reference; context healthy");
    assert!(tally.clean(), "{tally}");
    // Issue 13: at least 10^3 valid edge cases checked against the reference per op (a
    // shard checks its share; the shards together, all of them).
    let floor = 1_000usize.div_ceil(parts as usize);
    assert!(tally.total() >= floor, "{tally}");
    assert!(tally.accepted >= floor, "{tally}");
}
