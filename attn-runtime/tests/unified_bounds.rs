//! The DSL tile bounds (`vllm_bounds`) and mask (`vllm_mask`), executed on the CPU executor
//! through the bounds probe kernel: the spec §4 seed geometry, and a property test over
//! random geometries (spec §7.4) that every key the reference mask allows lies in the
//! DSL's visited tiles, that the DSL mask equals the reference mask, and how much the
//! bounds visit beyond what the mask needs (slack).

use std::sync::atomic::{AtomicU64, Ordering};

use attn_dsl::ir::ScalarType;
use attn_dsl::{specialize, ConstValue};
use attn_runtime::kernels::bounds_probe::{probe_block, ProbeBlock};
use attn_runtime::kernels::unified_attention;
use attn_runtime::ops::unified_attention::bounds::{
    compute_tile_loop_bounds, BlockGeometry, BlockMmRanges,
};
use attn_runtime::ops::unified_attention::config::{UnifiedAttentionConfig, MSG_CHUNK_NONCAUSAL};
use attn_runtime::ops::unified_attention::mask::{allowed, SequenceMask};
use attn_runtime::ops::unified_attention::plan::{attention_bindings, MaskVariant};
use proptest::prelude::*;
use proptest::test_runner::TestRunner;

mod bounds_common;
use bounds_common::{per_query_rows, plain_config, seed_block, seed_config};

/// Spec §4 table: context 0, L = qlen = 4096, b = 140 (rows 1120..1127), BLOCK_Q 8,
/// nqpkv 2, TILE 32, W 1024, clamped MM with MAX_MM_RANGES = 2 (second range padding).
fn seed(use_causal: bool, per_seq: Option<bool>, range: [i32; 2]) -> (i32, i32, i32) {
    let cfg = seed_config(use_causal, per_seq);
    let ranges = [range, [0, 0]];
    let block = seed_block(use_causal, per_seq, &ranges);
    let module = unified_attention::module().expect("module");
    let r = probe_block(&module, &cfg, &MaskVariant::default(), &block, 16).expect("probe");
    (r.loop_lo, r.loop_hi, r.max_seq_prefix_len)
}

#[test]
fn seed_clamped_mm_prunes_to_3_72() {
    assert_eq!(seed(true, None, [1024, 2303]), (3, 72, 4096));
}

#[test]
fn seed_non_causal_keeps_right_window_3_68() {
    assert_eq!(seed(false, None, [1024, 1500]), (3, 68, 4096));
}

#[test]
fn seed_per_seq_causal_bidirectional_sequence_3_68() {
    assert_eq!(seed(true, Some(false), [1024, 1500]), (3, 68, 4096));
    // A causal sequence in a per-sequence-causal launch: the DSL bounds use the
    // sequence's own flag, so the right window is not added (vLLM's constexpr-only
    // bounds would visit [3, 68) here too). Last key: the range end 1500 → tile 46.
    assert_eq!(seed(true, Some(true), [1024, 1500]), (3, 47, 4096));
}

/// Spec §2.1 rule 15 / §7.4: chunked + non-causal is unsound for the bounds, so the
/// kernel's own `require` rejects it at specialization, whatever the host does.
#[test]
fn chunked_non_causal_is_rejected_by_the_kernel() {
    let cfg = UnifiedAttentionConfig {
        use_causal: false,
        chunk_lookback: 0,
        chunk_size: 64,
        ..plain_config(32, 2, 64, 64)
    };
    let module = unified_attention::module().expect("module");
    let bindings = attention_bindings(&cfg, ScalarType::Bf16, &MaskVariant::default(), 1.0);
    let err = specialize(module.module(), "unified_attention", &bindings).expect_err("rejected");
    assert!(err.message.contains(MSG_CHUNK_NONCAUSAL), "{}", err.message);
    assert!(bindings
        .iter()
        .any(|b| b.name == "MASK" && b.value == ConstValue::Device("vllm_mask".into())));
}

/// Keys probed per row: every generated L is at most this.
const KEYS: usize = 256;

#[derive(Clone, Debug)]
struct Case {
    cfg: UnifiedAttentionConfig,
    seq_len: i32,
    query_len: i32,
    q_block: i32,
    causal: bool,
    rswa_prefix_len: i32,
    ranges: Vec<[i32; 2]>,
}

