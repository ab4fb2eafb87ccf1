//! The per-element attention mask of unified attention (spec `unified_attention.md` §3).
//!
//! This is the ONE predicate shared by the dense reference, the tile-bounds property tests
//! and (as the specification they are checked against) the DSL kernels. It is written
//! straight from §3.6:
//!
//! ```text
//! allowed(q,k) = [ base ∧ win ∧ rswa ] ∨ [ USE_MM_PREFIX ∧ ⋁ᵢ mmᵢ ]   ∧ 0 ≤ k < L
//! ```
//!
//! with the DSL rule that `k < L` is explicit (vLLM relies on the load mask for it).
//! Row validity (`t < qlen`, `h < Hq`) is the caller's business: a dense reference only
//! ever asks about real query tokens, so `effective = row_valid ∧ allowed`.

#![deny(clippy::indexing_slicing, clippy::arithmetic_side_effects)]

/// The launch-wide (constexpr) part of the mask: window, chunking, R-SWA and MM options.
///
/// Field names follow the kernel's constexprs so a reader can map one to the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaskConfig {
    /// `SLIDING_WINDOW` (W): keys with `q − k < W` (self included); 0 = off.
    pub sliding_window: i32,
    /// `CHUNK_LOOKBACK` (LB): −1 = off, else a key may sit up to LB chunks before q's chunk.
    pub chunk_lookback: i32,
    /// `CHUNK_SIZE` (C) = ⌊W / (LB + 1)⌋; only read when `chunk_lookback ≥ 0`.
    pub chunk_size: i32,
    /// `USE_R_SWA`: prefix keys stay visible, others need `q − k < R_SWA_WINDOW`.
    pub use_r_swa: bool,
    /// `R_SWA_WINDOW` (R).
    pub r_swa_window: i32,
    /// `USE_MM_PREFIX`: OR bidirectional multimodal ranges into the mask.
    pub use_mm_prefix: bool,
    /// `MM_PREFIX_CLAMP_SW` (Gemma4): AND each MM term with the window's left edge.
    pub mm_prefix_clamp_sw: bool,
}

impl MaskConfig {
    /// Plain causal (or bidirectional) attention with no window and no extras.
    pub const fn full() -> Self {
        MaskConfig {
            sliding_window: 0,
            chunk_lookback: -1,
            chunk_size: 0,
            use_r_swa: false,
            r_swa_window: 0,
            use_mm_prefix: false,
            mm_prefix_clamp_sw: false,
        }
    }
}

/// The per-sequence part of the mask, already resolved from the launch flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SequenceMask<'a> {
    /// L: total KV length of the sequence (context + new tokens).
    pub seq_len: i64,
    /// Whether this sequence is causal: `USE_PER_SEQ_CAUSAL ? is_causal[seq] : USE_CAUSAL`.
    pub causal: bool,
    /// P = `rswa_prefix_lens[seq]` (only read under R-SWA).
    pub rswa_prefix_len: i64,
    /// The inclusive `[s, e]` ranges that may contain the query: all of the sequence's
    /// ranges (per-sequence encoding) or the query token's own row (per-query encoding,
    /// `(−1, −1)` = none). Both encodings go through the same `mmᵢ` formula.
    pub mm_ranges: &'a [[i32; 2]],
}

/// Resolves §3 "NC": per-sequence flag when `USE_PER_SEQ_CAUSAL`, else `USE_CAUSAL`.
pub fn sequence_is_causal(use_causal: bool, per_seq_causal: Option<bool>) -> bool {
    per_seq_causal.unwrap_or(use_causal)
}

/// §3.6 `allowed(q, k)` for absolute query position `q` and key position `k`,
/// including the explicit DSL rule `0 ≤ k < L`.
pub fn allowed(cfg: &MaskConfig, seq: &SequenceMask<'_>, q: i64, k: i64) -> bool {
    if k < 0 || k >= seq.seq_len {
        return false;
    }
    let core = base(seq, q, k) && window(cfg, seq, q, k) && rswa(cfg, seq, q, k);
    core || (cfg.use_mm_prefix && multimodal(cfg, seq, q, k))
}

/// §3.1: causal keeps `k ≤ q`; a non-causal sequence sees every key below L.
fn base(seq: &SequenceMask<'_>, q: i64, k: i64) -> bool {
    if seq.causal {
        k <= q
    } else {
        k < seq.seq_len
    }
}

/// §3.2: chunk wins over the sliding window; the window is skipped under R-SWA.
fn window(cfg: &MaskConfig, seq: &SequenceMask<'_>, q: i64, k: i64) -> bool {
    let w = i64::from(cfg.sliding_window);
    if cfg.chunk_lookback >= 0 {
        let c = i64::from(cfg.chunk_size.max(1));
        q.div_euclid(c).saturating_sub(k.div_euclid(c)) <= i64::from(cfg.chunk_lookback)
    } else if w > 0 && !cfg.use_r_swa {
        q.saturating_sub(k) < w && (seq.causal || k.saturating_sub(q) < w)
    } else {
        true
    }
}

