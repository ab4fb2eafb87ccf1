//! The L rows of `specs/performance.md` (DeepSeek-V3 absorbed MLA decode, bf16, page 64, q_len 1)
//! through the whole MLA-DCP op (feature `gpu`, one GPU): dcp = 1 (all heads on the GPU, no
//! exchange) and dcp = 2 as ONE rank's work (D·N = 128 gathered heads over the rank's half of the
//! context, N = 64 own heads, the exchange replaced by a device copy of the same bytes).
//!
//! Per row it prints
//! `BENCH <row> time=<us> tflops=<..> gbs=<..> floor%=<..> isolated=<us> profiled=<us>
//! graph=<us> hist=<us> reduce=<us> exchange=<us> current=<us> combine=<us> vup=<us>
//! gather=<us> splits=<n> span=<t0>-<t1>` (the wall-clock seconds the sustained timing ran in)
//! (`time`: steps back to back on a context without stage events, after 1 s of them the
//! median per-step time of ~10 ms batches over 2 s, the regime criterion times the unified
//! rows in and `bench/peers/peers.py` its peers: the power limit lowers the clock within a
//! fraction of a second of heavy work; `isolated`: 20 steps each between two events and
//! synchronized, a cooler GPU; medians of 20 steps: `profiled` and the stages from a profiled
//! context's stage events; `graph` the step replayed from a CUDA graph, no host work between
//! its launches, unless `ATTN_BENCH_EVENT_TRACKING` keeps cudarc's event tracking on:
//! then `n/a(<why>)`; FLOPs = 2·B·H·L·(576+512), bytes = B·L·1152, L = ctx/dcp, floor = max(bytes /
//! 4.3e12, FLOPs / 790e12)), then `TIMELINE <row> main: ..@<us> | side: current [<start>, <end>] |
//! overlap=<..> hidden=<..>` (median µs after the step's start event: the side stream's current
//! part against the main stream's stages) and `HOST <row> prepare=<us> enqueue=<us>
//! exchange=<us> after=<us>` (host time of each phase of the op's call) and `HOT <row>
//! profiled=<us> hist=<us> current=<us> combine=<us>` (the profiled stages again, on a GPU
//! held at its sustained clock), writes `device-out/mla_decode.json`, and runs criterion on
//! the step.
//! Caches, queries and weights are filled on the GPU (a hash kernel), not uploaded.

use attn_runtime::bench::measurement::CudaEventTime;
use attn_runtime::bench::{render_table, write_json, BenchResult, Span};
use attn_runtime::launch::CudaDevice;
use attn_runtime::ops::mla_dcp::cuda_source::{self, HALF_CONVERSIONS};
use attn_runtime::ops::mla_dcp::graph::MlaDcpGraph;
use attn_runtime::ops::mla_dcp::metadata::DcpLayout;
use attn_runtime::ops::mla_dcp::op::{
    compile_launches, mla_dcp_decode, CurrentOrder, ExchangeMode, MlaDcpConfig, MlaDcpContext,
    MlaDcpDecodeArgs, StageTimeline, StageTimes, VupPath,
};
use attn_runtime::ops::mla_dcp::plan::{DecodeStep, FusedTile, QK_WIDTH};
use attn_runtime::ops::unified_attention::config::MmaKind;
use attn_runtime::reference::mla::MlaConfig;
use attn_runtime::timing::EventTimer;
use criterion::{Criterion, Throughput};
use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use half::bf16;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

const BLOCK: u32 = 64;
const PROFILED_RUNS: usize = 20;
/// Steps run untimed before the sustained timing, and how long it times ([`sustained_ms`]).
const SUSTAIN_WARMUP: Duration = Duration::from_secs(1);
const SUSTAIN_MEASURE: Duration = Duration::from_secs(2);

/// One L row: `batch × ctx`, `heads` query heads in the whole model, split over `dcp` ranks;
/// sweep rows force the history tile height (gathered heads per program).
#[derive(Clone, Copy, Debug)]
struct Row {
    batch: usize,
    ctx: u32,
    heads: u32,
    dcp: u32,
    history_heads: Option<u32>,
    kv_tile: Option<u32>,
}

