//! AG+RS parity mode of the history merge (spec `mla_dcp.md` §2.4, §9.3, as upstream vLLM's
//! `cp_lse_ag_out_rs`): every rank holds partials for all D·N gathered heads over its own KV shard,
//! `out [T, D·N, L]` (activation dtype) and `lse [T, D·N]` (f32, natural log). Then
//! 1. all-gather the lse into `lse_all [D, T, D·N]`;
//! 2. a correction kernel computes ℓ* = logsumexp over the valid (finite) ranks and writes
//!    `corrected[p, t, h, :] = exp(ℓ_me − ℓ*) · out[t, p·N + h, :]` in f32, zeroing rows whose
//!    factor is 0 *before* multiplying (an empty shard's output may be NaN), laid out rank-major so
//!    that block p is the part owned by rank p;
//! 3. reduce-scatter (sum, f32) gives each rank the merged history `[T, N, L]` of its own heads.
//!
//! The A2A + combine path is the preferred one; this mode exists to cross-check against vLLM.

use super::act_dtype::{ActDtype, ActivationElem};
use super::chunk_layout::ChunkLayout;
use super::cuda_source::{self, HALF_CONVERSIONS};
use super::exchange::{
    check_rank_count, driver_err, mark_used_after_group, nccl_err, ExchangeError, NcclGroup,
};
use cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, CudaView, DeviceSlice, LaunchConfig, PushKernelArg,
};
use cudarc::nccl::{Comm, ReduceOp};
use std::sync::Arc;

/// CUDA source of the correction kernel (one thread per element of `corrected [D, T, N, L]`).
pub const LSE_CORRECTION_SOURCE: &str = r#"
__device__ __forceinline__ bool lse_valid(float v) { return fabsf(v) <= 3.402823466e38f; }
#define LSE_CORRECT(SUFFIX, TO_F32)                                                                \
extern "C" __global__ void lse_correct_##SUFFIX(const unsigned short* __restrict__ out,         \
                                                const float* __restrict__ lse_all,              \
                                                float* __restrict__ corrected,                  \
                                                float* __restrict__ merged_lse,                 \
                                                int ranks, int rank, long long tokens,          \
                                                int heads, int latent) {                        \
    long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;                          \
    long long total = (long long)ranks * tokens * heads * latent;                              \
    if (idx >= total) return;                                                                  \
    long long l = idx % latent;                                                                \
    long long rest = idx / latent;                                                             \
    long long h = rest % heads;                                                                \
    rest /= heads;                                                                             \
    long long t = rest % tokens;                                                               \
    long long p = rest / tokens;                                                               \
    long long dn = (long long)ranks * heads;                                                   \
    long long g = p * heads + h;                                                               \
    float m = __int_as_float(0xff800000);                                                      \
    bool any = false;                                                                          \
    for (int q = 0; q < ranks; ++q) {                                                          \
        float v = lse_all[((long long)q * tokens + t) * dn + g];                               \
        if (lse_valid(v)) { m = fmaxf(m, v); any = true; }                                     \
    }                                                                                          \
    float s = 0.0f;                                                                            \
    for (int q = 0; q < ranks; ++q) {                                                          \
        float v = lse_all[((long long)q * tokens + t) * dn + g];                               \
        if (lse_valid(v)) s += expf(v - m);                                                    \
    }                                                                                          \
    float star = any ? m + logf(s) : __int_as_float(0xff800000);                               \
    float own = lse_all[((long long)rank * tokens + t) * dn + g];                              \
    float factor = (any && lse_valid(own)) ? expf(own - star) : 0.0f;                          \
    float o = factor == 0.0f ? 0.0f : TO_F32(out[(t * dn + g) * latent + l]);                  \
    corrected[idx] = factor * o;                                                               \
    if (p == rank && l == 0) merged_lse[t * heads + h] = star;                                 \
}
LSE_CORRECT(bf16, bf16_to_f32)
LSE_CORRECT(f16, f16_to_f32)
"#;

