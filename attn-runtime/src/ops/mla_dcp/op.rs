//! The MLA-DCP decode op on the GPU (spec `mla_dcp.md` §9): one [`MlaDcpContext`] per rank owns
//! the streams, the compiled DSL kernels, cuBLAS, the optional NCCL communicator and every buffer
//! of the token bucket; [`mla_dcp_decode`] enqueues one layer's step in the §9.4 order:
//!
//! 1. S0 (main): upload the step metadata if it changed → record **E_q** (the caller's `q_loc`
//!    and `cur_kv` are ready on S0);
//! 2. S1 (side): wait E_q → `mla_current` (the rank's heads, causal within the chunk) → record
//!    **current_attn_done**;
//! 3. S0: Q all-gather (NCCL; the caller's `q_all` in the simulated modes) → `mla_history` →
//!    `mla_history_reduce` into `hist_send` → exchange (A2A, or AG+RS) → wait current_attn_done →
//!    `mla_combine` → V-up (cuBLAS by default) into the context's `y [T, N·128]`.
//!
//! Buffers that cross streams (`cur_out`, `cur_lse`, the metadata) live in the context, so they
//! outlive every stream that uses them; the next call's E_q is recorded after this call's combine
//! on S0, which orders the side stream's rewrite of `cur_out` after its last reader (§9.4 WAR).
//! Steady-state calls (same batch shape as the previous call, e.g. every layer of a decode step)
//! allocate no device memory, copy nothing from the host and compile nothing.
//!
//! D ranks simulated on one GPU run through [`simulated_decode`] (D contexts sharing one main
//! stream; the exchange is `simulate_a2a`; `op/simulated.rs`); the stage functions
//! ([`MlaDcpContext::enqueue_until_exchange`], [`MlaDcpContext::enqueue_exchange`],
//! [`MlaDcpContext::enqueue_after_exchange`]) expose the same steps one by one.

#![deny(clippy::indexing_slicing, clippy::arithmetic_side_effects)]

mod ag_rs_glue;
mod buffers;
mod config;
mod error;
mod host_checks;
mod simulated;
mod stage_timing;

pub use ag_rs_glue::{ag_rs_glue_source, AG_RS_GLUE_SOURCE};
pub use config::{CurrentOrder, ExchangeMode, MlaDcpConfig, StreamOptions, VupPath};
pub use error::MlaError;
pub use host_checks::{check_host_inputs, MlaHostInputs};
pub use simulated::{simulated_decode, simulated_exchange};
pub use stage_timing::{StageTimeline, StageTimes};

use super::act_dtype::ActivationElem;
use super::ag_rs::{ag_rs_rank, AgRsBuffers, LseCorrection};
use super::chunk_layout::ChunkLayout;
use super::exchange::{a2a_rank, all_gather_rank, SelfChunk};
use super::plan::{
    BufferRole, DecodePlan, DecodeStep, ExchangeLayout, KernelLaunch, PlanArg, LATENT, QK_WIDTH,
    V_HEAD,
};
use super::streams::{ForkJoin, SpinKernel};
use super::vup::{VupFallback, VupGemm, VupShape};
use crate::graph::GraphError;
use crate::jit::JitOptions;
use crate::launch::{process_cache, CudaDevice, CudaKernelHandle, KernelArg, LaunchError};
use crate::ops::unified_attention::config::MmaKind;
use ag_rs_glue::AgRsGlue;
use attn_dsl::kernel::{DslType, ScalarArg};
use attn_dsl::ConstValue;
use buffers::DecodeBuffers;
use cudarc::driver::{CudaSlice, CudaStream, CudaView, CudaViewMut, DeviceSlice};
use cudarc::nccl::{Comm, NcclType};
use stage_timing::{Mark, StageEvents};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// The activation element types the op runs on (bf16, f16): device-representable, a DSL
/// type for the generated kernels, and an NCCL type for the Q all-gather.
pub trait DecodeElem: ActivationElem + DslType + NcclType {}

impl<E: ActivationElem + DslType + NcclType> DecodeElem for E {}

/// The inputs of one decode call on one rank. Everything is read-only; the result lands in the
/// context ([`MlaDcpContext::output`]).
#[derive(Debug)]
pub struct MlaDcpDecodeArgs<'a, E> {
    /// q_len_b of each request (1 + speculative tokens).
    pub query_lens: &'a [u32],
    /// S_b of each request: history plus the current chunk (global, not per rank).
    pub seq_lens: &'a [u32],
    /// `q_loc [T, N, 576]`: this rank's absorbed queries (ql ⊕ q_pe), written on the main stream.
    pub q_loc: CudaView<'a, E>,
    /// `q_all [D, T, N, 576]` (rank-major): only in the Simulated and Loopback modes, where no
    /// all-gather runs.
    pub q_all: Option<CudaView<'a, E>>,
    /// `cur_kv [T, 576]`: the current chunks' latent rows (kv_c ⊕ k_pe), replicated on all ranks.
    pub cur_kv: CudaView<'a, E>,
    /// This rank's paged latent shard `[num_blocks, B, 576]`.
    pub cache: CudaView<'a, E>,
    /// `[batch, block_table_stride]` i32, shared by all ranks (§2.2).
    pub block_table: CudaView<'a, i32>,
    /// Host copy of `block_table` (same values): the op checks every page id the history
    /// pass reads against the cache before launching.
    pub block_table_host: &'a [i32],
    /// Row stride of `block_table`, in entries.
    pub block_table_stride: usize,
    /// `W_UV [N, 512, 128]` of this rank's heads.
    pub w_uv: CudaView<'a, E>,
}

/// What one call chose and did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchReport {
    /// T = Σ q_len.
    pub num_tokens: usize,
    /// KV splits of the history pass.
    pub num_splits: u32,
    /// How the history partials were exchanged.
    pub exchange: ExchangeMode,
    /// Which V-up ran.
    pub vup: VupPath,
    /// Whether the step metadata changed and was uploaded (false in steady state).
    pub metadata_uploaded: bool,
    /// Kernel specializations compiled by this call (0 in steady state).
    pub kernels_compiled: usize,
}

/// Where the enqueue sequence of the current call stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Idle,
    /// Checked, planned, compiled, loaded, metadata uploaded: no stream work of the step yet.
    Prepared {
        metadata_uploaded: bool,
        kernels_compiled: usize,
    },
    HistoryDone,
    Exchanged,
}

/// The kernels and layouts of one batch shape, kept until the shape changes.
struct StepState {
    plan: DecodePlan,
    chunk: ChunkLayout,
    history: Arc<CudaKernelHandle>,
    /// None when the history runs one split and writes `hist_send` itself.
    reduce: Option<Arc<CudaKernelHandle>>,
    current: Arc<CudaKernelHandle>,
    /// The DSL V-up, when the config takes it (`VupPath::DslKernel`).
    v_up: Option<Arc<CudaKernelHandle>>,
    /// The launch that merges the partials: the combine, or the combine with V-up
    /// (`VupPath::Fused`); under AG+RS its one-"rank" form (the merged history with the
    /// current part).
    merge: (KernelLaunch, Arc<CudaKernelHandle>),
}

