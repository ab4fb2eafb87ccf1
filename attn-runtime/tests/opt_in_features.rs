//! Opt-in features measured on the H200 and not shipped (docs/gpu_ir.md, "The grid's tail"
//! and "P3's range scans": P0 5 % slower heads fastest, P3 unchanged with its scans
//! unrolled), kept correct without a GPU. The feature list
//! is read once per process from the environment, so this binary sets it before anything
//! reads it (`setup`), the same for every test.
//!
//! - `heads_fastest` (`plan::heads_fastest`): one grid axis of (q-block, KV head) programs,
//!   the heads fastest. CPU-executor parity with the f64 reference on mixed and decode
//!   batches, GQA with spill rows, 2D and 3D, every output poisoned first.
//! - `unroll_scans` (`codegen`'s short scalar scans unrolled by 8): P3's image-range scans
//!   carry the pragma and its sm_90a kernel still compiles spill-free.
//! - `pv_wait_behind` (`gpu_ir::pv_wait_behind`; H100, session 25: P1 0.6 % faster, P3
//!   3.4 % slower): P1's and P3's PV waited for in the next iteration compile spill-free
//!   without ptxas serializing their warpgroup MMAs.
//! - `merge_t128` (`mla_dcp::plan::fused_tile_on`; built in session 28, not timed): the MLA
//!   merge on warpgroup MMAs over 128 tokens where a one-rank step has them (the kernel:
//!   `mla_gpu_ir_kernels.rs`, `mla_sim.rs`).

mod sass_support;
mod unified_common;
mod unified_plans;

use attn_runtime::jit::{Arch, CudaSource};
use attn_runtime::ops::unified_attention::config::SplitKvWorkspace;
use attn_runtime::ops::unified_attention::cpu::CpuOptions;
use attn_runtime::ops::unified_attention::gpu::emit_launch;
use attn_runtime::ops::unified_attention::plan;
use attn_runtime::reference::unified_attention::AttentionOptions;
use unified_common::run::check_case;
use unified_common::{Geometry, PagedData};

const MIXED: &[(usize, usize)] = &[(1, 328), (5, 18), (29, 163)];
const DECODE: &[(usize, usize)] = &[(1, 123), (1, 37), (1, 211)];

fn setup() {
    std::env::set_var(
        "ATTN_CODEGEN_ENABLE",
        "heads_fastest,unroll_scans,pv_wait_behind,merge_t128",
    );
}

#[test]
fn heads_fastest_grid_matches_the_reference() {
    setup();
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

#[test]
fn unroll_scans_keeps_p3_spill_free() {
    setup();
    let cuda =
        emit_launch(&unified_plans::warpgroup_launch(unified_plans::p3(), 8192)).expect("emit");
    // The block's candidate ranges and the bounds' union, in the producer and the
    // consumers (and again in the unsplit program).
    let unrolled = cuda.source.matches("_Pragma(\"unroll 8\")").count();
    assert!(unrolled >= 4, "P3's range scans unrolled: {unrolled}");
    let arch: Arch = "sm_90a".parse().expect("arch");
    sass_support::compile_spill_free("P3 unroll_scans", &CudaSource::from_kernel(&cuda), arch);
}

/// P1 and P3 take PV's wait one iteration behind (the carried wait in the loop and after it)
/// and ptxas keeps their warpgroup MMAs pipelined: a non-MMA write of an accumulator while
/// one is in flight makes it serialize every `wgmma` of the kernel (C7515, as L1's history
/// did in this form: the pass leaves loops without turns alone), a `WARPGROUP.DEPBAR` after
/// each.
#[test]
fn pv_wait_behind_keeps_p1_and_p3_pipelined() {
    setup();
    for (label, problem) in [("P1", unified_plans::p1()), ("P3", unified_plans::p3())] {
        let cuda = emit_launch(&unified_plans::warpgroup_launch(problem, 8192)).expect("emit");
        let carried = cuda.source.matches("issued before complete here").count();
        assert!(
            carried >= 2,
            "{label}: the carried waits, in and after the loop"
        );
        let arch: Arch = "sm_90a".parse().expect("arch");
        let m = sass_support::compile_spill_free(label, &CudaSource::from_kernel(&cuda), arch);
        assert!(!m.log.contains("C7515"), "{label}: {}", m.log);
        let attn_runtime::jit::ModuleImage::Cubin(bytes) = &m.image else {
            panic!("{label}: no cubin");
        };
        let waits = sass_support::instructions(label, bytes)
            .iter()
            .filter(|i| i.starts_with("WARPGROUP.DEPBAR"))
            .count();
        assert!(waits <= 4, "{label}: {waits} warpgroup waits");
    }
}

/// `merge_t128`: a warpgroup plan of a one-rank step (two parts) with 128 tokens or more
/// takes the fused merge's 128-token tile; fewer tokens take the 64-token one, three parts
/// (dcp 2) too, and an `mma.sync` plan keeps its own tile.
#[test]
fn merge_t128_takes_the_wide_tile_from_128_tokens_of_one_rank() {
    use attn_runtime::ops::mla_dcp::plan::{
        fused_tile, fused_tile_on, warpgroup_fused_tile, wide_warpgroup_fused_tile,
    };
    use attn_runtime::ops::unified_attention::config::MmaKind::{Sync, Warpgroup};
    setup();
    assert!(attn_dsl::features::merge_t128());
    let wide = wide_warpgroup_fused_tile();
    assert_eq!(
        (wide.block_t, wide.block_v, wide.warpgroups),
        (128, 128, true)
    );
    assert_eq!(fused_tile_on(Warpgroup, 128, 128, 2, 132), wide);
    assert_eq!(fused_tile_on(Warpgroup, 300, 16, 2, 132), wide);
    assert_eq!(
        fused_tile_on(Warpgroup, 127, 128, 2, 132),
        warpgroup_fused_tile()
    );
    assert_eq!(
        fused_tile_on(Warpgroup, 128, 128, 3, 132),
        warpgroup_fused_tile()
    );
    assert_eq!(
        fused_tile_on(Sync, 128, 128, 2, 132),
        fused_tile(128, 128, 2, 132)
    );
}