/// Sorted, disjoint inclusive ranges inside `[0, L)`, padded with `(0, 0)` to 3.
fn ranges_from(cuts: &[u16], count: usize, l: i32) -> Vec<[i32; 2]> {
    let mut points: Vec<i32> = cuts.iter().map(|&c| i32::from(c) % l.max(1)).collect();
    points.truncate(2 * count);
    points.sort_unstable();
    points.dedup();
    let mut out: Vec<[i32; 2]> = points.chunks_exact(2).map(|p| [p[0], p[1]]).collect();
    out.resize(3, [0, 0]);
    out
}

prop_compose! {
    /// Spec §7.4 ranges: TILE {16, 32}, nqpkv {1, 2, 3, 5, 8}, W {0, 1, 7, 32, 64},
    /// causal / non-causal / per-sequence causal, LB off / 0 / 1, 0–3 ranges, clamp on/off,
    /// both range encodings, R-SWA sometimes; random L, qlen and q-block.
    fn case()(
        tile in prop::sample::select(vec![16, 32]),
        nqpkv in prop::sample::select(vec![1, 2, 3, 5, 8]),
        window in prop::sample::select(vec![0, 1, 7, 32, 64]),
        causal_mode in 0..3u8,
        seq_causal in any::<bool>(),
        lookback in -1..2i32,
        num_ranges in 0..4usize,
        cuts in prop::collection::vec(any::<u16>(), 6),
        clamp in any::<bool>(),
        per_query in any::<bool>(),
        rswa in prop::option::weighted(0.15, (1..40i32, any::<u16>())),
        seq_len in 1..(KEYS as i32 + 1),
        qlen_frac in 0.0..1.0f64,
        block_frac in 0.0..1.0f64,
    ) -> Case {
        let mut cfg = plain_config(tile, nqpkv, window, 64);
        cfg.use_causal = causal_mode != 1;
        cfg.use_per_seq_causal = causal_mode == 2;
        let causal = match causal_mode { 0 => true, 1 => false, _ => seq_causal };
        let causal_only = causal_mode == 0;
        if lookback >= 0 && causal_only && window > 0 && window / (lookback + 1) > 0 {
            cfg.chunk_lookback = lookback;
            cfg.chunk_size = window / (lookback + 1);
        }
        let l = seq_len;
        let mut rswa_prefix_len = 0;
        if let Some((r, p)) = rswa {
            cfg = UnifiedAttentionConfig { sliding_window: 0, chunk_lookback: -1, chunk_size: 0, ..cfg };
            cfg.use_r_swa = true;
            cfg.r_swa_window = r;
            rswa_prefix_len = i32::from(p) % (l + 1);
        }
        let ranges = ranges_from(&cuts, num_ranges, l);
        if num_ranges > 0 {
            cfg.use_mm_prefix = true;
            cfg.use_mm_query_range = per_query;
            cfg.max_mm_ranges = if per_query { 0 } else { 3 };
            cfg.mm_prefix_clamp_sw = clamp && cfg.sliding_window > 0;
        }
        cfg.tile_ranges = cfg.builtin_tile_ranges();
        let query_len = ((f64::from(l) * qlen_frac) as i32).clamp(1, l);
        let blocks = (query_len + cfg.block_q - 1) / cfg.block_q;
        let q_block = ((f64::from(blocks) * block_frac) as i32).min(blocks - 1);
        Case { cfg, seq_len: l, query_len, q_block, causal, rswa_prefix_len, ranges }
    }
}

/// Slack accounting over all cases: tiles visited vs tiles the mask needs.
static VISITED: AtomicU64 = AtomicU64::new(0);
static NEEDED: AtomicU64 = AtomicU64::new(0);
static TIGHTER_THAN_HOST: AtomicU64 = AtomicU64::new(0);
static CASES: AtomicU64 = AtomicU64::new(0);

