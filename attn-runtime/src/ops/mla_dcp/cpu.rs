//! The whole MLA-DCP decode step for D *simulated* ranks on the CPU executor (spec §9.5, "1 GPU
//! (simulated D ranks)"): each rank's paged latent shard is filled from one global sequence with
//! the §2.2 owner/slot mapping, the Q all-gather is a host concat, the A2A a permutation
//! (`recv_r[src] = send_src[r]`), and every kernel is the DSL kernel the GPU runs. This is how
//! CI, which has no GPU, checks the sharding, the exchange layout and the merge end to end.
//!
//! Every buffer a kernel writes starts NaN-poisoned, so an element a kernel forgets to write
//! (or a read of an unwritten one) shows up as NaN in the result.

use super::metadata::{DcpLayout, DcpLayoutError};
use super::plan::{BufferRole, DecodePlan, KernelLaunch, PlanArg, LATENT, QK_WIDTH, V_HEAD};
use crate::kernels::mla_dcp::{specialize_kernel, MlaKernelError};
use crate::ops::host_launch::{self, HostRunError};
pub use crate::ops::host_launch::{HostLaunch, HostLauncher};
use attn_dsl::interp::{CpuArg, ExecError, HostBuffer};
use attn_dsl::ir::{Function, ParamKind, ScalarType};
use attn_dsl::kernel::ScalarArg;
use std::collections::BTreeMap;
use thiserror::Error;

/// Why the simulated decode step failed.
#[derive(Debug, Error)]
pub enum CpuDecodeError {
    /// Building or loading a DSL kernel failed.
    #[error(transparent)]
    Kernel(#[from] MlaKernelError),
    /// The DCP geometry or rank is invalid.
    #[error(transparent)]
    Layout(#[from] DcpLayoutError),
    /// A [`HostLauncher`] failed running a kernel.
    #[error("launching `{kernel}` on the host: {message}")]
    Launcher {
        /// The launch's key.
        kernel: String,
        /// What failed.
        message: String,
    },
    /// The CPU executor failed running a kernel.
    #[error("running `{kernel}` on the CPU executor: {source}")]
    Exec {
        /// Name of the kernel.
        kernel: String,
        /// The executor's error.
        source: ExecError,
    },
    /// A host input has the wrong number of values.
    #[error("{what} has {got} values, expected {expected}")]
    Input {
        /// Name of the input.
        what: &'static str,
        /// Values it has.
        got: usize,
        /// Values expected.
        expected: usize,
    },
    /// The fused combine + V-up was asked of a group it does not take.
    #[error("the fused combine + V-up does not take a group of {dcp_size} ranks")]
    NotFused {
        /// The group's size.
        dcp_size: u32,
    },
    /// A kernel of the stage needs a buffer the stage does not provide.
    #[error("kernel `{kernel}` needs buffer {role:?}, which this stage does not provide")]
    MissingBuffer {
        /// Name of the kernel.
        kernel: &'static str,
        /// The buffer's role.
        role: BufferRole,
    },
}

/// Host inputs of a simulated step, in f32 (rounded to the activation dtype on upload).
#[derive(Clone, Copy, Debug)]
pub struct SimulatedInputs<'a> {
    /// Per request, its whole latent sequence `[S_b, 576]` (history, then the current chunk).
    pub latents: &'a [Vec<f32>],
    /// Absorbed queries of every rank, rank-major `[D, T, N, 576]`: rank r's `q_loc` is `[r]`,
    /// and the all-gathered `q_all` is the whole array (global head g = r·N + h).
    pub queries: &'a [f32],
    /// W_UV of all D·N heads `[D·N, 512, 128]`; rank r uses heads `[r·N, (r+1)·N)`.
    pub w_uv: &'a [f32],
    /// What runs each launch instead of the executor (`None`: the executor).
    pub launcher: Option<&'static dyn HostLauncher>,
}

/// One rank's paged latent shard and the (shared) block table.
#[derive(Clone, Debug, PartialEq)]
pub struct RankShard {
    /// `[num_blocks, B, 576]`; slots the rank does not own stay NaN.
    pub cache: HostBuffer,
    /// Physical blocks of the shard.
    pub num_blocks: usize,
}

/// A `hist_send` / `hist_recv` buffer as its two typed views (activation and f32), with the
/// element strides of [`super::plan::ExchangeLayout`].
#[derive(Clone, Debug, PartialEq)]
pub struct ExchangeBuffer {
    /// Outputs, activation-dtype view.
    pub out: HostBuffer,
    /// LSEs, f32 view.
    pub lse: HostBuffer,
}

/// A rank's current-chunk partial: `out [T, N, 512]`, `lse [T, N]` f32.
#[derive(Clone, Debug, PartialEq)]
pub struct CurrentPartial {
    /// `out [T, N, 512]` (activation dtype).
    pub out: HostBuffer,
    /// `lse [T, N]` f32.
    pub lse: HostBuffer,
    /// The chunk's keys `cur_kv [T, 576]`, which a merge reads as the current rows when the
    /// chunks are one token each (`DecodePlan::read_single_key_chunks_from_kv`).
    pub kv: Option<HostBuffer>,
}

/// What each simulated rank produced.
#[derive(Clone, Debug, PartialEq)]
pub struct RankOutput {
    /// The combine output `[T, N, 512]` (activation dtype).
    pub lat_out: HostBuffer,
    /// The V-up output `[T, N·128]` (activation dtype).
    pub y: HostBuffer,
    /// `y` from the fused combine + V-up (`mla_combine_v_up`, the op's `VupPath::Fused`), for
    /// the group sizes it takes (`dcp_size ≤ FUSED_MAX_DCP`).
    pub fused_y: Option<HostBuffer>,
}

/// The five kernels specialized once for a plan (the same on every rank).
#[derive(Clone, Debug)]
pub struct CpuKernels {
    history: Function,
    history_reduce: Option<Function>,
    current: Function,
    combine: Function,
    v_up: Function,
    /// `None` where the group is larger than the fused kernel takes.
    combine_v_up: Option<Function>,
    /// What runs the launches (`None`: the executor).
    launcher: Option<&'static dyn HostLauncher>,
}

impl CpuKernels {
    /// The fused combine + V-up, where the plan's group takes it.
    pub fn combine_v_up(&self) -> Option<&Function> {
        self.combine_v_up.as_ref()
    }