impl StepState {
    fn matches<E>(&self, args: &MlaDcpDecodeArgs<'_, E>) -> bool {
        let s = &self.plan.step;
        s.query_lens == args.query_lens
            && s.seq_lens == args.seq_lens
            && s.block_table_stride == args.block_table_stride
    }
}

/// The host-visible part of a call, for [`check_host_inputs`].
fn host_inputs<'a, E>(args: &MlaDcpDecodeArgs<'a, E>) -> MlaHostInputs<'a> {
    MlaHostInputs {
        query_lens: args.query_lens,
        seq_lens: args.seq_lens,
        block_table: args.block_table_host,
        block_table_device_len: args.block_table.len(),
        block_table_stride: args.block_table_stride,
        q_loc_len: args.q_loc.len(),
        q_all_len: args.q_all.as_ref().map(CudaView::len),
        cur_kv_len: args.cur_kv.len(),
        cache_len: args.cache.len(),
        w_uv_len: args.w_uv.len(),
    }
}

/// The AG+RS parity mode's kernels and workspace.
struct AgRsState {
    correction: LseCorrection,
    glue: AgRsGlue,
    bufs: AgRsBuffers,
}

/// One rank's decode machinery, created once and reused by every layer and step.
pub struct MlaDcpContext<E> {
    config: MlaDcpConfig,
    device: CudaDevice,
    fork_join: ForkJoin,
    comm: Option<Comm>,
    kernels: BTreeMap<String, Arc<CudaKernelHandle>>,
    bufs: DecodeBuffers<E>,
    vup_gemm: VupGemm,
    vup_hand: Option<VupFallback>,
    ag_rs: Option<AgRsState>,
    spin: Option<SpinKernel>,
    events: Option<StageEvents>,
    step: Option<StepState>,
    /// Token counts whose V-up already ran once (its library kernels are loaded).
    vup_warmed: BTreeSet<usize>,
    stage: Stage,
}

fn check_device(buffer: &'static str, got: usize, expected: usize) -> Result<(), MlaError> {
    if got == expected {
        Ok(())
    } else {
        Err(MlaError::WrongDevice {
            buffer,
            got,
            expected,
        })
    }
}

fn same_stream(a: &CudaStream, b: &CudaStream) -> bool {
    a.cu_stream() == b.cu_stream()
}

/// Kernel arguments by buffer role for one launch.
type RoleViews<'a> = BTreeMap<BufferRole, KernelArg<'a>>;

/// `hist_send`'s output and LSE views, for a `stage` that writes the exchange layout.
fn insert_send_views<'a, E: DecodeElem>(
    v: &mut RoleViews<'a>,
    hist_send: &'a mut CudaSlice<u8>,
    send_lse: &'a mut buffers::F32Alias,
    stage: &'static str,
) -> Result<(), MlaError> {
    let lse = send_lse.get_mut().ok_or(MlaError::StageOrder {
        stage,
        why: "the f32 view of hist_send is gone (internal error)",
    })?;
    v.insert(
        BufferRole::SendOut,
        KernelArg::output(as_act_mut::<E>(hist_send)?),
    );
    v.insert(BufferRole::SendLse, KernelArg::output(lse.as_view_mut()));
    Ok(())
}

/// The byte ranges of the loopback exchange's copy: the whole buffer, or with the own chunk
/// left in `hist_send` (`SelfChunk::Skip`) the chunks before and after it.
fn loopback_ranges(
    chunk: &ChunkLayout,
    rank: u32,
    self_chunk: SelfChunk,
) -> Vec<std::ops::Range<usize>> {
    let total = chunk.total_bytes();
    let own = chunk.chunk_offset(rank as usize);
    let ranges = match self_chunk {
        SelfChunk::Skip => [0..own, own.saturating_add(chunk.chunk_bytes())..total],
        _ => [0..total, total..total],
    };
    ranges.into_iter().filter(|r| !r.is_empty()).collect()
}

/// Launches `launch` on `stream` with its buffers taken from `views`.
fn launch_plan(
    handle: &CudaKernelHandle,
    stream: &Arc<CudaStream>,
    launch: &KernelLaunch,
    mut views: RoleViews<'_>,
) -> Result<(), MlaError> {
    let mut args = Vec::with_capacity(launch.args.len());
    for a in &launch.args {
        args.push(match *a {
            PlanArg::Buffer(role) => views.remove(&role).ok_or(MlaError::StageOrder {
                stage: launch.kernel,
                why: "a buffer of the plan has no binding (internal error)",
            })?,
            PlanArg::I32(v) => KernelArg::Scalar(ScalarArg::I32(v)),
            PlanArg::I64(v) => KernelArg::Scalar(ScalarArg::I64(v)),
            PlanArg::F32(v) => KernelArg::Scalar(ScalarArg::F32(v)),
        });
    }
    handle.launch(stream, launch.grid, args)?;
    Ok(())
}

/// A section of the metadata buffer as a read-only kernel argument.
fn meta_arg(meta: &CudaSlice<i32>, at: usize, len: usize) -> Result<KernelArg<'_>, MlaError> {
    at.checked_add(len.max(1))
        .and_then(|end| meta.try_slice(at..end))
        .map(KernelArg::input)
        .ok_or(MlaError::StageOrder {
            stage: "metadata view",
            why: "a metadata section lies past the buffer (internal error)",
        })
}

/// `buf` viewed as `len` elements of the activation dtype (a byte exchange buffer).
fn as_act<E>(buf: &CudaSlice<u8>) -> Result<CudaView<'_, E>, MlaError> {
    let len = buf.len().checked_div(std::mem::size_of::<E>()).unwrap_or(0);
    // SAFETY: bf16/f16/f32 accept every bit pattern; `len` elements fit in the buffer.
    unsafe { buf.transmute::<E>(len) }.ok_or(MlaError::StageOrder {
        stage: "exchange view",
        why: "the typed view does not fit the byte buffer (internal error)",
    })
}

fn as_act_mut<E>(buf: &mut CudaSlice<u8>) -> Result<CudaViewMut<'_, E>, MlaError> {
    let len = buf.len().checked_div(std::mem::size_of::<E>()).unwrap_or(0);
    // SAFETY: as in `as_act`.
    unsafe { buf.transmute_mut::<E>(len) }.ok_or(MlaError::StageOrder {
        stage: "exchange view",
        why: "the typed view does not fit the byte buffer (internal error)",
    })
}

