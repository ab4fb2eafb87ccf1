//! The DSL kernels the runtime ships.

pub mod proof;
