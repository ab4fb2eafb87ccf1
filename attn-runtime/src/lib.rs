//! attn-runtime: NVRTC JIT, content-keyed cache, typed launches, tensors, and the ops.

pub mod kernels;
pub mod ops;
pub mod reference;
