//! Tile-loop bounds (spec `unified_attention.md` §4) against the mask (§3): the §4 seed
//! table, the §7.4 property check over random geometries, and fixed regression cases.

use attn_runtime::ops::unified_attention::bounds::{
    compute_tile_loop_bounds, tiles_per_segment, BlockGeometry, BlockMmRanges, TileLoopBounds,
};
use attn_runtime::ops::unified_attention::config::{UnifiedAttentionConfig, MSG_CHUNK_NONCAUSAL};
use attn_runtime::ops::unified_attention::mask::{allowed, SequenceMask};
use attn_runtime::problem::SplitMix64;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;

mod bounds_common;
use bounds_common::{clamped_mm, per_query_rows, plain_config};

fn seed_geometry() -> BlockGeometry {
    BlockGeometry {
        context_len: 0,
        seq_len: 4096,
        query_len: 4096,
        q_block: 140,
        segment: 0,
        tiles_per_segment: 0,
    }
}

fn bounds_of(cfg: &UnifiedAttentionConfig, ranges: &[[i32; 2]]) -> TileLoopBounds {
    cfg.validate().expect("seed config is valid");
    compute_tile_loop_bounds(cfg, &seed_geometry(), BlockMmRanges::PerSequence(ranges))
}

#[test]
fn seed_causal_clamped_mm_is_3_to_72() {
    let cfg = clamped_mm(plain_config(32, 2, 1024, 256), 2);
    let b = bounds_of(&cfg, &[[1024, 2303], [0, 0]]);
    assert_eq!((b.loop_lo, b.loop_hi, b.max_seq_prefix_len), (3, 72, 4096));
}

#[test]
fn seed_noncausal_clamped_mm_is_3_to_68() {
    let mut cfg = clamped_mm(plain_config(32, 2, 1024, 256), 2);
    cfg.use_causal = false;
    let b = bounds_of(&cfg, &[[1024, 1500], [0, 0]]);
    assert_eq!((b.loop_lo, b.loop_hi, b.max_seq_prefix_len), (3, 68, 4096));
}

#[test]
fn seed_per_seq_causal_clamped_mm_is_3_to_68() {
    let mut cfg = clamped_mm(plain_config(32, 2, 1024, 256), 2);
    cfg.use_per_seq_causal = true;
    let b = bounds_of(&cfg, &[[1024, 1500], [0, 0]]);
    assert_eq!((b.loop_lo, b.loop_hi, b.max_seq_prefix_len), (3, 68, 4096));
}

#[test]
fn seed_unclamped_mm_disables_pruning() {
    let mut cfg = clamped_mm(plain_config(32, 2, 1024, 256), 2);
    cfg.mm_prefix_clamp_sw = false;
    let b = bounds_of(&cfg, &[[1024, 2303], [0, 0]]);
    assert_eq!((b.loop_lo, b.loop_hi), (0, 128));
}

#[test]
fn seed_per_query_encoding_matches_per_sequence() {
    let mut cfg = clamped_mm(plain_config(32, 2, 1024, 256), 2);
    cfg.use_mm_query_range = true;
    let rows: Vec<[i32; 2]> = (0..4096)
        .map(|t| {
            if (1024..=2303).contains(&t) {
                [1024, 2303]
            } else {
                [-1, -1]
            }
        })
        .collect();
    let b = compute_tile_loop_bounds(&cfg, &seed_geometry(), BlockMmRanges::PerQuery(&rows));
    assert_eq!((b.loop_lo, b.loop_hi, b.max_seq_prefix_len), (3, 72, 4096));
}

#[test]
fn seed_plain_causal_window_prunes_to_query_span() {
    let cfg = plain_config(32, 2, 1024, 256);
    let b = bounds_of(&cfg, &[]);
    // first = 1120 − 1023 = 97 → tile 3; last = 1127 → tile 35; MSP = 1128.
    assert_eq!((b.loop_lo, b.loop_hi, b.max_seq_prefix_len), (3, 36, 1128));
}

