//! Errors of the MLA-DCP decode op: every failure is typed, names the bad value and what is
//! allowed, and none of them panics.

use super::super::cuda_source::CudaSourceError;
use super::super::exchange::ExchangeError;
use super::super::plan::PlanError;
use super::super::streams::StreamError;
use super::super::vup::VupError;
use super::config::ExchangeMode;
use crate::kernels::mla_dcp::MlaKernelError;
use crate::launch::LaunchError;
use cudarc::driver::DriverError;

/// Why a context could not be built or a decode call was not (fully) enqueued.
#[derive(Debug, thiserror::Error)]
pub enum MlaError {
    #[error("dcp_rank = {rank} is outside 0..{dcp_size}")]
    Rank { rank: u32, dcp_size: u32 },
    #[error("{what} = 0; the context needs at least 1")]
    ZeroCapacity { what: &'static str },
    #[error("{what} = {got} exceeds {max}: the kernels index `[T, D·N, 576]` and the metadata with i32, so no call could use a larger bucket")]
    BucketTooLarge {
        what: &'static str,
        got: usize,
        max: usize,
    },
    #[error("the call has {got} {what} but the context was built for at most {max}; build a context for a larger bucket")]
    OverCapacity {
        what: &'static str,
        got: usize,
        max: usize,
    },
    #[error("{mode:?} exchange with dcp_size = {dcp_size} needs an NCCL communicator; pass one to MlaDcpContext::new")]
    NeedsComm { mode: ExchangeMode, dcp_size: u32 },
    #[error("the communicator is rank {got_rank} of {got_world}, but the context is rank {rank} of dcp_size = {dcp_size}")]
    CommGeometry {
        got_rank: usize,
        got_world: usize,
        rank: u32,
        dcp_size: u32,
    },
    #[error("the communicator's stream is not the context's main stream; create the Comm on the stream the op runs on")]
    CommStream,
    #[error("{mode:?} exchange needs the caller's q_all [D, T, N, 576]; args.q_all is None")]
    NeedsQAll { mode: ExchangeMode },
    #[error("{mode:?} exchange must run over all ranks at once: call simulated_decode (Simulated) or the stage functions")]
    NotSingleRank { mode: ExchangeMode },
    #[error("simulated_decode got {got} {what}, expected one per rank (dcp_size = {expected})")]
    RankCount {
        what: &'static str,
        got: usize,
        expected: usize,
    },
    #[error("simulated context {index} is rank {got}, expected rank {index} (contexts must be in rank order)")]
    RankOrder { index: usize, got: u32 },
    #[error("simulated contexts must share one main stream (context {index} has another), so that the exchange copies are ordered")]
    SharedStream { index: usize },
    #[error("simulated contexts disagree on {what}; all ranks of a step need the same geometry")]
    Mismatch { what: &'static str },
    #[error("`{buffer}` holds {got} elements but needs at least {needed} ({shape})")]
    BufferTooSmall {
        buffer: &'static str,
        got: usize,
        needed: usize,
        shape: String,
    },
    #[error("`{buffer}`: its element count does not fit in usize")]
    SizeOverflow { buffer: &'static str },
    #[error("{what}: the host copy has {host} values but the device buffer {device}; the host copy must mirror the device data")]
    HostDeviceMismatch {
        what: &'static str,
        host: usize,
        device: usize,
    },
    #[error("block_table row {request} needs {needed} columns (row stride {stride}) past the end of the table")]
    BlockTableRowShort {
        request: usize,
        needed: usize,
        stride: usize,
    },
    #[error("block_table[{request}, {column}] = {got} is outside the latent cache's blocks [0, {num_blocks})")]
    BlockIdOutOfRange {
        request: usize,
        column: usize,
        got: i32,
        num_blocks: usize,
    },
    #[error("latent cache has {len} elements, not a whole number of blocks of block_size · 576 = {block_elems}")]
    CacheShape { len: usize, block_elems: usize },
    #[error("`{buffer}` lives on device {got} but the context runs on device {expected}")]
    WrongDevice {
        buffer: &'static str,
        got: usize,
        expected: usize,
    },
    #[error("{stage} was called out of order: {why}")]
    StageOrder {
        stage: &'static str,
        why: &'static str,
    },
    #[error("stage timing was requested but the context was built with profile = false")]
    NotProfiling,
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error(transparent)]
    Kernel(#[from] MlaKernelError),
    #[error(transparent)]
    Launch(#[from] LaunchError),
    #[error(transparent)]
    Exchange(#[from] ExchangeError),
    #[error(transparent)]
    Vup(#[from] VupError),
    #[error(transparent)]
    Stream(#[from] StreamError),
    #[error(transparent)]
    Source(#[from] CudaSourceError),
    #[error(transparent)]
    Graph(#[from] crate::graph::GraphError),
    #[error("CUDA driver call failed while {during}: {source}")]
    Driver {
        during: &'static str,
        source: DriverError,
    },
}

impl MlaError {
    pub(crate) fn driver(during: &'static str) -> impl FnOnce(DriverError) -> MlaError {
        move |source| MlaError::Driver { during, source }
    }
}
