//! CPU-executor parity of the unified-attention kernels with the f64 reference, one
//! feature at a time (spec §3, §1.4, §7.3): clamped multimodal ranges (both encodings,
//! many ranges), per-sequence causal, non-causal windows, R-SWA, chunked attention,
//! sinks, ALiBi, qq_bias, f16, non-power-of-two heads, NaN in pages past L and in evicted
//! sliding-window pages.

mod unified_common;

use attn_runtime::ops::unified_attention::cpu::CpuOptions;
use attn_runtime::ops::unified_attention::mask::{allowed, MaskConfig, SequenceMask};
use attn_runtime::ops::unified_attention::plan::PathChoice;
use attn_runtime::reference::unified_attention::{
    Alibi, AttentionOptions, Causality, MmRanges, QqBias, RSwa,
};
use attn_runtime::reference::Dtype;
use unified_common::run::check_case;
use unified_common::{max_abs_diff, per_query_rows, seeded, Geometry, PagedData};

const MIXED: &[(usize, usize)] = &[(1, 150), (5, 18), (29, 93)];
const DECODE: &[(usize, usize)] = &[(1, 123), (1, 37), (1, 211)];

fn force_3d() -> CpuOptions<'static> {
    CpuOptions {
        path: PathChoice::Force3d { num_segments: 8 },
        ..Default::default()
    }
}

/// Spec §7.3, reduced: qlens [96, 48], kvlens [96, 80], one image per sequence (the first
/// longer than the window, so the clamp matters), SW 32, LB 0 (C = 32), heads 4/2.
#[test]
fn clamped_mm_dense_case_both_encodings() {
    let mut g = Geometry::new(&[(96, 96), (48, 80)], (4, 2), 64);
    g.block_size = 16;
    let data = PagedData::random(&g, 21);
    let ranges = [[8, 87], [40, 71]];
    let options = AttentionOptions {
        sliding_window: 32,
        chunk_lookback: 0,
        mm_ranges: MmRanges::PerSequence(&ranges, 1),
        mm_prefix_clamp_sw: true,
        ..Default::default()
    };
    // The shared mask equals §7.3's dense `keep` formula, written out independently.
    let cfg = MaskConfig {
        sliding_window: 32,
        chunk_lookback: 0,
        chunk_size: 32,
        use_mm_prefix: true,
        mm_prefix_clamp_sw: true,
        ..MaskConfig::full()
    };
    for (s, &l) in [96i64, 80].iter().enumerate() {
        let [a, b] = ranges[s];
        let (a, b) = (i64::from(a), i64::from(b));
        let seq = SequenceMask {
            seq_len: l,
            causal: true,
            rswa_prefix_len: 0,
            mm_ranges: &ranges[s..s + 1],
        };
        for q in 0..l {
            for k in 0..l {
                let d = q - k;
                let keep = (d >= 0 && q / 32 - k / 32 <= 0)
                    || ((a..=b).contains(&q) && (a..=b).contains(&k) && d < 32);
                assert_eq!(allowed(&cfg, &seq, q, k), keep, "seq {s} q {q} k {k}");
            }
        }
    }
    let (with_mm, _) = check_case(
        "clamped MM per-sequence",
        &data,
        options,
        CpuOptions::default(),
    );
    let rows = per_query_rows(&data, &ranges, 1);
    let per_query = AttentionOptions {
        mm_ranges: MmRanges::PerQuery(&rows),
        ..options
    };
    let (with_rows, _) = check_case(
        "clamped MM per-query",
        &data,
        per_query,
        CpuOptions::default(),
    );
    let want: Vec<f64> = with_mm.output.iter().map(|&x| f64::from(x)).collect();
    assert!(
        max_abs_diff(&with_rows.output, &want) < 1e-6,
        "encodings disagree"
    );
    // The MM term matters: without ranges the output changes.
    let chunk_only = AttentionOptions {
        mm_ranges: MmRanges::None,
        mm_prefix_clamp_sw: false,
        ..options
    };
    let (without, _) = check_case("chunk only", &data, chunk_only, CpuOptions::default());
    let with: Vec<f64> = with_mm.output.iter().map(|&x| f64::from(x)).collect();
    assert!(
        max_abs_diff(&without.output, &with) > 0.05,
        "MM ranges had no effect"
    );
}

/// §7.3 case 4, reduced: 12 ranges `(8 + 16i, 17 + 16i)`, L = qlen = 208, SW 16, LB 0.
#[test]
fn many_ranges_match_in_both_encodings() {
    let data = PagedData::random(&Geometry::new(&[(208, 208)], (2, 1), 64), 22);
    let ranges: Vec<[i32; 2]> = (0..12).map(|i| [8 + 16 * i, 17 + 16 * i]).collect();
    let options = AttentionOptions {
        sliding_window: 16,
        chunk_lookback: 0,
        mm_ranges: MmRanges::PerSequence(&ranges, 12),
        mm_prefix_clamp_sw: true,
        ..Default::default()
    };
    check_case(
        "12 ranges per-sequence",
        &data,
        options,
        CpuOptions::default(),
    );
    let rows = per_query_rows(&data, &ranges, 12);
    let per_query = AttentionOptions {
        mm_ranges: MmRanges::PerQuery(&rows),
        ..options
    };
    check_case(
        "12 ranges per-query",
        &data,
        per_query,
        CpuOptions::default(),
    );
}