impl<E: DecodeElem> MlaDcpContext<E> {
    /// Builds rank `config.dcp_rank`'s context on `main` (S0): creates the side stream and the
    /// fork/join events, cuBLAS on S0, and every buffer of the bucket. With a communicator, it
    /// must be rank `dcp_rank` of `dcp_size` and live on `main`.
    pub fn new(
        device: &CudaDevice,
        main: Arc<CudaStream>,
        config: MlaDcpConfig,
        comm: Option<Comm>,
    ) -> Result<Self, MlaError> {
        Self::check_config(&config, comm.as_ref(), &main)?;
        let fork_join = ForkJoin::new(main.clone())?.with_join_mode(config.streams.join_mode);
        let num_sms = device.limits().sm_count.max(1) as usize;
        let bufs = DecodeBuffers::new(&main, &config, num_sms)?;
        let vup_gemm = VupGemm::new(main.clone())?;
        let vup_hand = match config.vup {
            VupPath::HandWritten => Some(VupFallback::new(main.clone())?),
            _ => None,
        };
        let ag_rs = match config.exchange {
            ExchangeMode::AgRs => {
                let layout = ChunkLayout::new(
                    config.dcp_size(),
                    config.heads(),
                    config.max_tokens,
                    LATENT,
                    E::DTYPE,
                )?;
                Some(AgRsState {
                    correction: LseCorrection::new(&main)?,
                    glue: AgRsGlue::new(&main)?,
                    bufs: AgRsBuffers::new(&main, &layout)?,
                })
            }
            _ => None,
        };
        let delays = config.streams;
        let spin = if delays.side_delay_cycles.is_some() || delays.exchange_delay_cycles.is_some() {
            Some(SpinKernel::new(&main)?)
        } else {
            None
        };
        let events = if config.profile {
            Some(StageEvents::new(&main)?)
        } else {
            None
        };
        Ok(MlaDcpContext {
            config,
            device: device.clone(),
            fork_join,
            comm,
            kernels: BTreeMap::new(),
            bufs,
            vup_gemm,
            vup_hand,
            ag_rs,
            spin,
            events,
            step: None,
            vup_warmed: BTreeSet::new(),
            stage: Stage::Idle,
        })
    }

    fn check_config(
        config: &MlaDcpConfig,
        comm: Option<&Comm>,
        main: &Arc<CudaStream>,
    ) -> Result<(), MlaError> {
        config.check_bucket()?;
        config.check_vup()?;
        let d = config.layout.dcp_size;
        if config.dcp_rank >= d {
            return Err(MlaError::Rank {
                rank: config.dcp_rank,
                dcp_size: d,
            });
        }
        for (what, v) in [
            ("heads_per_rank", config.heads()),
            ("max_tokens", config.max_tokens),
            ("max_batch", config.max_batch),
        ] {
            if v == 0 {
                return Err(MlaError::ZeroCapacity { what });
            }
        }
        let needs_comm = match config.exchange {
            ExchangeMode::A2a => d > 1,
            ExchangeMode::AgRs => true,
            ExchangeMode::Simulated | ExchangeMode::Loopback => false,
        };
        match comm {
            None if needs_comm => Err(MlaError::NeedsComm {
                mode: config.exchange,
                dcp_size: d,
            }),
            Some(c) if c.rank() != config.dcp_rank as usize || c.world_size() != d as usize => {
                Err(MlaError::CommGeometry {
                    got_rank: c.rank(),
                    got_world: c.world_size(),
                    rank: config.dcp_rank,
                    dcp_size: d,
                })
            }
            Some(c) if !same_stream(&c.stream(), main) => Err(MlaError::CommStream),
            _ => Ok(()),
        }
    }

    /// The configuration the op was built with.
    pub fn config(&self) -> &MlaDcpConfig {
        &self.config
    }

    /// S0.
    pub fn main_stream(&self) -> &Arc<CudaStream> {
        self.fork_join.main()
    }

    /// S1.
    pub fn side_stream(&self) -> &Arc<CudaStream> {
        self.fork_join.side()
    }

    /// Tokens of the last call (0 before the first).
    pub fn num_tokens(&self) -> usize {
        self.step.as_ref().map_or(0, |s| s.plan.num_tokens)
    }

    /// The plan of the last call.
    pub fn plan(&self) -> Option<&DecodePlan> {
        self.step.as_ref().map(|s| &s.plan)
    }

