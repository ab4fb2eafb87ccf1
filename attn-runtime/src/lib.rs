//! attn-runtime: NVRTC JIT, content-keyed cache, typed launches, tensors, and the ops.

pub mod cache;
pub mod jit;
pub mod launch;
