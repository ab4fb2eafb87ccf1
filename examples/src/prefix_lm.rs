//! Prefix-LM: the first P keys of a sequence (the prompt / prefix) are attended
//! bidirectionally by every prefix query, and causally by the rest: a query q sees key k
//! iff `k ≤ q ∨ k < P` (and `k < L`).
//!
//! `mask_aux` row of a sequence: `[P]` (stride 1). The bounds start at tile 0 (every query
//! sees the whole prefix) and end at `max(last query + 1, P)`.

use attn_dsl_macros::module;
use attn_runtime::kernels::dsl_module::ModuleLoadError;

use crate::Variant;

#[module]
pub mod prefix_lm {
    /// `(k ≤ q ∨ k < P) ∧ k < L`.
    #[device]
    fn prefix_lm_mask(
        q_abs: Tile,
        k: Tile,
        seq_len: i32,
        causal: bool,
        rswa_prefix: i32,
        mm_ranges: Ptr,
        q_range_lo: Tile,
        q_range_hi: Tile,
        prefix_len: Ptr,
    ) -> Tile {
        let p = load(prefix_len);
        ((k <= q_abs) | (k < p)) & (k < seq_len)
    }

    /// Tiles `[0, cdiv(max(last query + 1, P), TILE))`, never past L.
    #[device]
    fn prefix_lm_bounds<const TILE_SIZE: i32, const BLOCK_Q: i32>(
        context_len: i32,
        seq_len: i32,
        qlen: i32,
        b: i32,
        causal: bool,
        mm_ranges: Ptr,
        q_range_lo: Tile,
        q_range_hi: Tile,
        q_abs: Tile,
        row_valid: Tile,
        prefix_len: Ptr,
    ) -> (i32, i32, i32) {
        let p = load(prefix_len);
        let last_q = context_len + min(b * BLOCK_Q + BLOCK_Q - 1, qlen - 1);
        let msp = min(max(last_q + 1, p), seq_len);
        (0, cdiv(msp, TILE_SIZE), msp)
    }
}

/// The prefix-LM variant (`mask_aux`: `[S, 1]` prefix lengths).
pub fn variant() -> Result<Variant, ModuleLoadError> {
    Variant::from_file(
        include_str!("prefix_lm.rs"),
        "prefix_lm",
        file!(),
        "prefix_lm_mask",
        "prefix_lm_bounds",
    )
}