/// Unclamped (Gemma3-style) ranges: images override the window; no pruning.
#[test]
fn unclamped_mm_ranges_with_window() {
    let data = PagedData::random(&Geometry::new(MIXED, (4, 2), 64), 23);
    let ranges = [[10, 40], [0, 0], [2, 9], [12, 16], [60, 90], [0, 0]];
    let options = AttentionOptions {
        sliding_window: 8,
        mm_ranges: MmRanges::PerSequence(&ranges, 2),
        ..Default::default()
    };
    check_case("unclamped MM", &data, options, CpuOptions::default());
}

#[test]
fn per_sequence_causal_and_non_causal_windows() {
    let data = PagedData::random(&Geometry::new(MIXED, (8, 2), 64), 24);
    let flags = [true, false, false];
    for window in [0, 16] {
        let options = AttentionOptions {
            sliding_window: window,
            causality: Causality::PerSequence(&flags),
            ..Default::default()
        };
        check_case(
            &format!("per-seq causal SW {window}"),
            &data,
            options,
            CpuOptions::default(),
        );
        let options = AttentionOptions {
            sliding_window: window,
            causality: Causality::NonCausal,
            ..Default::default()
        };
        check_case(
            &format!("non-causal SW {window}"),
            &data,
            options,
            CpuOptions::default(),
        );
    }
}

#[test]
fn r_swa_prefix_and_recent_window() {
    let data = PagedData::random(&Geometry::new(MIXED, (4, 4), 64), 25);
    let prefix = [40, 3, 50];
    let options = AttentionOptions {
        r_swa: Some(RSwa {
            window: 12,
            prefix_lens: &prefix,
        }),
        ..Default::default()
    };
    check_case("R-SWA", &data, options, CpuOptions::default());
    let decode = PagedData::random(&Geometry::new(DECODE, (4, 4), 64), 26);
    check_case("R-SWA 3D", &decode, options, force_3d());
}

#[test]
fn chunked_local_attention() {
    let data = PagedData::random(&Geometry::new(MIXED, (4, 2), 64), 27);
    for lookback in [0, 1] {
        let options = AttentionOptions {
            sliding_window: 64,
            chunk_lookback: lookback,
            ..Default::default()
        };
        check_case(
            &format!("chunked LB {lookback}"),
            &data,
            options,
            CpuOptions::default(),
        );
    }
}

#[test]
fn sinks_in_2d_and_3d() {
    let mut rng = seeded(28);
    let sinks: Vec<f32> = (0..8).map(|_| rng.uniform(-2.0, 3.0) as f32).collect();
    let options = AttentionOptions {
        sinks: Some(&sinks),
        sliding_window: 32,
        ..Default::default()
    };
    let data = PagedData::random(&Geometry::new(MIXED, (8, 2), 64), 29);
    check_case("sinks 2D", &data, options, CpuOptions::default());
    let decode = PagedData::random(&Geometry::new(DECODE, (8, 2), 64), 30);
    check_case("sinks 3D", &decode, options, force_3d());
}

#[test]
fn alibi_linear_and_sqrt() {
    let slopes: Vec<f32> = (0..4).map(|h| 0.5f32.powi(h + 1)).collect();
    let data = PagedData::random(&Geometry::new(MIXED, (4, 2), 64), 31);
    let decode = PagedData::random(&Geometry::new(DECODE, (4, 2), 64), 32);
    for sqrt in [false, true] {
        let options = AttentionOptions {
            alibi: Some(Alibi {
                slopes: &slopes,
                sqrt,
            }),
            ..Default::default()
        };
        check_case(
            &format!("ALiBi sqrt={sqrt}"),
            &data,
            options,
            CpuOptions::default(),
        );
        check_case(
            &format!("ALiBi sqrt={sqrt} 3D"),
            &decode,
            options,
            force_3d(),
        );
    }
}

#[test]
fn qq_bias_on_new_tokens() {
    let mut rng = seeded(33);
    let n = 29;
    let bias: Vec<f32> = (0..n * n).map(|_| rng.uniform(-1.0, 1.0) as f32).collect();
    let data = PagedData::random(&Geometry::new(MIXED, (4, 2), 64), 34);
    let options = AttentionOptions {
        qq_bias: Some(QqBias {
            values: &bias,
            stride0: n,
        }),
        ..Default::default()
    };
    check_case("qq_bias", &data, options, CpuOptions::default());
}