    /// `y [T, N·128]` of the last call (valid once the main stream has passed the V-up).
    pub fn output(&self) -> CudaView<'_, E> {
        // T ≤ max_tokens (checked per call), and `y` holds max_tokens · N · 128.
        let n = self
            .num_tokens()
            .saturating_mul(self.config.heads())
            .saturating_mul(V_HEAD);
        self.bufs.y.slice(0..n)
    }

    /// `lat_out [T, N, 512]`, the combine output of the last call; `None` under
    /// [`VupPath::Fused`], whose step never materializes it.
    pub fn latent_output(&self) -> Option<CudaView<'_, E>> {
        if self.config.vup == VupPath::Fused {
            return None;
        }
        let n = self
            .num_tokens()
            .saturating_mul(self.config.heads())
            .saturating_mul(LATENT);
        Some(self.bufs.lat_out.slice(0..n))
    }

    /// Fills `lat_out` and `y` with NaN (0xFF bytes) on the main stream, so a test sees
    /// every element the next step does not write.
    pub fn poison_outputs(&mut self) -> Result<(), MlaError> {
        let main = self.fork_join.main().clone();
        buffers::poison(&main, &mut self.bufs.lat_out)?;
        buffers::poison(&main, &mut self.bufs.y)
    }

    /// The specialization keys compiled so far, sorted.
    pub fn kernel_keys(&self) -> Vec<String> {
        self.kernels.keys().cloned().collect()
    }

    /// Device time of each stage of the last call (needs `profile = true`; waits for it).
    pub fn stage_times(&self) -> Result<StageTimes, MlaError> {
        self.events.as_ref().ok_or(MlaError::NotProfiling)?.times()
    }

    /// When each stage of the last call ended, relative to its start on the main stream
    /// (needs `profile = true`; waits for it): the overlap of the side stream, on a timeline.
    pub fn stage_timeline(&self) -> Result<StageTimeline, MlaError> {
        self.events
            .as_ref()
            .ok_or(MlaError::NotProfiling)?
            .timeline()
    }

    fn mark(&self, mark: Mark, stream: &CudaStream) -> Result<(), MlaError> {
        match &self.events {
            Some(e) => e.record(mark, stream),
            None => Ok(()),
        }
    }

    /// Checks the caller's buffers against the call's shape (host copies, no wrapping
    /// arithmetic: [`check_host_inputs`]) and the context's device.
    fn check_args(&self, args: &MlaDcpDecodeArgs<'_, E>) -> Result<(), MlaError> {
        check_host_inputs(&self.config, &host_inputs(args))?;
        let dev = self.device.context().ordinal();
        if let Some(q_all) = &args.q_all {
            check_device("q_all", q_all.stream().context().ordinal(), dev)?;
        }
        for (name, ord) in [
            ("q_loc", args.q_loc.stream().context().ordinal()),
            ("cur_kv", args.cur_kv.stream().context().ordinal()),
            ("cache", args.cache.stream().context().ordinal()),
            ("block_table", args.block_table.stream().context().ordinal()),
            ("w_uv", args.w_uv.stream().context().ordinal()),
        ] {
            check_device(name, ord, dev)?;
        }
        Ok(())
    }

    /// The handle of `launch`'s specialization (compiled by [`Self::compile_new`] before).
    fn handle(&self, launch: &KernelLaunch) -> Result<Arc<CudaKernelHandle>, MlaError> {
        self.kernels
            .get(&launch.key())
            .cloned()
            .ok_or(MlaError::StageOrder {
                stage: launch.kernel,
                why: "the specialization was not compiled (internal error)",
            })
    }

    /// Compiles the specializations of `launches` this context has not seen yet (NVRTC runs in
    /// parallel threads), loads them, and returns how many were new.
    fn compile_new(&mut self, launches: &[&KernelLaunch]) -> Result<usize, MlaError> {
        let mut new: BTreeMap<String, &KernelLaunch> = BTreeMap::new();
        for l in launches {
            let key = l.key();
            if !self.kernels.contains_key(&key) {
                new.insert(key, l);
            }
        }
        let fresh = compile_launches(&self.device, new.values().copied())?;
        let count = fresh.len();
        for (key, handle) in fresh {
            handle.load(self.device.context())?;
            self.kernels.insert(key, Arc::new(handle));
        }
        Ok(count)
    }

    /// The launch of the plan that merges the partials under `config`: the combine, or the
    /// combine with V-up; over AG+RS, its one-"rank" form.
    fn merge_launch(config: &MlaDcpConfig, plan: &DecodePlan) -> KernelLaunch {
        let merge = match config.vup {
            VupPath::Fused if config.own_part_in_place() => {
                plan.combine_v_up_reading_own_part(config.dcp_rank)
            }
            VupPath::Fused => plan.combine_v_up.clone(),
            _ => plan.combine.clone(),
        };
        match config.exchange {
            ExchangeMode::AgRs => Self::one_rank_launch(plan, &merge),
            _ => merge,
        }
    }

    /// The AG+RS form of a merging launch (the combine's or the fused one's): one "rank"
    /// (the merged history).
    fn one_rank_launch(plan: &DecodePlan, merge: &KernelLaunch) -> KernelLaunch {
        let one = ExchangeLayout::new(1, plan.exchange.heads, plan.num_tokens, 2);
        let mut l = merge.clone();
        for (name, v) in l.constexprs.iter_mut() {
            match *name {
                "DCP_SIZE" => *v = ConstValue::Int(1),
                "PARTS_PADDED" => *v = ConstValue::Int(2),
                _ => {}
            }
        }
        // A merging launch's last three arguments are the exchange strides (`plan.rs`).
        if let [.., out, lse, offset] = l.args.as_mut_slice() {
            *out = PlanArg::I64(one.chunk_stride_out() as i64);
            *lse = PlanArg::I64(one.chunk_stride_lse() as i64);
            *offset = PlanArg::I64(one.lse_offset() as i64);
        }
        l
    }

    /// The plan of `args`' batch shape, its split count capped by the split scratch.
    fn plan_for(&self, args: &MlaDcpDecodeArgs<'_, E>) -> Result<DecodePlan, MlaError> {
        let step = DecodeStep {
            query_lens: args.query_lens.to_vec(),
            seq_lens: args.seq_lens.to_vec(),
            layout: self.config.layout,
            heads_per_rank: self.config.heads_per_rank,
            dtype: E::TYPE,
            softmax_scale: self.config.softmax_scale,
            block_table_stride: args.block_table_stride,
            num_sms: self.device.limits().sm_count.max(1),
        };
        let heads = self.config.forced_history_heads;
        let mma = MmaKind::for_arch(self.device.arch());
        let kv_tile = self.config.forced_history_kv_tile;
        let mut plan = step.plan_tuned(mma, self.config.forced_splits, heads, kv_tile)?;
        let cap = self
            .bufs
            .split_slots
            .checked_div(plan.num_tokens.max(1))
            .unwrap_or(1);
        if usize::try_from(plan.num_splits).is_ok_and(|s| s > cap) {
            // The plan clamps the count to MAX_SPLITS, so a saturated cap is harmless.
            let capped = Some(u32::try_from(cap.max(1)).unwrap_or(u32::MAX));
            plan = step.plan_tuned(mma, capped, heads, kv_tile)?;
        }
        if let Some(tile) = self.config.forced_fused_tile {
            plan.force_fused_tile(mma, tile)?;
        }
        if let Some(tma) = self.config.forced_history_tma {
            plan.set_history_tma(tma);
        }
        if let Some(cols) = self.config.forced_reduce_cols {
            plan.recolumn_history_reduce(cols);
        }
        if self.config.vup == VupPath::Fused && self.config.current_rows_from_kv {
            plan.read_single_key_chunks_from_kv();
        }
        Ok(plan)
    }

    /// Whether the main stream is capturing a graph (its steady-state calls then must not
    /// plan, upload, compile or record timing events).
    fn capturing(&self) -> Result<bool, MlaError> {
        crate::graph::is_capturing(self.fork_join.main())
            .map_err(MlaError::driver("querying the capture status"))
    }

    /// Makes a captured step valid for `args`, whose batch shape may differ from the
    /// captured one only in what the kernels read from the metadata buffer (the KV lengths):
    /// checks the inputs, re-plans, requires the same launches (kernels, grids, scalars),
    /// then uploads the new metadata on the main stream, outside any capture. Returns
    /// whether metadata was uploaded.
    pub(crate) fn restep_for_replay(
        &mut self,
        args: &MlaDcpDecodeArgs<'_, E>,
    ) -> Result<bool, MlaError> {
        self.check_args(args)?;
        let Some(current) = self.step.as_ref() else {
            return Err(MlaError::StageOrder {
                stage: "graph replay",
                why: "no step was captured on this context",
            });
        };
        if current.matches(args) {
            return Ok(false);
        }
        let plan = self.plan_for(args)?;
        same_launches(&current.plan, &plan)?;
        self.upload_metadata(&plan)?;
        if let Some(st) = self.step.as_mut() {
            st.plan = plan;
        }
        Ok(true)
    }

    /// Plans the call (or reuses the previous plan when the batch shape is unchanged), compiles
    /// new specializations and uploads the metadata. Returns (uploaded, compiled).
    fn prepare(&mut self, args: &MlaDcpDecodeArgs<'_, E>) -> Result<(bool, usize), MlaError> {
        if self.step.as_ref().is_some_and(|s| s.matches(args)) {
            return Ok((false, 0));
        }
        if self.capturing()? {
            return Err(GraphError::NotSteadyState {
                what: "plan a new batch shape (upload its metadata, compile its kernels)",
            }
            .into());
        }
        let plan = self.plan_for(args)?;
        let chunk = ChunkLayout::new(
            self.config.dcp_size(),
            self.config.heads(),
            plan.num_tokens,
            LATENT,
            E::DTYPE,
        )?;
        let merge = Self::merge_launch(&self.config, &plan);
        // Only what this context launches: the plan also holds the merges and V-up of the
        // other paths.
        let dsl_vup = (self.config.vup == VupPath::DslKernel).then_some(&plan.v_up);
        let launches: Vec<&KernelLaunch> = [
            Some(&plan.history),
            plan.history_reduce.as_ref(),
            Some(&plan.current),
            Some(&merge),
            dsl_vup,
        ]
        .into_iter()
        .flatten()
        .collect();
        let compiled = self.compile_new(&launches)?;
        let merge_handle = self.handle(&merge)?;
        let state = StepState {
            history: self.handle(&plan.history)?,
            reduce: plan
                .history_reduce
                .as_ref()
                .map(|l| self.handle(l))
                .transpose()?,
            current: self.handle(&plan.current)?,
            v_up: dsl_vup.map(|l| self.handle(l)).transpose()?,
            merge: (merge, merge_handle),
            chunk,
            plan,
        };
        self.upload_metadata(&state.plan)?;
        let tokens = state.plan.num_tokens;
        self.step = Some(state);
        self.warm_vup(args, tokens)?;
        Ok((true, compiled))
    }

    /// Runs the V-up once for a token count this context has not seen, before any fork.
    /// cuBLAS loads the kernels of a shape at its first call, and under CUDA's lazy loading
    /// (the default since 12.2) loading a kernel may synchronize the whole context: inside the
    /// step that wait lands after the fork, so the main stream would wait for the side stream
    /// there, serializing the overlap and hiding a missing join (the first run of
    /// `stream_order_without_the_join_is_wrong` saw no race for this reason). It writes only
    /// `y`, which the step overwrites.
    fn warm_vup(&mut self, args: &MlaDcpDecodeArgs<'_, E>, tokens: usize) -> Result<(), MlaError> {
        if self.config.vup != VupPath::Fused && self.vup_warmed.insert(tokens) {
            self.enqueue_vup(args)?;
        }
        Ok(())
    }

    /// token_req, cu_seqlens_q and this rank's history lengths → the device, through the pinned
    /// staging buffer, on the main stream (before E_q, so the side stream sees them).
    fn upload_metadata(&mut self, plan: &DecodePlan) -> Result<(), MlaError> {
        let m = self.bufs.meta_layout;
        let host = self
            .bufs
            .meta_host
            .as_mut_slice()
            .map_err(MlaError::driver("waiting for the previous metadata upload"))?;
        let step = &plan.step;
        for (dst, src) in [
            (m.token_req, step.token_req()),
            (m.cu_seqlens_q, step.cu_seqlens_q()),
            (m.hist_lens, step.hist_lens(self.config.dcp_rank)),
        ] {
            dst.checked_add(src.len())
                .and_then(|end| host.get_mut(dst..end))
                .ok_or(MlaError::StageOrder {
                    stage: "metadata upload",
                    why: "the step's metadata exceeds the staging buffer (internal error)",
                })?
                .copy_from_slice(&src);
        }
        self.fork_join
            .main()
            .memcpy_htod(&self.bufs.meta_host, &mut self.bufs.meta)
            .map_err(MlaError::driver("uploading the step metadata"))
    }

    /// Steps 1–3 up to the exchange: [`Self::prepare_call`], then
    /// [`Self::enqueue_prepared`].
    pub fn enqueue_until_exchange(
        &mut self,
        args: &MlaDcpDecodeArgs<'_, E>,
    ) -> Result<LaunchReport, MlaError> {
        self.prepare_call(args)?;
        self.enqueue_prepared(args)
    }

    /// Everything of a call that is not the step's stream work: checks, plan, NVRTC, module
    /// loads, the metadata upload and the V-up warm-up. It runs before the fork because loading
    /// a module or a function may synchronize the context (CUDA lazy loading); one thread
    /// driving several ranks (the simulated step) prepares every rank before enqueueing any, so
    /// no load lands between one rank's fork and its join.
    pub fn prepare_call(&mut self, args: &MlaDcpDecodeArgs<'_, E>) -> Result<(), MlaError> {
        self.stage = Stage::Idle;
        self.check_args(args)?;
        if self.events.is_some() && self.capturing()? {
            return Err(GraphError::NotSteadyState {
                what: "record stage-timing events (the context was built with profile = true)",
            }
            .into());
        }
        let (metadata_uploaded, kernels_compiled) = self.prepare(args)?;
        self.stage = Stage::Prepared {
            metadata_uploaded,
            kernels_compiled,
        };
        Ok(())
    }

    /// The stream work up to the exchange of a prepared call: fork, the all-gather, the
    /// history pass and its reduce into `hist_send` on S0, then the current part on S1.
    pub fn enqueue_prepared(
        &mut self,
        args: &MlaDcpDecodeArgs<'_, E>,
    ) -> Result<LaunchReport, MlaError> {
        let Stage::Prepared {
            metadata_uploaded,
            kernels_compiled,
        } = self.stage
        else {
            return Err(MlaError::StageOrder {
                stage: "enqueue_prepared",
                why: "the call has not been prepared (prepare_call)",
            });
        };
        let main = self.fork_join.main().clone();
        self.mark(Mark::Start, &main)?;
        self.fork_join.fork()?;
        // H200, L1 step, the current part enqueued after the history on a side stream of
        // default priority: it ran under the whole history and held up the combine (449 →
        // 470 µs); enqueued first, the history waits for the host (16-20 µs profiled). On the
        // greatest priority, a part that writes only its LSE goes after (`CurrentOrder`).
        let lse_only = self.state("enqueue_prepared")?.plan.current_rows_from_kv();
        let current_first = !self.config.streams.current_order.history_first(lse_only);
        if current_first {
            self.enqueue_current(args)?;
        }
        self.enqueue_gather(args)?;
        self.mark(Mark::Gathered, &main)?;
        self.enqueue_history(args)?;
        if !current_first {
            self.enqueue_current(args)?;
        }
        self.stage = Stage::HistoryDone;
        let plan = self.plan().ok_or(MlaError::StageOrder {
            stage: "enqueue_prepared",
            why: "no plan after prepare (internal error)",
        })?;
        Ok(LaunchReport {
            num_tokens: plan.num_tokens,
            num_splits: plan.num_splits,
            exchange: self.config.exchange,
            vup: self.config.vup,
            metadata_uploaded,
            kernels_compiled,
        })
    }

    fn state(&self, stage: &'static str) -> Result<&StepState, MlaError> {
        self.step.as_ref().ok_or(MlaError::StageOrder {
            stage,
            why: "no step has been prepared; call enqueue_until_exchange first",
        })
    }

    /// S1: [spin] → `mla_current` (E_q was recorded by the fork).
    fn enqueue_current(&mut self, args: &MlaDcpDecodeArgs<'_, E>) -> Result<(), MlaError> {
        let side = self.fork_join.side().clone();
        if let (Some(spin), Some(cycles)) = (&self.spin, self.config.streams.side_delay_cycles) {
            spin.launch(&side, cycles)?;
        }
        self.mark(Mark::CurrentStart, &side)?;
        let st = self.state("current")?;
        let (launch, handle) = (st.plan.current.clone(), st.current.clone());
        let (t, batch) = (st.plan.num_tokens, st.plan.step.seq_lens.len());
        let m = self.bufs.meta_layout;
        let mut v = RoleViews::new();
        v.insert(BufferRole::QLoc, KernelArg::input(args.q_loc.slice(..)));
        v.insert(BufferRole::CurKv, KernelArg::input(args.cur_kv.slice(..)));
        v.insert(
            BufferRole::TokenReq,
            meta_arg(&self.bufs.meta, m.token_req, t)?,
        );
        v.insert(
            BufferRole::CuSeqlensQ,
            meta_arg(&self.bufs.meta, m.cu_seqlens_q, batch.saturating_add(1))?,
        );
        v.insert(
            BufferRole::CurOut,
            KernelArg::output(self.bufs.cur_out.as_view_mut()),
        );
        v.insert(
            BufferRole::CurLse,
            KernelArg::output(self.bufs.cur_lse.as_view_mut()),
        );
        launch_plan(&handle, &side, &launch, v)?;
        self.mark(Mark::CurrentEnd, &side)
    }

    /// S0: the Q all-gather into `q_all` (NCCL modes with D > 1).
    fn enqueue_gather(&mut self, args: &MlaDcpDecodeArgs<'_, E>) -> Result<(), MlaError> {
        let t = self.num_tokens();
        let n_loc = t
            .saturating_mul(self.config.heads())
            .saturating_mul(QK_WIDTH);
        let (Some(comm), Some(q_all)) = (&self.comm, self.bufs.q_all.as_mut()) else {
            return Ok(());
        };
        let d = self.config.dcp_size();
        all_gather_rank(
            comm,
            &args.q_loc.slice(0..n_loc),
            &mut q_all.slice_mut(0..d.saturating_mul(n_loc)),
        )?;
        Ok(())
    }

    /// S0: `mla_history` over the shard, then (several splits) `mla_history_reduce` into
    /// `hist_send`.
    fn enqueue_history(&mut self, args: &MlaDcpDecodeArgs<'_, E>) -> Result<(), MlaError> {
        let main = self.fork_join.main().clone();
        let st = self.state("history")?;
        let (history, reduce) = (st.plan.history.clone(), st.plan.history_reduce.clone());
        let (h_hist, h_reduce) = (st.history.clone(), st.reduce.clone());
        let (t, batch) = (st.plan.num_tokens, st.plan.step.seq_lens.len());
        let m = self.bufs.meta_layout;
        let q_all = match (&args.q_all, &self.bufs.q_all) {
            (Some(q), _) if self.comm.is_none() => KernelArg::input(q.slice(..)),
            (_, Some(q)) => KernelArg::input(q.as_view()),
            // D = 1 without a gather: the gathered queries are this rank's own.
            _ => KernelArg::input(args.q_loc.slice(..)),
        };
        let mut v = RoleViews::new();
        v.insert(BufferRole::QAll, q_all);
        v.insert(
            BufferRole::LatentCache,
            KernelArg::input(args.cache.slice(..)),
        );
        v.insert(
            BufferRole::BlockTable,
            KernelArg::input(args.block_table.slice(..)),
        );
        v.insert(
            BufferRole::TokenReq,
            meta_arg(&self.bufs.meta, m.token_req, t)?,
        );
        v.insert(
            BufferRole::HistLens,
            meta_arg(&self.bufs.meta, m.hist_lens, batch)?,
        );
        v.insert(
            BufferRole::SplitOut,
            KernelArg::output(self.bufs.split_out.as_view_mut()),
        );
        v.insert(
            BufferRole::SplitLse,
            KernelArg::output(self.bufs.split_lse.as_view_mut()),
        );
        // One split (`DIRECT`): the history writes `hist_send` itself.
        insert_send_views::<E>(
            &mut v,
            &mut self.bufs.hist_send,
            &mut self.bufs.send_lse,
            "history",
        )?;
        launch_plan(&h_hist, &main, &history, v)?;
        self.mark(Mark::History, &main)?;
        if let (Some(reduce), Some(h_reduce)) = (reduce, h_reduce) {
            self.enqueue_reduce(&main, &reduce, &h_reduce)?;
        }
        self.mark(Mark::Reduced, &main)
    }

    /// S0's merge of several history splits into `hist_send`.
    fn enqueue_reduce(
        &mut self,
        main: &Arc<CudaStream>,
        reduce: &KernelLaunch,
        h_reduce: &CudaKernelHandle,
    ) -> Result<(), MlaError> {
        let b = &mut self.bufs;
        let mut v = RoleViews::new();
        v.insert(
            BufferRole::SplitOut,
            KernelArg::input(b.split_out.as_view()),
        );
        v.insert(
            BufferRole::SplitLse,
            KernelArg::input(b.split_lse.as_view()),
        );
        insert_send_views::<E>(&mut v, &mut b.hist_send, &mut b.send_lse, "history reduce")?;
        launch_plan(h_reduce, main, reduce, v)
    }

    /// The exchange of one rank (A2a, AgRs, Loopback); the Simulated exchange runs over all
    /// contexts in [`simulated_exchange`].
    pub fn enqueue_exchange(&mut self) -> Result<(), MlaError> {
        if self.stage != Stage::HistoryDone {
            return Err(MlaError::StageOrder {
                stage: "enqueue_exchange",
                why: "the history of this call has not been enqueued",
            });
        }
        let main = self.fork_join.main().clone();
        let chunk = self.state("exchange")?.chunk;
        let total = chunk.total_bytes();
        let self_chunk = if self.config.own_part_in_place() {
            SelfChunk::Skip
        } else {
            SelfChunk::Copy
        };
        self.delay_exchange(&main)?;
        match self.config.exchange {
            ExchangeMode::Simulated => {
                return Err(MlaError::NotSingleRank {
                    mode: ExchangeMode::Simulated,
                })
            }
            ExchangeMode::A2a => {
                if let Some(comm) = &self.comm {
                    let b = &mut self.bufs;
                    a2a_rank(
                        comm,
                        &chunk,
                        &b.hist_send.slice(0..total),
                        &mut b.hist_recv.slice_mut(0..total),
                        self_chunk,
                    )?;
                }
            }
            ExchangeMode::Loopback => {
                let b = &mut self.bufs;
                for range in loopback_ranges(&chunk, self.config.dcp_rank, self_chunk) {
                    main.memcpy_dtod(
                        &b.hist_send.slice(range.clone()),
                        &mut b.hist_recv.slice_mut(range),
                    )
                    .map_err(MlaError::driver(
                        "copying hist_send to hist_recv (loopback)",
                    ))?;
                }
            }
            ExchangeMode::AgRs => self.enqueue_ag_rs(&chunk)?,
        }
        self.mark(Mark::Exchanged, &main)?;
        self.stage = Stage::Exchanged;
        Ok(())
    }

    /// [`StreamOptions::exchange_delay_cycles`]: a spin on the main stream where the exchange
    /// starts, a stand-in for wire time that widens the window the side stream must overlap.
    fn delay_exchange(&self, main: &Arc<CudaStream>) -> Result<(), MlaError> {
        if let (Some(spin), Some(cycles)) = (&self.spin, self.config.streams.exchange_delay_cycles)
        {
            spin.launch(main, cycles)?;
        }
        Ok(())
    }

    /// AG+RS: pack to the gathered layout, all-gather the LSEs + correct + reduce-scatter,
    /// unpack the merged history into the one-chunk buffer the combine reads.
    fn enqueue_ag_rs(&mut self, chunk: &ChunkLayout) -> Result<(), MlaError> {
        let main = self.fork_join.main().clone();
        let dcp_size = self.config.layout.dcp_size;
        let (Some(comm), Some(st), Some(ws)) =
            (&self.comm, self.ag_rs.as_mut(), self.bufs.ag_rs.as_mut())
        else {
            return Err(MlaError::NeedsComm {
                mode: ExchangeMode::AgRs,
                dcp_size,
            });
        };
        st.glue
            .pack(&main, chunk, &self.bufs.hist_send, &mut ws.out, &mut ws.lse)?;
        ag_rs_rank(
            comm,
            &st.correction,
            chunk,
            &ws.out.as_view(),
            &ws.lse.as_view(),
            &mut st.bufs,
        )?;
        let one = ChunkLayout::new(1, chunk.heads, chunk.tokens, LATENT, E::DTYPE)?;
        st.glue.unpack::<E>(
            &main,
            &one,
            &st.bufs.merged_out,
            &st.bufs.merged_lse,
            &mut ws.recv,
        )
    }

    /// Step 3 after the exchange: join (wait current_attn_done), combine, V-up into `y`.
    pub fn enqueue_after_exchange(
        &mut self,
        args: &MlaDcpDecodeArgs<'_, E>,
    ) -> Result<(), MlaError> {
        if self.stage != Stage::Exchanged {
            return Err(MlaError::StageOrder {
                stage: "enqueue_after_exchange",
                why: "the exchange of this call has not been enqueued",
            });
        }
        let main = self.fork_join.main().clone();
        self.fork_join.join()?;
        self.enqueue_merge(args)?;
        self.mark(Mark::Combined, &main)?;
        if self.config.vup != VupPath::Fused {
            self.enqueue_vup(args)?;
        }
        self.mark(Mark::VupDone, &main)?;
        self.stage = Stage::Idle;
        Ok(())
    }

    /// The combine (into `lat_out`), or under `VupPath::Fused` the combine with V-up (into `y`).
    fn enqueue_merge(&mut self, args: &MlaDcpDecodeArgs<'_, E>) -> Result<(), MlaError> {
        let main = self.fork_join.main().clone();
        let (launch, handle) = self.state("combine")?.merge.clone();
        let b = &mut self.bufs;
        let recv: &CudaSlice<u8> = match (self.config.exchange, &b.ag_rs) {
            (ExchangeMode::AgRs, Some(ws)) => &ws.recv,
            // D = 1 over A2A exchanges nothing: the own chunk is the whole buffer.
            (ExchangeMode::A2a, _) if self.comm.is_none() => &b.hist_send,
            _ => &b.hist_recv,
        };
        let mut v = RoleViews::new();
        v.insert(BufferRole::RecvOut, KernelArg::input(as_act::<E>(recv)?));
        v.insert(BufferRole::RecvLse, KernelArg::input(as_act::<f32>(recv)?));
        v.insert(BufferRole::CurOut, KernelArg::input(b.cur_out.as_view()));
        v.insert(BufferRole::CurLse, KernelArg::input(b.cur_lse.as_view()));
        // One-token chunks: the fused merge's current rows are the chunk's keys.
        v.insert(BufferRole::CurKv, KernelArg::input(args.cur_kv.slice(..)));
        // The own part, where the fused merge reads it in place (`own_part_in_place`).
        let send = &b.hist_send;
        v.insert(BufferRole::SendOut, KernelArg::input(as_act::<E>(send)?));
        v.insert(BufferRole::SendLse, KernelArg::input(as_act::<f32>(send)?));
        // Both merges' outputs are bound; the launch takes the roles its arguments name.
        v.insert(
            BufferRole::LatOut,
            KernelArg::output(b.lat_out.as_view_mut()),
        );
        v.insert(BufferRole::WUv, KernelArg::input(args.w_uv.slice(..)));
        v.insert(BufferRole::Y, KernelArg::output(b.y.as_view_mut()));
        launch_plan(&handle, &main, &launch, v)
    }

    fn enqueue_vup(&mut self, args: &MlaDcpDecodeArgs<'_, E>) -> Result<(), MlaError> {
        let main = self.fork_join.main().clone();
        let st = self.state("V-up")?;
        let t = st.plan.num_tokens;
        let (launch, handle) = (st.plan.v_up.clone(), st.v_up.clone());
        let shape = VupShape::deepseek_v3(t, self.config.heads())?;
        let b = &mut self.bufs;
        let w = args.w_uv.slice(..);
        match (self.config.vup, &self.vup_hand, handle) {
            (VupPath::Cublas, _, _) => self.vup_gemm.run(&shape, &b.lat_out, &w, &mut b.y)?,
            (VupPath::HandWritten, Some(f), _) => f.run(&shape, &b.lat_out, &w, &mut b.y)?,
            (_, _, Some(handle)) => {
                let mut v = RoleViews::new();
                v.insert(BufferRole::LatOut, KernelArg::input(b.lat_out.as_view()));
                v.insert(BufferRole::WUv, KernelArg::input(w));
                v.insert(BufferRole::Y, KernelArg::output(b.y.as_view_mut()));
                launch_plan(&handle, &main, &launch, v)?;
            }
            _ => {
                return Err(MlaError::StageOrder {
                    stage: "V-up",
                    why: "the config's V-up path has no kernel in this step (internal error)",
                })
            }
        }
        Ok(())
    }
}

