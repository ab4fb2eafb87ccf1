//! Tile-loop bounds of one (q-block, segment) program (spec `unified_attention.md` §4).
//!
//! The bounds must contain every key that the §3 mask admits for any valid row of the
//! block (the §4 invariant, property-tested against [`super::mask::allowed`]); whatever
//! they add beyond that is wasted work ("slack"). This is a literal transcription of the
//! §4 pseudo-code so that the DSL's bounds function can be compared with it exactly.

use super::config::UnifiedAttentionConfig;

/// The multimodal ranges the bounds function sees for one q-block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockMmRanges<'a> {
    /// No ranges (or USE_MM_PREFIX off).
    None,
    /// The sequence's padded `[R, 2]` list of inclusive ranges (`(0, 0)` = padding).
    PerSequence(&'a [[i32; 2]]),
    /// The sequence's rows of the per-query `[T, 2]` tensor, indexed by the local token
    /// offset `t` (`(−1, −1)` = the token is in no range).
    PerQuery(&'a [[i32; 2]]),
}

/// Per-program inputs of §4: sequence geometry, q-block and (3D) segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockGeometry {
    /// `L − qlen`.
    pub context_len: i64,
    /// L.
    pub seq_len: i64,
    /// qlen: query tokens of the sequence.
    pub query_len: i64,
    /// b: local q-block index within the sequence.
    pub q_block: i64,
    /// s: split-KV segment (0 in 2D).
    pub segment: i64,
    /// tps: tiles per segment (ignored in 2D); see [`tiles_per_segment`].
    pub tiles_per_segment: i64,
}

/// What the kernel's tile loop needs: `for j in loop_lo..loop_hi`, loads masked by `k < MSP`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TileLoopBounds {
    /// First tile index visited.
    pub loop_lo: i64,
    /// One past the last tile index visited.
    pub loop_hi: i64,
    /// MSP: keys at or beyond it are not loaded.
    pub max_seq_prefix_len: i64,
}

/// §5: `tps = ceil(L / (NSEG · TILE))`.
pub fn tiles_per_segment(seq_len: i64, num_segments: i64, tile_size: i64) -> i64 {
    let per = (num_segments * tile_size).max(1);
    (seq_len + per - 1).div_euclid(per)
}

/// Whether the pruning formulas treat the launch as possibly non-causal (§4: any
/// `USE_PER_SEQ_CAUSAL` counts, whatever the sequence's own flag).
fn maybe_noncausal(cfg: &UnifiedAttentionConfig) -> bool {
    cfg.use_per_seq_causal || !cfg.use_causal
}

/// §4 step 1: the longest key prefix the block may touch.
fn max_seq_prefix_len(cfg: &UnifiedAttentionConfig, g: &BlockGeometry) -> i64 {
    let nq = i64::from(cfg.num_queries_per_kv.max(1));
    let causal_view = g.context_len
        + g.q_block * i64::from(cfg.block_q)
        + (i64::from(cfg.block_m) - 1).div_euclid(nq)
        + 1;
    if cfg.use_mm_prefix || cfg.use_r_swa || maybe_noncausal(cfg) {
        g.seq_len
    } else {
        causal_view.min(g.seq_len)
    }
}

/// The pruned key interval `[first, last]` (absolute key positions, before the `L − 1`
/// clamp) of §4 step 2, or `None` when pruning does not apply.
fn pruned_key_interval(
    cfg: &UnifiedAttentionConfig,
    g: &BlockGeometry,
    ranges: BlockMmRanges<'_>,
) -> Option<(i64, i64)> {
    let w = i64::from(cfg.sliding_window);
    let can_prune = !cfg.use_r_swa && (!cfg.use_mm_prefix || cfg.mm_prefix_clamp_sw);
    if w <= 0 || !can_prune {
        return None;
    }
    let nq = i64::from(cfg.num_queries_per_kv.max(1));
    let q_lo = g.q_block * i64::from(cfg.block_q);
    let q_hi = (q_lo + (i64::from(cfg.block_m) - 1).div_euclid(nq)).min(g.query_len - 1);
    let (a_lo, a_hi) = (g.context_len + q_lo, g.context_len + q_hi);
    let lb = i64::from(cfg.chunk_lookback);
    let mut first = if lb >= 0 {
        let c = i64::from(cfg.chunk_size.max(1));
        (a_lo.div_euclid(c) - lb) * c
    } else {
        a_lo - w + 1
    };
    let mut last = if maybe_noncausal(cfg) {
        a_hi + w - 1
    } else {
        a_hi
    };
    if cfg.use_mm_prefix && cfg.mm_prefix_clamp_sw {
        widen_for_ranges(
            ranges,
            (a_lo, a_hi),
            (q_lo, q_hi),
            g.context_len,
            w,
            &mut first,
            &mut last,
        );
    }
    Some((first, last))
}

/// §4 clamped-MM union: each range intersecting the query span widens `[first, last]`
/// to its start (clamped to the window's left edge) and its whole end.
fn widen_for_ranges(
    ranges: BlockMmRanges<'_>,
    (a_lo, a_hi): (i64, i64),
    (q_lo, q_hi): (i64, i64),
    context_len: i64,
    w: i64,
    first: &mut i64,
    last: &mut i64,
) {
    let mut widen = |s: i64, e: i64, span_lo: i64, span_hi: i64| {
        if s < e && s <= span_hi && e >= span_lo {
            *first = (*first).min(s.max(span_lo - w + 1));
            *last = (*last).max(e);
        }
    };
    match ranges {
        BlockMmRanges::None => {}
        BlockMmRanges::PerSequence(list) => {
            for &[s, e] in list {
                widen(i64::from(s), i64::from(e), a_lo, a_hi);
            }
        }
        BlockMmRanges::PerQuery(rows) => {
            for t in q_lo.max(0)..=q_hi {
                if let Some(&[s, e]) = usize::try_from(t).ok().and_then(|t| rows.get(t)) {
                    let a_row = context_len + t;
                    widen(i64::from(s), i64::from(e), a_row, a_row);
                }
            }
        }
    }
}

/// §4 `compute_tile_loop_bounds`: `(loop_lo, loop_hi)` in tiles (half-open) and MSP.
/// In 3D the range is further scoped to segment `s`: `[s·tps, (s+1)·tps)`; the result
/// may then be empty (`loop_lo ≥ loop_hi`), exactly as the kernel's loop sees it.
pub fn compute_tile_loop_bounds(
    cfg: &UnifiedAttentionConfig,
    g: &BlockGeometry,
    ranges: BlockMmRanges<'_>,
) -> TileLoopBounds {
    let tile = i64::from(cfg.tile_size.max(1));
    let msp = max_seq_prefix_len(cfg, g);
    let num_tiles = (msp + tile - 1).div_euclid(tile);
    let (tile_start, tile_end) = match pruned_key_interval(cfg, g, ranges) {
        None => (0, num_tiles),
        Some((first, last)) => {
            let last = last.min(g.seq_len - 1);
            (
                first.div_euclid(tile).max(0),
                (last.div_euclid(tile) + 1).min(num_tiles),
            )
        }
    };
    let (loop_lo, loop_hi) = if cfg.is_3d {
        let tps = g.tiles_per_segment;
        (
            (g.segment * tps).max(tile_start),
            ((g.segment + 1) * tps).min(tile_end),
        )
    } else {
        (tile_start, tile_end)
    };
    TileLoopBounds {
        loop_lo,
        loop_hi,
        max_seq_prefix_len: msp,
    }
}
