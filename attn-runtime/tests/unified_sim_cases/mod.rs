//! The case grid the simulated kernels run (`unified_sim.rs` as shipped,
//! `sim_opt_in.rs` with the opt-in features): the benchmark rows' plans (P0, P1, P3,
//! D1 classes) on mixed, prefill and decode batches, 2D and 3D, and each mask feature on
//! the plan of its class, every output poisoned and compared with the f64 reference.

#![allow(dead_code)]

use super::sim_launcher::{self, Branch, Landing};
use super::unified_common::run::check_case;
use super::unified_common::{Geometry, PagedData};
use attn_runtime::ops::unified_attention::config::MmaKind;
use attn_runtime::ops::unified_attention::cpu::{CpuOptions, CpuRun};
use attn_runtime::ops::unified_attention::gpu::{emit_plan_attention, launch_key};
use attn_runtime::ops::unified_attention::plan::PathChoice;
use attn_runtime::reference::unified_attention::{Alibi, AttentionOptions, Causality, MmRanges};
use attn_runtime::reference::Dtype;
use attn_runtime::testing::main_grid::{self, DECODE};

pub const MIXED: &[(usize, usize)] = &[(1, 150), (5, 18), (29, 93)];
pub const PREFILL: &[(usize, usize)] = &[(150, 150), (70, 200)];

/// One case on `mma`'s plan (`path` chosen or forced), its kernels simulated; `None` when
/// g++ is missing.
pub fn simulated(
    name: &str,
    g: &Geometry,
    seed: u64,
    options: AttentionOptions<'_>,
    mma: MmaKind,
    path: PathChoice,
) -> Option<CpuRun> {
    if !sim_launcher::have_gxx() {
        eprintln!("skipping {name}: no g++");
        return None;
    }
    // Copies land as late as allowed: a read that does not wait for them sees stale bytes.
    let launcher = sim_launcher::for_target(mma, Landing::Late);
    let data = PagedData::random(g, seed);
    let cpu = CpuOptions {
        mma,
        path,
        launcher: Some(launcher),
        ..Default::default()
    };
    let (run, _) = check_case(&format!("{name} ({mma:?})"), &data, options, cpu);
    eprintln!("{name}: {}", launch_key(&run.plan.attention));
    Some(run)
}

fn heuristic(name: &str, g: &Geometry, seed: u64, options: AttentionOptions<'_>, mma: MmaKind) {
    simulated(name, g, seed, options, mma, PathChoice::Heuristic);
}

/// [`heuristic`] for a plan that must take warpgroup MMAs on sm_90a (a benchmark row's);
/// the source of the kernel that ran.
fn on_warpgroups(
    name: &str,
    g: &Geometry,
    seed: u64,
    options: AttentionOptions<'_>,
    mma: MmaKind,
) -> Option<String> {
    let run = simulated(name, g, seed, options, mma, PathChoice::Heuristic)?;
    let k = emit_plan_attention(&run.plan).expect("emit");
    assert_eq!(
        Branch::Wgmma.present(&k.source),
        mma == MmaKind::Warpgroup,
        "{name}: the plan's kernel has an sm_90a branch exactly on sm_90a"
    );
    Some(k.source)
}

/// Dense causal prefill at D 128 (P0's plan on sm_90a: 128 × 128 tiles, three stages); the
/// kernel's source.
pub fn p0_class(mma: MmaKind) -> Option<String> {
    let g = Geometry::new(PREFILL, (4, 2), 128);
    on_warpgroups("P0 class", &g, 11, AttentionOptions::default(), mma)
}

/// A sliding window over GQA at D 256 (P1's plan).
pub fn p1_class(mma: MmaKind) {
    let g = Geometry::new(&[(150, 300), (40, 90)], (4, 2), 256);
    let options = AttentionOptions {
        sliding_window: 64,
        ..Default::default()
    };
    on_warpgroups("P1 class", &g, 12, options, mma);
}

/// P1 with clamped image ranges (P3's plan): the union bounds and the image-range loop.
pub fn p3_class(mma: MmaKind) {
    let g = Geometry::new(&[(150, 300), (40, 90)], (4, 2), 256);
    let ranges = [[20, 120], [150, 260], [5, 30], [0, 0]];
    let options = AttentionOptions {
        sliding_window: 32,
        mm_ranges: MmRanges::PerSequence(&ranges, 2),
        mm_prefix_clamp_sw: true,
        ..Default::default()
    };
    on_warpgroups("P3 class", &g, 13, options, mma);
}

