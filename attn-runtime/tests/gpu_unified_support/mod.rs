//! GPU side of the unified-attention parity tests: uploads a `unified_common::PagedData`
//! problem (q and out with padded, NaN-poisoned token rows), turns test features into both
//! the reference's options and the GPU op's arguments, runs the op, and checks the output
//! against the f64 reference with NaN never passing.

#![allow(dead_code)]

use std::sync::Arc;

use attn_runtime::launch::CudaDevice;
use attn_runtime::ops::unified_attention::args::{
    Causal, Metadata, MmPrefixRanges, QqBias as QqBiasArg, TokenLayout, Tokens,
    UnifiedAttentionArgs,
};
use attn_runtime::ops::unified_attention::config::SplitKvWorkspace;
use attn_runtime::ops::unified_attention::gpu::{
    unified_attention, AttnError, ContextOptions, LaunchReport, UnifiedAttentionContext,
    WorkspaceCapacity,
};
use attn_runtime::ops::unified_attention::paged_cache::{CacheGeometry, PagedKvCache};
use attn_runtime::ops::unified_attention::plan::{LaunchPlan, PathChoice};
use attn_runtime::parity::{compare, Tolerance};
use attn_runtime::reference::unified_attention::{
    unified_attention as reference, AttentionOptions, Causality, MmRanges, QqBias,
};
use attn_runtime::reference::Dtype;
use cudarc::driver::{CudaSlice, CudaStream};

use crate::unified_common::{seeded, PagedData, ATOL, RTOL};

/// Elements after each token row of q and out (poisoned; 16 bytes keeps rows aligned).
pub const ROW_PADDING: usize = attn_runtime::testing::device_variant::DEVICE_ROW_PADDING;

/// Threads for parallel compiles and references (the GPU host has 16 cores).
pub fn threads() -> usize {
    std::thread::available_parallelism().map_or(4, |n| n.get())
}

/// The 16-bit kernel dtypes with their host conversions (the library's test helper).
pub use attn_runtime::testing::device_variant::DeviceDtype as TestDtype;

/// A context on device 0 (default stream) with a 3D workspace for up to
/// `max_tokens` decode tokens of up to `max_heads` heads × `max_head_size`.
pub fn context(
    max_tokens: usize,
    max_heads: usize,
    max_head_size: usize,
) -> UnifiedAttentionContext {
    let dev = CudaDevice::new(0).expect("the gpu feature requires a CUDA device");
    let options = ContextOptions {
        split_kv: Some(SplitKvWorkspace {
            seq_threshold_3d: 8,
            num_segments: 16,
        }),
        workspace: Some(WorkspaceCapacity {
            max_tokens,
            max_query_heads: max_heads,
            max_head_size,
            max_segments: 16,
        }),
    };
    UnifiedAttentionContext::new(&dev, dev.default_stream(), options).expect("context")
}

/// Moves the problem's pages into a cache of `num_blocks` blocks at random distinct
/// physical ids (every other block NaN), remapping the block table, as §7.1's
/// `num_blocks = 2048` does.
pub fn spread_blocks(data: &mut PagedData, num_blocks: usize, seed: u64) {
    let page = data.block_size * data.num_kv_heads * data.head_size;
    let old = data.k_cache.len() / page;
    assert!(
        num_blocks >= old,
        "cannot spread {old} blocks into {num_blocks}"
    );
    let mut rng = seeded(seed);
    let mut ids: Vec<usize> = (0..num_blocks).collect();
    for i in (1..ids.len()).rev() {
        ids.swap(i, rng.below(i + 1));
    }
    let mut k = vec![f32::NAN; num_blocks * page];
    let mut v = vec![f32::NAN; num_blocks * page];
    for (from, &to) in ids.iter().take(old).enumerate() {
        k[to * page..(to + 1) * page]
            .copy_from_slice(&data.k_cache[from * page..(from + 1) * page]);
        v[to * page..(to + 1) * page]
            .copy_from_slice(&data.v_cache[from * page..(from + 1) * page]);
    }
    for e in &mut data.block_table {
        *e = ids[*e as usize] as i32;
    }
    data.k_cache = k;
    data.v_cache = v;
}

/// Causality as host data (the GPU flags are uploaded per run).
#[derive(Clone, Debug, PartialEq)]
pub enum HostCausality {
    Causal,
    NonCausal,
    PerSequence(Vec<bool>),
}

