//! MLA decode with decode context parallelism (spec `mla_dcp.md`): the DCP token sharding
//! metadata, the N-way LSE merge, and the GPU plumbing around the DSL kernels — V-up as one
//! strided-batched GEMM, the NCCL history exchange and Q all-gather, and the fork/join stream
//! orchestration.

#![warn(missing_docs)]

pub mod act_dtype;
pub mod ag_rs;
pub mod chunk_layout;
pub mod cpu;
pub mod cuda_source;
pub mod exchange;
pub mod graph;
mod launches;
pub mod merge;
pub mod metadata;
pub mod op;
pub mod plan;
pub mod streams;
pub mod vup;
