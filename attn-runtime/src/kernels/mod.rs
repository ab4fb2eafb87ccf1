//! The DSL kernels the runtime ships, and how their modules are loaded at run time.

pub mod bounds_probe;
pub mod dsl_module;
pub mod mla_dcp;
pub mod proof;
pub mod specialization_cache;
pub mod unified_attention;