/// Multimodal ranges as host data.
#[derive(Clone, Debug, PartialEq)]
pub enum HostMm {
    None,
    /// `[S, R, 2]` flat with R.
    PerSequence(Vec<[i32; 2]>, usize),
    /// `[T, 2]`.
    PerQuery(Vec<[i32; 2]>),
}

/// The options of one test case, fed to both the reference and the GPU op.
#[derive(Clone, Debug)]
pub struct Features {
    pub sliding_window: i32,
    pub softcap: Option<f64>,
    pub causality: HostCausality,
    pub chunk_lookback: i32,
    pub mm: HostMm,
    pub clamp: bool,
    /// `[rows, stride0]` values and stride0.
    pub qq_bias: Option<(Vec<f32>, usize)>,
    pub path: PathChoice,
}

impl Default for Features {
    fn default() -> Self {
        Features {
            sliding_window: 0,
            softcap: None,
            causality: HostCausality::Causal,
            chunk_lookback: -1,
            mm: HostMm::None,
            clamp: false,
            qq_bias: None,
            path: PathChoice::Heuristic,
        }
    }
}

impl Features {
    /// The reference's options, probabilities rounded to `dtype` as the kernel casts P.
    pub fn reference_options(&self, dtype: Dtype) -> AttentionOptions<'_> {
        AttentionOptions {
            sliding_window: self.sliding_window,
            causality: match &self.causality {
                HostCausality::Causal => Causality::Causal,
                HostCausality::NonCausal => Causality::NonCausal,
                HostCausality::PerSequence(f) => Causality::PerSequence(f),
            },
            chunk_lookback: self.chunk_lookback,
            mm_ranges: match &self.mm {
                HostMm::None => MmRanges::None,
                HostMm::PerSequence(r, n) => MmRanges::PerSequence(r, *n),
                HostMm::PerQuery(r) => MmRanges::PerQuery(r),
            },
            mm_prefix_clamp_sw: self.clamp,
            softcap: self.softcap,
            qq_bias: self.qq_bias.as_ref().map(|(values, stride0)| QqBias {
                values,
                stride0: *stride0,
            }),
            round_p: Some(dtype),
            ..Default::default()
        }
    }
}

/// The f64 reference of every case, computed on all cores.
pub fn references(data: &PagedData, cases: &[Features]) -> Vec<Vec<f64>> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results = std::sync::Mutex::new(vec![None; cases.len()]);
    std::thread::scope(|s| {
        for _ in 0..threads().min(cases.len()).max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(case) = cases.get(i) else { break };
                let want = reference(&data.problem(case.reference_options(data.dtype)))
                    .unwrap_or_else(|e| panic!("reference of case {i}: {e}"));
                results.lock().expect("results")[i] = Some(want);
            });
        }
    });
    results
        .into_inner()
        .expect("results")
        .into_iter()
        .map(|r| r.expect("every reference computed"))
        .collect()
}

/// One problem on the device: q (padded rows, poison in the padding), out (all NaN before
/// each run), the cache and the metadata.
pub struct DeviceBatch<T> {
    pub q: CudaSlice<T>,
    pub out: CudaSlice<T>,
    pub cache: PagedKvCache<T>,
    pub cu_seqlens_q: CudaSlice<i32>,
    pub seq_lens: CudaSlice<i32>,
    pub block_table: CudaSlice<i32>,
    pub layout: TokenLayout,
    poison: Vec<T>,
    stream: Arc<CudaStream>,
}

impl<T: TestDtype> DeviceBatch<T> {
    pub fn upload(stream: &Arc<CudaStream>, data: &PagedData) -> Self {
        assert_eq!(data.dtype, T::DTYPE, "fixture dtype");
        let (hq, d) = (data.num_query_heads, data.head_size);
        let t = data.num_tokens();
        let layout = TokenLayout {
            token_stride: hq * d + ROW_PADDING,
            ..TokenLayout::contiguous(t, hq, d)
        };
        let nan = T::from_f32(f32::NAN);
        let mut q = vec![nan; t * layout.token_stride];
        for tok in 0..t {
            for i in 0..hq * d {
                q[tok * layout.token_stride + i] = T::from_f32(data.q[tok * hq * d + i]);
            }
        }
        let poison = vec![nan; t * layout.token_stride];
        let conv = |v: &[f32]| v.iter().map(|&x| T::from_f32(x)).collect::<Vec<T>>();
        let page = data.block_size * data.num_kv_heads * d;
        let geometry = CacheGeometry {
            num_blocks: data.k_cache.len() / page,
            block_size: data.block_size,
            num_kv_heads: data.num_kv_heads,
            head_size: d,
        };
        let cache =
            PagedKvCache::from_host(stream, geometry, &conv(&data.k_cache), &conv(&data.v_cache))
                .expect("upload cache");
        let up = |v: &[i32]| stream.clone_htod(v).expect("upload metadata");
        DeviceBatch {
            q: stream.clone_htod(&q).expect("upload q"),
            out: stream.clone_htod(&poison).expect("allocate out"),
            cache,
            cu_seqlens_q: up(&data.cu_seqlens_q),
            seq_lens: up(&data.seq_lens),
            block_table: up(&data.block_table),
            layout,
            poison,
            stream: stream.clone(),
        }
    }

