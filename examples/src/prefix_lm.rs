//! Prefix-LM: the first P keys of a sequence (the prompt / prefix) are attended
//! bidirectionally by every prefix query, and causally by the rest: a query q sees key k
//! iff `k ≤ q ∨ k < P` (and `k < L`).
//!
//! `aux` row of a sequence: `[P]`. The bounds start at tile 0 (every query sees the whole
//! prefix) and end at `max(last query + 1, P)`.

use attn_dsl_macros::variant;
use attn_runtime::ops::unified_attention::variant::{AuxDtype, AuxRow, Variant};

#[variant(mask = prefix_lm_mask, bounds = prefix_lm_bounds)]
pub mod prefix_lm {
    /// `(k ≤ q ∨ k < P) ∧ k < L`.
    #[device]
    fn prefix_lm_mask(q_abs: Tile, k: Tile, seq_len: i32, aux: Ptr) -> Tile<bool> {
        let p = load(aux);
        ((k <= q_abs) | (k < p)) & (k < seq_len)
    }

    /// Tiles `[0, cdiv(max(last query + 1, P), TILE))`, never past L.
    #[device]
    fn prefix_lm_bounds<const TILE_SIZE: i32, const BLOCK_Q: i32>(
        context_len: i32,
        seq_len: i32,
        qlen: i32,
        b: i32,
        aux: Ptr,
    ) -> (i32, i32, i32) {
        let p = load(aux);
        let last_q = context_len + min(b * BLOCK_Q + BLOCK_Q - 1, qlen - 1);
        let msp = min(max(last_q + 1, p), seq_len);
        (0, cdiv(msp, TILE_SIZE), msp)
    }
}

/// The prefix-LM variant (`aux`: `[S, 1]` prefix lengths).
pub fn variant() -> Variant {
    Variant::from_source(&prefix_lm::VARIANT).with_aux_i32(
        "prefix_len",
        AuxDtype::I32,
        AuxRow::Fixed(1),
    )
}
