//! The MLA-DCP decode op on ONE GPU (feature `gpu`; a missing GPU is a failure): D ∈ {1, 2, 4, 8}
//! ranks simulated as D contexts sharing one main stream (the exchange is `simulate_a2a`), each
//! rank's `y [T, N·128]` against the dense f64 reference (full causal absorbed attention + V-up,
//! spec §9.5), empty shards, zero history, mixed q_len, f16, every V-up path, the GPU kernels
//! against the CPU executor, steady-state reuse, the single-rank paths (A2A with D = 1, loopback),
//! typed errors, the stream order (a spin kernel on the side stream before `mla_current`), and
//! the overlap of the side stream with the exchange on an event timeline.
//! Prints `MLA <case> max_abs=<..>` per case.

#![cfg(feature = "gpu")]

mod mla_op_support;
mod mla_support;

use attn_dsl::interp::HostBuffer;
use attn_dsl::ir::ScalarType;
use attn_dsl::ConstValue;
use attn_runtime::launch::CudaDevice;
use attn_runtime::ops::mla_dcp::cpu::simulate_decode_step;
use attn_runtime::ops::mla_dcp::op::{
    mla_dcp_decode, simulated_decode, CurrentOrder, DecodeElem, ExchangeMode, LaunchReport,
    MlaDcpConfig, MlaDcpContext, MlaDcpDecodeArgs, MlaError, StageTimeline, StreamOptions, VupPath,
};
use attn_runtime::ops::mla_dcp::plan::{
    warpgroup_fused_tile, wide_warpgroup_fused_tile, FusedTile,
};
use attn_runtime::ops::mla_dcp::streams::JoinMode;
use attn_runtime::ops::unified_attention::config::MmaKind;
use attn_runtime::parity::{compare, CompareError, Tolerance};
use cudarc::driver::CudaStream;
use half::{bf16, f16};
use mla_op_support::{check_vs_reference, from_elems, DeviceInputs, Outputs};
use mla_support::{dsv3_scale, Case, Inputs};
use std::sync::Arc;

/// ~2 s at H200 clocks: longer than everything the host does between the fork and the
/// combine of the first step (kernel loads, cache lookups), so without the join the combine
/// runs while the side stream still spins. (25 ms was not: the first run on the H200 saw no
/// race because loading the five kernels took longer than the spin.)
const SPIN_CYCLES: i64 = 4_000_000_000;

fn device() -> CudaDevice {
    CudaDevice::new(0).expect("a CUDA device (feature `gpu` requires one)")
}

/// How a test builds its contexts.
#[derive(Clone, Copy)]
struct Opts {
    exchange: ExchangeMode,
    /// `None`: the op's default (fused into the combine at D = 1, cuBLAS from D = 2).
    vup: Option<VupPath>,
    forced_splits: Option<u32>,
    forced_history_heads: Option<u32>,
    forced_history_tma: Option<bool>,
    forced_fused_tile: Option<FusedTile>,
    streams: StreamOptions,
    /// Tokens of bucket beyond the call's T (the buffers are sized for the bucket).
    bucket_extra: usize,
    /// Only the fork/join orders the streams (cudarc's per-buffer events would hide a race).
    no_event_tracking: bool,
    profile: bool,
    /// One-token chunks: the fused merge reads the current rows from `cur_kv` (the op's
    /// default).
    current_rows_from_kv: bool,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            exchange: ExchangeMode::Simulated,
            vup: None,
            forced_splits: None,
            forced_history_heads: None,
            forced_history_tma: None,
            forced_fused_tile: None,
            streams: StreamOptions::default(),
            bucket_extra: 3,
            no_event_tracking: false,
            profile: false,
            current_rows_from_kv: true,
        }
    }
}

fn config(case: &Case, r: u32, o: &Opts) -> MlaDcpConfig {
    let mut c = MlaDcpConfig::new(
        case.step().layout,
        r,
        case.heads,
        dsv3_scale(),
        case.tokens() + o.bucket_extra,
        case.seq_lens.len() + 1,
    );
    c.exchange = o.exchange;
    if let Some(vup) = o.vup {
        c.vup = vup;
    }
    c.forced_splits = o.forced_splits;
    c.forced_history_heads = o.forced_history_heads;
    c.forced_history_tma = o.forced_history_tma;
    c.forced_fused_tile = o.forced_fused_tile;
    c.streams = o.streams;
    c.profile = o.profile;
    c.current_rows_from_kv = o.current_rows_from_kv;
    c
}

