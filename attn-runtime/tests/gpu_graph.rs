//! CUDA-graph capture of the ops (feature `gpu`; a missing GPU is a failure): a decode step
//! of unified attention (2D and 3D) and of MLA-DCP decode (one rank) captured once, then
//! replayed with new inputs written into the captured buffers — fresh random q / K / V and
//! different KV lengths every step — each replay against the dense f64 reference with a
//! NaN-poisoned output. Also: replays with other buffers, another plan or bad metadata are
//! typed errors; the legacy stream, cudarc's event tracking and compiling inside a capture
//! are rejected before they corrupt anything.
//!
//! Prints `GRAPH <case> step=<k> max_abs=<..>` per replay.

#![cfg(feature = "gpu")]

mod gpu_unified_support;
mod mla_op_support;
mod mla_support;
mod unified_common;

use std::sync::{Arc, Mutex, MutexGuard};

use attn_runtime::graph::{capture, GraphError};
use attn_runtime::launch::CudaDevice;
use attn_runtime::ops::mla_dcp::graph::MlaDcpGraph;
use attn_runtime::ops::mla_dcp::op::{ExchangeMode, MlaDcpConfig, MlaDcpContext, MlaError};
use attn_runtime::ops::unified_attention::config::SplitKvWorkspace;
use attn_runtime::ops::unified_attention::gpu::{
    unified_attention, AttnError, ContextOptions, UnifiedAttentionContext, WorkspaceCapacity,
};
use attn_runtime::ops::unified_attention::graph::UnifiedAttentionGraph;
use attn_runtime::ops::unified_attention::plan::PathChoice;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use gpu_unified_support::{check, references, spread_blocks, DeviceBatch, Features};
use half::bf16;
use mla_op_support::{check_vs_reference, from_elems, DeviceInputs, Outputs};
use mla_support::{dsv3_scale, table_and_shards, Case, Inputs};
use unified_common::{Geometry, PagedData};

/// Physical blocks of every step's cache (the captured K/V buffers never change size).
const NUM_BLOCKS: usize = 600;
/// Block-table columns: room for 2048 keys of block 16, plus one.
const STRIDE: usize = 129;
const HEADS: (usize, usize) = (8, 2);
const HEAD_SIZE: usize = 128;

/// The KV lengths of each replayed decode step (4 sequences, one query each): the first is
/// captured, every later one changes every length within the table's capacity.
const STEPS: [[usize; 4]; 3] = [
    [523, 37, 2011, 64],
    [1500, 7, 900, 2048],
    [1, 300, 1024, 777],
];

/// One test at a time on the GPU.
fn gpu_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// A device whose context does not track buffer uses with events (what capture needs) and
/// a non-blocking stream on it (the legacy stream cannot be captured).
fn untracked_stream() -> (CudaDevice, Arc<CudaStream>) {
    let dev = CudaDevice::new(0).expect("the gpu feature requires a CUDA device");
    // SAFETY: every buffer of the test lives on the one stream created below, so no
    // cross-stream ordering is left to cudarc's events.
    unsafe { dev.context().disable_event_tracking() };
    let stream = dev.new_stream().expect("stream");
    (dev, stream)
}

fn context(dev: &CudaDevice, stream: &Arc<CudaStream>) -> UnifiedAttentionContext {
    let options = ContextOptions {
        split_kv: Some(SplitKvWorkspace {
            seq_threshold_3d: 8,
            num_segments: 16,
        }),
        workspace: Some(WorkspaceCapacity {
            max_tokens: 8,
            max_query_heads: HEADS.0,
            max_head_size: HEAD_SIZE,
            max_segments: 16,
        }),
    };
    UnifiedAttentionContext::new(dev, stream.clone(), options).expect("context")
}

/// Step `k`'s problem with fresh random values, laid out in the captured geometry (the
/// same block-table stride and number of physical blocks every step).
fn step_data(lens: &[usize], seed: u64) -> PagedData {
    let seqs: Vec<(usize, usize)> = lens.iter().map(|&l| (1, l)).collect();
    let mut data = PagedData::random(&Geometry::new(&seqs, HEADS, HEAD_SIZE), seed);
    restride(&mut data, STRIDE);
    spread_blocks(&mut data, NUM_BLOCKS, seed ^ 0x5EED);
    data
}