    /// These kernels' launches run by `launcher` (the executor for `None`).
    pub fn launched_by(self, launcher: Option<&'static dyn HostLauncher>) -> Self {
        CpuKernels { launcher, ..self }
    }

    fn runner<'a>(&self, f: &'a Function) -> Runner<'a> {
        (f, self.launcher)
    }

    /// Specializes every kernel of `plan` for the CPU executor (once per plan).
    pub fn new(plan: &DecodePlan) -> Result<Self, CpuDecodeError> {
        let spec = |l: &KernelLaunch| specialize_kernel(l.kernel, &l.bindings());
        Ok(CpuKernels {
            history: spec(&plan.history)?,
            history_reduce: plan.history_reduce.as_ref().map(spec).transpose()?,
            current: spec(&plan.current)?,
            combine: spec(&plan.combine)?,
            v_up: spec(&plan.v_up)?,
            combine_v_up: (plan.fused_merges_the_group())
                .then(|| spec(&plan.combine_v_up))
                .transpose()?,
            launcher: None,
        })
    }
}

fn expect_len(what: &'static str, got: usize, expected: usize) -> Result<(), CpuDecodeError> {
    if got == expected {
        Ok(())
    } else {
        Err(CpuDecodeError::Input {
            what,
            got,
            expected,
        })
    }
}

/// A buffer of `dtype` with every element NaN (or `-559038737` for integers).
pub fn poisoned(dtype: ScalarType, len: usize) -> HostBuffer {
    let v = match dtype {
        ScalarType::I32 | ScalarType::I64 => -559_038_737.0,
        _ => f64::NAN,
    };
    HostBuffer::from_f64s(dtype, &vec![v; len])
}

/// `values` converted to a buffer of `dtype` (rounded to it).
pub fn to_buffer(dtype: ScalarType, values: &[f32]) -> HostBuffer {
    let v: Vec<f64> = values.iter().map(|&x| f64::from(x)).collect();
    HostBuffer::from_f64s(dtype, &v)
}