impl Row {
    const fn new(batch: usize, ctx: u32, heads: u32, dcp: u32) -> Self {
        Row {
            batch,
            ctx,
            heads,
            dcp,
            history_heads: None,
            kv_tile: None,
        }
    }
    const fn kv_tile(self, keys: u32) -> Self {
        Row {
            kv_tile: Some(keys),
            ..self
        }
    }
    const fn history_heads(self, heads: u32) -> Self {
        Row {
            history_heads: Some(heads),
            ..self
        }
    }
    fn name(&self) -> String {
        let heads = self
            .history_heads
            .map_or(String::new(), |h| format!(" bh{h}"));
        let keys = self.kv_tile.map_or(String::new(), |k| format!(" kv{k}"));
        let sweep = format!("{heads}{keys}");
        format!(
            "{}x{} h{} dcp{}{sweep}",
            self.batch, self.ctx, self.heads, self.dcp
        )
    }
    fn local_len(&self) -> f64 {
        f64::from(self.ctx) / f64::from(self.dcp)
    }
    /// 2·B·H·L·(576 + 512) with H the gathered heads (all of them) and L per GPU.
    fn flops(&self) -> f64 {
        2.0 * self.batch as f64 * f64::from(self.heads) * self.local_len() * 1088.0
    }
    /// B·L·1152: the latent cache read once.
    fn bytes(&self) -> f64 {
        self.batch as f64 * self.local_len() * 1152.0
    }
    fn layout(&self) -> DcpLayout {
        DcpLayout::new(self.dcp, 1, BLOCK).expect("layout")
    }
    fn heads_per_rank(&self) -> u32 {
        self.heads / self.dcp
    }
    fn step(&self, num_sms: u32) -> DecodeStep {
        DecodeStep::uniform_decode(
            self.batch,
            self.ctx,
            self.heads_per_rank(),
            self.layout(),
            MlaConfig::deepseek_v3().softmax_scale() as f32,
            num_sms,
        )
    }
    fn blocks_per_request(&self) -> usize {
        self.layout().max_blocks_per_request(u64::from(self.ctx)) as usize
    }
}

const ROWS: [Row; 9] = [
    Row::new(1, 32768, 128, 1),
    Row::new(1, 32768, 128, 2),
    Row::new(32, 8192, 128, 1),
    Row::new(32, 8192, 128, 2),
    Row::new(128, 4096, 128, 1),
    Row::new(128, 4096, 128, 2),
    Row::new(128, 32768, 16, 1),
    // Sweep: L1 on 32-head tiles of 4 warps (the `mma.sync` tiling; on sm_90a the plan
    // takes 64-head tiles on two warpgroups) and on 32-key tiles (the plan takes 64 there).
    Row::new(128, 4096, 128, 1).history_heads(32),
    Row::new(128, 4096, 128, 1).kv_tile(32),
];

const FILL_SOURCE: &str = r#"
extern "C" __global__ void fill_bf16(unsigned short* p, long long n, unsigned int seed, float scale) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (; i < n; i += stride) {
        unsigned int x = (unsigned int)i * 2654435761u ^ (unsigned int)(i >> 32) ^ seed;
        x ^= x >> 16; x *= 0x7feb352dU; x ^= x >> 15; x *= 0x846ca68bU; x ^= x >> 16;
        float u = (float)(x >> 8) * (1.0f / 16777216.0f);
        p[i] = f32_to_bf16((2.0f * u - 1.0f) * scale);
    }
}
"#;

/// Fills device buffers with hashed uniform values in `[-scale, scale)`.
struct Filler {
    func: CudaFunction,
    stream: Arc<CudaStream>,
}

impl Filler {
    fn new(stream: &Arc<CudaStream>) -> Self {
        let src = format!("{HALF_CONVERSIONS}\n{FILL_SOURCE}");
        let module = cuda_source::load_module(stream.context(), "bench_fill", &src).expect("fill");
        Filler {
            func: cuda_source::load_function(&module, "fill_bf16").expect("fill_bf16"),
            stream: stream.clone(),
        }
    }

