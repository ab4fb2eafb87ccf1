//! attn-runtime: NVRTC JIT, content-keyed cache, typed launches, tensors, and the ops.

pub mod ops;