/// Runs one launch with its buffers taken by role from `bufs`.
fn run_launch(
    (f, launcher): Runner<'_>,
    launch: &KernelLaunch,
    bufs: &mut BTreeMap<BufferRole, HostBuffer>,
) -> Result<(), CpuDecodeError> {
    let mut by_role: BTreeMap<BufferRole, &mut HostBuffer> =
        bufs.iter_mut().map(|(k, v)| (*k, v)).collect();
    let mut args = Vec::with_capacity(launch.args.len());
    for (i, a) in launch.args.iter().enumerate() {
        args.push(match *a {
            PlanArg::Buffer(role) => {
                let b = by_role.remove(&role).ok_or(CpuDecodeError::MissingBuffer {
                    kernel: launch.kernel,
                    role,
                })?;
                let mutable = matches!(
                    f.params.get(i).map(|p| p.kind),
                    Some(ParamKind::Ptr { mutable: true, .. })
                );
                if mutable {
                    b.arg_out()
                } else {
                    b.arg_in()
                }
            }
            PlanArg::I32(v) => CpuArg::Scalar(ScalarArg::I32(v)),
            PlanArg::I64(v) => CpuArg::Scalar(ScalarArg::I64(v)),
            PlanArg::F32(v) => CpuArg::Scalar(ScalarArg::F32(v)),
        });
    }
    let cuda = || launch.compile().map(|c| c.cuda).map_err(|e| e.to_string());
    let host = HostLaunch {
        kernel: f,
        grid: launch.grid,
        cuda: &cuda,
    };
    let kernel = launch.key();
    host_launch::run_launch(launcher, host, args)
        .map(|_| ())
        .map_err(|e| match e {
            HostRunError::Exec(source) => CpuDecodeError::Exec { kernel, source },
            HostRunError::Launcher(message) => CpuDecodeError::Launcher { kernel, message },
        })
}

/// A stage's specialized kernel and what runs it (`None`: the executor).
type Runner<'a> = (&'a Function, Option<&'static dyn HostLauncher>);

/// Runs one stage with `inputs` by role and every role of `outputs` poisoned at the plan's
/// dtype and length (so an element the kernel does not write shows up as NaN); returns the
/// buffer map for the caller to `take` the outputs from.
fn run_stage(
    plan: &DecodePlan,
    f: Runner<'_>,
    launch: &KernelLaunch,
    inputs: impl IntoIterator<Item = (BufferRole, HostBuffer)>,
    outputs: &[BufferRole],
) -> Result<BTreeMap<BufferRole, HostBuffer>, CpuDecodeError> {
    let mut bufs: BTreeMap<BufferRole, HostBuffer> = inputs.into_iter().collect();
    for &r in outputs {
        bufs.insert(
            r,
            poisoned(plan.buffer_dtype(r), plan.buffer_len(r).unwrap_or(0)),
        );
    }
    run_launch(f, launch, &mut bufs)?;
    Ok(bufs)
}

/// [`run_stage`] of a stage whose outputs are one partial: its `(out, lse)` buffers.
fn run_partial_stage(
    plan: &DecodePlan,
    f: Runner<'_>,
    launch: &KernelLaunch,
    inputs: impl IntoIterator<Item = (BufferRole, HostBuffer)>,
    [out, lse]: [BufferRole; 2],
) -> Result<(HostBuffer, HostBuffer), CpuDecodeError> {
    let mut bufs = run_stage(plan, f, launch, inputs, &[out, lse])?;
    take_pair(&mut bufs, launch.kernel, [out, lse])
}

/// Takes a partial's `(out, lse)` buffers back out of a stage's buffer map.
fn take_pair(
    bufs: &mut BTreeMap<BufferRole, HostBuffer>,
    kernel: &'static str,
    [out, lse]: [BufferRole; 2],
) -> Result<(HostBuffer, HostBuffer), CpuDecodeError> {
    Ok((take(bufs, kernel, out)?, take(bufs, kernel, lse)?))
}

/// Takes a stage's output back out of its buffer map.
fn take(
    bufs: &mut BTreeMap<BufferRole, HostBuffer>,
    kernel: &'static str,
    role: BufferRole,
) -> Result<HostBuffer, CpuDecodeError> {
    bufs.remove(&role)
        .ok_or(CpuDecodeError::MissingBuffer { kernel, role })
}

