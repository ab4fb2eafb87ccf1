//! Proc-macro front end of attn-dsl. The compiler itself lives in `attn-dsl`; this crate
//! parses attributes, runs the compiler inside rustc and turns its diagnostics into
//! compile errors at the right spans.
mod render;