/// The full translation unit of the correction kernel.
pub fn lse_correction_source() -> String {
    format!("{HALF_CONVERSIONS}\n{LSE_CORRECTION_SOURCE}")
}

const BLOCK: u32 = 256;

/// Per-rank workspace of the AG+RS mode (allocate once per token bucket).
#[derive(Debug)]
pub struct AgRsBuffers {
    /// `[D, T, D·N]` f32: every rank's lse.
    pub lse_all: CudaSlice<f32>,
    /// `[D, T, N, L]` f32: rescaled partials, block p destined for rank p.
    pub corrected: CudaSlice<f32>,
    /// `[T, N, L]` f32: merged history of this rank's heads (normalized).
    pub merged_out: CudaSlice<f32>,
    /// `[T, N]` f32: merged history lse of this rank's heads (−∞ when no shard has keys).
    pub merged_lse: CudaSlice<f32>,
}

impl AgRsBuffers {
    /// Allocates the workspace for `layout` on `stream`'s device.
    pub fn new(stream: &Arc<CudaStream>, layout: &ChunkLayout) -> Result<Self, ExchangeError> {
        let s = AgRsSizes::of(layout);
        let alloc = |n: usize| {
            stream
                .alloc_zeros::<f32>(n.max(1))
                .map_err(driver_err("allocating the AG+RS workspace"))
        };
        Ok(AgRsBuffers {
            lse_all: alloc(s.lse_all)?,
            corrected: alloc(s.corrected)?,
            merged_out: alloc(s.merged_out)?,
            merged_lse: alloc(s.merged_lse)?,
        })
    }
}

/// Element counts of the AG+RS buffers for one layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AgRsSizes {
    /// `[T, D·N, L]`: the history partial outputs.
    pub out: usize,
    /// `[T, D·N]`: the history partial lses.
    pub lse: usize,
    /// `[D, T, D·N]`: every rank's lse ([`AgRsBuffers::lse_all`]).
    pub lse_all: usize,
    /// `[D, T, N, L]`: the rescaled partials ([`AgRsBuffers::corrected`]).
    pub corrected: usize,
    /// `[T, N, L]`: the merged history ([`AgRsBuffers::merged_out`]).
    pub merged_out: usize,
    /// `[T, N]`: the merged lse ([`AgRsBuffers::merged_lse`]).
    pub merged_lse: usize,
}

impl AgRsSizes {
    /// Sizes for `layout` (its constructor already ruled out overflow of D·N·T·L).
    pub fn of(c: &ChunkLayout) -> Self {
        let dn = c.ranks * c.heads;
        AgRsSizes {
            out: c.tokens * dn * c.latent,
            lse: c.tokens * dn,
            lse_all: c.ranks * c.tokens * dn,
            corrected: c.ranks * c.tokens * c.heads * c.latent,
            merged_out: c.tokens * c.heads * c.latent,
            merged_lse: c.tokens * c.heads,
        }
    }
}

/// The compiled correction kernel for one device.
#[derive(Debug)]
pub struct LseCorrection {
    bf16: CudaFunction,
    f16: CudaFunction,
}

impl LseCorrection {
    /// Compiles the kernel for `stream`'s device.
    pub fn new(stream: &Arc<CudaStream>) -> Result<Self, ExchangeError> {
        let module =
            cuda_source::load_module(stream.context(), "lse_correction", &lse_correction_source())?;
        Ok(LseCorrection {
            bf16: cuda_source::load_function(&module, "lse_correct_bf16")?,
            f16: cuda_source::load_function(&module, "lse_correct_f16")?,
        })
    }