/// The shared block table `[batch, stride]`: physical blocks handed out in reverse order
/// (never the identity, so a kernel that ignores the table reads wrong rows), unused
/// columns −1 (an unmasked read of one is out of bounds). Block 0 is never used.
pub fn block_table(plan: &DecodePlan) -> (Vec<i32>, usize) {
    let step = &plan.step;
    let stride = step.block_table_stride;
    let used: u64 = step.seq_lens.iter().map(|&s| step.virtual_blocks(s)).sum();
    let num_blocks = used as usize + 1;
    let mut table = vec![-1i32; step.seq_lens.len() * stride];
    let mut next = num_blocks - 1;
    for (b, &s) in step.seq_lens.iter().enumerate() {
        for col in 0..step.virtual_blocks(s) as usize {
            table[b * stride + col] = next as i32;
            next -= 1;
        }
    }
    (table, num_blocks)
}

/// Fills every rank's shard from the global sequences with the §2.2 slot mapping (all S_b
/// tokens, current chunk included, as the cache write of the step would).
pub fn build_shards(
    plan: &DecodePlan,
    layout: &DcpLayout,
    latents: &[Vec<f32>],
    table: &[i32],
    num_blocks: usize,
) -> Result<Vec<RankShard>, CpuDecodeError> {
    let step = &plan.step;
    expect_len("latents (requests)", latents.len(), step.seq_lens.len())?;
    let b = layout.block_size as usize;
    let mut caches: Vec<Vec<f64>> =
        vec![vec![f64::NAN; num_blocks * b * QK_WIDTH]; layout.dcp_size as usize];
    let stride = step.block_table_stride;
    for (req, (&s, lat)) in step.seq_lens.iter().zip(latents).enumerate() {
        expect_len("request latent", lat.len(), s as usize * QK_WIDTH)?;
        let row = &table[req * stride..(req + 1) * stride];
        for p in 0..s as usize {
            let owner = layout.place(p as u64).owner;
            if let Some(slot) = layout.slot_for(p as u64, owner, row)? {
                let dst = &mut caches[owner as usize][slot as usize * QK_WIDTH..][..QK_WIDTH];
                for (d, &x) in dst.iter_mut().zip(&lat[p * QK_WIDTH..(p + 1) * QK_WIDTH]) {
                    *d = f64::from(x);
                }
            }
        }
    }
    Ok(caches
        .into_iter()
        .map(|c| RankShard {
            cache: HostBuffer::from_f64s(step.dtype, &c),
            num_blocks,
        })
        .collect())
}

/// `cur_kv [T, 576]`: the current chunks' latent rows, token order.
pub fn current_kv(plan: &DecodePlan, latents: &[Vec<f32>]) -> Vec<f32> {
    let mut v = Vec::with_capacity(plan.num_tokens * QK_WIDTH);
    for (lat, (&s, &q)) in latents
        .iter()
        .zip(plan.step.seq_lens.iter().zip(&plan.step.query_lens))
    {
        v.extend_from_slice(&lat[(s - q) as usize * QK_WIDTH..s as usize * QK_WIDTH]);
    }
    v
}

/// The split scratch of the history pass: `out [T, D·N, S, 512]`, `lse [T, D·N, S]` (f32).
#[derive(Clone, Debug, PartialEq)]
pub struct HistorySplits {
    /// `out [T, D·N, S, 512]` f32.
    pub out: HostBuffer,
    /// `lse [T, D·N, S]` f32.
    pub lse: HostBuffer,
}

/// History pass of `rank`: all D·N gathered heads over its shard, one partial per KV split
/// into the split scratch, or (one split, `DIRECT`) straight into `hist_send`; the buffers
/// the pass does not write stay poisoned.
fn run_history_pass(
    plan: &DecodePlan,
    kernels: &CpuKernels,
    shard: &RankShard,
    table: &[i32],
    rank: u32,
    q_all: &HostBuffer,
) -> Result<BTreeMap<BufferRole, HostBuffer>, CpuDecodeError> {
    let step = &plan.step;
    let inputs = [
        (BufferRole::QAll, q_all.clone()),
        (BufferRole::LatentCache, shard.cache.clone()),
        (BufferRole::BlockTable, HostBuffer::I32(table.to_vec())),
        (BufferRole::TokenReq, HostBuffer::I32(step.token_req())),
        (BufferRole::HistLens, HostBuffer::I32(step.hist_lens(rank))),
    ];
    let outputs = [
        BufferRole::SplitOut,
        BufferRole::SplitLse,
        BufferRole::SendOut,
        BufferRole::SendLse,
    ];
    run_stage(
        plan,
        kernels.runner(&kernels.history),
        &plan.history,
        inputs,
        &outputs,
    )
}