#[test]
fn f16_and_f32_data() {
    for dtype in [Dtype::F16, Dtype::F32] {
        let data = PagedData::random(&Geometry::new(MIXED, (4, 2), 64).dtype(dtype), 35);
        let options = AttentionOptions {
            sliding_window: 32,
            softcap: Some(20.0),
            ..Default::default()
        };
        check_case(&format!("{dtype:?}"), &data, options, CpuOptions::default());
    }
}

/// D = 40 pads to 64 lanes: lanes 40..63 must never be stored (the row padding and the
/// next head would catch them).
#[test]
fn head_size_not_power_of_two() {
    let data = PagedData::random(&Geometry::new(MIXED, (5, 1), 40), 36);
    check_case(
        "D 40",
        &data,
        AttentionOptions::default(),
        CpuOptions::default(),
    );
    let decode = PagedData::random(&Geometry::new(DECODE, (5, 1), 40), 37);
    check_case("D 40 3D", &decode, AttentionOptions::default(), force_3d());
}

/// Every cache slot past L (tail of the last page, unused table entries) holds NaN; the
/// non-causal and MM paths read up to L, so a load past L would reach the output.
#[test]
fn nan_past_seq_len_never_reaches_output() {
    let data = PagedData::random(&Geometry::new(&[(5, 21), (3, 35)], (4, 2), 64), 38);
    let tail = |s: usize| {
        let bs = data.block_size;
        let l = data.seq_lens[s] as usize;
        let phys = data.block_table[s * data.block_table_stride + l / bs] as usize;
        let at = (phys * bs + l % bs) * data.num_kv_heads * data.head_size;
        data.k_cache[at].is_nan() && data.v_cache[at].is_nan()
    };
    assert!(tail(0) && tail(1), "fixture must plant NaN right after L");
    for causality in [Causality::Causal, Causality::NonCausal] {
        let options = AttentionOptions {
            causality,
            ..Default::default()
        };
        check_case(
            &format!("NaN tail {causality:?}"),
            &data,
            options,
            CpuOptions::default(),
        );
    }
}

/// Unclamped image ranges that hold queries and start below their window: the block's
/// first attended key is the range's start, not the window's (a guard at the window would
/// zero the range's keys, spec §3.8), and every key below the ranges is evicted (NaN: a
/// guard that let one in would poison the output), in 2D and 3D.
#[test]
fn nan_below_unclamped_ranges_never_reaches_output() {
    const W: usize = 16;
    // MIXED's queries start at 149, 13 and 64, DECODE's are 122, 36 and 210.
    let mixed = [[100, 149], [2, 15], [20, 70]];
    let decode = [[80, 122], [0, 0], [150, 210]];
    let cases = [
        (MIXED, &mixed, [100, 0, 20], 41, CpuOptions::default()),
        (DECODE, &decode, [80, 0, 150], 42, force_3d()),
    ];
    for (geometry, ranges, first_kept, seed, cpu) in cases {
        let mut data = PagedData::random(&Geometry::new(geometry, (4, 2), 64), seed);
        assert!(
            data.evict_below(&first_kept) > 100,
            "fixture must evict keys"
        );
        let options = AttentionOptions {
            sliding_window: W as i32,
            mm_ranges: MmRanges::PerSequence(ranges, 1),
            mm_prefix_clamp_sw: false,
            ..Default::default()
        };
        check_case("evicted below unclamped ranges", &data, options, cpu);
    }
}

/// The sliding-window pages below every query's window are evicted (NaN): the V guard must
/// keep them out of `P · V` on the tiles that straddle the window's edge, under each mode
/// whose guard is a bound on the key (`plan::first_key_v_guard`: causal, non-causal, clamped
/// and unclamped image ranges), in 2D and 3D.
#[test]
fn nan_in_evicted_window_pages_never_reaches_output() {
    const W: usize = 16;
    let modes = [
        ("causal", Causality::Causal, false, false),
        ("non-causal", Causality::NonCausal, false, false),
        ("clamped MM", Causality::Causal, true, true),
        ("unclamped MM", Causality::Causal, true, false),
    ];
    // Ranges above every evicted key (an unclamped range may reach below the window, and a
    // cache under one keeps its pages), each holding its sequence's last query.
    let mixed = [[140, 149], [0, 0], [60, 92]];
    let decode = [[110, 122], [0, 0], [200, 210]];
    let cases = [
        (MIXED, &mixed, 39, CpuOptions::default()),
        (DECODE, &decode, 40, force_3d()),
    ];
    for (geometry, ranges, seed, cpu) in cases {
        let mut data = PagedData::random(&Geometry::new(geometry, (4, 2), 64), seed);
        assert!(data.evict_below_window(W) > 100, "fixture must evict keys");
        for (name, causality, mm, clamp) in modes {
            let options = AttentionOptions {
                sliding_window: W as i32,
                causality,
                mm_ranges: if mm {
                    MmRanges::PerSequence(ranges, 1)
                } else {
                    MmRanges::None
                },
                mm_prefix_clamp_sw: clamp,
                ..Default::default()
            };
            check_case(&format!("evicted pages, {name}"), &data, options, cpu);
        }
    }
}
