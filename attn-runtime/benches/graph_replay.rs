//! Per-step time of small decode steps with and without a CUDA graph (feature `gpu`): the
//! host-bound regime a graph exists for, where launching (validation, planning, argument
//! marshalling, one driver call per kernel) costs as much as the kernels.
//!
//! Rows (wall-clock per step over back-to-back steps, the stream synchronized once per
//! sample, so host overhead that the GPU cannot hide shows):
//! - `unified D-small/{eager,eager-planned,graph,graph-checked}`: decode 8 × 512, 32/8/128,
//!   3D split-KV — `unified_attention` (validate + plan + launch), `run_plan` (launch a plan
//!   validated once), the graph's `replay_unchecked`, and `replay` (host validation, plan and
//!   buffer checks, then the graph);
//! - `mla D-small/{eager,graph}`: MLA decode, one rank, 4 × 1024, 16 heads, page 64.
//!
//! Each row also prints `BENCH graph <row> time=<us>/step`.
//! Run: `cargo bench -p attn-runtime --features gpu --bench graph_replay -- --warm-up-time 1
//! --measurement-time 2`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use attn_runtime::bench::unified::{context_options, random_bf16, rows, Prepared};
use attn_runtime::launch::CudaDevice;
use attn_runtime::ops::mla_dcp::graph::MlaDcpGraph;
use attn_runtime::ops::mla_dcp::metadata::DcpLayout;
use attn_runtime::ops::mla_dcp::op::{
    mla_dcp_decode, ExchangeMode, MlaDcpConfig, MlaDcpContext, MlaDcpDecodeArgs,
};
use attn_runtime::ops::mla_dcp::plan::{LATENT, QK_WIDTH, V_HEAD};
use attn_runtime::ops::unified_attention::gpu::{
    run_plan, unified_attention, UnifiedAttentionContext,
};
use attn_runtime::ops::unified_attention::graph::UnifiedAttentionGraph;
use criterion::{criterion_group, criterion_main, Bencher, Criterion};
use cudarc::driver::{CudaSlice, CudaStream};
use half::bf16;

/// A device without cudarc's event tracking (capture needs it off) and a capturable stream.
fn device_and_stream() -> (CudaDevice, Arc<CudaStream>) {
    let dev = CudaDevice::new(0).expect("benches need a CUDA device");
    // SAFETY: every buffer of the bench is used on the one stream created below (the MLA
    // context orders its side stream with its own events).
    unsafe { dev.context().disable_event_tracking() };
    let stream = dev.new_stream().expect("stream");
    (dev, stream)
}

/// Wall time of `iters` steps enqueued back to back, synchronized once; prints the median
/// per-step time of the samples at the end of the row.
fn time_steps(
    b: &mut Bencher<'_>,
    stream: &CudaStream,
    per_step_us: &mut Vec<f64>,
    mut step: impl FnMut(),
) {
    b.iter_custom(|iters| {
        stream.synchronize().expect("idle before timing");
        let t = Instant::now();
        for _ in 0..iters {
            step();
        }
        stream.synchronize().expect("steps ran");
        let d = t.elapsed();
        per_step_us.push(d.as_secs_f64() * 1e6 / iters.max(1) as f64);
        d
    });
}

fn report(row: &str, per_step_us: &mut [f64]) {
    per_step_us.sort_by(f64::total_cmp);
    if let Some(m) = per_step_us.get(per_step_us.len() / 2) {
        println!("BENCH graph {row} time={m:.2}us/step");
    }
}

fn bench_unified(c: &mut Criterion) {
    let (dev, stream) = device_and_stream();
    let ctx = UnifiedAttentionContext::new(&dev, stream.clone(), context_options()).expect("ctx");
    let row = rows()
        .into_iter()
        .find(|r| r.id == "D1-3D")
        .expect("the D1-3D row")
        .with_num_seqs(8)
        .with_seq_len(512);
    let mut prepared = Prepared::build(&stream, &row).expect("problem");
    let mut args = prepared.args(&row);
    let plan = ctx.plan(&args).expect("plan");
    run_plan(&ctx, &plan, &mut args).expect("first call (compiles)");
    let graph = UnifiedAttentionGraph::capture(&ctx, &mut args).expect("capture");
    graph.replay_unchecked().expect("first replay");
    let mut group = c.benchmark_group("graph");
    group.sample_size(20);
    let mut run = |name: &str, step: &mut dyn FnMut()| {
        let mut us = vec![];
        let id = format!("unified D-small/{name}");
        group.bench_function(&id, |b| time_steps(b, &stream, &mut us, &mut *step));
        report(&id, &mut us);
    };
    run("eager", &mut || {
        unified_attention(&ctx, &mut args).expect("call");
    });
    run("eager-planned", &mut || {
        run_plan(&ctx, &plan, &mut args).expect("launch");
    });
    run("graph", &mut || graph.replay_unchecked().expect("replay"));
    run("graph-checked", &mut || {
        graph.replay(&ctx, &args).expect("replay");
    });
    group.finish();
}