fn fresh_device(o: &Opts) -> CudaDevice {
    let dev = device();
    if o.no_event_tracking {
        // SAFETY: every buffer of the test is created after this call from this context, and
        // the streams are synchronized before any buffer is dropped.
        unsafe { dev.context().disable_event_tracking() };
    }
    dev
}

fn download<E: DecodeElem>(
    main: &Arc<CudaStream>,
    ctxs: &[MlaDcpContext<E>],
    reports: Vec<LaunchReport>,
) -> Outputs {
    main.synchronize().expect("the step ran");
    let get = |v| from_elems::<E>(&main.clone_dtoh(&v).expect("download"));
    Outputs {
        y: ctxs.iter().map(|c| get(c.output())).collect(),
        // Under the fused combine + V-up no rank has a `lat_out`.
        lat: ctxs
            .iter()
            .filter_map(|c| c.latent_output().map(get))
            .collect(),
        reports,
    }
}

/// Runs the simulated step of `case` with D contexts on one main stream.
fn run_simulated<E: DecodeElem>(case: &Case, inputs: &Inputs, o: &Opts) -> Outputs {
    let dev = fresh_device(o);
    let main = dev.new_stream().expect("stream");
    let data = DeviceInputs::<E>::upload(&main, case, inputs);
    let mut ctxs: Vec<MlaDcpContext<E>> = (0..case.d)
        .map(|r| {
            MlaDcpContext::new(&dev, main.clone(), config(case, r, o), None)
                .unwrap_or_else(|e| panic!("context {r}: {e}"))
        })
        .collect();
    main.synchronize().expect("uploads");
    let args: Vec<_> = (0..case.d as usize)
        .map(|r| data.args(case, r, true))
        .collect();
    let reports = simulated_decode(&mut ctxs, &args).unwrap_or_else(|e| panic!("{case:?}: {e}"));
    let out = download(main_of(&ctxs), &ctxs, reports);
    // Without the join the side streams may still run after the main stream is done: wait for
    // them before any buffer is freed.
    for c in &ctxs {
        c.side_stream().synchronize().expect("the side stream ran");
    }
    out
}

fn main_of<E: DecodeElem>(ctxs: &[MlaDcpContext<E>]) -> &Arc<CudaStream> {
    ctxs[0].main_stream()
}

fn simulated_case<E: DecodeElem>(name: &str, case: &Case, seed: u64, o: &Opts) -> Outputs {
    let inputs = Inputs::random(case, seed);
    let out = run_simulated::<E>(case, &inputs, o);
    let max_abs =
        check_vs_reference(name, case, &inputs, &out).unwrap_or_else(|e| panic!("{case:?}: {e}"));
    println!("MLA {name} max_abs={max_abs:.3e}");
    out
}

/// Ragged batch, mixed q_len {1, 4, 2}: one long request, one shorter than D·I for the larger
/// geometries (empty shards), one with no history at all.
fn ragged(d: u32, i: u32, heads: u32) -> Case {
    Case::new(d, i, 64, heads, &[300, 7, 2], &[1, 4, 2])
}

#[test]
fn simulated_d1_d2_d4_d8_match_the_reference() {
    for (d, i) in [(1, 1), (2, 8), (4, 1), (8, 64)] {
        let name = format!("simulated D={d} I={i} N=4 bf16");
        simulated_case::<bf16>(
            &name,
            &ragged(d, i, 4),
            100 + u64::from(d),
            &Opts::default(),
        );
    }
}

#[test]
fn simulated_d8_sixteen_heads_per_rank() {
    // DeepSeek-V3 at TP8 + DCP8: 128 gathered heads in the history pass.
    let case = Case::new(8, 1, 64, 16, &[200, 33], &[2, 1]);
    simulated_case::<bf16>("simulated D=8 N=16 bf16", &case, 7, &Opts::default());
}