/// A captured step replays `now` only if every launch is the captured one: the graph holds
/// the kernels, grids and scalar arguments; only the metadata buffer's contents may change.
fn same_launches(captured: &DecodePlan, now: &DecodePlan) -> Result<(), GraphError> {
    for (c, n) in captured.launches().iter().zip(now.launches().iter()) {
        if c != n {
            return Err(GraphError::ReplayMismatch {
                what: format!("the {} launch (kernel, grid or scalars)", c.kernel),
                captured: format!("{} grid {:?}", c.key(), c.grid),
                now: format!("{} grid {:?}", n.key(), n.grid),
            });
        }
    }
    Ok(())
}

/// Specializes `launches` (the DSL pipeline) and runs NVRTC for `device`'s arch on all of them
/// in parallel threads, filling the process's disk cache; returns one unloaded handle per
/// distinct specialization key. Benchmarks call it once for every plan they will run, so the
/// first decode calls find their modules compiled.
pub fn compile_launches<'l>(
    device: &CudaDevice,
    launches: impl IntoIterator<Item = &'l KernelLaunch>,
) -> Result<Vec<(String, CudaKernelHandle)>, MlaError> {
    let mut kernels: BTreeMap<String, CudaKernelHandle> = BTreeMap::new();
    for l in launches {
        if let std::collections::btree_map::Entry::Vacant(e) = kernels.entry(l.key()) {
            let c = l.compile()?;
            e.insert(CudaKernelHandle::new(c.cuda));
        }
    }
    let opts = JitOptions::new(device.arch());
    std::thread::scope(|s| {
        let jobs: Vec<_> = kernels
            .values()
            .map(|h| {
                s.spawn(|| {
                    process_cache()
                        .get_or_compile(&h.source(), &opts)
                        .map(|_| ())
                })
            })
            .collect();
        for job in jobs {
            job.join()
                .map_err(|_| MlaError::StageOrder {
                    stage: "parallel NVRTC compile",
                    why: "a compile thread panicked",
                })?
                .map_err(LaunchError::from)?;
        }
        Ok::<(), MlaError>(())
    })?;
    Ok(kernels.into_iter().collect())
}

