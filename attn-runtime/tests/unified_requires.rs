//! Every `require` rule of `unified_attention` (spec §2.1) gives the same message at run time
//! (`Template::specialize`) as at compile time (the trybuild case `tests/ui/unified_<case>.rs`),
//! and that message is the host-side rule's (`ops::unified_attention::config::MSG_*`).

use attn_dsl::ir::ScalarType;
use attn_dsl::ConstValue;
use attn_runtime::kernels::unified_attention::unified::UNIFIED_ATTENTION_TEMPLATE;
use attn_runtime::ops::unified_attention::config;

/// A valid configuration (Gemma4 sliding layer with clamped MM ranges); every other constexpr
/// takes the kernel's default.
fn base() -> Vec<(&'static str, ConstValue)> {
    vec![
        ("T", ConstValue::Dtype(ScalarType::Bf16)),
        ("HEAD_SIZE", ConstValue::Int(128)),
        ("HEAD_SIZE_PADDED", ConstValue::Int(128)),
        ("BLOCK_SIZE", ConstValue::Int(16)),
        ("TILE_SIZE", ConstValue::Int(32)),
        ("BLOCK_M", ConstValue::Int(16)),
        ("BLOCK_Q", ConstValue::Int(8)),
        ("NUM_QUERIES_PER_KV", ConstValue::Int(2)),
        ("SLIDING_WINDOW", ConstValue::Int(1024)),
        ("USE_MM_PREFIX", ConstValue::Bool(true)),
        ("MM_PREFIX_CLAMP_SW", ConstValue::Bool(true)),
        ("MAX_MM_RANGES", ConstValue::Int(2)),
    ]
}