/// §3.3: prefix keys (`k < P`) stay visible, the rest need `q − k < R`.
fn rswa(cfg: &MaskConfig, seq: &SequenceMask<'_>, q: i64, k: i64) -> bool {
    !cfg.use_r_swa || k < seq.rswa_prefix_len || q.saturating_sub(k) < i64::from(cfg.r_swa_window)
}

/// §3.5: OR over ranges `[s, e]` (valid iff `s < e`) containing both q and k,
/// each optionally clamped to the window's left edge.
fn multimodal(cfg: &MaskConfig, seq: &SequenceMask<'_>, q: i64, k: i64) -> bool {
    let w = i64::from(cfg.sliding_window);
    let clamp_ok = !(cfg.mm_prefix_clamp_sw && w > 0) || q.saturating_sub(k) < w;
    clamp_ok
        && seq.mm_ranges.iter().any(|&[s, e]| {
            let (s, e) = (i64::from(s), i64::from(e));
            s < e && s <= q && q <= e && s <= k && k <= e
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seq(causal: bool, l: i64, ranges: &[[i32; 2]]) -> SequenceMask<'_> {
        SequenceMask {
            seq_len: l,
            causal,
            rswa_prefix_len: 0,
            mm_ranges: ranges,
        }
    }

    #[test]
    fn causal_window_admits_w_keys_including_self() {
        let cfg = MaskConfig {
            sliding_window: 4,
            ..MaskConfig::full()
        };
        let s = seq(true, 100, &[]);
        let keys: Vec<i64> = (0..100).filter(|&k| allowed(&cfg, &s, 50, k)).collect();
        assert_eq!(keys, vec![47, 48, 49, 50]);
    }

    #[test]
    fn noncausal_window_is_symmetric_and_stops_at_l() {
        let cfg = MaskConfig {
            sliding_window: 3,
            ..MaskConfig::full()
        };
        let s = seq(false, 12, &[]);
        let keys: Vec<i64> = (0..20).filter(|&k| allowed(&cfg, &s, 10, k)).collect();
        assert_eq!(keys, vec![8, 9, 10, 11]);
    }

    #[test]
    fn chunk_lookback_zero_is_same_chunk_causal() {
        let cfg = MaskConfig {
            sliding_window: 8,
            chunk_lookback: 0,
            chunk_size: 8,
            ..MaskConfig::full()
        };
        let s = seq(true, 64, &[]);
        let keys: Vec<i64> = (0..64).filter(|&k| allowed(&cfg, &s, 19, k)).collect();
        assert_eq!(keys, (16..=19).collect::<Vec<_>>());
    }

    #[test]
    fn clamped_mm_keeps_future_image_keys_but_cuts_left_edge() {
        let ranges = [[2, 30]];
        let cfg = MaskConfig {
            sliding_window: 4,
            use_mm_prefix: true,
            mm_prefix_clamp_sw: true,
            ..MaskConfig::full()
        };
        let s = seq(true, 40, &ranges);
        let keys: Vec<i64> = (0..40).filter(|&k| allowed(&cfg, &s, 10, k)).collect();
        assert_eq!(keys, (7..=30).collect::<Vec<_>>());
    }

    #[test]
    fn one_token_range_and_padding_are_invalid() {
        let ranges = [[0, 0], [5, 5]];
        let cfg = MaskConfig {
            use_mm_prefix: true,
            ..MaskConfig::full()
        };
        let s = seq(true, 10, &ranges);
        assert!(!allowed(&cfg, &s, 5, 6));
        assert!(allowed(&cfg, &s, 5, 5));
    }

    #[test]
    fn range_past_l_never_admits_keys_past_l() {
        let ranges = [[0, 50]];
        let cfg = MaskConfig {
            use_mm_prefix: true,
            ..MaskConfig::full()
        };
        let s = seq(true, 10, &ranges);
        assert!(allowed(&cfg, &s, 3, 9));
        assert!(!allowed(&cfg, &s, 3, 10));
    }

    #[test]
    fn rswa_keeps_prefix_and_recent_keys() {
        let cfg = MaskConfig {
            use_r_swa: true,
            r_swa_window: 2,
            ..MaskConfig::full()
        };
        let s = SequenceMask {
            seq_len: 20,
            causal: true,
            rswa_prefix_len: 3,
            mm_ranges: &[],
        };
        let keys: Vec<i64> = (0..20).filter(|&k| allowed(&cfg, &s, 10, k)).collect();
        assert_eq!(keys, vec![0, 1, 2, 9, 10]);
    }
}