/// Re-lays the block table with `stride` columns; the new columns repeat the row's last
/// entry (a real block, never read: past every sequence's length).
fn restride(data: &mut PagedData, stride: usize) {
    let old = data.block_table_stride;
    assert!(stride >= old, "stride {stride} < {old}");
    let rows = data.block_table.len() / old;
    let mut table = Vec::with_capacity(rows * stride);
    for row in data.block_table.chunks(old) {
        table.extend_from_slice(row);
        let pad = *row.last().expect("a row");
        table.resize(table.len() + stride - old, pad);
    }
    data.block_table = table;
    data.block_table_stride = stride;
}

/// Copies `from`'s device buffers into `into`'s (same sizes): the captured addresses stay.
fn overwrite(stream: &Arc<CudaStream>, into: &mut DeviceBatch<bf16>, from: &DeviceBatch<bf16>) {
    fn copy<T: cudarc::driver::DeviceRepr>(
        s: &Arc<CudaStream>,
        src: &impl DevicePtr<T>,
        dst: &mut CudaSlice<T>,
    ) {
        assert_eq!(src.len(), dst.len(), "captured buffers keep their size");
        s.memcpy_dtod(src, dst)
            .expect("copy into the captured buffer");
    }
    copy(stream, &from.q, &mut into.q);
    copy(stream, &from.cache.k(), into.cache.k_mut());
    copy(stream, &from.cache.v(), into.cache.v_mut());
    copy(stream, &from.cu_seqlens_q, &mut into.cu_seqlens_q);
    copy(stream, &from.seq_lens, &mut into.seq_lens);
    copy(stream, &from.block_table, &mut into.block_table);
}

/// Captures step 0 on `path`, replays every step with its own inputs, checks each.
fn unified_replays(path: PathChoice, expect_3d: bool) {
    let _g = gpu_lock();
    let (dev, stream) = untracked_stream();
    let ctx = context(&dev, &stream);
    let features = Features {
        path,
        ..Features::default()
    };
    let steps: Vec<PagedData> = STEPS
        .iter()
        .enumerate()
        .map(|(k, lens)| step_data(lens, 0x6A11 + k as u64))
        .collect();
    let wants: Vec<Vec<f64>> = steps
        .iter()
        .map(|d| references(d, std::slice::from_ref(&features)).remove(0))
        .collect();
    let mut batch = DeviceBatch::<bf16>::upload(&stream, &steps[0]);
    let graph = {
        let mut args = batch.args(&steps[0]);
        args.path = path;
        UnifiedAttentionGraph::capture(&ctx, &mut args).unwrap_or_else(|e| panic!("capture: {e}"))
    };
    assert_eq!(graph.report().config.is_3d, expect_3d, "path");
    stream.synchronize().expect("capture done");
    let name = format!("unified {}", graph.report().path_name());
    // Step 0 twice: the first replay of the captured inputs, then the later steps, then
    // step 0 again (a replay that kept anything of a previous step fails one of them).
    for k in [0, 1, 2, 0] {
        let fresh = DeviceBatch::<bf16>::upload(&stream, &steps[k]);
        overwrite(&stream, &mut batch, &fresh);
        batch.poison_output();
        {
            let mut args = batch.args(&steps[k]);
            args.path = path;
            graph
                .replay(&ctx, &args)
                .unwrap_or_else(|e| panic!("replay {k}: {e}"));
        }
        stream.synchronize().expect("replay ran");
        drop(fresh);
        let got = batch.output(&format!("{name} step {k}"));
        let err = check(&format!("{name} step {k}"), graph.report(), &got, &wants[k]);
        println!("GRAPH {name} step={k} max_abs={err:.3e}");
    }
}

#[test]
fn unified_3d_decode_step_replays_with_new_inputs_and_lengths() {
    unified_replays(PathChoice::Heuristic, true);
}

#[test]
fn unified_2d_decode_step_replays_with_new_inputs_and_lengths() {
    unified_replays(PathChoice::Force2d, false);
}

