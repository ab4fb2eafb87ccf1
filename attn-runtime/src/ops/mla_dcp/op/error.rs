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
    /// `dcp_rank` is not below `dcp_size`.
    #[error("dcp_rank = {rank} is outside 0..{dcp_size}")]
    Rank {
        /// The rank given.
        rank: u32,
        /// DCP world size D.
        dcp_size: u32,
    },
    /// A capacity of the context is 0.
    #[error("{what} = 0; the context needs at least 1")]
    ZeroCapacity {
        /// Name of the capacity.
        what: &'static str,
    },
    /// A bucket capacity exceeds what the kernels' `i32` indexing allows.
    #[error("{what} = {got} exceeds {max}: the kernels index `[T, D·N, 576]` and the metadata with i32, so no call could use a larger bucket")]
    BucketTooLarge {
        /// Name of the capacity.
        what: &'static str,
        /// Its value.
        got: usize,
        /// The largest allowed.
        max: usize,
    },
    /// The call is larger than the context's bucket.
    #[error("the call has {got} {what} but the context was built for at most {max}; build a context for a larger bucket")]
    OverCapacity {
        /// What is counted (tokens, requests, ...).
        what: &'static str,
        /// The call's count.
        got: usize,
        /// The context's capacity.
        max: usize,
    },
    /// An NCCL exchange mode with D > 1 but no communicator.
    #[error("{mode:?} exchange with dcp_size = {dcp_size} needs an NCCL communicator; pass one to MlaDcpContext::new")]
    NeedsComm {
        /// The exchange mode.
        mode: ExchangeMode,
        /// DCP world size D.
        dcp_size: u32,
    },
    /// The communicator's rank or world size differs from the context's.
    #[error("the communicator is rank {got_rank} of {got_world}, but the context is rank {rank} of dcp_size = {dcp_size}")]
    CommGeometry {
        /// The communicator's rank.
        got_rank: usize,
        /// The communicator's world size.
        got_world: usize,
        /// The context's rank.
        rank: u32,
        /// The context's DCP world size.
        dcp_size: u32,
    },
    /// The communicator runs on another stream than the context's main stream.
    #[error("the communicator's stream is not the context's main stream; create the Comm on the stream the op runs on")]
    CommStream,
    /// The exchange mode needs the caller's `q_all` but the call passes none.
    #[error("{mode:?} exchange needs the caller's q_all [D, T, N, 576]; args.q_all is None")]
    NeedsQAll {
        /// The exchange mode.
        mode: ExchangeMode,
    },
    /// A simulated exchange mode was used with a single-rank call.
    #[error("{mode:?} exchange must run over all ranks at once: call simulated_decode (Simulated) or the stage functions")]
    NotSingleRank {
        /// The exchange mode.
        mode: ExchangeMode,
    },
    /// `simulated_decode` got a per-rank list of the wrong length.
    #[error("simulated_decode got {got} {what}, expected one per rank (dcp_size = {expected})")]
    RankCount {
        /// What the list holds.
        what: &'static str,
        /// Its length.
        got: usize,
        /// DCP world size D.
        expected: usize,
    },
    /// The simulated contexts are not in rank order.
    #[error("simulated context {index} is rank {got}, expected rank {index} (contexts must be in rank order)")]
    RankOrder {
        /// Position of the context in the list.
        index: usize,
        /// Its rank.
        got: u32,
    },
    /// A simulated context has another main stream than the first.
    #[error("simulated contexts must share one main stream (context {index} has another), so that the exchange copies are ordered")]
    SharedStream {
        /// Position of the context in the list.
        index: usize,
    },
    /// The simulated contexts or calls differ in a geometry value.
    #[error("simulated contexts disagree on {what}; all ranks of a step need the same geometry")]
    Mismatch {
        /// The value they disagree on.
        what: &'static str,
    },
    /// A buffer is shorter than its shape needs.
    #[error("`{buffer}` holds {got} elements but needs at least {needed} ({shape})")]
    BufferTooSmall {
        /// Name of the buffer.
        buffer: &'static str,
        /// Elements it holds.
        got: usize,
        /// Elements it needs.
        needed: usize,
        /// Its shape, in words.
        shape: String,
    },
    /// A buffer's element count overflows `usize`.
    #[error("`{buffer}`: its element count does not fit in usize")]
    SizeOverflow {
        /// Name of the buffer.
        buffer: &'static str,
    },
    /// A host metadata copy and its device buffer have different lengths.
    #[error("{what}: the host copy has {host} values but the device buffer {device}; the host copy must mirror the device data")]
    HostDeviceMismatch {
        /// Name of the metadata argument.
        what: &'static str,
        /// Values in the host copy.
        host: usize,
        /// Elements in the device buffer.
        device: usize,
    },
    /// A request's block-table row reaches past the end of the table.
    #[error("block_table row {request} needs {needed} columns (row stride {stride}) past the end of the table")]
    BlockTableRowShort {
        /// Request index (row).
        request: usize,
        /// Columns the request needs.
        needed: usize,
        /// Row stride, in entries.
        stride: usize,
    },
    /// A block id a request uses is not a block of the latent cache.
    #[error("block_table[{request}, {column}] = {got} is outside the latent cache's blocks [0, {num_blocks})")]
    BlockIdOutOfRange {
        /// Request index (row).
        request: usize,
        /// Logical block index (column).
        column: usize,
        /// The block id found there.
        got: i32,
        /// Blocks in the latent cache.
        num_blocks: usize,
    },
    /// The latent cache is not a whole number of blocks.
    #[error("latent cache has {len} elements, not a whole number of blocks of block_size · 576 = {block_elems}")]
    CacheShape {
        /// Elements of the latent cache.
        len: usize,
        /// Elements per block (`block_size · 576`).
        block_elems: usize,
    },
    /// A buffer lives on another device than the context.
    #[error("`{buffer}` lives on device {got} but the context runs on device {expected}")]
    WrongDevice {
        /// Name of the buffer.
        buffer: &'static str,
        /// Its device ordinal.
        got: usize,
        /// The context's device ordinal.
        expected: usize,
    },
    /// `VupPath::Fused` over a group larger than the fused kernel merges.
    #[error("VupPath::Fused merges the parts of at most {max} ranks (an accumulator a part), but dcp_size = {dcp_size}; use VupPath::Cublas, or the AgRs exchange (whose merge sees one part of history)")]
    FusedGroupTooLarge {
        /// The context's group size.
        dcp_size: u32,
        /// The largest group the fused kernel takes.
        max: u32,
    },
    /// A stage function was called out of the §9.4 order.
    #[error("{stage} was called out of order: {why}")]
    StageOrder {
        /// The stage function.
        stage: &'static str,
        /// Why the call is out of order.
        why: &'static str,
    },
    /// Stage timing was asked of a context built without profiling.
    #[error("stage timing was requested but the context was built with profile = false")]
    NotProfiling,
    /// No launch plan could be made for the step.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// Building or loading a DSL kernel failed.
    #[error(transparent)]
    Kernel(#[from] MlaKernelError),
    /// A kernel launch failed.
    #[error(transparent)]
    Launch(#[from] LaunchError),
    /// The history exchange or Q all-gather failed.
    #[error(transparent)]
    Exchange(#[from] ExchangeError),
    /// The V-up GEMM failed.
    #[error(transparent)]
    Vup(#[from] VupError),
    /// Creating or ordering the streams failed.
    #[error(transparent)]
    Stream(#[from] StreamError),
    /// Compiling or loading the hand-written CUDA plumbing kernels failed.
    #[error(transparent)]
    Source(#[from] CudaSourceError),
    /// Capturing or launching a CUDA graph failed.
    #[error(transparent)]
    Graph(#[from] crate::graph::GraphError),
    /// A CUDA driver call failed.
    #[error("CUDA driver call failed while {during}: {source}")]
    Driver {
        /// What the op was doing.
        during: &'static str,
        /// The driver error.
        source: DriverError,
    },
}

impl MlaError {
    pub(crate) fn driver(during: &'static str) -> impl FnOnce(DriverError) -> MlaError {
        move |source| MlaError::Driver { during, source }
    }
}