// ------------------------------------------------------------------------------------------
// §7.4 property check
// ------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Causality {
    Causal,
    NonCausal,
    PerSeq(bool),
}

/// One random geometry of §7.4, already sanitized to a valid configuration.
#[derive(Clone, Debug)]
struct Geometry {
    cfg: UnifiedAttentionConfig,
    causal: Causality,
    context_len: i64,
    query_len: i64,
    ranges: Vec<[i32; 2]>,
    rswa_prefix_len: i64,
}

type Knobs = (
    (i32, i32, i32, u8, i32, usize),
    (bool, bool, bool, i64, i64, u32),
    (bool, u64, u8),
);

fn knobs() -> impl Strategy<Value = Knobs> {
    (
        (
            prop::sample::select(vec![16, 32]),
            prop::sample::select(vec![1, 2, 3, 5, 8]),
            prop::sample::select(vec![0, 1, 7, 32, 64]),
            0u8..4,
            prop::sample::select(vec![-1, 0, 1]),
            0usize..=3,
        ),
        (
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            0i64..300,
            1i64..80,
            0u32..3,
        ),
        (any::<bool>(), any::<u64>(), 0u8..8),
    )
}

/// Up to `n` sorted, disjoint inclusive ranges inside `[0, l)`, some longer than W.
fn random_ranges(rng: &mut SplitMix64, n: usize, l: i64) -> Vec<[i32; 2]> {
    let mut pts: Vec<i64> = (0..2 * n).map(|_| rng.below(l as usize) as i64).collect();
    pts.sort_unstable();
    pts.dedup();
    pts.chunks_exact(2)
        .filter(|c| c[0] < c[1])
        .map(|c| [c[0] as i32, c[1] as i32])
        .collect()
}

fn geometry_from(k: Knobs) -> Geometry {
    let (
        (tile, nqpkv, w, causal_pick, lb, n_ranges),
        (use_mm, clamp, per_query, ctx, qlen, nseg_pow),
        (flag, seed, rswa_pick),
    ) = k;
    let mut cfg = plain_config(tile, nqpkv, w, 256);
    let causal = match causal_pick {
        0 | 1 => Causality::Causal,
        2 => Causality::NonCausal,
        _ => Causality::PerSeq(flag),
    };
    cfg.use_causal = causal != Causality::NonCausal;
    cfg.use_per_seq_causal = matches!(causal, Causality::PerSeq(_));
    let chunk_ok = lb >= 0 && w > 0 && w / (lb + 1) > 0 && causal == Causality::Causal;
    cfg.chunk_lookback = if chunk_ok { lb } else { -1 };
    cfg.chunk_size = if chunk_ok { w / (lb + 1) } else { 0 };
    let mut rng = SplitMix64(seed);
    let l = ctx + qlen;
    let ranges = if use_mm {
        random_ranges(&mut rng, n_ranges, l)
    } else {
        Vec::new()
    };
    cfg.use_mm_prefix = use_mm;
    cfg.use_mm_query_range = use_mm && per_query;
    cfg.max_mm_ranges = if use_mm { 3 } else { 0 };
    cfg.mm_prefix_clamp_sw = use_mm && clamp && w > 0;
    let mut rswa_prefix_len = 0;
    if rswa_pick == 0 && cfg.chunk_lookback < 0 {
        cfg.use_r_swa = true;
        cfg.sliding_window = 0;
        cfg.mm_prefix_clamp_sw = false;
        cfg.r_swa_window = 1 + rng.below(40) as i32;
        rswa_prefix_len = rng.below(l as usize + 1) as i64;
    }
    if qlen == 1 && nseg_pow > 0 {
        cfg.is_3d = true;
        cfg.num_segments = 1 << (2 * nseg_pow);
    }
    Geometry {
        cfg,
        causal,
        context_len: ctx,
        query_len: qlen,
        ranges,
        rswa_prefix_len,
    }
}