/// Decode at D 128 (D1's plan), 2D and split over segments (3D with its reduce).
pub fn d1_class(mma: MmaKind) {
    let g = Geometry::new(DECODE, (8, 2), 128);
    heuristic("D1 class", &g, 14, AttentionOptions::default(), mma);
    let forced = PathChoice::Force3d { num_segments: 4 };
    simulated(
        "D1 class 3D",
        &g,
        15,
        AttentionOptions::default(),
        mma,
        forced,
    );
}

/// A mixed batch at D 64 with softcap and sinks.
pub fn mixed_softcap_sinks(mma: MmaKind) {
    let g = Geometry::new(MIXED, (4, 2), 64);
    let sinks = [0.5, -1.0, 2.0, 0.0];
    let options = AttentionOptions {
        softcap: Some(20.0),
        sinks: Some(&sinks),
        ..Default::default()
    };
    heuristic("mixed softcap sinks", &g, 16, options, mma);
}

/// Prefill at D 128 with ALiBi, non-causal windows and per-sequence causality, and chunked
/// local attention.
pub fn prefill_masks(mma: MmaKind) {
    let g = Geometry::new(PREFILL, (4, 2), 128);
    let slopes = [0.25, 0.125, 0.0625, 0.03125];
    let alibi = AttentionOptions {
        alibi: Some(Alibi {
            slopes: &slopes,
            sqrt: false,
        }),
        ..Default::default()
    };
    heuristic("prefill ALiBi", &g, 17, alibi, mma);
    let flags = [true, false];
    let per_seq = AttentionOptions {
        sliding_window: 40,
        causality: Causality::PerSequence(&flags),
        ..Default::default()
    };
    heuristic("prefill per-seq causal window", &g, 18, per_seq, mma);
    let chunked = AttentionOptions {
        sliding_window: 32,
        chunk_lookback: 1,
        ..Default::default()
    };
    heuristic("prefill chunked", &g, 19, chunked, mma);
}

/// §7.1's main grid, reduced (as `unified_parity_grid.rs` runs it on the executor): mixed
/// and decode batches, sliding window none / 64, softcap none / 50, decode in 2D and in 3D.
pub fn main_grid(heads: (usize, usize), head_size: usize, seed: u64, mma: MmaKind) {
    for (set, seqs) in main_grid::BATCHES {
        let g = Geometry::new(seqs, heads, head_size);
        for (what, options) in main_grid::options() {
            let name = format!("{set} heads {heads:?} D {head_size} {what}");
            simulated(&name, &g, seed, options, mma, PathChoice::Heuristic);
            if set == "decode" {
                let forced = PathChoice::Force3d { num_segments: 4 };
                simulated(&format!("{name} 3D"), &g, seed, options, mma, forced);
            }
        }
    }
}

/// The launch table's prefill tilings on a mixed batch with a prefill: each head size's
/// (D 32, 64, 96, 128, 256), D 128 with ALiBi (its 64-key tiles) and D 256 with softcap
/// (P1's softcap row), and D 128 in f16, on `mma`'s plans.
pub fn launch_table_tilings(mma: MmaKind) {
    let seqs: &[(usize, usize)] = &[(1, 150), (70, 200), (29, 93)];
    for (i, d) in [32, 64, 96, 128, 256].into_iter().enumerate() {
        let g = Geometry::new(seqs, (4, 2), d);
        let name = format!("tiling D {d}");
        heuristic(&name, &g, 30 + i as u64, AttentionOptions::default(), mma);
    }
    let slopes = [0.5, 0.25, 0.125, 0.0625];
    let alibi = AttentionOptions {
        alibi: Some(Alibi {
            slopes: &slopes,
            sqrt: true,
        }),
        ..Default::default()
    };
    heuristic(
        "tiling D 128 ALiBi sqrt",
        &Geometry::new(seqs, (4, 2), 128),
        36,
        alibi,
        mma,
    );
    let softcap = AttentionOptions {
        sliding_window: 64,
        softcap: Some(50.0),
        ..Default::default()
    };
    heuristic(
        "tiling D 256 softcap",
        &Geometry::new(seqs, (4, 2), 256),
        37,
        softcap,
        mma,
    );
    // f16 operands (the MMAs' other input type).
    let f16 = Geometry::new(seqs, (4, 2), 128).dtype(Dtype::F16);
    heuristic(
        "tiling D 128 f16",
        &f16,
        38,
        AttentionOptions::default(),
        mma,
    );
}
