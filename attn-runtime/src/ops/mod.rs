//! The attention ops built on the DSL kernels and on cudarc (cuBLAS, NCCL, streams).

pub mod mla_dcp;
