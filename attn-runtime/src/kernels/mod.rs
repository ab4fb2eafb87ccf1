//! The DSL kernels of the ops (DESIGN §2): each file is one `#[module]` of tile programs.

pub mod mla_dcp;
