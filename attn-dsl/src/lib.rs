//! attn-dsl: the tile compiler as a library.
//!
//! Pipeline (DESIGN §3): Rust-syntax source ─syn─▶ [`ast`] ─[`specialize`]─▶ [`ir`]
//! (typed SSA, constexprs bound) ─[`passes`]─▶ [`interp`] (CPU executor) or [`codegen`]
//! (CUDA C++ for NVRTC).

pub mod ast;
pub mod codegen;
pub mod driver;
pub mod frontend;
pub mod interp;
pub mod ir;
pub mod kernel;
pub mod passes;
pub mod specialize;
pub mod template;

pub use specialize::{specialize, Binding, ConstValue, DslError, Specialized};
