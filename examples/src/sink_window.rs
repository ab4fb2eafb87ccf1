//! Attention sinks + sliding window (StreamingLLM): a query sees the first `SINK_TOKENS`
//! keys of its sequence and the last `SINK_WINDOW` keys up to itself (causal).
//!
//! Two tile ranges per q-block (`tile_ranges = 2`): range 0 covers the sink tokens, range
//! 1 the window; the kernel visits them in order and never twice, so a block visits the
//! sink tiles plus its window tiles, not everything between them.
//!
//! Tiles every query of a block sees whole (all sinks, or inside every query's window)
//! are declared by `sink_window_full_tile` (`full_tile = ..`): the kernel skips the mask
//! there, which is most of the window's tiles.
//!
//! Both numbers are the variant's own constexprs (defaults 4 and 128), bound at run time
//! with `Variant::with_constexpr` and checked by the `require` rules.

use attn_dsl_macros::variant;
use attn_runtime::ops::unified_attention::variant::Variant;

#[variant(
    mask = sink_window_mask,
    bounds = sink_window_bounds,
    full_tile = sink_window_full_tile,
    tile_ranges = 2
)]
pub mod sink_window {
    /// `k ≤ q ∧ (k < SINK_TOKENS ∨ q − k < SINK_WINDOW)`.
    #[device(
        require(SINK_TOKENS >= 0, "SINK_TOKENS must be >= 0"),
        require(SINK_WINDOW >= 1, "SINK_WINDOW must be >= 1 (the query itself)"),
    )]
    fn sink_window_mask<const SINK_TOKENS: i32 = 4, const SINK_WINDOW: i32 = 128>(
        q_abs: Tile,
        k: Tile,
        seq_len: i32,
    ) -> Tile<bool> {
        (k <= q_abs) & ((k < SINK_TOKENS) | (q_abs - k < SINK_WINDOW)) & (k < seq_len)
    }

    /// Every query `q ∈ [q_first, q_last]` sees every key `k ∈ [k_first, k_last]`: the tile
    /// is below the key limit and the first query (so causal for all), and either all
    /// sinks or inside the last query's window (so inside every query's).
    #[device]
    fn sink_window_full_tile<const SINK_TOKENS: i32 = 4, const SINK_WINDOW: i32 = 128>(
        k_first: i32,
        k_last: i32,
        q_first: i32,
        q_last: i32,
        msp: i32,
    ) -> bool {
        (k_last < msp)
            & (k_last <= q_first)
            & ((k_last < SINK_TOKENS) | (q_last - k_first < SINK_WINDOW))
    }

    /// Range 0: the sink tiles; range 1: the window of the block's queries.
    #[device]
    fn sink_window_bounds<
        const TILE_SIZE: i32,
        const BLOCK_Q: i32,
        const SINK_TOKENS: i32 = 4,
        const SINK_WINDOW: i32 = 128,
    >(
        r: i32,
        context_len: i32,
        seq_len: i32,
        qlen: i32,
        b: i32,
    ) -> (i32, i32, i32) {
        let first_q = context_len + b * BLOCK_Q;
        let last_q = context_len + min(b * BLOCK_Q + BLOCK_Q - 1, qlen - 1);
        let msp = min(last_q + 1, seq_len);
        let mut lo = max(0, first_q - SINK_WINDOW + 1) / TILE_SIZE;
        let mut hi = cdiv(msp, TILE_SIZE);
        if r == 0 {
            lo = 0;
            hi = cdiv(min(SINK_TOKENS, msp), TILE_SIZE);
        }
        (lo, hi, msp)
    }
}

/// The sinks + window variant with `sinks` sink tokens and a `window`-key window.
pub fn variant(sinks: i32, window: i32) -> Variant {
    Variant::from_source(&sink_window::VARIANT)
        .with_constexpr("SINK_TOKENS", sinks)
        .with_constexpr("SINK_WINDOW", window)
}