/// A replay whose arguments the captured launches do not describe is a typed error and
/// launches nothing (the poisoned output stays poisoned).
#[test]
fn mismatched_replays_are_typed_errors() {
    let _g = gpu_lock();
    let (dev, stream) = untracked_stream();
    let ctx = context(&dev, &stream);
    let data = step_data(&STEPS[0], 7);
    let mut batch = DeviceBatch::<bf16>::upload(&stream, &data);
    let graph = UnifiedAttentionGraph::capture(&ctx, &mut batch.args(&data)).expect("capture");
    batch.poison_output();

    // Other buffers (q is the first the check compares).
    let mut other = DeviceBatch::<bf16>::upload(&stream, &data);
    let moved = graph.replay(&ctx, &other.args(&data));
    assert!(
        matches!(&moved, Err(AttnError::Graph(GraphError::ReplayMismatch { what, .. })) if what.contains("`q`")),
        "{moved:?}"
    );
    // Another plan: the captured heuristic chose 3D, forcing 2D changes the launches.
    let replanned = {
        let mut args = batch.args(&data);
        args.path = PathChoice::Force2d;
        graph.replay(&ctx, &args)
    };
    assert!(
        matches!(
            &replanned,
            Err(AttnError::Graph(GraphError::ReplayMismatch { .. }))
        ),
        "{replanned:?}"
    );
    // New metadata past the block table: validated on the host like a call.
    let mut long = step_data(&STEPS[0], 7);
    long.seq_lens[2] = (STRIDE as i32 + 1) * 16;
    let invalid = graph.replay(&ctx, &batch.args(&long));
    assert!(matches!(&invalid, Err(AttnError::Input(_))), "{invalid:?}");
    stream.synchronize().expect("sync");
    let raw: Vec<f32> = stream
        .clone_dtoh(&batch.out)
        .expect("download")
        .into_iter()
        .map(f32::from)
        .collect();
    assert!(
        raw.iter().all(|x| x.is_nan()),
        "a rejected replay wrote the output"
    );
}

/// What would break a capture is refused before it begins (legacy stream, event tracking)
/// or inside it (a compile), and the stream is usable afterwards.
#[test]
fn uncapturable_setups_are_typed_errors() {
    let _g = gpu_lock();
    let data = step_data(&STEPS[0], 9);

    let dev = CudaDevice::new(0).expect("device");
    let legacy = dev.default_stream();
    let ctx = context(&dev, &legacy);
    let mut batch = DeviceBatch::<bf16>::upload(&legacy, &data);
    let err = UnifiedAttentionGraph::capture(&ctx, &mut batch.args(&data)).unwrap_err();
    assert!(
        matches!(err, AttnError::Graph(GraphError::LegacyStream)),
        "{err}"
    );
    drop(batch);
    legacy.synchronize().expect("sync");

    let tracked = CudaDevice::new(0).expect("device");
    let stream = tracked.new_stream().expect("stream");
    let ctx = context(&tracked, &stream);
    let mut batch = DeviceBatch::<bf16>::upload(&stream, &data);
    let err = UnifiedAttentionGraph::capture(&ctx, &mut batch.args(&data)).unwrap_err();
    assert!(
        matches!(err, AttnError::Graph(GraphError::EventTracking)),
        "{err}"
    );
    drop(batch);
    stream.synchronize().expect("sync");

    // A fresh context has nothing compiled: the op refuses to compile inside a capture.
    let (dev, stream) = untracked_stream();
    let ctx = context(&dev, &stream);
    let mut batch = DeviceBatch::<bf16>::upload(&stream, &data);
    stream.synchronize().expect("uploads");
    let err = capture(&stream, || {
        unified_attention(&ctx, &mut batch.args(&data)).map(|_| ())
    })
    .unwrap_err();
    assert!(
        matches!(err, AttnError::CompileDuringCapture { .. }),
        "{err}"
    );
    // The capture was ended: an ordinary call on the stream works and is right.
    let wants = references(&data, &[Features::default()]);
    batch.poison_output();
    let report = unified_attention(&ctx, &mut batch.args(&data)).expect("call after the capture");
    stream.synchronize().expect("sync");
    check(
        "after a refused capture",
        &report,
        &batch.output("after"),
        &wants[0],
    );
}