#[derive(Default, Debug, Clone, Copy)]
struct Slack {
    blocks: u64,
    extra_tiles: u64,
}

/// The tiles a block's programs visit: one interval in 2D, the union of segments in 3D.
fn visited_tiles(g: &Geometry, b: i64, ranges: BlockMmRanges<'_>) -> (Vec<bool>, i64) {
    let l = g.context_len + g.query_len;
    let tile = i64::from(g.cfg.tile_size);
    let mut visited = vec![false; ((l + tile - 1) / tile) as usize + 1];
    let nseg = if g.cfg.is_3d {
        i64::from(g.cfg.num_segments)
    } else {
        1
    };
    let tps = tiles_per_segment(l, nseg, tile);
    let mut msp = 0;
    for s in 0..nseg {
        let geo = BlockGeometry {
            context_len: g.context_len,
            seq_len: l,
            query_len: g.query_len,
            q_block: b,
            segment: s,
            tiles_per_segment: tps,
        };
        let bd = compute_tile_loop_bounds(&g.cfg, &geo, ranges);
        msp = bd.max_seq_prefix_len;
        for j in bd.loop_lo.max(0)..bd.loop_hi {
            visited[j as usize] = true;
        }
    }
    (visited, msp)
}

/// Property 1 (coverage, with `k < MSP`) for every block of the geometry, both range
/// encodings agreeing; returns the slack over the tightest covering interval.
fn check_geometry(g: &Geometry) -> Result<Slack, String> {
    g.cfg
        .validate()
        .map_err(|e| format!("generator produced an invalid config: {e}"))?;
    let l = g.context_len + g.query_len;
    let tile = i64::from(g.cfg.tile_size);
    let (bq, bm, nq) = (
        i64::from(g.cfg.block_q),
        i64::from(g.cfg.block_m),
        i64::from(g.cfg.num_queries_per_kv),
    );
    let rows = per_query_rows(&g.ranges, g.context_len, g.query_len);
    let causal = match g.causal {
        Causality::Causal => true,
        Causality::NonCausal => false,
        Causality::PerSeq(f) => f,
    };
    let mask_cfg = g.cfg.mask_config();
    let mut slack = Slack::default();
    for b in 0..(g.query_len + bq - 1) / bq {
        let ranges = if g.cfg.use_mm_query_range {
            BlockMmRanges::PerQuery(&rows)
        } else {
            BlockMmRanges::PerSequence(&g.ranges)
        };
        let (visited, msp) = visited_tiles(g, b, ranges);
        let (mut lo_need, mut hi_need) = (i64::MAX, i64::MIN);
        for r in 0..bm {
            let t = b * bq + r / nq;
            if t >= g.query_len {
                continue;
            }
            let q = g.context_len + t;
            let seq_ranges = SequenceMask {
                seq_len: l,
                causal,
                rswa_prefix_len: g.rswa_prefix_len,
                mm_ranges: &g.ranges,
            };
            let own = [rows[t as usize]];
            let query_ranges = SequenceMask {
                mm_ranges: &own,
                ..seq_ranges
            };
            for k in 0..l {
                let a = allowed(&mask_cfg, &seq_ranges, q, k);
                if a != allowed(&mask_cfg, &query_ranges, q, k) {
                    return Err(format!("range encodings disagree at q={q} k={k}"));
                }
                if !a {
                    continue;
                }
                if k >= msp || !visited[(k / tile) as usize] {
                    return Err(format!(
                        "block {b} row {r} (q={q}): allowed key {k} not visited (msp {msp})"
                    ));
                }
                lo_need = lo_need.min(k / tile);
                hi_need = hi_need.max(k / tile);
            }
        }
        let n_visited = visited.iter().filter(|&&v| v).count() as i64;
        let n_needed = if hi_need >= lo_need {
            hi_need - lo_need + 1
        } else {
            0
        };
        slack.blocks += 1;
        slack.extra_tiles += (n_visited - n_needed).max(0) as u64;
    }
    Ok(slack)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

    #[test]
    fn bounds_cover_every_allowed_key(k in knobs()) {
        let g = geometry_from(k);
        if let Err(e) = check_geometry(&g) {
            prop_assert!(false, "{e}\n{g:#?}");
        }
    }
}

