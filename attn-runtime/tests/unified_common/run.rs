//! The poisoned CPU-run check, from `attn_runtime::testing`.

#![allow(unused_imports)]

pub use attn_runtime::testing::cpu_case::*;
