//! Attention variants written as DSL code: each is a `#[variant]` module whose `MASK` /
//! `BOUNDS` device functions plug into the shipped `unified_attention` kernel body (see
//! `docs/writing-a-variant.md`), so a new masked-attention variant is two short functions,
//! checked when this crate compiles, not a copy of the kernel.
//!
//! - [`packed_documents`]: several documents packed into one sequence; a token attends
//!   causally within its own document only.
//! - [`prefix_lm`]: bidirectional attention over a per-sequence prefix, causal after it.
//! - [`sink_window`]: attention sinks + sliding window, two tile ranges per q-block.
//! - [`tree_mask`]: speculative-decoding tree attention from an ancestor matrix (bool aux).
//! - [`document_window`]: packed documents with a sliding window inside each document.

pub mod document_window;
pub mod packed_documents;
pub mod prefix_lm;
pub mod sink_window;
pub mod tree_mask;

pub use attn_runtime::ops::unified_attention::variant::Variant;

/// Every example variant with representative settings, by name (benches, the CLI, tests).
pub fn all() -> Vec<(&'static str, Variant)> {
    vec![
        ("packed_documents", packed_documents::variant()),
        ("prefix_lm", prefix_lm::variant()),
        ("sink_window", sink_window::variant(4, 128)),
        ("tree_mask", tree_mask::variant(16)),
        ("document_window", document_window::variant(64)),
    ]
}