/// The history pass's split scratch (a plan of several splits; with one the history
/// writes `hist_send` and the scratch stays poisoned).
pub fn run_history_splits(
    plan: &DecodePlan,
    kernels: &CpuKernels,
    shard: &RankShard,
    table: &[i32],
    rank: u32,
    q_all: &HostBuffer,
) -> Result<HistorySplits, CpuDecodeError> {
    let mut bufs = run_history_pass(plan, kernels, shard, table, rank, q_all)?;
    take_splits(&mut bufs, plan.history.kernel)
}

/// The split scratch a history pass wrote.
fn take_splits(
    bufs: &mut BTreeMap<BufferRole, HostBuffer>,
    kernel: &'static str,
) -> Result<HistorySplits, CpuDecodeError> {
    let (out, lse) = take_pair(bufs, kernel, [BufferRole::SplitOut, BufferRole::SplitLse])?;
    Ok(HistorySplits { out, lse })
}

/// The reduce of the history splits into this rank's `hist_send` (a plan without a reduce
/// gives back nothing to merge: `None`).
pub fn run_history_reduce(
    plan: &DecodePlan,
    kernels: &CpuKernels,
    splits: HistorySplits,
) -> Result<Option<ExchangeBuffer>, CpuDecodeError> {
    let (Some(f), Some(launch)) = (&kernels.history_reduce, &plan.history_reduce) else {
        return Ok(None);
    };
    let inputs = [
        (BufferRole::SplitOut, splits.out),
        (BufferRole::SplitLse, splits.lse),
    ];
    let outputs = [BufferRole::SendOut, BufferRole::SendLse];
    let (out, lse) = run_partial_stage(plan, kernels.runner(f), launch, inputs, outputs)?;
    Ok(Some(ExchangeBuffer { out, lse }))
}

/// History pass of `rank` and, with several splits, the reduce into its `hist_send`.
pub fn run_history(
    plan: &DecodePlan,
    kernels: &CpuKernels,
    shard: &RankShard,
    table: &[i32],
    rank: u32,
    q_all: &HostBuffer,
) -> Result<ExchangeBuffer, CpuDecodeError> {
    let mut bufs = run_history_pass(plan, kernels, shard, table, rank, q_all)?;
    let kernel = plan.history.kernel;
    let splits = take_splits(&mut bufs, kernel)?;
    match run_history_reduce(plan, kernels, splits)? {
        Some(send) => Ok(send),
        None => {
            let (out, lse) = take_pair(
                &mut bufs,
                kernel,
                [BufferRole::SendOut, BufferRole::SendLse],
            )?;
            Ok(ExchangeBuffer { out, lse })
        }
    }
}

fn copy_range(dst: &mut HostBuffer, src: &HostBuffer, dst_at: usize, src_at: usize, n: usize) {
    match (dst, src) {
        (HostBuffer::Bf16(d), HostBuffer::Bf16(s)) => {
            d[dst_at..dst_at + n].copy_from_slice(&s[src_at..src_at + n])
        }
        (HostBuffer::F16(d), HostBuffer::F16(s)) => {
            d[dst_at..dst_at + n].copy_from_slice(&s[src_at..src_at + n])
        }
        (HostBuffer::F32(d), HostBuffer::F32(s)) => {
            d[dst_at..dst_at + n].copy_from_slice(&s[src_at..src_at + n])
        }
        _ => {}
    }
}

/// The A2A as a permutation of whole chunks: `recv_r[src] = send_src[r]` (bit-exact, like the
/// byte transport of §9.3).
pub fn exchange(plan: &DecodePlan, sends: &[ExchangeBuffer]) -> Vec<ExchangeBuffer> {
    let (so, sl) = (
        plan.exchange.chunk_stride_out(),
        plan.exchange.chunk_stride_lse(),
    );
    (0..sends.len())
        .map(|r| {
            let mut recv = sends[r].clone();
            for (src, send) in sends.iter().enumerate() {
                copy_range(&mut recv.out, &send.out, src * so, r * so, so);
                copy_range(&mut recv.lse, &send.lse, src * sl, r * sl, sl);
            }
            recv
        })
        .collect()
}