fn check(case: &Case) -> Result<(), TestCaseError> {
    let cfg = &case.cfg;
    prop_assert!(
        cfg.validate().is_ok(),
        "generator made an invalid config: {:?}",
        cfg.validate()
    );
    let rows = per_query_rows(
        &case.ranges,
        i64::from(case.seq_len - case.query_len),
        i64::from(case.query_len),
    );
    let per_query = cfg.use_mm_query_range;
    let context = case.seq_len - case.query_len;
    let block = ProbeBlock {
        context_len: context,
        seq_len: case.seq_len,
        query_len: case.query_len,
        q_block: case.q_block,
        causal: case.causal,
        rswa_prefix_len: case.rswa_prefix_len,
        mm_ranges: if per_query { &[] } else { &case.ranges },
        query_ranges: if per_query { &rows } else { &[] },
        mask_aux: &[],
        mask_aux_f32: &[],
    };
    let module = unified_attention::module().map_err(|e| TestCaseError::fail(e.to_string()))?;
    let r = probe_block(&module, cfg, &MaskVariant::default(), &block, KEYS)
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let tile = cfg.tile_size;
    let mcfg = cfg.mask_config();
    let (mut need_lo, mut need_hi) = (i32::MAX, i32::MIN);
    let mut needed_tiles = std::collections::BTreeSet::new();
    let nq = cfg.num_queries_per_kv;
    for row in 0..cfg.block_m {
        let t = case.q_block * cfg.block_q + row / nq;
        let valid = row < cfg.block_q * nq && t < case.query_len;
        let q = i64::from(context + t);
        let own = if valid && per_query {
            &rows[t as usize..t as usize + 1]
        } else {
            &case.ranges[..]
        };
        let seq = SequenceMask {
            seq_len: i64::from(case.seq_len),
            causal: case.causal,
            rswa_prefix_len: i64::from(case.rswa_prefix_len),
            mm_ranges: if cfg.use_mm_prefix { own } else { &[] },
        };
        for k in 0..KEYS as i32 {
            let want = valid && allowed(&mcfg, &seq, q, i64::from(k));
            prop_assert_eq!(
                r.mask[row as usize][k as usize],
                want,
                "mask row {} (q {}) key {}",
                row,
                q,
                k
            );
            if want {
                prop_assert!(
                    r.covers(i64::from(k), tile, case.seq_len),
                    "key {} of row {} (q {}) outside every tile range {:?} x {}",
                    k,
                    row,
                    q,
                    r.ranges,
                    tile
                );
                needed_tiles.insert(k / tile);
                need_lo = need_lo.min(k / tile);
                need_hi = need_hi.max(k / tile + 1);
            }
        }
    }
    prop_assert!(
        r.max_seq_prefix_len <= case.seq_len,
        "msp {} past L {}",
        r.max_seq_prefix_len,
        case.seq_len
    );
    // The host transcription of vLLM's bounds (spill rows, constexpr causality) never
    // visits fewer tiles than the DSL bounds: the DSL's range lies inside it.
    let host = compute_tile_loop_bounds(
        cfg,
        &BlockGeometry {
            context_len: i64::from(context),
            seq_len: i64::from(case.seq_len),
            query_len: i64::from(case.query_len),
            q_block: i64::from(case.q_block),
            segment: 0,
            tiles_per_segment: 0,
        },
        if !cfg.use_mm_prefix {
            BlockMmRanges::None
        } else if per_query {
            BlockMmRanges::PerQuery(&rows)
        } else {
            BlockMmRanges::PerSequence(&case.ranges)
        },
    );
    if need_lo <= need_hi {
        for (lo, hi) in r.visited_keys(tile, case.seq_len) {
            prop_assert!(
                host.loop_lo * i64::from(tile) <= lo && hi <= host.loop_hi * i64::from(tile),
                "DSL keys [{}, {}) vs host tiles [{}, {})",
                lo,
                hi,
                host.loop_lo,
                host.loop_hi
            );
        }
    }
    let visited = r.visited_tiles().max(0) as u64;
    // Tiles holding at least one allowed key (two ranges can skip the holes between).
    let needed = needed_tiles.len() as u64;
    if visited < (host.loop_hi - host.loop_lo).max(0) as u64 {
        TIGHTER_THAN_HOST.fetch_add(1, Ordering::Relaxed);
    }
    VISITED.fetch_add(visited, Ordering::Relaxed);
    NEEDED.fetch_add(needed, Ordering::Relaxed);
    CASES.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// ~200 random geometries (`PROPTEST_CASES` overrides); reports the slack at the end.
#[test]
fn dsl_bounds_cover_reference_mask() {
    let config = ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::with_cases(200)
    };
    let mut runner = TestRunner::new(config);
    if let Err(e) = runner.run(&case(), |c| check(&c)) {
        panic!("{e}");
    }
    let (visited, needed) = (
        VISITED.load(Ordering::Relaxed),
        NEEDED.load(Ordering::Relaxed),
    );
    eprintln!(
        "bounds slack over {} cases: {visited} tiles visited, {needed} needed by the mask ({:.1}% extra); \
         DSL range strictly inside vLLM's (host) bounds in {} cases",
        CASES.load(Ordering::Relaxed),
        100.0 * (visited as f64 / needed.max(1) as f64 - 1.0),
        TIGHTER_THAN_HOST.load(Ordering::Relaxed)
    );
}
