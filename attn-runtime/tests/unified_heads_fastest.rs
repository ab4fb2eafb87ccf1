//! The opt-in grid order `HEADS_FASTEST` (`ATTN_CODEGEN_ENABLE=heads_fastest`, see
//! `plan::heads_fastest`): one grid axis of (q-block, KV head) programs, the heads fastest.
//! CPU-executor parity with the f64 reference on mixed and decode batches, GQA with spill
//! rows, 2D and 3D, every output poisoned first. The feature is read once per process from
//! the environment, so this binary sets it before anything reads it and holds one test.

mod unified_common;

use attn_runtime::ops::unified_attention::config::SplitKvWorkspace;
use attn_runtime::ops::unified_attention::cpu::CpuOptions;
use attn_runtime::ops::unified_attention::plan;
use attn_runtime::reference::unified_attention::AttentionOptions;
use unified_common::run::check_case;
use unified_common::{Geometry, PagedData};

const MIXED: &[(usize, usize)] = &[(1, 328), (5, 18), (29, 163)];
const DECODE: &[(usize, usize)] = &[(1, 123), (1, 37), (1, 211)];

#[test]
fn heads_fastest_grid_matches_the_reference() {
    std::env::set_var("ATTN_CODEGEN_ENABLE", "heads_fastest");
    assert!(
        plan::heads_fastest(),
        "the feature is read from the environment"
    );
    for (heads, seed) in [((8, 2), 21), ((5, 1), 22), ((4, 4), 23)] {
        for (set, seqs) in [("mixed", MIXED), ("decode", DECODE)] {
            let data = PagedData::random(&Geometry::new(seqs, heads, 64), seed);
            let options = AttentionOptions {
                sliding_window: 64,
                ..Default::default()
            };
            let name = format!("{set} heads {heads:?}");
            let (run, _) = check_case(&name, &data, options, CpuOptions::default());
            let grid = run.plan.attention.grid;
            let kv_heads = heads.1 as u32;
            assert_eq!(grid[1], 1, "{name}: one axis of programs");
            assert_eq!(
                grid[0] % kv_heads,
                0,
                "{name}: whole q-blocks of every head"
            );
            let split = CpuOptions {
                split_kv: Some(SplitKvWorkspace {
                    seq_threshold_3d: 8,
                    num_segments: 16,
                }),
                ..Default::default()
            };
            if set == "decode" {
                let (run, _) = check_case(&name, &data, options, split);
                assert!(run.plan.config.is_3d, "{name}: 3D");
                assert_eq!(run.plan.attention.grid[2], 16, "{name}: segments on z");
            }
        }
    }
}
