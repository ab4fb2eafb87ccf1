//! Attention variants written as DSL code: each is a `MASK` / `BOUNDS` device-function pair
//! that plugs into the shipped `unified_attention` kernel body (see that kernel's calling
//! convention), so a new masked-attention variant is two short functions, not a copy of
//! the kernel.
//!
//! - [`packed_documents`]: several documents packed into one sequence; a token attends
//!   causally within its own document only.
//! - [`prefix_lm`]: bidirectional attention over a per-sequence prefix, causal after it.

pub mod packed_documents;
pub mod prefix_lm;
pub mod variant;

pub use variant::Variant;