/// Constexpr bindings by name.
type Bindings = Vec<(&'static str, ConstValue)>;

/// (trybuild case, overrides, the rule's message).
fn cases() -> Vec<(&'static str, Bindings, &'static str)> {
    vec![
        (
            "unified_clamp_without_mm",
            vec![("USE_MM_PREFIX", ConstValue::Bool(false))],
            config::MSG_CLAMP_WITHOUT_MM,
        ),
        (
            "unified_clamp_without_window",
            vec![("SLIDING_WINDOW", ConstValue::Int(0))],
            config::MSG_CLAMP_WITHOUT_WINDOW,
        ),
        (
            "unified_rswa_with_window",
            vec![
                ("USE_MM_PREFIX", ConstValue::Bool(false)),
                ("MM_PREFIX_CLAMP_SW", ConstValue::Bool(false)),
                ("USE_R_SWA", ConstValue::Bool(true)),
                ("R_SWA_WINDOW", ConstValue::Int(64)),
            ],
            config::MSG_RSWA_WITH_SLIDING_WINDOW,
        ),
        (
            "unified_rswa_empty_window",
            vec![
                ("USE_MM_PREFIX", ConstValue::Bool(false)),
                ("MM_PREFIX_CLAMP_SW", ConstValue::Bool(false)),
                ("SLIDING_WINDOW", ConstValue::Int(0)),
                ("USE_R_SWA", ConstValue::Bool(true)),
            ],
            config::MSG_RSWA_WINDOW_EMPTY,
        ),
        (
            "unified_rswa_with_chunk",
            vec![
                ("USE_MM_PREFIX", ConstValue::Bool(false)),
                ("MM_PREFIX_CLAMP_SW", ConstValue::Bool(false)),
                ("SLIDING_WINDOW", ConstValue::Int(0)),
                ("USE_R_SWA", ConstValue::Bool(true)),
                ("R_SWA_WINDOW", ConstValue::Int(64)),
                ("CHUNK_LOOKBACK", ConstValue::Int(0)),
            ],
            config::MSG_RSWA_WITH_CHUNK,
        ),
        (
            "unified_chunk_noncausal",
            vec![
                ("USE_MM_PREFIX", ConstValue::Bool(false)),
                ("MM_PREFIX_CLAMP_SW", ConstValue::Bool(false)),
                ("USE_CAUSAL", ConstValue::Bool(false)),
                ("CHUNK_LOOKBACK", ConstValue::Int(0)),
                ("CHUNK_SIZE", ConstValue::Int(1024)),
            ],
            config::MSG_CHUNK_NONCAUSAL,
        ),
        (
            "unified_chunk_size_zero",
            vec![
                ("USE_MM_PREFIX", ConstValue::Bool(false)),
                ("MM_PREFIX_CLAMP_SW", ConstValue::Bool(false)),
                ("SLIDING_WINDOW", ConstValue::Int(1)),
                ("CHUNK_LOOKBACK", ConstValue::Int(1)),
            ],
            config::MSG_CHUNK_SIZE_ZERO,
        ),
        (
            "unified_chunk_without_window",
            vec![
                ("USE_MM_PREFIX", ConstValue::Bool(false)),
                ("MM_PREFIX_CLAMP_SW", ConstValue::Bool(false)),
                ("SLIDING_WINDOW", ConstValue::Int(0)),
                ("CHUNK_LOOKBACK", ConstValue::Int(0)),
            ],
            config::MSG_CHUNK_WITHOUT_WINDOW,
        ),
        (
            "unified_chunk_size_mismatch",
            vec![
                ("USE_MM_PREFIX", ConstValue::Bool(false)),
                ("MM_PREFIX_CLAMP_SW", ConstValue::Bool(false)),
                ("CHUNK_LOOKBACK", ConstValue::Int(1)),
                ("CHUNK_SIZE", ConstValue::Int(256)),
            ],
            config::MSG_CHUNK_SIZE_MISMATCH,
        ),
        (
            "unified_per_seq_without_causal",
            vec![
                ("USE_MM_PREFIX", ConstValue::Bool(false)),
                ("MM_PREFIX_CLAMP_SW", ConstValue::Bool(false)),
                ("USE_CAUSAL", ConstValue::Bool(false)),
                ("USE_PER_SEQ_CAUSAL", ConstValue::Bool(true)),
            ],
            config::MSG_PER_SEQ_CAUSAL_WITHOUT_CAUSAL,
        ),
        (
            "unified_alibi_sqrt_without_slopes",
            vec![("USE_ALIBI_SQRT", ConstValue::Bool(true))],
            config::MSG_ALIBI_SQRT_WITHOUT_SLOPES,
        ),
        (
            "unified_segments_in_2d",
            vec![("NUM_SEGMENTS", ConstValue::Int(16))],
            config::MSG_2D_WITH_SEGMENTS,
        ),
        (
            "unified_segments_not_pow2",
            vec![
                ("IS_3D", ConstValue::Bool(true)),
                ("NUM_SEGMENTS", ConstValue::Int(12)),
            ],
            config::MSG_SEGMENTS_NOT_POW2,
        ),
        (
            "unified_tile_not_pow2",
            vec![("TILE_SIZE", ConstValue::Int(48))],
            config::MSG_TILE_NOT_POW2,
        ),
        (
            "unified_tile_too_small",
            vec![("TILE_SIZE", ConstValue::Int(8))],
            config::MSG_TILE_TOO_SMALL,
        ),
        (
            "unified_block_q_mismatch",
            vec![("BLOCK_Q", ConstValue::Int(4))],
            config::MSG_BLOCK_Q_MISMATCH,
        ),
        (
            "unified_block_size_not_16",
            vec![("BLOCK_SIZE", ConstValue::Int(24))],
            config::MSG_BLOCK_SIZE_NOT_MULTIPLE_OF_16,
        ),
        (
            "unified_head_over_padded",
            vec![("HEAD_SIZE", ConstValue::Int(192))],
            config::MSG_HEAD_SIZE_OVER_PADDED,
        ),
        (
            "unified_query_range_without_mm",
            vec![
                ("USE_MM_PREFIX", ConstValue::Bool(false)),
                ("MM_PREFIX_CLAMP_SW", ConstValue::Bool(false)),
                ("USE_MM_QUERY_RANGE", ConstValue::Bool(true)),
            ],
            config::MSG_MM_QUERY_RANGE_WITHOUT_MM,
        ),
    ]
}

fn with(overrides: &[(&'static str, ConstValue)]) -> Bindings {
    let mut all = base();
    for (k, v) in overrides {
        match all.iter_mut().find(|(b, _)| b == k) {
            Some(slot) => slot.1 = v.clone(),
            None => all.push((k, v.clone())),
        }
    }
    all
}

#[test]
fn the_base_configuration_specializes() {
    UNIFIED_ATTENTION_TEMPLATE
        .specialize(&base())
        .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn every_rule_fails_with_the_same_message_at_run_time_and_compile_time() {
    let ui = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/ui");
    for (case, overrides, msg) in cases() {
        let err = match UNIFIED_ATTENTION_TEMPLATE.specialize(&with(&overrides)) {
            Ok(_) => panic!("{case}: specialized"),
            Err(e) => e,
        };
        let first = format!("require failed: {msg}");
        assert!(
            err.message.starts_with(&first),
            "{case}: run-time message `{}`",
            err.message
        );
        let stderr = std::fs::read_to_string(ui.join(format!("{case}.stderr")))
            .unwrap_or_else(|e| panic!("{case}.stderr: {e}"));
        assert!(
            stderr.contains(&first),
            "{case}: compile-time message differs:\n{stderr}"
        );
        assert!(
            config::ALL_RULE_MESSAGES.contains(&msg),
            "{case}: not a host-side rule"
        );
    }
}