/// One decode step of one rank (A2a, AgRs or Loopback exchange): everything of §9.4, enqueued
/// on the context's streams; the result is [`MlaDcpContext::output`]. Every rank of the
/// communicator must call it for the same step.
pub fn mla_dcp_decode<E: DecodeElem>(
    ctx: &mut MlaDcpContext<E>,
    args: &MlaDcpDecodeArgs<'_, E>,
) -> Result<LaunchReport, MlaError> {
    if ctx.config.exchange == ExchangeMode::Simulated {
        return Err(MlaError::NotSingleRank {
            mode: ExchangeMode::Simulated,
        });
    }
    let report = ctx.enqueue_until_exchange(args)?;
    ctx.enqueue_exchange()?;
    ctx.enqueue_after_exchange(args)?;
    Ok(report)
}

#[cfg(test)]
// Tests index their own fixtures; a panic there is a failing test, not a caller's input.
#[allow(clippy::indexing_slicing, clippy::arithmetic_side_effects)]
mod tests {
    use super::super::act_dtype::ActDtype;
    use super::super::metadata::DcpLayout;
    use super::super::plan::NO_OWN_PART;
    use super::*;
    use crate::jit::{compile_for_arch, Arch, CudaSource};
    use attn_dsl::ir::ScalarType;