/// MLA: the latent shard of every step in one buffer of `blocks` blocks (NaN past the step's
/// shard), so the captured address holds each step's cache.
fn mla_case(seq_lens: &[u32]) -> Case {
    Case::new(1, 1, 64, 8, seq_lens, &[1, 2, 3])
}

fn mla_config(case: &Case) -> MlaDcpConfig {
    let mut c = MlaDcpConfig::new(
        case.step().layout,
        0,
        case.heads,
        dsv3_scale(),
        case.tokens() + 2,
        case.seq_lens.len() + 1,
    );
    c.exchange = ExchangeMode::A2a;
    // The heuristic split count follows the longest history; a graph needs it fixed.
    c.forced_splits = Some(4);
    c
}

/// Elements of rank 0's shard of `case`.
fn shard_len(case: &Case, inputs: &Inputs) -> usize {
    let (_, shards) = table_and_shards(&case.plan(), inputs);
    shards[0].cache.to_f64s().len()
}

#[test]
fn mla_decode_step_replays_with_new_inputs_and_lengths() {
    let _g = gpu_lock();
    let (dev, stream) = untracked_stream();
    // Same query lengths and block-table stride (⌈max S / 64⌉ + 1 = 8); other KV lengths.
    let cases = [
        mla_case(&[400, 90, 3]),
        mla_case(&[420, 130, 9]),
        mla_case(&[385, 64, 200]),
    ];
    let inputs: Vec<Inputs> = cases
        .iter()
        .enumerate()
        .map(|(k, c)| Inputs::random(c, 0x31A + k as u64))
        .collect();
    let cache_len = cases
        .iter()
        .zip(&inputs)
        .map(|(c, i)| shard_len(c, i))
        .max()
        .expect("cases");
    let upload =
        |k: usize| DeviceInputs::<bf16>::upload_padded(&stream, &cases[k], &inputs[k], cache_len);
    let mut data = upload(0);
    let mut ctx =
        MlaDcpContext::new(&dev, stream.clone(), mla_config(&cases[0]), None).expect("context");
    let graph = MlaDcpGraph::capture(&mut ctx, &data.args(&cases[0], 0, false))
        .unwrap_or_else(|e| panic!("capture: {e}"));
    stream.synchronize().expect("capture done");
    for k in [0, 1, 2, 0] {
        let fresh = upload(k);
        data.overwrite_from(&stream, &fresh);
        ctx.poison_outputs().expect("poison");
        graph
            .replay(&mut ctx, &data.args(&cases[k], 0, false))
            .unwrap_or_else(|e| panic!("replay {k}: {e}"));
        stream.synchronize().expect("replay ran");
        drop(fresh);
        let get = |v| from_elems::<bf16>(&stream.clone_dtoh(&v).expect("download"));
        let out = Outputs {
            y: vec![get(ctx.output())],
            // None when the step fuses V-up into the combine (the D = 1 default).
            lat: ctx.latent_output().map(get).into_iter().collect(),
            reports: vec![*graph.report()],
        };
        let err = check_vs_reference(&format!("mla graph step {k}"), &cases[k], &inputs[k], &out)
            .unwrap_or_else(|e| panic!("step {k}: {e}"));
        println!("GRAPH mla step={k} max_abs={err:.3e}");
    }
    // Other buffers: a typed error naming the first, nothing launched.
    let other = mla_case(&[400, 90, 3]);
    let other_inputs = Inputs::random(&other, 5);
    let other_data = DeviceInputs::<bf16>::upload_padded(&stream, &other, &other_inputs, cache_len);
    let err = graph
        .replay(&mut ctx, &other_data.args(&other, 0, false))
        .unwrap_err();
    assert!(
        matches!(&err, MlaError::Graph(GraphError::ReplayMismatch { what, .. }) if what.contains("q_loc")),
        "{err}"
    );
    stream.synchronize().expect("sync");
}
