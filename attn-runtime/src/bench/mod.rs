//! Benchmark support: floors from the performance spec, result tables and JSON, and
//! (feature `gpu`) a criterion `Measurement` that times with CUDA events.

pub mod floor;
#[cfg(feature = "gpu")]
pub mod measurement;
pub mod report;
pub mod span;
pub mod unified;

pub use floor::{Floor, HBM_BYTES_PER_S, WGMMA_FLOPS_PER_S};
pub use report::{render_table, write_json, BenchResult};
pub use span::Span;
