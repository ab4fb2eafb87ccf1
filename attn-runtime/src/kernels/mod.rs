//! The DSL kernels the runtime ships.

pub mod mla_dcp;
pub mod proof;
