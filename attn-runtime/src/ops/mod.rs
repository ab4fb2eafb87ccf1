//! The attention ops built on the DSL kernels and on cudarc (cuBLAS, NCCL, streams), with
//! their host-side metadata.

pub mod host_launch;
pub mod mla_dcp;
pub mod unified_attention;