/// A small MLA decode problem on the device (random bf16, identity block table).
struct MlaProblem {
    query_lens: Vec<u32>,
    seq_lens: Vec<u32>,
    q_loc: CudaSlice<bf16>,
    cur_kv: CudaSlice<bf16>,
    cache: CudaSlice<bf16>,
    table: CudaSlice<i32>,
    table_host: Vec<i32>,
    stride: usize,
    w_uv: CudaSlice<bf16>,
}

const MLA_BATCH: usize = 4;
const MLA_CTX: u32 = 1024;
const MLA_HEADS: u32 = 16;
const MLA_BLOCK: u32 = 64;

impl MlaProblem {
    fn new(stream: &Arc<CudaStream>) -> Self {
        let stride = (MLA_CTX / MLA_BLOCK) as usize + 1;
        let blocks = MLA_BATCH * stride;
        let table_host: Vec<i32> = (0..blocks as i32).collect();
        let t = MLA_BATCH;
        let n = MLA_HEADS as usize;
        let up = |len: usize, seed: u64| stream.clone_htod(&random_bf16(len, seed)).expect("up");
        MlaProblem {
            query_lens: vec![1; MLA_BATCH],
            seq_lens: vec![MLA_CTX; MLA_BATCH],
            q_loc: up(t * n * QK_WIDTH, 1),
            cur_kv: up(t * QK_WIDTH, 2),
            cache: up(blocks * MLA_BLOCK as usize * QK_WIDTH, 3),
            table: stream.clone_htod(&table_host).expect("table"),
            table_host,
            stride,
            w_uv: up(n * LATENT * V_HEAD, 4),
        }
    }

    fn args(&self) -> MlaDcpDecodeArgs<'_, bf16> {
        MlaDcpDecodeArgs {
            query_lens: &self.query_lens,
            seq_lens: &self.seq_lens,
            q_loc: self.q_loc.as_view(),
            q_all: None,
            cur_kv: self.cur_kv.as_view(),
            cache: self.cache.as_view(),
            block_table: self.table.as_view(),
            block_table_host: &self.table_host,
            block_table_stride: self.stride,
            w_uv: self.w_uv.as_view(),
        }
    }
}

fn bench_mla(c: &mut Criterion) {
    let (dev, stream) = device_and_stream();
    let layout = DcpLayout::new(1, 1, MLA_BLOCK).expect("layout");
    let scale = 1.0 / (QK_WIDTH as f32 - 384.0).sqrt();
    let mut config = MlaDcpConfig::new(layout, 0, MLA_HEADS, scale, MLA_BATCH, MLA_BATCH);
    config.exchange = ExchangeMode::A2a;
    let mut ctx = MlaDcpContext::<bf16>::new(&dev, stream.clone(), config, None).expect("ctx");
    let p = MlaProblem::new(&stream);
    let args = p.args();
    mla_dcp_decode(&mut ctx, &args).expect("first call (compiles)");
    let graph = MlaDcpGraph::capture(&mut ctx, &args).expect("capture");
    graph.replay_unchecked().expect("first replay");
    let mut group = c.benchmark_group("graph");
    group.sample_size(20);
    let mut us = vec![];
    group.bench_function("mla D-small/eager", |b| {
        time_steps(b, &stream, &mut us, || {
            mla_dcp_decode(&mut ctx, &args).expect("call");
        })
    });
    report("mla D-small/eager", &mut us);
    let mut us = vec![];
    group.bench_function("mla D-small/graph", |b| {
        time_steps(b, &stream, &mut us, || {
            graph.replay_unchecked().expect("replay")
        })
    });
    report("mla D-small/graph", &mut us);
    group.finish();
    stream.synchronize().expect("done");
    ctx.side_stream().synchronize().expect("side done");
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2));
    targets = bench_unified, bench_mla
}
criterion_main!(benches);
