//! attn-runtime: NVRTC JIT, content-keyed cache, typed launches, tensors, and the ops.

pub mod cache;
pub mod jit;
pub mod launch;
pub mod tensor;
pub mod timing;
pub mod parity;
pub mod problem;
pub mod registry;
pub mod bench;
pub mod cli;
