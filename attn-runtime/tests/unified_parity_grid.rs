//! CPU-executor parity of the unified-attention kernels with the f64 reference on the
//! spec §7.1 main grid at reduced sizes: mixed prefill/decode and pure-decode batches,
//! heads (4,4), (8,2), (5,1) (spill rows), sliding window none/64, softcap none/50,
//! 2D (the launch table's 64-key tiles) and 3D (split-KV) decode.

mod unified_common;

use attn_runtime::ops::unified_attention::config::SplitKvWorkspace;
use attn_runtime::ops::unified_attention::cpu::CpuOptions;
use attn_runtime::ops::unified_attention::plan::PathChoice;
use attn_runtime::reference::unified_attention::AttentionOptions;
use attn_runtime::testing::main_grid::{self, DECODE};
use unified_common::run::check_case;
use unified_common::{Geometry, PagedData};

fn grid(heads: (usize, usize), head_size: usize, seed: u64) {
    for (set, seqs) in main_grid::BATCHES {
        let data = PagedData::random(&Geometry::new(seqs, heads, head_size), seed);
        for (what, options) in main_grid::options() {
            let name = format!("{set} heads {heads:?} D {head_size} {what}");
            let (run, _) = check_case(&name, &data, options, CpuOptions::default());
            assert!(!run.plan.config.is_3d, "{name}: no workspace, so 2D");
            if set == "decode" {
                // The launch table's 2D decode tiles (`DECODE_TILE_SIZE`).
                assert_eq!(run.plan.config.tile_size, 64, "{name}: 64-key tiles");
                // §6: a workspace and a small pure-decode batch select 3D.
                let cpu = CpuOptions {
                    split_kv: Some(SplitKvWorkspace {
                        seq_threshold_3d: 8,
                        num_segments: 16,
                    }),
                    ..Default::default()
                };
                let (run, _) = check_case(&name, &data, options, cpu);
                assert!(run.plan.config.is_3d, "{name}: heuristic should pick 3D");
                assert_eq!(run.stats.len(), 2, "{name}: attention + reduce launches");
            }
        }
    }
}

#[test]
fn main_grid_heads_4_4() {
    grid((4, 4), 64, 11);
}

#[test]
fn main_grid_heads_8_2() {
    grid((8, 2), 128, 12);
}

#[test]
fn main_grid_heads_5_1_spill_rows() {
    grid((5, 1), 64, 13);
}

#[test]
fn threshold_zero_keeps_decode_on_2d() {
    let data = PagedData::random(&Geometry::new(DECODE, (8, 2), 64), 14);
    let cpu = CpuOptions {
        split_kv: Some(SplitKvWorkspace {
            seq_threshold_3d: 0,
            num_segments: 16,
        }),
        ..Default::default()
    };
    let (run, _) = check_case("threshold 0", &data, AttentionOptions::default(), cpu);
    assert!(!run.plan.config.is_3d);
}

#[test]
fn forced_3d_with_few_segments_and_window() {
    let data = PagedData::random(&Geometry::new(DECODE, (4, 2), 64), 15);
    for num_segments in [1, 2, 4] {
        let options = AttentionOptions {
            sliding_window: 16,
            ..Default::default()
        };
        let cpu = CpuOptions {
            path: PathChoice::Force3d { num_segments },
            ..Default::default()
        };
        check_case(&format!("3D NSEG {num_segments}"), &data, options, cpu);
    }
}