    /// Step 2 on `stream` for rank `rank`: reads `out` and `bufs.lse_all`, writes
    /// `bufs.corrected` and `bufs.merged_lse`.
    pub fn run<E: ActivationElem>(
        &self,
        stream: &Arc<CudaStream>,
        layout: &ChunkLayout,
        rank: usize,
        out: &CudaView<E>,
        bufs: &mut AgRsBuffers,
    ) -> Result<(), ExchangeError> {
        let s = AgRsSizes::of(layout);
        check_ag_rs_buffers(layout, rank, out.len(), bufs)?;
        if layout.dtype != E::DTYPE {
            return Err(ExchangeError::DtypeMismatch {
                layout: layout.dtype,
                got: E::DTYPE,
            });
        }
        if s.corrected == 0 {
            return Ok(());
        }
        let to_i32 = |v: usize| {
            i32::try_from(v).map_err(|_| ExchangeError::Overflow {
                ranks: layout.ranks,
                heads: layout.heads,
                tokens: layout.tokens,
                latent: layout.latent,
            })
        };
        let grid = to_i32(s.corrected.div_ceil(BLOCK as usize))? as u32;
        let (ranks, rank_i, heads, latent) = (
            to_i32(layout.ranks)?,
            to_i32(rank)?,
            to_i32(layout.heads)?,
            to_i32(layout.latent)?,
        );
        let tokens = layout.tokens as i64;
        let func = match E::DTYPE {
            ActDtype::Bf16 => &self.bf16,
            ActDtype::F16 => &self.f16,
        };
        let cfg = LaunchConfig {
            grid_dim: (grid, 1, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut launch = stream.launch_builder(func);
        launch
            .arg(out)
            .arg(&bufs.lse_all)
            .arg(&mut bufs.corrected)
            .arg(&mut bufs.merged_lse)
            .arg(&ranks)
            .arg(&rank_i)
            .arg(&tokens)
            .arg(&heads)
            .arg(&latent);
        // SAFETY: arguments match the kernel signature; buffer lengths were checked against the
        // extents the kernel addresses (out T·D·N·L, lse_all D·T·D·N, corrected D·T·N·L, T·N).
        unsafe { launch.launch(cfg) }
            .map(|_| ())
            .map_err(driver_err("launching the AG+RS lse correction kernel"))
    }
}

fn check_ag_rs_buffers(
    layout: &ChunkLayout,
    rank: usize,
    out_len: usize,
    bufs: &AgRsBuffers,
) -> Result<(), ExchangeError> {
    if rank >= layout.ranks {
        return Err(ExchangeError::RankOutOfRange {
            rank,
            ranks: layout.ranks,
        });
    }
    let s = AgRsSizes::of(layout);
    let checks = [
        ("out [T, D*N, L]", out_len, s.out),
        ("lse_all", bufs.lse_all.len(), s.lse_all),
        ("corrected", bufs.corrected.len(), s.corrected),
        ("merged_out", bufs.merged_out.len(), s.merged_out),
        ("merged_lse", bufs.merged_lse.len(), s.merged_lse),
    ];
    for (buffer, got, needed) in checks {
        if got < needed {
            return Err(ExchangeError::BufferTooSmall {
                buffer,
                rank,
                got,
                needed,
            });
        }
    }
    Ok(())
}

fn check_ag_rs_rank<E>(
    comm: &Comm,
    layout: &ChunkLayout,
    out: &CudaView<E>,
    lse: &CudaView<f32>,
    bufs: &AgRsBuffers,
) -> Result<(), ExchangeError> {
    if comm.world_size() != layout.ranks {
        return Err(ExchangeError::WorldSizeMismatch {
            world: comm.world_size(),
            ranks: layout.ranks,
        });
    }
    check_ag_rs_buffers(layout, comm.rank(), out.len(), bufs)?;
    let s = AgRsSizes::of(layout);
    if lse.len() < s.lse {
        return Err(ExchangeError::BufferTooSmall {
            buffer: "lse [T, D*N]",
            rank: comm.rank(),
            got: lse.len(),
            needed: s.lse,
        });
    }
    let dev = comm.ordinal();
    for (buffer, got) in [
        ("out", out.stream().context().ordinal()),
        ("lse", lse.stream().context().ordinal()),
        ("AG+RS workspace", bufs.lse_all.stream().context().ordinal()),
    ] {
        if got != dev {
            return Err(ExchangeError::WrongDevice {
                buffer,
                rank: comm.rank(),
                got,
                expected: dev,
            });
        }
    }
    Ok(())
}

/// Steps 1–3 for one rank (one process or thread per GPU), all on the communicator's stream.
pub fn ag_rs_rank<E: ActivationElem>(
    comm: &Comm,
    correction: &LseCorrection,
    layout: &ChunkLayout,
    out: &CudaView<E>,
    lse: &CudaView<f32>,
    bufs: &mut AgRsBuffers,
) -> Result<(), ExchangeError> {
    check_ag_rs_rank(comm, layout, out, lse, bufs)?;
    let s = AgRsSizes::of(layout);
    if s.corrected == 0 {
        return Ok(());
    }
    let me = Some(comm.rank());
    let stream = comm.stream();
    comm.all_gather(
        &lse.slice(0..s.lse),
        &mut bufs.lse_all.slice_mut(0..s.lse_all),
    )
    .map_err(nccl_err("ncclAllGather of the history lse", me))?;
    correction.run(&stream, layout, comm.rank(), out, bufs)?;
    comm.reduce_scatter(
        &bufs.corrected.slice(0..s.corrected),
        &mut bufs.merged_out.slice_mut(0..s.merged_out),
        &ReduceOp::Sum,
    )
    .map_err(nccl_err("ncclReduceScatter of the corrected history", me))?;
    Ok(())
}

/// Steps 1–3 for every rank of a `Comm::from_devices` set from one thread: one group for the
/// all-gathers, the correction kernels, one group for the reduce-scatters.
pub fn ag_rs_single_process<E: ActivationElem>(
    comms: &[Comm],
    corrections: &[LseCorrection],
    layout: &ChunkLayout,
    outs: &[CudaView<E>],
    lses: &[CudaView<f32>],
    bufs: &mut [AgRsBuffers],
) -> Result<(), ExchangeError> {
    let d = comms.len();
    check_rank_count("correction kernels", corrections.len(), d)?;
    check_rank_count("history outputs", outs.len(), d)?;
    check_rank_count("history lse buffers", lses.len(), d)?;
    check_rank_count("AG+RS workspaces", bufs.len(), d)?;
    for (((comm, out), lse), b) in comms.iter().zip(outs).zip(lses).zip(bufs.iter()) {
        check_ag_rs_rank(comm, layout, out, lse, b)?;
    }
    let s = AgRsSizes::of(layout);
    if s.corrected == 0 {
        return Ok(());
    }
    let group = NcclGroup::start("the lse all-gather (all ranks)")?;
    for ((comm, lse), b) in comms.iter().zip(lses).zip(bufs.iter_mut()) {
        comm.all_gather(&lse.slice(0..s.lse), &mut b.lse_all.slice_mut(0..s.lse_all))
            .map_err(nccl_err(
                "ncclAllGather of the history lse",
                Some(comm.rank()),
            ))?;
    }
    group.end()?;
    for ((comm, lse), b) in comms.iter().zip(lses).zip(bufs.iter_mut()) {
        mark_used_after_group(&comm.stream(), lse, &mut b.lse_all);
    }
    for (((comm, corr), out), b) in comms.iter().zip(corrections).zip(outs).zip(bufs.iter_mut()) {
        corr.run(&comm.stream(), layout, comm.rank(), out, b)?;
    }
    let group = NcclGroup::start("the history reduce-scatter (all ranks)")?;
    for (comm, b) in comms.iter().zip(bufs.iter_mut()) {
        let AgRsBuffers {
            corrected,
            merged_out,
            ..
        } = b;
        comm.reduce_scatter(
            &corrected.slice(0..s.corrected),
            &mut merged_out.slice_mut(0..s.merged_out),
            &ReduceOp::Sum,
        )
        .map_err(nccl_err(
            "ncclReduceScatter of the corrected history",
            Some(comm.rank()),
        ))?;
    }
    group.end()?;
    for (comm, b) in comms.iter().zip(bufs.iter_mut()) {
        let AgRsBuffers {
            corrected,
            merged_out,
            ..
        } = b;
        mark_used_after_group(&comm.stream(), corrected, merged_out);
    }
    Ok(())
}