    fn alloc(&self, n: usize, seed: u32, scale: f32) -> CudaSlice<bf16> {
        let mut buf = self.stream.alloc_zeros::<bf16>(n.max(1)).expect("alloc");
        let len = n as i64;
        let cfg = LaunchConfig {
            grid_dim: (4 * 132, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(&self.func);
        b.arg(&mut buf).arg(&len).arg(&seed).arg(&scale);
        // SAFETY: (unsigned short*, long long, unsigned, float) matches `fill_bf16`; buf holds n.
        unsafe { b.launch(cfg) }.expect("fill launch");
        buf
    }
}

/// A row's device inputs.
struct RowInputs {
    cache: CudaSlice<bf16>,
    table: CudaSlice<i32>,
    table_host: Vec<i32>,
    q_loc: CudaSlice<bf16>,
    q_all: CudaSlice<bf16>,
    cur_kv: CudaSlice<bf16>,
    w_uv: CudaSlice<bf16>,
    query_lens: Vec<u32>,
    seq_lens: Vec<u32>,
    stride: usize,
}

impl RowInputs {
    fn new(row: &Row, stream: &Arc<CudaStream>, fill: &Filler) -> Self {
        let (b, n, d) = (row.batch, row.heads_per_rank() as usize, row.dcp as usize);
        let stride = row.blocks_per_request();
        let num_blocks = b * stride + 1;
        // Block 0 is never used; request r's blocks are 1 + r·stride ...
        let table: Vec<i32> = (0..b * stride).map(|i| 1 + i as i32).collect();
        RowInputs {
            cache: fill.alloc(num_blocks * BLOCK as usize * QK_WIDTH, 1, 1.0),
            table: stream.clone_htod(&table).expect("table"),
            table_host: table,
            q_loc: fill.alloc(b * n * QK_WIDTH, 2, 1.0),
            q_all: fill.alloc(d * b * n * QK_WIDTH, 3, 1.0),
            cur_kv: fill.alloc(b * QK_WIDTH, 4, 1.0),
            w_uv: fill.alloc(n * 512 * 128, 5, 0.05),
            query_lens: vec![1; b],
            seq_lens: vec![row.ctx; b],
            stride,
        }
    }

    fn args(&self) -> MlaDcpDecodeArgs<'_, bf16> {
        MlaDcpDecodeArgs {
            query_lens: &self.query_lens,
            seq_lens: &self.seq_lens,
            q_loc: self.q_loc.as_view(),
            q_all: Some(self.q_all.as_view()),
            cur_kv: self.cur_kv.as_view(),
            cache: self.cache.as_view(),
            block_table: self.table.as_view(),
            block_table_host: &self.table_host,
            block_table_stride: self.stride,
            w_uv: self.w_uv.as_view(),
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Median of each mark of the timeline over `runs`.
fn median_timeline(runs: &[StageTimeline]) -> StageTimeline {
    let m = |f: fn(&StageTimeline) -> f64| median(runs.iter().map(f).collect());
    StageTimeline {
        current_start_us: m(|t| t.current_start_us),
        current_end_us: m(|t| t.current_end_us),
        gathered_us: m(|t| t.gathered_us),
        history_us: m(|t| t.history_us),
        reduced_us: m(|t| t.reduced_us),
        exchanged_us: m(|t| t.exchanged_us),
        combined_us: m(|t| t.combined_us),
        vup_done_us: m(|t| t.vup_done_us),
    }
}

/// Median of each stage over `runs`.
fn median_times(runs: &[StageTimes]) -> StageTimes {
    let m = |f: fn(&StageTimes) -> f64| median(runs.iter().map(f).collect());
    StageTimes {
        total_us: m(|t| t.total_us),
        gather_us: m(|t| t.gather_us),
        history_us: m(|t| t.history_us),
        reduce_us: m(|t| t.reduce_us),
        exchange_us: m(|t| t.exchange_us),
        current_us: m(|t| t.current_us),
        combine_us: m(|t| t.combine_us),
        vup_us: m(|t| t.vup_us),
    }
}

fn bench_row(
    c: &mut Criterion<CudaEventTime>,
    dev: &CudaDevice,
    main: &Arc<CudaStream>,
    fill: &Filler,
    row: &Row,
) -> BenchResult {
    let inputs = RowInputs::new(row, main, fill);
    let mut config = MlaDcpConfig::new(
        row.layout(),
        0,
        row.heads_per_rank(),
        MlaConfig::deepseek_v3().softmax_scale() as f32,
        row.batch,
        row.batch,
    );
    // A/B of the enqueue order (default: `CurrentOrder::Auto`).
    if std::env::var_os("ATTN_MLA_HISTORY_FIRST").is_some() {
        config.streams.current_order = CurrentOrder::AfterHistory;
    }
    if std::env::var_os("ATTN_MLA_CURRENT_FIRST").is_some() {
        config.streams.current_order = CurrentOrder::First;
    }
    // A/B of the V-up path: `ATTN_MLA_VUP=cublas|fused|dsl` (default: the op's).
    match std::env::var("ATTN_MLA_VUP").as_deref() {
        Ok("cublas") => config.vup = VupPath::Cublas,
        Ok("fused") => config.vup = VupPath::Fused,
        Ok("dsl") => config.vup = VupPath::DslKernel,
        _ => {}
    }
    // A/B of the current rows read from `cur_kv` (one-token chunks, fused merge):
    // `ATTN_MLA_CUR_ROWS=out` keeps the current part's `[T, N, 512]` rows.
    if std::env::var("ATTN_MLA_CUR_ROWS").as_deref() == Ok("out") {
        config.current_rows_from_kv = false;
    }
    // The fused kernel's tile, `ATTN_MLA_FUSED_TILE=BLOCK_TxLAT_CHUNK[xSTAGES[xBLOCK_V]][w]`
    // (e.g. `32x128`, `16x128x4`, `16x128x2x128`; two stages and 128 columns unless given;
    // a trailing `w`, as in `64x64x2x128w` or `128x64x2x128w`: warpgroup MMAs, sm_90a, 64
    // tokens, or 128 at dcp 1).
    if let Ok(tile) = std::env::var("ATTN_MLA_FUSED_TILE") {
        let warpgroups = tile.ends_with('w');
        let dims: Vec<u32> = tile
            .trim_end_matches('w')
            .split('x')
            .map(|d| d.parse::<u32>().expect("ATTN_MLA_FUSED_TILE"))
            .collect();
        if let [block_t, lat_chunk, ref rest @ ..] = dims[..] {
            let stages = rest.first().copied().unwrap_or(2);
            let block_v = rest.get(1).copied().unwrap_or(128);
            config.forced_fused_tile = Some(FusedTile {
                block_t,
                lat_chunk,
                stages,
                block_v,
                warpgroups,
            });
        }
    }
    // The history reduce's columns a program, `ATTN_MLA_REDUCE_COLS=512|256|128`.
    if let Ok(cols) = std::env::var("ATTN_MLA_REDUCE_COLS") {
        config.forced_reduce_cols = Some(cols.parse().expect("ATTN_MLA_REDUCE_COLS"));
    }
    config.forced_history_heads = row.history_heads;
    config.forced_history_kv_tile = row.kv_tile;
    config.exchange = if row.dcp == 1 {
        ExchangeMode::A2a
    } else {
        ExchangeMode::Loopback
    };
    let args = inputs.args();
    let isolated = median(steps_ms(dev, main, config, &args, isolated_ms)) * 1e3;
    let mut span = Span::start();
    let step_ms = steps_ms(dev, main, config, &args, sustained_ms);
    span.extend();
    let host = host_phases_us(dev, main, config, &args);
    println!(
        "HOST {} prepare={:.1} enqueue={:.1} exchange={:.1} after={:.1}",
        row.name(),
        host[0],
        host[1],
        host[2],
        host[3]
    );
    let graph = match graph_steps_ms(dev, main, config, &args) {
        Ok(ms) => format!("{:.1}", median(ms) * 1e3),
        Err(why) => format!("n/a({})", why.replace(' ', "_")),
    };
    config.profile = true;
    let mut ctx = MlaDcpContext::new(dev, main.clone(), config, None).expect("context");
    let report = mla_dcp_decode(&mut ctx, &args).expect("first step");
    main.synchronize().expect("first step ran");
    let mut runs = Vec::with_capacity(PROFILED_RUNS);
    let mut timeline = Vec::with_capacity(PROFILED_RUNS);
    for _ in 0..PROFILED_RUNS {
        mla_dcp_decode(&mut ctx, &args).expect("step");
        runs.push(ctx.stage_times().expect("stage times"));
        timeline.push(ctx.stage_timeline().expect("stage timeline"));
    }
    let t = median_times(&runs);
    let hot = hot_stage_times(main, &mut ctx, &args);
    println!(
        "HOT {} profiled={:.1} hist={:.1} current={:.1} combine={:.1}",
        row.name(),
        hot.total_us,
        hot.history_us,
        hot.current_us,
        hot.combine_us
    );
    // Where the side stream's current part ran relative to the main stream's stages.
    println!(
        "TIMELINE {} {}",
        row.name(),
        median_timeline(&timeline).render()
    );
    let result = BenchResult::from_runs(
        "mla_dcp_decode",
        &ctx.kernel_keys().join(" "),
        &row.name(),
        row.flops(),
        row.bytes(),
        &step_ms,
    );
    println!(
        "BENCH {} time={:.1} tflops={:.2} gbs={:.1} floor%={:.1} isolated={:.1} profiled={:.1} graph={} \
         hist={:.1} reduce={:.1} exchange={:.1} current={:.1} combine={:.1} vup={:.1} \
         gather={:.1} splits={} {}",
        row.name(),
        result.median_us,
        result.tflops,
        result.gbps,
        result.percent_of_floor,
        isolated,
        t.total_us,
        graph,
        t.history_us,
        t.reduce_us,
        t.exchange_us,
        t.current_us,
        t.combine_us,
        t.vup_us,
        t.gather_us,
        report.num_splits,
        span
    );
    let mut group = c.benchmark_group("mla_decode");
    group.sample_size(10);
    group.throughput(Throughput::Elements(row.flops() as u64));
    group.bench_function(row.name(), |b| {
        b.iter(|| mla_dcp_decode(&mut ctx, &args).expect("step"))
    });
    group.finish();
    // The row's buffers drop next (see the event-tracking switch in `main`).
    main.synchronize().expect("the row's steps ran");
    result
}

/// How a row's steps are timed: [`isolated_ms`] (each step between two events and
/// synchronized, the peers' `--regime burst`) or [`sustained_ms`].
type Timing =
    fn(&Arc<CudaStream>, &mut dyn FnMut() -> Result<(), String>) -> Result<Vec<f64>, String>;

/// Device milliseconds of steps on a context without stage events, timed by `timing`: the
/// stage events of a profiled context cost host time while the step's first launches are
/// enqueued, which the device waits for.
fn steps_ms(
    dev: &CudaDevice,
    main: &Arc<CudaStream>,
    config: MlaDcpConfig,
    args: &MlaDcpDecodeArgs<'_, bf16>,
    timing: Timing,
) -> Vec<f64> {
    let mut ctx = unprofiled_context(dev, main, config, args).expect("context");
    timing(main, &mut || {
        mla_dcp_decode(&mut ctx, args)
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
    .expect("steps")
}

/// Host microseconds of each phase of an isolated step's call (medians of
/// [`PROFILED_RUNS`]): `prepare_call` (checks, plan, metadata upload), `enqueue_prepared`
/// (fork, current part, history), `enqueue_exchange`, `enqueue_after_exchange`. The device
/// waits for the first two before the history starts.
fn host_phases_us(
    dev: &CudaDevice,
    main: &Arc<CudaStream>,
    config: MlaDcpConfig,
    args: &MlaDcpDecodeArgs<'_, bf16>,
) -> [f64; 4] {
    let mut ctx = unprofiled_context(dev, main, config, args).expect("context");
    let mut phases = [const { Vec::new() }; 4];
    for _ in 0..PROFILED_RUNS {
        let t0 = std::time::Instant::now();
        ctx.prepare_call(args).expect("prepare");
        let t1 = std::time::Instant::now();
        ctx.enqueue_prepared(args).expect("enqueue");
        let t2 = std::time::Instant::now();
        ctx.enqueue_exchange().expect("exchange");
        let t3 = std::time::Instant::now();
        ctx.enqueue_after_exchange(args)
            .expect("after the exchange");
        let t4 = std::time::Instant::now();
        main.synchronize().expect("the step ran");
        for (v, (a, b)) in phases
            .iter_mut()
            .zip([(t0, t1), (t1, t2), (t2, t3), (t3, t4)])
        {
            v.push((b - a).as_secs_f64() * 1e6);
        }
    }
    ctx.side_stream().synchronize().expect("side stream");
    phases.map(median)
}

/// Stage times (medians of [`PROFILED_RUNS`]) of steps run on a GPU kept at its sustained
/// clock: [`SUSTAIN_WARMUP`] of back-to-back steps first, then each timed step followed at
/// once by the next (waiting for a step's events leaves the device idle a few microseconds,
/// too short for the clock to rise). What the stages take under the power limit the
/// sustained `time` runs at, where the profiled step's stages are a cooler GPU's.
fn hot_stage_times(
    main: &Arc<CudaStream>,
    ctx: &mut MlaDcpContext<bf16>,
    args: &MlaDcpDecodeArgs<'_, bf16>,
) -> StageTimes {
    warm_up(main, 8, &mut || {
        mla_dcp_decode(ctx, args)
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
    .expect("warm-up steps");
    let runs: Vec<StageTimes> = (0..PROFILED_RUNS)
        .map(|_| {
            mla_dcp_decode(ctx, args).expect("step");
            ctx.stage_times().expect("stage times")
        })
        .collect();
    median_times(&runs)
}

/// Device milliseconds of isolated replays of the step captured in a CUDA graph (what a
/// serving engine's decode runs: no host work between the step's launches), timed like
/// [`steps_ms`] with [`isolated_ms`]; or why there are none. Capture needs cudarc's event
/// tracking off (the bench's default; `ATTN_BENCH_EVENT_TRACKING` keeps it on).
fn graph_steps_ms(
    dev: &CudaDevice,
    main: &Arc<CudaStream>,
    config: MlaDcpConfig,
    args: &MlaDcpDecodeArgs<'_, bf16>,
) -> Result<Vec<f64>, String> {
    if dev.context().is_event_tracking() {
        return Err("event tracking on".into());
    }
    let mut ctx = unprofiled_context(dev, main, config, args)?;
    let graph = MlaDcpGraph::capture(&mut ctx, args).map_err(|e| e.to_string())?;
    // The first launch uploads the graph: not timed.
    graph.replay_unchecked().map_err(|e| e.to_string())?;
    let ms = isolated_ms(main, &mut || {
        graph.replay_unchecked().map_err(|e| e.to_string())
    })?;
    // The context's buffers drop next: its side stream's last work must be done.
    ctx.side_stream().synchronize().map_err(|e| e.to_string())?;
    Ok(ms)
}

/// A context without stage events that has run the step once (compiled, planned, its
/// metadata uploaded), idle.
fn unprofiled_context(
    dev: &CudaDevice,
    main: &Arc<CudaStream>,
    mut config: MlaDcpConfig,
    args: &MlaDcpDecodeArgs<'_, bf16>,
) -> Result<MlaDcpContext<bf16>, String> {
    config.profile = false;
    let mut ctx = MlaDcpContext::new(dev, main.clone(), config, None).map_err(|e| e.to_string())?;
    mla_dcp_decode(&mut ctx, args).map_err(|e| e.to_string())?;
    main.synchronize().map_err(|e| e.to_string())?;
    Ok(ctx)
}

/// [`SUSTAIN_WARMUP`] of `step` run back to back, synchronized every `per_batch` steps: the
/// GPU brought to the clock the power limit holds it at under sustained work.
fn warm_up(
    main: &Arc<CudaStream>,
    per_batch: usize,
    step: &mut dyn FnMut() -> Result<(), String>,
) -> Result<(), String> {
    let warm = std::time::Instant::now();
    while warm.elapsed() < SUSTAIN_WARMUP {
        (0..per_batch).try_for_each(|_| step())?;
        main.synchronize().map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Per-step device milliseconds of `step` run back to back, one value a batch: after
/// [`SUSTAIN_WARMUP`] of steps (synchronized a batch at a time), batches of about 10 ms of
/// steps between two events on `main` for [`SUSTAIN_MEASURE`]. The regime of criterion's
/// timings of the unified rows and of `bench/peers/peers.py`: under the board's power limit
/// the SM clock settles lower within a fraction of a second of heavy work (H100, P0: 1545 to
/// 1560 MHz for ours, 1740 for cuDNN's, both at 700 W), so isolated steps time a cooler GPU.
fn sustained_ms(
    main: &Arc<CudaStream>,
    step: &mut dyn FnMut() -> Result<(), String>,
) -> Result<Vec<f64>, String> {
    let clock = std::time::Instant::now();
    step()?;
    main.synchronize().map_err(|e| e.to_string())?;
    let per_batch = (0.01 / clock.elapsed().as_secs_f64().max(1e-6)).clamp(1.0, 1e4) as usize;
    warm_up(main, per_batch, step)?;
    let timer = EventTimer::new(main).map_err(|e| e.to_string())?;
    let mut per_step = Vec::new();
    let measured = std::time::Instant::now();
    while measured.elapsed() < SUSTAIN_MEASURE || per_step.len() < 5 {
        per_step.push(batch_ms(main, &timer, per_batch, step)?);
    }
    Ok(per_step)
}

/// Per-step device milliseconds of `steps` runs of `step` back to back between `timer`'s
/// events on `main` (waits for the last).
fn batch_ms(
    main: &Arc<CudaStream>,
    timer: &EventTimer,
    steps: usize,
    step: &mut dyn FnMut() -> Result<(), String>,
) -> Result<f64, String> {
    timer.start(main).map_err(|e| e.to_string())?;
    (0..steps).try_for_each(|_| step())?;
    timer.stop(main).map_err(|e| e.to_string())?;
    let ms = timer.elapsed_ms().map_err(|e| e.to_string())?;
    Ok(f64::from(ms) / steps as f64)
}

/// Device milliseconds of [`PROFILED_RUNS`] runs of `step`, each between two events on
/// `main` and synchronized before the next.
fn isolated_ms(
    main: &Arc<CudaStream>,
    step: &mut dyn FnMut() -> Result<(), String>,
) -> Result<Vec<f64>, String> {
    let timer = EventTimer::new(main).map_err(|e| e.to_string())?;
    (0..PROFILED_RUNS)
        .map(|_| batch_ms(main, &timer, 1, step))
        .collect()
}

/// The rows to run: those named in `MLA_BENCH_ROWS` (row names separated by commas, e.g.
/// `128x4096 h128 dcp1` for `ncu` on one row), else all.
fn selected_rows() -> Vec<Row> {
    let wanted = std::env::var("MLA_BENCH_ROWS").unwrap_or_default();
    let names: Vec<&str> = wanted
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .collect();
    ROWS.into_iter()
        .filter(|r| names.is_empty() || names.contains(&r.name().as_str()))
        .collect()
}

/// Compiles every row's specializations up front, in parallel (NVRTC dominates a cold run).
fn precompile(dev: &CudaDevice, rows: &[Row]) {
    let sms = dev.limits().sm_count.max(1);
    let mma = MmaKind::for_arch(dev.arch());
    let plans: Vec<_> = rows
        .iter()
        .map(|r| {
            r.step(sms)
                .plan_tuned(mma, None, r.history_heads, r.kv_tile)
                .expect("plan")
        })
        .collect();
    let launches = plans.iter().flat_map(|p| p.launches());
    let n = compile_launches(dev, launches).expect("precompile").len();
    println!("precompiled {n} specializations");
}

fn main() {
    let dev = CudaDevice::new(0).expect("benches need a CUDA device");
    if std::env::var_os("ATTN_BENCH_EVENT_TRACKING").is_none() {
        // What a serving engine runs: it captures the step in a CUDA graph (which needs the
        // tracking off) or orders its streams itself, as the op does with its fork/join
        // events. `ATTN_BENCH_EVENT_TRACKING=1` keeps cudarc's per-buffer events (and
        // leaves out the graph figure).
        // SAFETY: every buffer is created after this call; each row's streams are
        // synchronized before its buffers drop.
        unsafe { dev.context().disable_event_tracking() };
    }
    let main = dev.new_stream().expect("stream");
    let mut c = Criterion::default()
        .with_measurement(CudaEventTime::new(main.clone()))
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    let rows = selected_rows();
    precompile(&dev, &rows);
    let fill = Filler::new(&main);
    let results: Vec<BenchResult> = rows
        .iter()
        .map(|row| bench_row(&mut c, &dev, &main, &fill, row))
        .collect();
    print!("{}", render_table(&results));
    if let Err(e) = write_json(
        Path::new("device-out/mla_decode.json"),
        dev.name(),
        &results,
    ) {
        eprintln!("could not write device-out/mla_decode.json: {e}");
    }
    c.final_summary();
}
