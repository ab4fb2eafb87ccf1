//! attn-runtime: NVRTC JIT, content-keyed cache, typed launches, tensors, and the ops.

pub mod bench;
pub mod cache;
#[cfg(feature = "candle")]
pub mod candle;
pub mod cli;
pub mod graph;
pub mod jit;
pub mod kernels;
pub mod launch;
pub mod ops;
pub mod parity;
pub mod problem;
pub mod reference;
pub mod registry;
pub mod split_mix64;
pub mod tensor;
pub mod testing;
pub mod timing;
