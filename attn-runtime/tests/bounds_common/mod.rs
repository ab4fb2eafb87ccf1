//! Shared fixtures of the tile-bounds tests (host reference, CPU executor probe, GPU probe):
//! the plain 2D configuration the geometries start from, the spec §4 seed block, and the
//! per-query range encoding derived from per-sequence ranges.

#![allow(dead_code)]

use attn_runtime::kernels::bounds_probe::ProbeBlock;
use attn_runtime::ops::unified_attention::config::{block_m_for, MmaKind, UnifiedAttentionConfig};

/// A 2D configuration with every mask option but causality and the window off: block 16,
/// one KV head, `nqpkv` query heads of `head_size`.
pub fn plain_config(tile: i32, nqpkv: i32, window: i32, head_size: i32) -> UnifiedAttentionConfig {
    let block_m = block_m_for(nqpkv);
    UnifiedAttentionConfig {
        block_size: 16,
        tile_size: tile,
        block_m,
        block_q: block_m / nqpkv,
        head_size,
        head_size_padded: head_size,
        num_query_heads: nqpkv,
        num_kv_heads: 1,
        num_queries_per_kv: nqpkv,
        kv_elem_bytes: 2,
        sliding_window: window,
        use_causal: true,
        use_per_seq_causal: false,
        chunk_lookback: -1,
        chunk_size: 0,
        use_mm_prefix: false,
        use_mm_query_range: false,
        max_mm_ranges: 0,
        mm_prefix_clamp_sw: false,
        use_r_swa: false,
        r_swa_window: 0,
        use_softcap: false,
        use_sinks: false,
        use_alibi_slopes: false,
        use_alibi_sqrt: false,
        use_qq_bias: false,
        is_3d: false,
        num_segments: 1,
        tile_ranges: 1,
        mma: MmaKind::Sync,
        slabs_per_warp: 1,
        num_stages: 2,
    }
}

/// `cfg` with clamped MM prefix ranges (per sequence, up to `max_ranges` of them).
pub fn clamped_mm(cfg: UnifiedAttentionConfig, max_ranges: i32) -> UnifiedAttentionConfig {
    UnifiedAttentionConfig {
        use_mm_prefix: true,
        mm_prefix_clamp_sw: true,
        max_mm_ranges: max_ranges,
        ..cfg
    }
}

/// Spec §4 seed configuration: nqpkv 2, TILE 32, W 1024, clamped MM with MAX_MM_RANGES = 2;
/// `per_seq` is `Some(sequence causal)` for a per-sequence-causal launch.
pub fn seed_config(use_causal: bool, per_seq: Option<bool>) -> UnifiedAttentionConfig {
    let cfg = UnifiedAttentionConfig {
        use_causal,
        use_per_seq_causal: per_seq.is_some(),
        ..clamped_mm(plain_config(32, 2, 1024, 64), 2)
    };
    cfg.validate().expect("seed configuration is valid");
    cfg
}

/// Spec §4 seed block: context 0, L = qlen = 4096, b = 140 (rows 1120..1127); `ranges` is
/// the MM range and its padding.
pub fn seed_block(use_causal: bool, per_seq: Option<bool>, ranges: &[[i32; 2]]) -> ProbeBlock<'_> {
    ProbeBlock {
        context_len: 0,
        seq_len: 4096,
        query_len: 4096,
        q_block: 140,
        causal: per_seq.unwrap_or(use_causal),
        rswa_prefix_len: 0,
        mm_ranges: ranges,
        query_ranges: &[],
        mask_aux: &[],
        mask_aux_f32: &[],
    }
}

/// §3.5 per-query rows `[query_len, 2]` equivalent to the per-sequence `ranges`: each query
/// position's own range, `[-1, -1]` when it is in none.
pub fn per_query_rows(ranges: &[[i32; 2]], context_len: i64, query_len: i64) -> Vec<[i32; 2]> {
    (0..query_len)
        .map(|t| {
            let q = context_len + t;
            ranges
                .iter()
                .copied()
                .find(|&[s, e]| s < e && i64::from(s) <= q && q <= i64::from(e))
                .unwrap_or([-1, -1])
        })
        .collect()
}
