//! CUDA C++ emission: one self-contained `extern "C" __global__` function per
//! specialization plus an in-memory prelude header (no system includes).
//!
//! # Execution model of the generated code
//! - A program instance is one thread block of `32 · num_warps` threads.
//! - Scalars are replicated: every thread computes them, so control flow (which only ever
//!   branches on scalars) is uniform and `__syncthreads()` is legal anywhere.
//! - A tile is spread over the threads cyclically by its row-major flat index (see
//!   [`tile_map`]) in fully unrolled register arrays; elementwise ops, loads, stores,
//!   `arange`, splats and `unsqueeze` never move data between threads.
//! - Index, pointer and mask tiles (pure functions of the element's coordinates and of
//!   scalars: `arange`, splats, `unsqueeze`, `broadcast` and elementwise ops over them) get
//!   no registers: each consumer recomputes the element it needs (see `recompute`), so
//!   their broadcasts cost integer arithmetic, not a shared-memory round trip.
//! - `broadcast` of other tiles, `trans`, `reduce` and `dot` exchange data through one dynamic
//!   shared-memory scratch buffer (`attn_smem`), sized to the largest need of any such op
//!   ([`CudaKernel::shared_bytes`]) and guarded by barriers before and after every write.
//! - `dot` on bf16/f16 runs `mma.sync.m16n8k16` with f32 accumulation (see [`dot`]).
//!
//! # Numerics (the CPU executor's rules)
//! bf16/f16 values live in f32 registers and are rounded (nearest even) after every op;
//! f32 `+ - * /` and `sqrt` use the `__f*_rn` intrinsics so NVRTC's default FMA contraction
//! cannot change results; integer arithmetic wraps; shifts take their amount modulo the
//! width; `min`/`max` return the non-NaN operand (`fminf`/`fmaxf`); float→int casts truncate
//! and saturate (NaN → 0); reductions run in ascending index order from the first element.
//! Transcendentals are the CUDA `expf`/`logf`/... (≤ 2 ulp), and tensor-core dots sum each
//! 16-wide K step in hardware order, so those two are close to, not identical with, the CPU.
//!
//! Global-memory writes of one program are not ordered against its other threads' reads of
//! the same addresses (no kernel needs that: each program reads its inputs and writes
//! disjoint outputs).

mod c_types;
mod describe;
mod dot;
mod elem_index;
mod elementwise;
mod emitter;
mod exchange;
mod fragment_ops;
mod memory;
mod mma_map;
mod names;
mod operand_fragments;
mod recompute;
mod staged_load;
pub mod tile_map;
mod writer;

use crate::ir::{Function, Layout, Param};

/// Generated CUDA for one specialization, ready for NVRTC.
#[derive(Clone, Debug, PartialEq)]
pub struct CudaKernel {
    /// The `extern "C"` entry point name (unique per specialization).
    pub entry: String,
    /// The kernel translation unit; it includes [`PRELUDE_NAME`] and nothing else.
    pub source: String,
    /// Content hash (hex blake3) of source + prelude + compiler version.
    pub hash: String,
    /// Runtime parameters in launch order.
    pub params: Vec<Param>,
    /// Threads per block (32 · num_warps).
    pub block_threads: u32,
    /// Dynamic shared memory the kernel needs, in bytes.
    pub shared_bytes: u32,
}

/// Name under which [`PRELUDE`] must be handed to NVRTC as an in-memory header.
pub const PRELUDE_NAME: &str = "attn_prelude.cuh";
/// Device helpers the generated kernels use (bf16/f16 types, mma wrappers, math).
pub const PRELUDE: &str = include_str!("prelude.cuh");

/// Why a function could not be turned into CUDA.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CodegenError {
    #[error("codegen: {0}")]
    Unsupported(String),
    #[error("codegen: num_warps = {0}; allowed: 1..=32 (at most 1024 threads per block)")]
    NumWarps(u32),
    #[error("codegen: value %{0} is used before it is defined")]
    UndefinedValue(u32),
    #[error("codegen: malformed IR: {0}")]
    Malformed(String),
    #[error(
        "codegen: kernel `{kernel}` needs {needed} bytes of shared memory; at most {limit} bytes \
         (227 KiB) fit one block on any supported GPU"
    )]
    SharedMemory {
        kernel: String,
        needed: usize,
        limit: usize,
    },
}

/// Emits CUDA for a specialized kernel.
///
/// Tiles whose layout is still unassigned (IR built by hand, not through
/// [`crate::passes::optimize`]) get the layout pass's layouts first, so the emitted code is
/// the same whichever way the IR arrived.
pub fn emit_cuda(f: &Function) -> Result<CudaKernel, CodegenError> {
    let unassigned = f
        .values
        .iter()
        .any(|v| !v.ty.is_scalar() && v.ty.layout == Layout::Unassigned);
    if unassigned {
        let mut laid_out = f.clone();
        crate::passes::layout::run(&mut laid_out);
        return emit_laid_out(&laid_out);
    }
    emit_laid_out(f)
}

fn emit_laid_out(f: &Function) -> Result<CudaKernel, CodegenError> {
    let mut em = emitter::Emitter::new(f)?;
    let entry = names::sanitize(&f.name);
    let header = format!(
        "Generated by attn-dsl {} from kernel `{}`: {} threads per block.",
        env!("CARGO_PKG_VERSION"),
        f.name,
        em.threads
    );
    em.emit_kernel(&entry, &header)?;
    if em.scratch_bytes > emitter::MAX_SHARED_BYTES {
        return Err(CodegenError::SharedMemory {
            kernel: f.name.clone(),
            needed: em.scratch_bytes,
            limit: emitter::MAX_SHARED_BYTES,
        });
    }
    let (threads, shared) = (em.threads as u32, em.scratch_bytes as u32);
    let source = em.w.finish();
    Ok(CudaKernel {
        hash: content_hash(&source),
        entry,
        source,
        params: f.params.clone(),
        block_threads: threads,
        shared_bytes: shared,
    })
}

/// Hex blake3 of source ++ prelude ++ compiler version: the runtime's cache key basis.
pub fn content_hash(source: &str) -> String {
    let mut h = blake3::Hasher::new();
    h.update(source.as_bytes());
    h.update(PRELUDE.as_bytes());
    h.update(env!("CARGO_PKG_VERSION").as_bytes());
    h.finalize().to_hex().to_string()
}
