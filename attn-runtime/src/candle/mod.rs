//! The ops on candle tensors (feature `candle`; running them needs `candle-cuda`): unified
//! attention (paged or dense, varlen, every option of the op, user variants) and MLA-DCP
//! decode (one rank) as candle custom ops on the tensors' own device and stream.
//!
//! The host side (this feature alone) checks each candle tensor against the op's contract
//! (rank, extents, strides, dtype, device) and maps every failure, and every error of the op
//! itself, into a [`candle_core::Error`] that keeps the typed error: [`op_error`] gets it
//! back. The device side (`candle-cuda`) reads the tensors' CUDA storage in place — no copy
//! — and launches on the candle device's stream.

mod error;
mod tensor_check;
mod unified_call;

#[cfg(feature = "candle-cuda")]
mod mla;
#[cfg(feature = "candle-cuda")]
mod storage_view;
#[cfg(feature = "candle-cuda")]
mod unified;

pub use error::{op_error, CandleOpError, TensorError};
pub use tensor_check::{check_mla, check_unified, MlaShapes, UnifiedShapes};
pub use unified_call::{CandleCausal, CandleMmRanges, CandleVariant, HostMeta, UnifiedCall};

#[cfg(feature = "candle-cuda")]
pub use mla::{CandleMlaDecode, MlaCall};
#[cfg(feature = "candle-cuda")]
pub use unified::CandleUnifiedAttention;
