//! Constexpr configuration (spec `unified_attention.md` §2.1 rules, §6 heuristics): one
//! test per rule, each checking the shared message constant.

use attn_runtime::ops::unified_attention::config::*;

fn problem() -> AttentionProblem {
    AttentionProblem {
        num_query_heads: 16,
        num_kv_heads: 8,
        head_size: 256,
        block_size: 16,
        kv_elem_bytes: 2,
        sliding_window: 1024,
        causal: CausalMode::Causal,
        chunk_lookback: -1,
        mm: MmRangeEncoding::PerSequence { max_ranges: 4 },
        mm_prefix_clamp_sw: true,
        r_swa_window: None,
        softcap: 0.0,
        use_sinks: false,
        alibi: AlibiMode::None,
        use_qq_bias: false,
        max_seqlen_q: 512,
        num_seqs: 4,
        split_kv: None,
        batch_invariant: false,
        mma: MmaKind::Sync,
    }
}

fn base() -> UnifiedAttentionConfig {
    UnifiedAttentionConfig::from_problem(&problem()).expect("Gemma4 sliding layer is valid")
}

/// Asserts that `edit` applied to a valid config trips exactly the rule `msg`.
fn rejects(msg: &str, edit: impl FnOnce(&mut UnifiedAttentionConfig)) {
    let mut cfg = base();
    edit(&mut cfg);
    let err = cfg.validate().expect_err("must be rejected");
    assert_eq!(err.rule, msg, "{err}");
    assert!(err.to_string().starts_with(msg));
    assert!(ALL_RULE_MESSAGES.contains(&msg));
}

fn rejects_launch(msg: &str, cfg: UnifiedAttentionConfig, v: LaunchValues) {
    let err = cfg.validate_launch(&v).expect_err("must be rejected");
    assert_eq!(err.rule, msg, "{err}");
}

fn launch_values() -> LaunchValues {
    LaunchValues {
        max_seqlen_q: 1,
        softcap: 0.0,
        num_sinks: 0,
    }
}

#[test]
fn gemma4_sliding_layer_heuristics() {
    let c = base();
    assert_eq!(
        (
            c.block_m,
            c.block_q,
            c.tile_size,
            c.head_size_padded,
            c.num_queries_per_kv
        ),
        (16, 8, 32, 256, 2)
    );
    assert!(!c.is_3d && c.num_segments == 1);
}

#[test]
fn gemma4_full_layer_heuristics() {
    let p = AttentionProblem {
        num_kv_heads: 2,
        head_size: 512,
        sliding_window: 0,
        mm: MmRangeEncoding::None,
        mm_prefix_clamp_sw: false,
        ..problem()
    };
    let c = UnifiedAttentionConfig::from_problem(&p).unwrap();
    assert_eq!(
        (c.block_m, c.block_q, c.tile_size, c.head_size_padded),
        (16, 2, 32, 512)
    );
}

#[test]
fn large_group_block_m_is_next_pow2() {
    assert_eq!(block_m_for(1), 16);
    assert_eq!(block_m_for(16), 16);
    assert_eq!(block_m_for(17), 32);
    assert_eq!(block_m_for(40), 64);
    assert_eq!(next_pow2(96), 128);
}

/// Above 2^30 no i32 power of two exists: `next_pow2` used to double past i32::MAX (a panic
/// in debug builds, an endless loop on 0 in release). It now saturates to i32::MAX, which is
/// not a power of two, so a config built from such a head count or head size is a typed
/// error instead of a hang.
#[test]
fn huge_heads_and_head_sizes_are_typed_errors() {
    assert_eq!(next_pow2(1 << 30), 1 << 30);
    assert_eq!(next_pow2((1 << 30) + 1), i32::MAX);
    assert_eq!(next_pow2(i32::MAX), i32::MAX);
    assert_eq!(next_pow2(i32::MIN), 1);
    assert_eq!(block_m_for(i32::MAX), i32::MAX);
    for p in [
        AttentionProblem {
            head_size: i32::MAX,
            ..problem()
        },
        AttentionProblem {
            num_query_heads: i32::MAX,
            num_kv_heads: 1,
            ..problem()
        },
    ] {
        let err = UnifiedAttentionConfig::from_problem(&p);
        assert!(err.is_err(), "{p:?} gave {err:?}");
    }
}

#[test]
fn tile_size_rules() {
    assert_eq!(get_tile_size(128, 1024, 2, false), 32);
    assert_eq!(get_tile_size(256, 1024, 2, false), 32);
    assert_eq!(get_tile_size(64, 1024, 2, false), 16);
    assert_eq!(get_tile_size(128, 0, 2, true), 32);
    assert_eq!(get_tile_size(128, 0, 2, false), 16);
    assert_eq!(get_tile_size(128, 0, 1, false), 32);
}

