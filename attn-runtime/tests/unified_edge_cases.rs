//! Valid edge cases of issue 13 on the CPU executor (the same specializations and launch
//! plan as the GPU) against the dense f64 reference, outputs poisoned with NaN: windows that
//! cover everything (`i32::MAX`, which used to wrap to all-zero rows), zero-length
//! sequences, one token, one page, and a 64-segment 3D split (the chunked reduce).

mod unified_common;

use attn_runtime::ops::unified_attention::cpu::CpuOptions;
use attn_runtime::ops::unified_attention::limits::MAX_SEQ_LEN;
use attn_runtime::ops::unified_attention::plan::PathChoice;
use attn_runtime::reference::unified_attention::{AttentionOptions, Causality};
use proptest::prelude::*;
use unified_common::run::check_case;
use unified_common::{Geometry, PagedData};

fn window(w: i32, causality: Causality<'static>) -> AttentionOptions<'static> {
    AttentionOptions {
        sliding_window: w,
        causality,
        ..AttentionOptions::default()
    }
}

fn path(p: PathChoice) -> CpuOptions<'static> {
    CpuOptions {
        path: p,
        ..CpuOptions::default()
    }
}

/// A window of i32::MAX (or anything ≥ 2^30) selects every key: the output equals the
/// reference with that window, which in turn equals attention with no window at all.
#[test]
fn all_covering_windows_match_no_window() {
    let data = PagedData::random(&Geometry::new(&[(3, 40), (1, 17), (5, 5)], (4, 2), 64), 11);
    for w in [i32::MAX, i32::MAX - 1, MAX_SEQ_LEN, MAX_SEQ_LEN + 1] {
        for causality in [Causality::Causal, Causality::NonCausal] {
            let name = format!("window {w}, {causality:?}");
            let (run, want) = check_case(
                &name,
                &data,
                window(w, causality),
                path(PathChoice::Force2d),
            );
            let (_, dense) = check_case(
                "no window",
                &data,
                window(0, causality),
                path(PathChoice::Force2d),
            );
            assert_eq!(
                want, dense,
                "{name}: the reference itself must not depend on W"
            );
            assert!(
                run.output.iter().any(|&x| x != 0.0),
                "{name}: all-zero output"
            );
        }
    }
}

/// The same on the 3D split-KV path (decode batch).
#[test]
fn all_covering_window_on_the_3d_path() {
    let data = PagedData::random(&Geometry::new(&[(1, 70), (1, 1)], (4, 1), 32), 12);
    let p = path(PathChoice::Force3d { num_segments: 4 });
    check_case(
        "3D window i32::MAX",
        &data,
        window(i32::MAX, Causality::Causal),
        p,
    );
}

/// Sequences with no query tokens (and one with no keys at all) between real ones.
#[test]
fn zero_length_sequences() {
    let data = PagedData::random(
        &Geometry::new(&[(0, 0), (2, 5), (0, 7), (1, 1), (0, 0)], (2, 1), 16),
        13,
    );
    check_case(
        "zero-length",
        &data,
        AttentionOptions::default(),
        CpuOptions::default(),
    );
}

#[test]
fn one_token_and_one_page() {
    let one = PagedData::random(&Geometry::new(&[(1, 1)], (1, 1), 8), 14);
    check_case(
        "one token",
        &one,
        AttentionOptions::default(),
        CpuOptions::default(),
    );
    // Exactly one 16-token block: the last key is the page's last slot.
    let page = PagedData::random(&Geometry::new(&[(4, 16)], (2, 2), 16), 15);
    check_case(
        "one page",
        &page,
        AttentionOptions::default(),
        CpuOptions::default(),
    );
}

/// 64 segments: the reduce combines them in four 16-segment chunks.
#[test]
fn many_segments_reduce_in_chunks() {
    let data = PagedData::random(&Geometry::new(&[(1, 300), (1, 77)], (2, 1), 16), 16);
    check_case(
        "64 segments",
        &data,
        AttentionOptions::default(),
        path(PathChoice::Force3d { num_segments: 64 }),
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, failure_persistence: None, ..ProptestConfig::default() })]

    /// Random small batches mixing empty sequences, single tokens and huge windows.
    #[test]
    fn random_edge_batches(
        seqs in proptest::collection::vec((0usize..3, 0usize..40), 1..4),
        w in prop_oneof![Just(0), Just(i32::MAX), Just(MAX_SEQ_LEN), 1i32..20],
        seed in any::<u64>(),
    ) {
        let seqs: Vec<(usize, usize)> = seqs.iter().map(|&(q, c)| (q, q + c)).collect();
        let data = PagedData::random(&Geometry::new(&seqs, (2, 1), 16), seed);
        check_case("random edge batch", &data, window(w, Causality::Causal), CpuOptions::default());
    }
}

/// A positive scale is applied in the exponent (`SCALE_AFTER_MAX`: the row max of the
/// unscaled scores, scaled once), which `max(s·c) = c·max(s)` allows only for `c > 0`: a
/// zero or negative scale keeps the scores scaled before the max, and each matches the
/// reference, 2D and 3D. Softcapped scores take the softcap (positive) as the exponent's
/// factor, the scale inside their `tanh`, at any scale.
#[test]
fn scale_signs_pick_where_the_scores_are_scaled() {
    use attn_runtime::ops::unified_attention::cpu::run_unified_attention_cpu;
    use attn_runtime::reference::unified_attention::unified_attention;
    use unified_common::{assert_close, ATOL, RTOL};
    let prefill = PagedData::random(&Geometry::new(&[(5, 37), (1, 20)], (4, 2), 32), 16);
    let decode = PagedData::random(&Geometry::new(&[(1, 70), (1, 33)], (4, 2), 32), 17);
    for (scale, softcap, folded) in [
        (0.3, None, true),
        (2.5, None, true),
        (0.0, None, false),
        (-0.4, None, false),
        // Softcapped scores take the softcap as the exponent's factor, whatever the scale.
        (0.3, Some(5.0), true),
        (-0.4, Some(5.0), true),
        (0.0, Some(2.0), true),
    ] {
        for (data, p) in [
            (&prefill, PathChoice::Force2d),
            (&decode, PathChoice::Force3d { num_segments: 2 }),
        ] {
            let name = format!("scale {scale}, softcap {softcap:?}, {p:?}");
            let options = AttentionOptions {
                softcap,
                round_p: Some(data.dtype),
                ..AttentionOptions::default()
            };
            let problem = attn_runtime::reference::unified_attention::UnifiedAttentionProblem {
                scale,
                ..data.problem(options)
            };
            let want = unified_attention(&problem).expect("reference");
            let cpu = CpuOptions {
                dtype: data.dtype,
                row_padding: unified_common::run::ROW_PADDING,
                ..path(p)
            };
            let run = run_unified_attention_cpu(&problem, &cpu).expect("cpu run");
            let flag = run
                .plan
                .attention
                .bindings
                .iter()
                .find(|b| b.name == "SCALE_AFTER_MAX")
                .map(|b| b.value.clone());
            assert_eq!(
                flag,
                Some(attn_dsl::ConstValue::Bool(folded)),
                "{name}: SCALE_AFTER_MAX"
            );
            unified_common::run::assert_poison_intact(&run, data, &name);
            assert_close(&run.output, &want, ATOL, RTOL, &name);
        }
    }
}