/// The §7.4 sweep (3000 geometries, deterministic) with the slack report; run with
/// `--nocapture` to see the mean number of extra tiles per block.
#[test]
fn bounds_sweep_reports_slack() {
    let mut runner = TestRunner::deterministic();
    let strategy = knobs();
    let mut total = Slack::default();
    for _ in 0..3000 {
        let g = geometry_from(strategy.new_tree(&mut runner).expect("strategy").current());
        let s = check_geometry(&g).unwrap_or_else(|e| panic!("{e}\n{g:#?}"));
        total.blocks += s.blocks;
        total.extra_tiles += s.extra_tiles;
    }
    let mean = total.extra_tiles as f64 / total.blocks.max(1) as f64;
    eprintln!(
        "bounds slack: {} blocks, mean {mean:.3} extra tiles per block",
        total.blocks
    );
    assert!(total.blocks > 3000);
}

// ------------------------------------------------------------------------------------------
// Regression cases for the §7.4 categories
// ------------------------------------------------------------------------------------------

#[test]
fn chunked_noncausal_is_rejected() {
    let mut cfg = plain_config(32, 2, 64, 256);
    cfg.chunk_lookback = 0;
    cfg.chunk_size = 64;
    cfg.use_causal = false;
    assert_eq!(cfg.validate().map_err(|e| e.rule), Err(MSG_CHUNK_NONCAUSAL));
    cfg.use_causal = true;
    cfg.use_per_seq_causal = true;
    assert_eq!(cfg.validate().map_err(|e| e.rule), Err(MSG_CHUNK_NONCAUSAL));
    cfg.use_per_seq_causal = false;
    assert!(cfg.validate().is_ok());
}

/// The coverage violation the rule prevents: with a non-causal chunk mask the bounds
/// (upper = `q_hi + W − 1`) miss future chunks.
#[test]
fn chunked_noncausal_would_violate_coverage() {
    let mut cfg = plain_config(16, 1, 32, 256);
    cfg.chunk_lookback = 0;
    cfg.chunk_size = 32;
    cfg.use_causal = false;
    let g = Geometry {
        cfg,
        causal: Causality::NonCausal,
        context_len: 0,
        query_len: 200,
        ranges: vec![],
        rswa_prefix_len: 0,
    };
    let err = check_geometry(&g).expect_err("must be invalid");
    assert!(err.contains("invalid config"), "{err}");
    let mask_cfg = g.cfg.mask_config();
    let seq = SequenceMask {
        seq_len: 200,
        causal: false,
        rswa_prefix_len: 0,
        mm_ranges: &[],
    };
    let b = compute_tile_loop_bounds(
        &g.cfg,
        &BlockGeometry {
            context_len: 0,
            seq_len: 200,
            query_len: 200,
            q_block: 0,
            segment: 0,
            tiles_per_segment: 0,
        },
        BlockMmRanges::None,
    );
    let missed = (0..200)
        .filter(|&k| allowed(&mask_cfg, &seq, 0, k) && k >= 16 * b.loop_hi)
        .count();
    assert!(
        missed > 0,
        "the non-causal chunk mask admits keys past the bounds"
    );
}

/// Upstream V guard (§1.4 step 7) keyed on the block's first row q_lo: `true` when
/// it would zero `V[k]`.
fn upstream_guard_zeroes(w: i64, causal: bool, a_lo: i64, k: i64) -> bool {
    a_lo - k >= w || (!causal && a_lo - k <= -w)
}