#[test]
fn empty_shards_and_zero_history() {
    // S_b < D·I: most ranks hold nothing (their partials are (0, -inf)); request 1 is all chunk.
    let case = Case::new(8, 8, 64, 2, &[5, 4, 12], &[1, 4, 2]);
    simulated_case::<bf16>("empty shards D=8 I=8", &case, 11, &Opts::default());
    let case = Case::new(4, 64, 64, 3, &[3, 70], &[2, 1]);
    simulated_case::<bf16>("empty shards D=4 I=64", &case, 12, &Opts::default());
    // No history anywhere: the output is the current part alone.
    let case = Case::new(2, 1, 64, 4, &[3, 1, 2], &[3, 1, 2]);
    simulated_case::<bf16>("zero history D=2", &case, 13, &Opts::default());
}

#[test]
fn mixed_query_lengths_and_block16() {
    let case = Case::new(4, 16, 16, 2, &[130, 64, 9, 41], &[4, 1, 3, 2]);
    simulated_case::<bf16>("mixed q_len D=4 B=16", &case, 14, &Opts::default());
}

#[test]
fn f16_activations() {
    let mut case = Case::new(4, 8, 64, 2, &[150, 3], &[2, 1]);
    case.dtype = ScalarType::F16;
    simulated_case::<f16>("f16 D=4", &case, 15, &Opts::default());
}

#[test]
fn forced_splits_and_the_split_heuristic() {
    let case = Case::new(2, 8, 64, 2, &[700, 40], &[2, 1]);
    let o = Opts {
        forced_splits: Some(5),
        ..Opts::default()
    };
    let out = simulated_case::<bf16>("forced 5 splits D=2", &case, 16, &o);
    assert!(out.reports.iter().all(|r| r.num_splits == 5));
    let out = simulated_case::<bf16>("heuristic splits D=2", &case, 16, &Opts::default());
    assert!(
        out.reports[0].num_splits > 1,
        "a 2-token step over a 350-key shard must split on a big GPU"
    );
}

/// Every history tiling (16 heads on 4 column-split warps, 32 on a 2 × 2 grid, 64 on a
/// 4 × 2 grid of 8 warps) against the reference, with 48 gathered heads so the last tile
/// of each has rows past the heads.
#[test]
fn every_history_tile_height_matches_the_reference() {
    let case = Case::new(2, 8, 64, 24, &[700, 130, 9], &[2, 1, 1]);
    for h in [16, 32, 64] {
        let o = Opts {
            forced_history_heads: Some(h),
            ..Opts::default()
        };
        simulated_case::<bf16>(&format!("history tiles of {h} heads, D=2"), &case, 17, &o);
    }
}

/// The latent tiles moved as TMA boxes on sm_90a (`MlaDcpConfig::forced_history_tma`: the
/// plan's own choice is `cp.async`, `plan::HIST_TMA`): one split over 65 tiles of 128
/// gathered heads on the two-warpgroup tiling, the second request's last tile ragged (the
/// rest of its page must not reach PV).
#[test]
fn long_programs_moving_tma_boxes_match_the_reference() {
    let case = Case::new(1, 1, 64, 128, &[4161, 4134], &[1, 1]);
    let mma = MmaKind::for_arch(device().arch());
    let mut plan = case
        .step()
        .plan_tuned(mma, Some(1), None, None)
        .expect("plan");
    plan.set_history_tma(true);
    let tma = plan.history.constexprs.iter().find(|(n, _)| *n == "TMA");
    let boxes = tma.is_some_and(|(_, v)| *v == ConstValue::Bool(true));
    assert!(boxes, "{mma:?}: the forced form");
    let o = Opts {
        forced_splits: Some(1),
        forced_history_tma: Some(true),
        ..Opts::default()
    };
    simulated_case::<bf16>("TMA boxes, 65 tiles a program", &case, 18, &o);
}