#[test]
fn three_d_choice() {
    let ws = Some(SplitKvWorkspace {
        seq_threshold_3d: seq_threshold_3d(8),
        num_segments: 16,
    });
    assert_eq!(seq_threshold_3d(8), 16);
    assert!(choose_3d(ws, 1, 16, false));
    assert!(!choose_3d(ws, 2, 4, false));
    assert!(!choose_3d(ws, 1, 17, false));
    assert!(!choose_3d(ws, 1, 4, true));
    assert!(!choose_3d(None, 1, 4, false));
    let p = AttentionProblem {
        max_seqlen_q: 1,
        split_kv: ws,
        head_size: 128,
        sliding_window: 0,
        mm: MmRangeEncoding::None,
        mm_prefix_clamp_sw: false,
        ..problem()
    };
    let c = UnifiedAttentionConfig::from_problem(&p).unwrap();
    assert!(c.is_3d);
    assert_eq!((c.num_segments, c.tile_size), (16, 16));
}

#[test]
fn window_from_left() {
    assert_eq!(sliding_window_from_left(-1), 0);
    assert_eq!(sliding_window_from_left(1023), 1024);
}

#[test]
fn chunk_size_is_derived() {
    let p = AttentionProblem {
        chunk_lookback: 1,
        mm: MmRangeEncoding::None,
        mm_prefix_clamp_sw: false,
        ..problem()
    };
    assert_eq!(
        UnifiedAttentionConfig::from_problem(&p).unwrap().chunk_size,
        512
    );
}

#[test]
fn all_messages_are_distinct() {
    let mut m = ALL_RULE_MESSAGES.to_vec();
    m.sort_unstable();
    m.dedup();
    assert_eq!(m.len(), ALL_RULE_MESSAGES.len());
}

#[test]
fn rule_01_heads_divisible() {
    rejects(MSG_HEADS_NOT_DIVISIBLE, |c| c.num_kv_heads = 3);
}

#[test]
fn rule_01_queries_per_kv_consistent() {
    rejects(MSG_QUERIES_PER_KV_MISMATCH, |c| c.num_queries_per_kv = 4);
}

#[test]
fn rule_02_block_size_multiple_of_16() {
    rejects(MSG_BLOCK_SIZE_NOT_MULTIPLE_OF_16, |c| c.block_size = 24);
}

#[test]
fn rule_03_chunk_without_window() {
    rejects(MSG_CHUNK_WITHOUT_WINDOW, |c| {
        c.mm_prefix_clamp_sw = false;
        c.sliding_window = 0;
        c.chunk_lookback = 0;
    });
}

#[test]
fn rule_03_chunk_size_zero() {
    rejects(MSG_CHUNK_SIZE_ZERO, |c| {
        c.sliding_window = 3;
        c.chunk_lookback = 3;
    });
}

#[test]
fn rule_03_chunk_lookback_range() {
    rejects(MSG_CHUNK_LOOKBACK_RANGE, |c| c.chunk_lookback = -2);
}

#[test]
fn rule_03_chunk_size_consistent() {
    rejects(MSG_CHUNK_SIZE_MISMATCH, |c| {
        c.chunk_lookback = 1;
        c.chunk_size = 1024;
    });
}

#[test]
fn window_not_negative() {
    rejects(MSG_WINDOW_NEGATIVE, |c| c.sliding_window = -1);
}

#[test]
fn rule_05_sinks_len() {
    let mut c = base();
    c.use_sinks = true;
    rejects_launch(
        MSG_SINKS_LEN,
        c,
        LaunchValues {
            num_sinks: 8,
            ..launch_values()
        },
    );
    assert!(c
        .validate_launch(&LaunchValues {
            num_sinks: 16,
            ..launch_values()
        })
        .is_ok());
}

#[test]
fn rule_10_clamp_without_mm() {
    rejects(MSG_CLAMP_WITHOUT_MM, |c| c.use_mm_prefix = false);
}

#[test]
fn rule_11_clamp_without_window() {
    rejects(MSG_CLAMP_WITHOUT_WINDOW, |c| c.sliding_window = 0);
}

#[test]
fn mm_ranges_need_a_slot() {
    rejects(MSG_MM_RANGES_ZERO, |c| c.max_mm_ranges = 0);
}

#[test]
fn mm_query_range_needs_mm() {
    rejects(MSG_MM_QUERY_RANGE_WITHOUT_MM, |c| {
        c.use_mm_prefix = false;
        c.mm_prefix_clamp_sw = false;
        c.use_mm_query_range = true;
    });
}

fn rswa(c: &mut UnifiedAttentionConfig) {
    c.mm_prefix_clamp_sw = false;
    c.sliding_window = 0;
    c.use_r_swa = true;
    c.r_swa_window = 128;
}

#[test]
fn rswa_normal_config_is_valid() {
    let mut c = base();
    rswa(&mut c);
    assert!(c.validate().is_ok());
}

#[test]
fn rule_12_rswa_window_empty() {
    rejects(MSG_RSWA_WINDOW_EMPTY, |c| {
        rswa(c);
        c.r_swa_window = 0;
    });
}

#[test]
fn rule_13_rswa_with_sliding_window() {
    rejects(MSG_RSWA_WITH_SLIDING_WINDOW, |c| {
        rswa(c);
        c.sliding_window = 64;
    });
}

#[test]
fn rule_14_rswa_with_chunk() {
    rejects(MSG_RSWA_WITH_CHUNK, |c| {
        rswa(c);
        c.chunk_lookback = 0;
    });
}