/// Current-chunk attention of `rank`'s own heads.
pub fn run_current(
    plan: &DecodePlan,
    kernels: &CpuKernels,
    q_loc: &HostBuffer,
    cur_kv: &HostBuffer,
) -> Result<CurrentPartial, CpuDecodeError> {
    let inputs = [
        (BufferRole::QLoc, q_loc.clone()),
        (BufferRole::CurKv, cur_kv.clone()),
        (BufferRole::TokenReq, HostBuffer::I32(plan.step.token_req())),
        (
            BufferRole::CuSeqlensQ,
            HostBuffer::I32(plan.step.cu_seqlens_q()),
        ),
    ];
    let outputs = [BufferRole::CurOut, BufferRole::CurLse];
    let current = kernels.runner(&kernels.current);
    let (out, lse) = run_partial_stage(plan, current, &plan.current, inputs, outputs)?;
    Ok(CurrentPartial {
        out,
        lse,
        kv: Some(cur_kv.clone()),
    })
}

/// The partials a merging stage reads: the received history parts and the current part.
fn partial_inputs(
    recv: &ExchangeBuffer,
    cur: &CurrentPartial,
) -> impl Iterator<Item = (BufferRole, HostBuffer)> {
    let kv = cur.kv.clone().map(|kv| (BufferRole::CurKv, kv));
    [
        (BufferRole::RecvOut, recv.out.clone()),
        (BufferRole::RecvLse, recv.lse.clone()),
        (BufferRole::CurOut, cur.out.clone()),
        (BufferRole::CurLse, cur.lse.clone()),
    ]
    .into_iter()
    .chain(kv)
}

/// The combine: D received history partials + the current partial → `lat_out [T, N, 512]`.
pub fn run_combine(
    plan: &DecodePlan,
    kernels: &CpuKernels,
    recv: &ExchangeBuffer,
    cur: &CurrentPartial,
) -> Result<HostBuffer, CpuDecodeError> {
    let inputs = partial_inputs(recv, cur);
    let lat = BufferRole::LatOut;
    let mut bufs = run_stage(
        plan,
        kernels.runner(&kernels.combine),
        &plan.combine,
        inputs,
        &[lat],
    )?;
    take(&mut bufs, plan.combine.kernel, lat)
}

/// The V-up fallback kernel: `y [T, N·128]` from `lat_out` and the rank's `w_uv [N, 512, 128]`.
pub fn run_v_up(
    plan: &DecodePlan,
    kernels: &CpuKernels,
    lat_out: &HostBuffer,
    w_uv: &HostBuffer,
) -> Result<HostBuffer, CpuDecodeError> {
    let inputs = [
        (BufferRole::LatOut, lat_out.clone()),
        (BufferRole::WUv, w_uv.clone()),
    ];
    let v_up = kernels.runner(&kernels.v_up);
    let mut bufs = run_stage(plan, v_up, &plan.v_up, inputs, &[BufferRole::Y])?;
    take(&mut bufs, plan.v_up.kernel, BufferRole::Y)
}

/// The fused combine + V-up: `y [T, N·128]` straight from the partials and `w_uv`. With
/// `own = Some((send, rank))`, part `rank` is read from `send` (where the history wrote it,
/// the GPU op's A2A and loopback exchanges leaving it out of the receive buffer).
pub fn run_combine_v_up(
    plan: &DecodePlan,
    kernels: &CpuKernels,
    recv: &ExchangeBuffer,
    own: Option<(&ExchangeBuffer, u32)>,
    cur: &CurrentPartial,
    w_uv: &HostBuffer,
) -> Result<HostBuffer, CpuDecodeError> {
    let send = own.map_or(recv, |(send, _)| send);
    let inputs = partial_inputs(recv, cur).chain([
        (BufferRole::SendOut, send.out.clone()),
        (BufferRole::SendLse, send.lse.clone()),
        (BufferRole::WUv, w_uv.clone()),
    ]);
    let launch = &own.map_or_else(
        || plan.combine_v_up.clone(),
        |(_, rank)| plan.combine_v_up_reading_own_part(rank),
    );
    let kernel = kernels.combine_v_up().ok_or(CpuDecodeError::NotFused {
        dcp_size: plan.step.layout.dcp_size,
    })?;
    let mut bufs = run_stage(
        plan,
        kernels.runner(kernel),
        launch,
        inputs,
        &[BufferRole::Y],
    )?;
    take(&mut bufs, launch.kernel, BufferRole::Y)
}

