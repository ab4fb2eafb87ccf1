//! Typed errors of the candle integration and their mapping into candle's error type.

use candle_core::DType;

use crate::ops::mla_dcp::op::MlaError;
use crate::ops::unified_attention::gpu::AttnError;
use crate::ops::unified_attention::paged_cache::PagedCacheError;

/// What is wrong with one tensor argument.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TensorError {
    #[error("has shape {got:?}; expected rank {rank} ({what})")]
    Rank {
        got: Vec<usize>,
        rank: usize,
        what: &'static str,
    },
    #[error("has {dim} = {got}; expected {expected} ({why})")]
    Extent {
        dim: &'static str,
        got: usize,
        expected: usize,
        why: &'static str,
    },
    #[error("has dtype {got:?}; expected {expected}")]
    DType { got: DType, expected: &'static str },
    #[error("has strides {strides:?} for shape {shape:?}; {needed}")]
    Strides {
        shape: Vec<usize>,
        strides: Vec<usize>,
        needed: &'static str,
    },
    #[error("lives on {got}; the op runs on {expected}")]
    Device { got: String, expected: String },
    #[error("has {device} values but its host copy has {host}; the host copy must mirror it")]
    HostCopy { device: usize, host: usize },
}

/// Why a candle call of an op did not run.
#[derive(Debug, thiserror::Error)]
pub enum CandleOpError {
    #[error("{op}: tensor `{tensor}` {error}")]
    Tensor {
        op: &'static str,
        tensor: &'static str,
        error: TensorError,
    },
    #[error("{op} runs on CUDA tensors only; `{tensor}` is on the CPU")]
    NeedsCuda {
        op: &'static str,
        tensor: &'static str,
    },
    #[error("unified attention: {0}")]
    Attention(#[from] AttnError),
    #[error("unified attention: the K/V tensors do not form a paged cache: {0}")]
    Cache(#[from] PagedCacheError),
    #[error("MLA decode: {0}")]
    Mla(#[from] MlaError),
}

impl From<CandleOpError> for candle_core::Error {
    /// candle's `Cuda` variant boxes a `std::error::Error`, so the typed error survives
    /// (see [`op_error`]).
    fn from(e: CandleOpError) -> Self {
        candle_core::Error::Cuda(Box::new(e)).bt()
    }
}

/// The typed error inside a candle error produced by this integration (through candle's
/// backtrace and context wrappers), if it is one.
pub fn op_error(e: &candle_core::Error) -> Option<&CandleOpError> {
    use candle_core::Error as E;
    match e {
        E::Cuda(inner) => inner.downcast_ref::<CandleOpError>(),
        E::WithBacktrace { inner, .. } | E::Context { inner, .. } | E::WithPath { inner, .. } => {
            op_error(inner)
        }
        // `Result::context` boxes the candle error itself.
        E::WrappedContext { wrapped, .. } => {
            wrapped.downcast_ref::<CandleOpError>().or_else(|| {
                wrapped
                    .downcast_ref::<candle_core::Error>()
                    .and_then(op_error)
            })
        }
        _ => None,
    }
}
