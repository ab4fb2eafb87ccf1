//! Packed documents: several documents concatenated into one sequence (sequence packing),
//! each attending causally within itself only.
//!
//! `aux` row of a sequence: the document id of every key position `[0, L)`. Each document
//! occupies one contiguous span; id −1 marks padding, whose rows see nothing and output 0.
//! The bounds start at the first key of the document of the block's first query (later
//! documents in the block start later) and end at the block's last query (causal).

use attn_dsl_macros::variant;
use attn_runtime::ops::unified_attention::variant::{AuxDtype, AuxRow, Variant};

#[variant(mask = packed_doc_mask, bounds = packed_doc_bounds)]
pub mod packed_documents {
    /// Same document (not padding) and causal: `doc[q] == doc[k] >= 0 ∧ k ≤ q < L`.
    #[device]
    fn packed_doc_mask(q_abs: Tile, k: Tile, seq_len: i32, aux: Ptr) -> Tile<bool> {
        let q_ok = q_abs < seq_len;
        let k_ok = (k >= 0) & (k < seq_len);
        let doc_q = load(aux + q_abs, q_ok, -1);
        let doc_k = load(aux + k, k_ok, -2);
        (doc_q == doc_k) & (doc_q >= 0) & (k <= q_abs) & k_ok & q_ok
    }

    /// Tiles from the first key of the first query's document to the last query.
    #[device]
    fn packed_doc_bounds<const TILE_SIZE: i32, const BLOCK_Q: i32>(
        context_len: i32,
        seq_len: i32,
        qlen: i32,
        b: i32,
        aux: Ptr,
    ) -> (i32, i32, i32) {
        let first_q = context_len + b * BLOCK_Q;
        let last_q = context_len + min(b * BLOCK_Q + BLOCK_Q - 1, qlen - 1);
        let doc = load(aux + first_q);
        // Documents are contiguous: on [0, first_q], `doc_ids[k] == doc` is false then
        // true, so a binary search finds where the document starts.
        let mut lo = 0;
        let mut hi = first_q;
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

/// The packed-documents variant (`aux`: `[S, ≥ max L]` document ids, −1 = padding).
pub fn variant() -> Variant {
    Variant::from_source(&packed_documents::VARIANT).with_aux_i32(
        "doc_ids",
        AuxDtype::I32,
        AuxRow::PerKey,
    )
}