/// The fused combine + V-up on warpgroup MMAs (`WARPGROUPS`, feature `merge_wgmma`,
/// forced here): dcp 1 (two parts, a producer warpgroup) and dcp 2 (three parts), 71 tokens
/// in two 64-token tiles, the second ragged; and the 128-token tile at dcp 1 (opt-in
/// `merge_t128`). sm_90a only: elsewhere the plan never asks.
#[test]
fn fused_merge_on_warpgroup_mmas_matches_the_reference() {
    if MmaKind::for_arch(device().arch()) != MmaKind::Warpgroup {
        eprintln!("skipping: not an sm_90a device");
        return;
    }
    for d in [1, 2] {
        let case = Case::new(d, 8, 64, 16, &[300, 170, 90], &[40, 30, 1]);
        let o = Opts {
            forced_fused_tile: Some(warpgroup_fused_tile()),
            ..Opts::default()
        };
        let name = format!("merge on warpgroup MMAs, D={d}");
        simulated_case::<bf16>(&name, &case, 50 + u64::from(d), &o);
    }
    // The 128-token tile (opt-in `merge_t128`, one rank only): the 71 tokens in one
    // program, its second token half ragged.
    let case = Case::new(1, 8, 64, 16, &[300, 170, 90], &[40, 30, 1]);
    let o = Opts {
        forced_fused_tile: Some(wide_warpgroup_fused_tile()),
        ..Opts::default()
    };
    simulated_case::<bf16>("merge on warpgroup MMAs, 128 tokens", &case, 53, &o);
}

/// Plain decode (every chunk one token) at dcp 1 and 2: the current part writes only its
/// LSE and the fused merge reads the current rows from `cur_kv`. `y` matches the reference
/// and, bit for bit, the path whose current rows go through memory.
#[test]
fn one_token_chunks_read_the_current_rows_from_the_keys() {
    for d in [1, 2] {
        let case = Case::new(d, 8, 64, 16, &[300, 70, 5], &[1, 1, 1]);
        let name = format!("one-token chunks D={d}");
        let seed = 40 + u64::from(d);
        let kv = simulated_case::<bf16>(&name, &case, seed, &Opts::default());
        let rows = Opts {
            current_rows_from_kv: false,
            ..Opts::default()
        };
        let through_memory = simulated_case::<bf16>(&name, &case, seed, &rows);
        assert_eq!(kv.y, through_memory.y, "{name}: bit for bit");
    }
}

#[test]
fn every_vup_path_matches_the_reference() {
    let case = ragged(2, 8, 4);
    for vup in [
        VupPath::Cublas,
        VupPath::DslKernel,
        VupPath::HandWritten,
        VupPath::Fused,
    ] {
        let o = Opts {
            vup: Some(vup),
            ..Opts::default()
        };
        let out = simulated_case::<bf16>(&format!("V-up {vup:?} D=2"), &case, 17, &o);
        assert_eq!(out.lat.is_empty(), vup == VupPath::Fused, "{vup:?}");
    }
}

/// The GPU kernels against the CPU executor (same plan, same splits): both round at the same
/// places, so they agree to about one output ulp. The combine then cuBLAS V-up against the
/// executor's combine and V-up kernels (`lat_out` and `y`), and the fused merge (the default
/// at D = 2) against the executor's fused kernel.
#[test]
fn gpu_matches_the_cpu_executor() {
    let mut case = Case::new(2, 8, 16, 2, &[90, 5], &[2, 1]);
    case.splits = Some(2);
    let inputs = Inputs::random(&case, 18);
    let cpu = simulate_decode_step(&case.plan(), &inputs.sim()).expect("CPU executor");
    let mut worst: f64 = 0.0;
    for vup in [VupPath::Cublas, VupPath::Fused] {
        let o = Opts {
            forced_splits: Some(2),
            vup: Some(vup),
            ..Opts::default()
        };
        let gpu = run_simulated::<bf16>(&case, &inputs, &o);
        for (r, c) in cpu.iter().enumerate() {
            let vals = |b: &HostBuffer| b.to_f64s();
            let y = match vup {
                VupPath::Fused => c.fused_y.as_ref().expect("D = 2 fuses"),
                _ => {
                    compare(
                        &format!("lat_out GPU vs CPU rank {r}"),
                        &gpu.lat[r],
                        &vals(&c.lat_out),
                        Tolerance::new(2e-3, 1e-2),
                    )
                    .unwrap_or_else(|e| panic!("{e}"));
                    &c.y
                }
            };
            let cmp = compare(
                &format!("y ({vup:?}) GPU vs CPU rank {r}"),
                &gpu.y[r],
                &vals(y),
                Tolerance::new(4e-3, 1e-2),
            )
            .unwrap_or_else(|e| panic!("{e}"));
            worst = worst.max(cmp.max_abs_err);
        }
    }
    println!("MLA gpu-vs-cpu-executor D=2 max_abs={worst:.3e}");
}