#[test]
fn rule_15_chunk_noncausal() {
    rejects(MSG_CHUNK_NONCAUSAL, |c| {
        c.chunk_lookback = 0;
        c.chunk_size = 1024;
        c.use_causal = false;
    });
}

#[test]
fn rule_15_chunk_per_seq_causal() {
    rejects(MSG_CHUNK_NONCAUSAL, |c| {
        c.chunk_lookback = 0;
        c.chunk_size = 1024;
        c.use_per_seq_causal = true;
    });
}

#[test]
fn rule_16_per_seq_without_causal() {
    rejects(MSG_PER_SEQ_CAUSAL_WITHOUT_CAUSAL, |c| {
        c.use_per_seq_causal = true;
        c.use_causal = false;
    });
}

#[test]
fn rule_17_alibi_sqrt_without_slopes() {
    rejects(MSG_ALIBI_SQRT_WITHOUT_SLOPES, |c| c.use_alibi_sqrt = true);
}

#[test]
fn rule_17_softcap_positive() {
    let mut c = base();
    c.use_softcap = true;
    rejects_launch(
        MSG_SOFTCAP_NOT_POSITIVE,
        c,
        LaunchValues {
            softcap: 0.0,
            ..launch_values()
        },
    );
    assert!(c
        .validate_launch(&LaunchValues {
            softcap: 50.0,
            ..launch_values()
        })
        .is_ok());
}

#[test]
fn rule_18_3d_is_decode_only() {
    let mut c = base();
    c.is_3d = true;
    c.num_segments = 16;
    rejects_launch(
        MSG_3D_WITH_PREFILL,
        c,
        LaunchValues {
            max_seqlen_q: 2,
            ..launch_values()
        },
    );
    assert!(c.validate_launch(&launch_values()).is_ok());
}

#[test]
fn rule_18_3d_segments_pow2() {
    rejects(MSG_SEGMENTS_NOT_POW2, |c| {
        c.is_3d = true;
        c.num_segments = 12;
    });
}

#[test]
fn rule_18_2d_single_segment() {
    rejects(MSG_2D_WITH_SEGMENTS, |c| c.num_segments = 16);
}

#[test]
fn rule_19_tile_pow2() {
    rejects(MSG_TILE_NOT_POW2, |c| c.tile_size = 48);
}

#[test]
fn rule_19_tile_at_least_16() {
    rejects(MSG_TILE_TOO_SMALL, |c| c.tile_size = 8);
}

#[test]
fn rule_19_tile_32_for_1_byte_kv() {
    rejects(MSG_TILE_TOO_SMALL_FOR_1_BYTE_KV, |c| {
        c.kv_elem_bytes = 1;
        c.tile_size = 16;
    });
}

#[test]
fn rule_19_block_m_pow2() {
    rejects(MSG_BLOCK_M_NOT_POW2, |c| c.block_m = 24);
}

#[test]
fn rule_19_block_m_covers_group() {
    rejects(MSG_BLOCK_M_BELOW_QUERIES_PER_KV, |c| {
        c.num_query_heads = 32 * 8;
        c.num_queries_per_kv = 32;
    });
}

#[test]
fn block_q_consistent() {
    rejects(MSG_BLOCK_Q_MISMATCH, |c| c.block_q = 16);
}

#[test]
fn rule_19_head_size_padded_pow2() {
    rejects(MSG_HEAD_SIZE_PADDED_NOT_POW2, |c| {
        c.head_size = 96;
        c.head_size_padded = 96;
    });
}

#[test]
fn head_size_within_padded() {
    rejects(MSG_HEAD_SIZE_OVER_PADDED, |c| c.head_size = 300);
}

#[test]
fn rule_20_block_m_not_multiple_of_group_is_fine() {
    let p = AttentionProblem {
        num_query_heads: 5,
        num_kv_heads: 1,
        ..problem()
    };
    let c = UnifiedAttentionConfig::from_problem(&p).unwrap();
    assert_eq!((c.block_m, c.block_q), (16, 3));
}

/// The measured decode launch table: segments bring the split-KV grid up to
/// `DECODE_PROGRAMS` programs, within the workspace, never below one.
#[test]
fn decode_segments_follow_the_measured_grid() {
    use attn_runtime::ops::unified_attention::plan::{decode_segments, DECODE_PROGRAMS};
    assert_eq!(DECODE_PROGRAMS, 2048);
    assert_eq!(decode_segments(16, 64, 8), 4, "D1: 512 programs x 4");
    assert_eq!(
        decode_segments(16, 8, 2),
        16,
        "small batch: the workspace caps it"
    );
    assert_eq!(decode_segments(4, 8, 2), 4);
    assert_eq!(
        decode_segments(16, 100, 8),
        2,
        "800 x 2 = 1600 <= 2048 < 800 x 4"
    );
    assert_eq!(decode_segments(16, 1024, 8), 1);
    assert_eq!(decode_segments(16, i32::MAX, i32::MAX), 1, "no overflow");
    assert_eq!(
        decode_segments(0, 0, 0),
        1,
        "degenerate inputs still give one segment"
    );
}
