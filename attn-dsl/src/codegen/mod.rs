//! CUDA C++ emission: one self-contained `extern "C" __global__` function per
//! specialization plus an in-memory prelude header (no system includes).

use crate::ir::{Function, Param};

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
pub const PRELUDE: &str = "";

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CodegenError {
    #[error("codegen: {0}")]
    Unsupported(String),
}

/// Emits CUDA for a specialized kernel.
pub fn emit_cuda(f: &Function) -> Result<CudaKernel, CodegenError> {
    Err(CodegenError::Unsupported(format!("emitter not implemented ({})", f.name)))
}