/// Counts (row, key) pairs whose allowed key the upstream guard would zero.
fn guard_conflicts(g: &Geometry, b: i64) -> usize {
    let l = g.context_len + g.query_len;
    let (bq, bm, nq) = (
        i64::from(g.cfg.block_q),
        i64::from(g.cfg.block_m),
        i64::from(g.cfg.num_queries_per_kv),
    );
    let causal = g.causal == Causality::Causal;
    let seq = SequenceMask {
        seq_len: l,
        causal,
        rswa_prefix_len: 0,
        mm_ranges: &g.ranges,
    };
    let a_lo = g.context_len + b * bq;
    let mut n = 0;
    for r in (0..bm).step_by(nq as usize) {
        let t = b * bq + r / nq;
        if t >= g.query_len {
            continue;
        }
        let q = g.context_len + t;
        n += (0..l)
            .filter(|&k| {
                allowed(&g.cfg.mask_config(), &seq, q, k)
                    && upstream_guard_zeroes(i64::from(g.cfg.sliding_window), causal, a_lo, k)
            })
            .count();
    }
    n
}

/// §3.8: PR geometry, non-causal, W 1024: 28 (row, key) pairs per head are zeroed by the
/// upstream guard; the configuration is legal and its bounds still cover every key.
#[test]
fn v_guard_hazard_noncausal_window() {
    let mut cfg = plain_config(32, 2, 1024, 256);
    cfg.use_causal = false;
    let g = Geometry {
        cfg,
        causal: Causality::NonCausal,
        context_len: 0,
        query_len: 4096,
        ranges: vec![],
        rswa_prefix_len: 0,
    };
    assert_eq!(guard_conflicts(&g, 140), 28);
    let small = Geometry {
        context_len: 0,
        query_len: 300,
        ..g.clone()
    };
    let mut small = small;
    small.cfg.sliding_window = 32;
    check_geometry(&small).expect("legal NC + SW geometry is covered");
}

/// §3.8: unclamped ranges longer than W reach farther left than the guard keeps.
#[test]
fn v_guard_hazard_unclamped_long_range() {
    let mut cfg = plain_config(16, 1, 8, 256);
    cfg.use_mm_prefix = true;
    cfg.max_mm_ranges = 1;
    let g = Geometry {
        cfg,
        causal: Causality::Causal,
        context_len: 10,
        query_len: 60,
        ranges: vec![[5, 60]],
        rswa_prefix_len: 0,
    };
    assert!(guard_conflicts(&g, 3) > 0);
    check_geometry(&g).expect("legal unclamped geometry is covered");
}

/// Causal clamped MM is guard-safe: every allowed key is right of `q_lo − W`.
#[test]
fn v_guard_safe_for_causal_clamped_mm() {
    let g = Geometry {
        cfg: clamped_mm(plain_config(32, 2, 64, 256), 2),
        causal: Causality::Causal,
        context_len: 40,
        query_len: 300,
        ranges: vec![[10, 200], [220, 330]],
        rswa_prefix_len: 0,
    };
    for b in 0..(300 / 8) {
        assert_eq!(guard_conflicts(&g, b), 0, "block {b}");
    }
    check_geometry(&g).expect("covered");
}

#[test]
fn spill_rows_and_3d_segments_are_covered() {
    let mut cfg = plain_config(16, 5, 7, 256);
    cfg.is_3d = true;
    cfg.num_segments = 16;
    let g = Geometry {
        cfg,
        causal: Causality::Causal,
        context_len: 250,
        query_len: 1,
        ranges: vec![],
        rswa_prefix_len: 0,
    };
    check_geometry(&g).expect("3D decode covered");
    let g2 = Geometry {
        cfg: plain_config(16, 3, 7, 256),
        causal: Causality::Causal,
        context_len: 17,
        query_len: 77,
        ranges: vec![],
        rswa_prefix_len: 0,
    };
    check_geometry(&g2).expect("spill rows covered");
}