    /// The plan of the L-row bench for `batch` requests of `ctx_len` tokens on one rank.
    fn bench_step(batch: usize, ctx_len: u32, d: u32, heads: u32) -> DecodeStep {
        let layout = DcpLayout::new(d, 1, 64).unwrap();
        DecodeStep {
            query_lens: vec![1; batch],
            seq_lens: vec![ctx_len; batch],
            layout,
            heads_per_rank: heads,
            dtype: ScalarType::Bf16,
            softmax_scale: 0.135,
            block_table_stride: layout.max_blocks_per_request(u64::from(ctx_len)) as usize,
            num_sms: 132,
        }
    }

    /// Every specialization the benches launch compiles with NVRTC for sm_90 (NVRTC must be
    /// loadable: scripts/nvrtc-env; no GPU needed), including the AG+RS combine; prints the
    /// ptxas registers and spills of each. Ignored by default: NVRTC takes minutes on these
    /// (spill-heavy) kernels; run with `-- --ignored bench_specializations`.
    #[test]
    #[ignore]
    fn bench_specializations_compile_for_sm90() {
        let arch = Arch::from_compute_capability(9, 0);
        let mut seen = std::collections::BTreeSet::new();
        for (batch, len, d, n) in [(1, 32768, 1, 128), (32, 8192, 2, 64), (128, 4096, 1, 128)] {
            let plan = bench_step(batch, len, d, n).plan().unwrap();
            let one = [&plan.combine, &plan.combine_v_up]
                .map(|l| MlaDcpContext::<half::bf16>::one_rank_launch(&plan, l));
            for l in plan.launches().into_iter().chain(&one) {
                if !seen.insert(l.key()) {
                    continue;
                }
                let c = l.compile().unwrap();
                let m = compile_for_arch(&CudaSource::from_kernel(&c.cuda), arch)
                    .unwrap_or_else(|e| panic!("{}: {e}", l.key()));
                println!("{}: {:?}", l.key(), m.entry_stats());
            }
        }
    }

