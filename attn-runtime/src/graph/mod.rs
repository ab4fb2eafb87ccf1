//! CUDA-graph capture of the ops (DESIGN §3.7): record one step's stream work once, replay
//! it with a single launch. A replay runs no host code of the op, so everything a step
//! reads per call must already live in device buffers at fixed addresses, and nothing the
//! op does during capture may synchronize, allocate or copy from pageable host memory.
//!
//! [`capture`] checks what would silently break a capture before it begins (the legacy
//! default stream cannot be captured; cudarc's per-buffer event tracking would wait on
//! events recorded outside the capture) and returns a [`StepGraph`] to replay. The ops
//! build on it: `ops::unified_attention::graph` and `ops::mla_dcp::graph`.

mod capture;
mod error;

pub use capture::{capture, is_capturing, StepGraph};
pub use error::GraphError;