/// Everything up to the exchange, per rank, and the inputs of the later stages: lets a test
/// tamper with the received partials before the combine.
#[derive(Clone, Debug)]
pub struct SimulatedStep {
    /// The kernels specialized for the plan.
    pub kernels: CpuKernels,
    /// `hist_recv` of each rank, after the permutation.
    pub recv: Vec<ExchangeBuffer>,
    /// Each rank's current partial.
    pub current: Vec<CurrentPartial>,
    /// Each rank's `w_uv [N, 512, 128]` in the activation dtype.
    pub w_uv: Vec<HostBuffer>,
}

/// Runs the history pass, the exchange and the current pass on every simulated rank.
pub fn simulate_until_combine(
    plan: &DecodePlan,
    inputs: &SimulatedInputs<'_>,
) -> Result<SimulatedStep, CpuDecodeError> {
    let step = &plan.step;
    let (d, n, t) = (
        step.layout.dcp_size as usize,
        step.heads_per_rank as usize,
        plan.num_tokens,
    );
    expect_len(
        "queries [D, T, N, 576]",
        inputs.queries.len(),
        d * t * n * QK_WIDTH,
    )?;
    expect_len(
        "w_uv [D*N, 512, 128]",
        inputs.w_uv.len(),
        d * n * LATENT * V_HEAD,
    )?;
    let kernels = CpuKernels::new(plan)?.launched_by(inputs.launcher);
    let (table, num_blocks) = block_table(plan);
    let shards = build_shards(plan, &step.layout, inputs.latents, &table, num_blocks)?;
    // The Q all-gather: rank-major concatenation of every rank's q_loc.
    let q_all = to_buffer(step.dtype, inputs.queries);
    let cur_kv = to_buffer(step.dtype, &current_kv(plan, inputs.latents));
    let mut sends = Vec::with_capacity(d);
    let mut current = Vec::with_capacity(d);
    let mut w_uv = Vec::with_capacity(d);
    for (r, shard) in shards.iter().enumerate() {
        sends.push(run_history(
            plan, &kernels, shard, &table, r as u32, &q_all,
        )?);
        let q_loc = to_buffer(
            step.dtype,
            &inputs.queries[r * t * n * QK_WIDTH..(r + 1) * t * n * QK_WIDTH],
        );
        current.push(run_current(plan, &kernels, &q_loc, &cur_kv)?);
        let w = n * LATENT * V_HEAD;
        w_uv.push(to_buffer(step.dtype, &inputs.w_uv[r * w..(r + 1) * w]));
    }
    let recv = exchange(plan, &sends);
    Ok(SimulatedStep {
        kernels,
        recv,
        current,
        w_uv,
    })
}

/// Runs the combine and the V-up on every rank of a simulated step, and the fused form of
/// both.
pub fn finish(plan: &DecodePlan, sim: &SimulatedStep) -> Result<Vec<RankOutput>, CpuDecodeError> {
    sim.recv
        .iter()
        .zip(&sim.current)
        .zip(&sim.w_uv)
        .map(|((recv, cur), w)| {
            let lat_out = run_combine(plan, &sim.kernels, recv, cur)?;
            let y = run_v_up(plan, &sim.kernels, &lat_out, w)?;
            let fused_y = (sim.kernels.combine_v_up.is_some())
                .then(|| run_combine_v_up(plan, &sim.kernels, recv, None, cur, w))
                .transpose()?;
            Ok(RankOutput {
                lat_out,
                y,
                fused_y,
            })
        })
        .collect()
}

/// The whole decode step on D simulated ranks: each rank's `[T, N·128]` (and its `lat_out`).
pub fn simulate_decode_step(
    plan: &DecodePlan,
    inputs: &SimulatedInputs<'_>,
) -> Result<Vec<RankOutput>, CpuDecodeError> {
    let sim = simulate_until_combine(plan, inputs)?;
    finish(plan, &sim)
}