    #[test]
    fn ag_rs_glue_compiles_for_sm80_and_sm90() {
        for arch in ["sm_80", "sm_90"] {
            super::super::cuda_source::compile_for_arch("agrs_glue", &ag_rs_glue_source(), arch)
                .unwrap_or_else(|e| panic!("{e}"));
        }
    }

    #[test]
    fn the_ag_rs_combine_merges_one_chunk() {
        let plan = bench_step(3, 500, 2, 4).plan().unwrap();
        let l = MlaDcpContext::<half::bf16>::one_rank_launch(&plan, &plan.combine);
        assert!(l.key().contains("DCP_SIZE=1") && l.key().contains("PARTS_PADDED=2"));
        let one = ExchangeLayout::new(1, 4, 3, 2);
        let tail: Vec<PlanArg> = l.args[l.args.len() - 3..].to_vec();
        assert_eq!(
            tail,
            vec![
                PlanArg::I64(one.chunk_stride_out() as i64),
                PlanArg::I64(one.chunk_stride_lse() as i64),
                PlanArg::I64(one.lse_offset() as i64)
            ]
        );
        assert_eq!(
            l.args[..l.args.len() - 3],
            plan.combine.args[..l.args.len() - 3]
        );
    }

    /// The loopback copy leaves the own chunk in `hist_send` when the merge reads it there,
    /// and copies every other byte; otherwise it copies the whole buffer.
    #[test]
    fn loopback_copies_all_but_the_own_chunk() {
        let chunk = ChunkLayout::new(4, 2, 3, 512, ActDtype::Bf16).unwrap();
        let (c, total) = (chunk.chunk_bytes(), chunk.total_bytes());
        assert_eq!(loopback_ranges(&chunk, 1, SelfChunk::Copy), vec![0..total]);
        assert_eq!(
            loopback_ranges(&chunk, 1, SelfChunk::Skip),
            vec![0..c, 2 * c..total]
        );
        assert_eq!(loopback_ranges(&chunk, 0, SelfChunk::Skip), vec![c..total]);
        assert_eq!(loopback_ranges(&chunk, 3, SelfChunk::Skip), vec![0..3 * c]);
        let one = ChunkLayout::new(1, 2, 3, 512, ActDtype::Bf16).unwrap();
        assert!(loopback_ranges(&one, 0, SelfChunk::Skip).is_empty());
    }

    /// The fused merge's own part is set only where asked, in the argument before the strides.
    #[test]
    fn the_fused_merge_reads_the_own_part_where_asked() {
        let plan = bench_step(3, 500, 2, 4).plan().unwrap();
        let own = plan.combine_v_up_reading_own_part(1);
        let at = own.args.len() - 4;
        assert_eq!(plan.combine_v_up.args[at], PlanArg::I32(NO_OWN_PART));
        assert_eq!(own.args[at], PlanArg::I32(1));
        assert_eq!(own.args[..at], plan.combine_v_up.args[..at]);
        assert_eq!(own.args[at + 1..], plan.combine_v_up.args[at + 1..]);
    }
}
