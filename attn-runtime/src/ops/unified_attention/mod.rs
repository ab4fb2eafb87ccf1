//! Unified attention (spec `unified_attention.md`): varlen, paged-KV attention with
//! sliding window, multimodal prefix ranges, R-SWA, chunked attention, softcap, sinks,
//! ALiBi, 2D and 3D paths. This module holds the host-side pieces: the mask predicate,
//! the tile-loop bounds, the constexpr configuration and the input validation; the launch
//! plan shared by the backends; the CPU-executor backend; and the GPU op (paged cache,
//! call arguments, context and launch).

#![warn(missing_docs)]

pub mod args;
pub mod bounds;
pub mod config;
pub mod cpu;
pub mod gpu;
pub mod graph;
pub mod limits;
pub mod mask;
pub mod paged_cache;
pub mod plan;
pub mod validate;
pub mod variant;
pub mod variant_args;
pub mod variant_check;
pub mod variant_dense_mask;
