//! The running max that moves only past a slack (`ATTN_CODEGEN_ENABLE=lazy_rescale`,
//! opt-in: the kernel's `LAZY_RESCALE`), kept correct without a GPU: CPU-executor parity
//! with the f64 reference, every output poisoned first, on mixed and decode batches, 2D and
//! 3D (the segments' partials merged from their own stale maxima), with sinks, softcap and
//! a window, and on queries scaled up so that tiles raise a row's max by more than the
//! slack as well as by less; and the MLA history's (its whole decode step on simulated
//! ranks against the dense reference). The feature list is read once per process, so this
//! binary sets it before anything reads it (`setup`).

mod mla_support;
mod unified_common;

use attn_runtime::ops::unified_attention::config::SplitKvWorkspace;
use attn_runtime::ops::unified_attention::cpu::CpuOptions;
use attn_runtime::reference::unified_attention::AttentionOptions;
use mla_support::{dsv3_scale, Case};
use unified_common::run::check_case;
use unified_common::{Geometry, PagedData};

const MIXED: &[(usize, usize)] = &[(1, 328), (5, 18), (29, 163)];
const DECODE: &[(usize, usize)] = &[(1, 123), (1, 37), (1, 211)];

fn setup() {
    std::env::set_var("ATTN_CODEGEN_ENABLE", "lazy_rescale");
}

fn split() -> CpuOptions<'static> {
    CpuOptions {
        split_kv: Some(SplitKvWorkspace {
            seq_threshold_3d: 8,
            num_segments: 16,
        }),
        ..Default::default()
    }
}

/// Scores scaled by `scale` (queries multiplied): at 1 a row's max settles within the slack
/// after its first tiles; at 12 tiles keep raising it past the slack.
fn run(name: &str, heads: (usize, usize), seed: u64, scale: f32, options: AttentionOptions) {
    for (set, seqs) in [("mixed", MIXED), ("decode", DECODE)] {
        let mut data = PagedData::random(&Geometry::new(seqs, heads, 64), seed);
        data.q.iter_mut().for_each(|x| *x *= scale);
        let name = format!("{name} {set} heads {heads:?} ×{scale}");
        let (run, _) = check_case(&name, &data, options, CpuOptions::default());
        let bound = |n: &str| run.plan.attention.bindings.iter().any(|b| b.name == n);
        assert!(bound("LAZY_RESCALE"), "{name}: the plan binds the feature");
        if set == "decode" {
            let (run, _) = check_case(&name, &data, options, split());
            assert!(run.plan.config.is_3d, "{name}: 3D");
        }
    }
}

#[test]
fn lazy_running_max_matches_the_reference() {
    setup();
    for (heads, seed) in [((8, 2), 31), ((4, 4), 32)] {
        for scale in [1.0, 12.0] {
            run("plain", heads, seed, scale, AttentionOptions::default());
        }
    }
}

#[test]
fn lazy_running_max_with_sinks_softcap_and_a_window() {
    setup();
    let sinks: Vec<f32> = (0..8).map(|h| h as f32 * 0.7 - 2.0).collect();
    let options = AttentionOptions {
        sliding_window: 64,
        softcap: Some(30.0),
        sinks: Some(&sinks),
        ..Default::default()
    };
    for scale in [1.0, 12.0] {
        run("sinks+softcap+window", (8, 2), 33, scale, options);
    }
}

/// The MLA history's softmax takes the same slack: one rank and two, a ragged batch (a
/// request whose only keys are its own queries), the scale as DeepSeek-V3's and twelve times it.
#[test]
fn mla_history_lazy_running_max_matches_the_reference() {
    setup();
    for d in [1, 2] {
        for factor in [1.0, 12.0] {
            let case = Case {
                scale: dsv3_scale() * factor,
                ..Case::new(d, 8, 64, 2, &[260, 7, 2], &[1, 4, 2])
            };
            let history = case.plan().history;
            assert!(
                history.constexprs.iter().any(|(n, _)| *n == "LAZY_RESCALE"),
                "{case:?}: the plan binds the feature"
            );
            mla_support::check_case(&case, 40 + u64::from(d));
        }
    }
}
