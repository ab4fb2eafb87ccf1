//! Pruning of the built-in modes whose mask ORs an unpruned term into a pruned one:
//! R-SWA (prefix `[0, P)` ∪ recent window) and MM ranges without the Gemma4 clamp (ranges ∪
//! window) visit two tile ranges per q-block, so a whole prefill sequence visits within
//! 1.1× of the tiles that hold an allowed key (one contiguous range visited nearly all).
//! Counts come from the DSL bounds on the CPU executor and the host mask predicate.

mod bounds_common;

use attn_runtime::kernels::bounds_probe::{probe_block, ProbeBlock};
use attn_runtime::kernels::unified_attention;
use attn_runtime::ops::unified_attention::config::UnifiedAttentionConfig;
use attn_runtime::ops::unified_attention::mask::{allowed, SequenceMask};
use attn_runtime::ops::unified_attention::plan::MaskVariant;
use bounds_common::plain_config;

/// (visited tiles, tiles holding an allowed key) over every q-block of a prefill of `l`.
fn sequence_tiles(
    cfg: &UnifiedAttentionConfig,
    l: i32,
    rswa_prefix: i32,
    ranges: &[[i32; 2]],
) -> (i64, i64) {
    let module = unified_attention::module().expect("module");
    let mcfg = cfg.mask_config();
    let seq = SequenceMask {
        seq_len: i64::from(l),
        causal: true,
        rswa_prefix_len: i64::from(rswa_prefix),
        mm_ranges: ranges,
    };
    let (mut visited, mut needed) = (0, 0);
    for b in 0..(l + cfg.block_q - 1) / cfg.block_q {
        let block = ProbeBlock {
            context_len: 0,
            seq_len: l,
            query_len: l,
            q_block: b,
            causal: true,
            rswa_prefix_len: rswa_prefix,
            mm_ranges: ranges,
            query_ranges: &[],
            mask_aux: &[],
            mask_aux_f32: &[],
        };
        let r = probe_block(&module, cfg, &MaskVariant::default(), &block, 16).expect("probe");
        visited += r.visited_tiles();
        let tile = i64::from(cfg.tile_size);
        let mut tiles = std::collections::BTreeSet::new();
        for q in i64::from(b * cfg.block_q)..i64::from(((b + 1) * cfg.block_q).min(l)) {
            for k in 0..i64::from(l) {
                if allowed(&mcfg, &seq, q, k) {
                    assert!(
                        r.covers(k, cfg.tile_size, l),
                        "block {b}: key {k} of q {q} not visited: {:?}",
                        r.ranges
                    );
                    tiles.insert(k / tile);
                }
            }
        }
        needed += tiles.len() as i64;
    }
    (visited, needed)
}

#[test]
fn r_swa_visits_prefix_and_window_tiles_only() {
    let mut cfg = plain_config(32, 1, 0, 64);
    cfg.use_r_swa = true;
    cfg.r_swa_window = 128;
    cfg.tile_ranges = cfg.builtin_tile_ranges();
    assert_eq!(cfg.tile_ranges, 2);
    let (visited, needed) = sequence_tiles(&cfg, 1024, 100, &[]);
    eprintln!("R-SWA L 1024, R 128, P 100, tile 32: visited {visited} tiles for {needed} holding an allowed key");
    assert!(
        visited as f64 <= 1.1 * needed as f64,
        "visited {visited}, needed {needed}"
    );
}

/// Unclamped ranges listed per sequence: one span a q-block (a range holding one of its
/// queries moves the span's start), and still no tile that no row needs.
#[test]
fn unclamped_mm_ranges_visit_ranges_and_window_tiles_only() {
    let mut cfg = plain_config(32, 1, 64, 64);
    cfg.use_mm_prefix = true;
    cfg.max_mm_ranges = 2;
    cfg.tile_ranges = cfg.builtin_tile_ranges();
    assert_eq!(cfg.tile_ranges, 1);
    let ranges = [[100, 355], [600, 855]];
    let (visited, needed) = sequence_tiles(&cfg, 1024, 0, &ranges);
    eprintln!("unclamped MM L 1024, W 64, 2 images of 256, tile 32: visited {visited} tiles for {needed} holding an allowed key");
    assert!(
        visited as f64 <= 1.1 * needed as f64,
        "visited {visited}, needed {needed}"
    );
}