    /// Refills the output with NaN (no allocation).
    pub fn poison_output(&mut self) {
        self.stream
            .memcpy_htod(&self.poison, &mut self.out)
            .expect("poison out");
    }

    /// The op's arguments over this batch (extras still off).
    pub fn args<'a>(&'a mut self, data: &'a PagedData) -> UnifiedAttentionArgs<'a, T> {
        UnifiedAttentionArgs::new(
            Tokens {
                data: self.q.as_view(),
                layout: self.layout,
            },
            Tokens {
                data: self.out.as_view_mut(),
                layout: self.layout,
            },
            &self.cache,
            Metadata {
                device: self.cu_seqlens_q.as_view(),
                host: &data.cu_seqlens_q,
            },
            Metadata {
                device: self.seq_lens.as_view(),
                host: &data.seq_lens,
            },
            Metadata {
                device: self.block_table.as_view(),
                host: &data.block_table,
            },
            data.block_table_stride,
        )
    }

    /// Downloads out, checks every valid element was written (finite) and the padding
    /// still holds its poison; returns the `[T, Hq, D]` values.
    pub fn output(&self, context: &str) -> Vec<f32> {
        let raw: Vec<f32> = self
            .stream
            .clone_dtoh(&self.out)
            .expect("download out")
            .into_iter()
            .map(T::to_f32)
            .collect();
        let row = self.layout.num_heads * self.layout.head_size;
        let mut valid = Vec::with_capacity(self.layout.num_tokens * row);
        for (i, &x) in raw.iter().enumerate() {
            if i % self.layout.token_stride < row {
                assert!(
                    x.is_finite(),
                    "{context}: out element {i} is {x} (unwritten or NaN leaked)"
                );
                valid.push(x);
            } else {
                assert!(
                    x.is_nan(),
                    "{context}: padding element {i} was overwritten with {x}"
                );
            }
        }
        valid
    }
}

/// Device copies of a case's extras; they must outlive the call's arguments.
pub struct DeviceExtras {
    ranges: Option<CudaSlice<i32>>,
    flags: Option<CudaSlice<i32>>,
    qq_bias: Option<CudaSlice<f32>>,
    ranges_host: Vec<i32>,
}

impl DeviceExtras {
    pub fn upload(stream: &Arc<CudaStream>, f: &Features) -> Self {
        let ranges_host: Vec<i32> = match &f.mm {
            HostMm::None => vec![],
            HostMm::PerSequence(r, _) | HostMm::PerQuery(r) => r.as_flattened().to_vec(),
        };
        let ranges = (!matches!(f.mm, HostMm::None))
            .then(|| stream.clone_htod(&ranges_host).expect("upload ranges"));
        let flags = match &f.causality {
            HostCausality::PerSequence(fl) => {
                let v: Vec<i32> = fl.iter().map(|&c| i32::from(c)).collect();
                Some(stream.clone_htod(&v).expect("upload flags"))
            }
            _ => None,
        };
        let qq_bias = f
            .qq_bias
            .as_ref()
            .map(|(v, _)| stream.clone_htod(v).expect("upload qq_bias"));
        DeviceExtras {
            ranges,
            flags,
            qq_bias,
            ranges_host,
        }
    }