/// A second call with the same batch shape (the next layer) uploads nothing, compiles nothing
/// and gives bit-identical results; a new shape re-plans.
#[test]
fn steady_state_reuses_the_plan_and_is_bit_identical() {
    let case = ragged(2, 8, 2);
    let inputs = Inputs::random(&case, 19);
    let dev = device();
    let main = dev.new_stream().expect("stream");
    let data = DeviceInputs::<bf16>::upload(&main, &case, &inputs);
    let o = Opts::default();
    let mut ctxs: Vec<MlaDcpContext<bf16>> = (0..2)
        .map(|r| MlaDcpContext::new(&dev, main.clone(), config(&case, r, &o), None).unwrap())
        .collect();
    let args: Vec<_> = (0..2).map(|r| data.args(&case, r, true)).collect();
    let first = simulated_decode(&mut ctxs, &args).unwrap();
    let y1 = download(&main, &ctxs, first.clone());
    let second = simulated_decode(&mut ctxs, &args).unwrap();
    let y2 = download(&main, &ctxs, second.clone());
    assert!(first
        .iter()
        .all(|r| r.metadata_uploaded && r.kernels_compiled > 0));
    assert!(
        second
            .iter()
            .all(|r| !r.metadata_uploaded && r.kernels_compiled == 0),
        "{second:?}"
    );
    for r in 0..2 {
        let same = y1.y[r]
            .iter()
            .zip(&y2.y[r])
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "rank {r}: the repeated call differs");
    }
    let max_abs = check_vs_reference("steady state", &case, &inputs, &y2).unwrap();
    println!("MLA steady-state D=2 max_abs={max_abs:.3e}");
}

/// The single-rank paths the benches use: A2A with D = 1 (no communicator, no exchange) and
/// the loopback exchange with D = 1, both through `mla_dcp_decode`, with stage timing.
#[test]
fn single_rank_a2a_and_loopback_match_the_reference() {
    let case = Case::new(1, 1, 64, 8, &[400, 90, 3], &[1, 2, 3]);
    let inputs = Inputs::random(&case, 20);
    for exchange in [ExchangeMode::A2a, ExchangeMode::Loopback] {
        let dev = device();
        let main = dev.new_stream().expect("stream");
        let data = DeviceInputs::<bf16>::upload(&main, &case, &inputs);
        let o = Opts {
            exchange,
            profile: true,
            ..Opts::default()
        };
        let mut ctx = MlaDcpContext::new(&dev, main.clone(), config(&case, 0, &o), None).unwrap();
        let args = data.args(&case, 0, exchange == ExchangeMode::Loopback);
        let report = mla_dcp_decode(&mut ctx, &args).unwrap_or_else(|e| panic!("{e}"));
        let out = download(&main, std::slice::from_ref(&ctx), vec![report]);
        let name = format!("single rank {exchange:?}");
        let max_abs = check_vs_reference(&name, &case, &inputs, &out).unwrap();
        println!("MLA {name} max_abs={max_abs:.3e}");
        let t = ctx.stage_times().expect("profiled");
        assert!(
            t.total_us > 0.0 && t.history_us > 0.0 && t.current_us > 0.0 && t.vup_us > 0.0,
            "{t:?}"
        );
    }
}

