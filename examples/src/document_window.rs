//! Documents + sliding window: packed documents (see `packed_documents`) where a token
//! also sees at most the last `DOC_WINDOW` keys of its own document.
//!
//! `aux` row: the document id of every key, contiguous documents, −1 = padding. The bounds
//! start at the later of the block's window start and its first query's document start.

use attn_dsl_macros::variant;
use attn_runtime::ops::unified_attention::variant::{AuxDtype, AuxRow, Variant};

#[variant(mask = doc_window_mask, bounds = doc_window_bounds)]
pub mod document_window {
    /// `doc[q] == doc[k] >= 0 ∧ k ≤ q ∧ q − k < DOC_WINDOW`.
    #[device(require(DOC_WINDOW >= 1, "DOC_WINDOW must be >= 1"))]
    fn doc_window_mask<const DOC_WINDOW: i32 = 64>(
        q_abs: Tile,
        k: Tile,
        seq_len: i32,
        aux: Ptr,
    ) -> Tile<bool> {
        let q_ok = q_abs < seq_len;
        let k_ok = (k >= 0) & (k < seq_len);
        let doc_q = load(aux + q_abs, q_ok, -1);
        let doc_k = load(aux + k, k_ok, -2);
        let near = (k <= q_abs) & (q_abs - k < DOC_WINDOW);
        (doc_q == doc_k) & (doc_q >= 0) & near & k_ok & q_ok
    }

    /// `[max(doc start, first query − W + 1), last query]` in tiles.
    #[device]
    fn doc_window_bounds<const TILE_SIZE: i32, const BLOCK_Q: i32, const DOC_WINDOW: i32 = 64>(
        context_len: i32,
        seq_len: i32,
        qlen: i32,
        b: i32,
        aux: Ptr,
    ) -> (i32, i32, i32) {
        let first_q = context_len + b * BLOCK_Q;
        let last_q = context_len + min(b * BLOCK_Q + BLOCK_Q - 1, qlen - 1);
        let doc = load(aux + first_q);
        let mut lo = max(0, first_q - DOC_WINDOW + 1);
        let mut hi = first_q;
        // The first key of the document on [lo, first_q] (documents are contiguous).
        while lo < hi {
            let mid = (lo + hi) / 2;
            if load(aux + mid) == doc {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        let msp = min(last_q + 1, seq_len);
        (lo / TILE_SIZE, cdiv(msp, TILE_SIZE), msp)
    }
}

/// The documents + window variant with a `window`-key window.
pub fn variant(window: i32) -> Variant {
    Variant::from_source(&document_window::VARIANT)
        .with_constexpr("DOC_WINDOW", window)
        .with_aux_i32("doc_ids", AuxDtype::I32, AuxRow::PerKey)
}
