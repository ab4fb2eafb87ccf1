//! Shared fixtures of the unified-attention CPU tests (now exported by the library as
//! `attn_runtime::testing`, so user crates reach them without `#[path]`).

#![allow(dead_code, unused_imports)]

pub mod run;

pub use attn_runtime::testing::paged::*;