    /// Sets the case's options on `args`.
    pub fn apply<'a, T: TestDtype>(&'a self, f: &Features, args: &mut UnifiedAttentionArgs<'a, T>) {
        args.sliding_window = f.sliding_window;
        args.softcap = f.softcap.map(|c| c as f32);
        args.chunk_lookback = f.chunk_lookback;
        args.mm_prefix_clamp_sliding_window = f.clamp;
        args.path = f.path;
        args.causal = match (&f.causality, &self.flags) {
            (HostCausality::NonCausal, _) => Causal::NonCausal,
            (HostCausality::PerSequence(_), Some(flags)) => Causal::PerSequence(flags.as_view()),
            _ => Causal::Causal,
        };
        let meta = |s: &'a CudaSlice<i32>| Metadata {
            device: s.as_view(),
            host: &self.ranges_host,
        };
        args.mm_prefix_ranges = match (&f.mm, &self.ranges) {
            (HostMm::PerSequence(_, r), Some(s)) => MmPrefixRanges::PerSequence {
                ranges: meta(s),
                max_ranges: *r,
            },
            (HostMm::PerQuery(_), Some(s)) => MmPrefixRanges::PerQuery(meta(s)),
            _ => MmPrefixRanges::None,
        };
        args.qq_bias = match (&f.qq_bias, &self.qq_bias) {
            (Some((_, stride0)), Some(s)) => Some(QqBiasArg {
                values: s.as_view(),
                stride0: *stride0,
            }),
            _ => None,
        };
    }
}

/// Validates and plans a case without running it (for parallel precompiles).
pub fn plan_case<T: TestDtype>(
    ctx: &UnifiedAttentionContext,
    batch: &mut DeviceBatch<T>,
    data: &PagedData,
    f: &Features,
) -> Result<LaunchPlan, AttnError> {
    with_case_args(ctx, batch, data, f, |args| ctx.plan(args))
}

/// Compiles every specialization the cases need, in parallel.
pub fn precompile<T: TestDtype>(
    ctx: &UnifiedAttentionContext,
    batch: &mut DeviceBatch<T>,
    data: &PagedData,
    cases: &[Features],
) {
    let plans: Vec<LaunchPlan> = cases
        .iter()
        .map(|f| plan_case(ctx, batch, data, f).unwrap_or_else(|e| panic!("plan {f:?}: {e}")))
        .collect();
    ctx.precompile(&plans, threads()).expect("precompile");
}

/// Runs one case on the GPU: poisoned output, one call, output checked for poison.
pub fn run_case<T: TestDtype>(
    ctx: &UnifiedAttentionContext,
    batch: &mut DeviceBatch<T>,
    data: &PagedData,
    f: &Features,
    name: &str,
) -> (Vec<f32>, LaunchReport) {
    batch.poison_output();
    let report = launch_case(ctx, batch, data, f).unwrap_or_else(|e| panic!("{name}: {e}"));
    ctx.stream().synchronize().expect("synchronize");
    let out = batch.output(name);
    (out, report)
}

/// Enqueues one case on the op.
fn launch_case<T: TestDtype>(
    ctx: &UnifiedAttentionContext,
    batch: &mut DeviceBatch<T>,
    data: &PagedData,
    f: &Features,
) -> Result<LaunchReport, AttnError> {
    with_case_args(ctx, batch, data, f, |args| unified_attention(ctx, args))
}

/// Runs `use_args` on the batch's arguments with the case's extras (uploaded for it).
fn with_case_args<T: TestDtype, R>(
    ctx: &UnifiedAttentionContext,
    batch: &mut DeviceBatch<T>,
    data: &PagedData,
    f: &Features,
    use_args: impl FnOnce(&mut UnifiedAttentionArgs<'_, T>) -> R,
) -> R {
    let extras = DeviceExtras::upload(ctx.stream(), f);
    let mut args = batch.args(data);
    extras.apply(f, &mut args);
    use_args(&mut args)
}

/// GPU output vs the reference at the spec tolerance (NaN never passes); prints one
/// `UNIFIED <case> max_abs=<..>` line and returns the max abs error.
pub fn check(name: &str, report: &LaunchReport, got: &[f32], want: &[f64]) -> f64 {
    check_with(name, report, got, want, Tolerance::new(ATOL, RTOL))
}

pub fn check_with(
    name: &str,
    report: &LaunchReport,
    got: &[f32],
    want: &[f64],
    tol: Tolerance,
) -> f64 {
    let got: Vec<f64> = got.iter().map(|&x| f64::from(x)).collect();
    let c = compare("out", &got, want, tol)
        .unwrap_or_else(|e| panic!("{name} ({} path): {e}", report.path_name()));
    println!(
        "UNIFIED {name} path={} tile={} max_abs={:.3e}",
        report.path_name(),
        report.config.tile_size,
        c.max_abs_err
    );
    c.max_abs_err
}