/// The loopback exchange at D = 2 leaves a rank's own chunk in `hist_send` when the fused
/// merge reads it there (`own_part_in_place`): its `y` equals the cuBLAS path's, which copies
/// every chunk and merges the copy, to the fused/unfused rounding difference. The fused
/// context never writes its receive buffer's own chunk, so a merge reading it there would
/// merge whatever the allocation held.
#[test]
fn loopback_fused_merge_reads_the_own_part_in_place() {
    let case = ragged(2, 8, 4);
    let inputs = Inputs::random(&case, 21);
    for rank in 0..case.d {
        let y = |vup| {
            let dev = device();
            let main = dev.new_stream().expect("stream");
            let data = DeviceInputs::<bf16>::upload(&main, &case, &inputs);
            let o = Opts {
                exchange: ExchangeMode::Loopback,
                vup: Some(vup),
                ..Opts::default()
            };
            let mut ctx = MlaDcpContext::new(&dev, main.clone(), config(&case, rank, &o), None)
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(ctx.config().own_part_in_place(), vup == VupPath::Fused);
            let args = data.args(&case, rank as usize, true);
            let report = mla_dcp_decode(&mut ctx, &args).unwrap_or_else(|e| panic!("{e}"));
            download(&main, std::slice::from_ref(&ctx), vec![report])
                .y
                .remove(0)
        };
        let (fused, copied) = (y(VupPath::Fused), y(VupPath::Cublas));
        let cmp = compare(
            &format!("loopback rank {rank}: own part in place vs copied"),
            &fused,
            &copied,
            Tolerance::new(4e-3, 1e-2),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        println!(
            "MLA loopback own part in place rank {rank} max_abs={:.3e}",
            cmp.max_abs_err
        );
    }
}

#[test]
fn bad_calls_are_typed_errors() {
    let case = ragged(2, 8, 2);
    let inputs = Inputs::random(&case, 21);
    let dev = device();
    let main = dev.new_stream().expect("stream");
    let data = DeviceInputs::<bf16>::upload(&main, &case, &inputs);
    let o = Opts::default();

    let mut c = config(&case, 2, &o);
    let err = MlaDcpContext::<bf16>::new(&dev, main.clone(), c, None).err();
    assert!(
        matches!(
            err,
            Some(MlaError::Rank {
                rank: 2,
                dcp_size: 2
            })
        ),
        "{err:?}"
    );
    c.dcp_rank = 0;
    c.exchange = ExchangeMode::A2a;
    let err = MlaDcpContext::<bf16>::new(&dev, main.clone(), c, None).err();
    assert!(matches!(err, Some(MlaError::NeedsComm { .. })), "{err:?}");

    let mut ctx = MlaDcpContext::<bf16>::new(&dev, main.clone(), config(&case, 0, &o), None)
        .expect("context");
    let err = mla_dcp_decode(&mut ctx, &data.args(&case, 0, true)).unwrap_err();
    assert!(matches!(err, MlaError::NotSingleRank { .. }), "{err}");
    let err = ctx
        .enqueue_until_exchange(&data.args(&case, 0, false))
        .unwrap_err();
    assert!(matches!(err, MlaError::NeedsQAll { .. }), "{err}");
    let mut args = data.args(&case, 0, true);
    args.w_uv = data.w_uvs[0].slice(0..100);
    let err = ctx.enqueue_until_exchange(&args).unwrap_err();
    assert!(
        matches!(
            err,
            MlaError::BufferTooSmall {
                buffer: "w_uv",
                got: 100,
                ..
            }
        ),
        "{err}"
    );
    let long = [9u32, 9, 9];
    let mut args = data.args(&case, 0, true);
    args.query_lens = &long;
    let err = ctx.enqueue_until_exchange(&args).unwrap_err();
    assert!(
        matches!(
            err,
            MlaError::OverCapacity {
                what: "query tokens",
                got: 27,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("27"), "{err}");
    let err = ctx
        .enqueue_after_exchange(&data.args(&case, 0, true))
        .unwrap_err();
    assert!(matches!(err, MlaError::StageOrder { .. }), "{err}");
}

/// Runs a zero-history step (the output is the current part alone) with a spin kernel on the
/// side stream before `mla_current`, the current part enqueued in `order`; returns the
/// reference comparison.
fn spin_before_current(join_mode: JoinMode, order: CurrentOrder) -> Result<f64, CompareError> {
    let case = Case::new(2, 1, 64, 4, &[3, 2], &[3, 2]);
    let inputs = Inputs::random(&case, 22);
    let o = Opts {
        streams: StreamOptions {
            join_mode,
            side_delay_cycles: Some(SPIN_CYCLES),
            current_order: order,
            ..StreamOptions::default()
        },
        no_event_tracking: true,
        ..Opts::default()
    };
    let out = run_simulated::<bf16>(&case, &inputs, &o);
    check_vs_reference("spin before current", &case, &inputs, &out)
}

#[test]
fn stream_order_spin_on_the_side_stream_with_the_join_is_right() {
    for order in [
        CurrentOrder::Auto,
        CurrentOrder::First,
        CurrentOrder::AfterHistory,
    ] {
        let max_abs =
            spin_before_current(JoinMode::Join, order).unwrap_or_else(|e| panic!("{order:?}: {e}"));
        println!("MLA stream-order join+spin, current {order:?}: max_abs={max_abs:.3e}");
    }
}

/// Without the join the combine reads `cur_out`/`cur_lse` before the (delayed) current part
/// writes them (they are still NaN-poisoned, so the row merges to 0). Demonstrates why the join
/// exists; run once on the GPU host: `-- --ignored stream_order_without_the_join_is_wrong`.
#[test]
#[ignore]
fn stream_order_without_the_join_is_wrong() {
    match spin_before_current(JoinMode::SkipJoinUnsafe, CurrentOrder::First) {
        Ok(max_abs) => panic!("no race observed without the join (max_abs={max_abs:e})"),
        Err(e) => println!("MLA stream-order skip-join (expected wrong): {e}"),
    }
}

/// ~10 ms at H200 clocks: a slow wire in the exchange stage, far longer than the current part.
const EXCHANGE_SPIN_CYCLES: i64 = 20_000_000;

/// One simulated D = 2 step per call on the same contexts (profiled, exchange delayed),
/// returning each rank's timeline.
fn timelines(
    ctxs: &mut [MlaDcpContext<bf16>],
    args: &[MlaDcpDecodeArgs<'_, bf16>],
) -> Vec<StageTimeline> {
    simulated_decode(ctxs, args).unwrap_or_else(|e| panic!("{e}"));
    ctxs.iter()
        .map(|c| c.stage_timeline().expect("profiled"))
        .collect()
}

/// The overlap, proven on a timeline: with the op's default stream handling (cudarc's event
/// tracking on), the side stream's current part starts and ends while the main stream is
/// still in its history + exchange (a 10 ms spin stands in for the wire), on the first step
/// (modules loaded before the fork) and in steady state. Prints `TIMELINE <step> rank <r> ..`.
#[test]
fn the_current_part_runs_during_the_exchange_on_a_timeline() {
    let case = Case::new(2, 8, 64, 4, &[4000, 1500, 9], &[1, 2, 1]);
    let inputs = Inputs::random(&case, 23);
    let o = Opts {
        profile: true,
        streams: StreamOptions {
            exchange_delay_cycles: Some(EXCHANGE_SPIN_CYCLES),
            ..StreamOptions::default()
        },
        ..Opts::default()
    };
    let dev = fresh_device(&o);
    let main = dev.new_stream().expect("stream");
    let data = DeviceInputs::<bf16>::upload(&main, &case, &inputs);
    let mut ctxs: Vec<MlaDcpContext<bf16>> = (0..case.d)
        .map(|r| MlaDcpContext::new(&dev, main.clone(), config(&case, r, &o), None).unwrap())
        .collect();
    main.synchronize().expect("uploads");
    let args: Vec<_> = (0..2).map(|r| data.args(&case, r, true)).collect();
    for step in ["first", "steady"] {
        for (r, t) in timelines(&mut ctxs, &args).iter().enumerate() {
            println!("TIMELINE {step} rank {r} {}", t.render());
            assert!(
                t.current_hidden(),
                "{step} step, rank {r}: the current part did not run inside the exchange \
                 window: {}",
                t.render()
            );
            assert!(
                t.exchanged_us - t.reduced_us > 1000.0,
                "{step} step, rank {r}: the exchange delay did not run: {}",
                t.render()
            );
        }
    }
    let out = download(&main, &ctxs, vec![]);
    let max_abs = check_vs_reference("timeline", &case, &inputs, &out).unwrap();
    println!("MLA timeline D=2 max_abs={max_abs:.3e}");
}
