//! The launch table's prefill tilings per tensor-core target (`MmaKind`): the mma.sync
//! entries are unchanged by the warpgroup ones, the warpgroup entries apply where they were
//! measured (P1's lean scores) and nowhere they were slower or their registers would spill
//! (P3's image ranges, softcap), decode is the same for both, and a warpgroup launch is its own specialization.

mod unified_plans;

use attn_runtime::jit::Arch;
use attn_runtime::ops::unified_attention::config::{AlibiMode, AttentionProblem, MmaKind};
use attn_runtime::ops::unified_attention::gpu::launch_key;
use attn_runtime::ops::unified_attention::plan::{choose_config, PathChoice};
use unified_plans::{d1, p0, p1, p3, plan};

fn on(mma: MmaKind, p: AttentionProblem) -> AttentionProblem {
    AttentionProblem { mma, ..p }
}

/// `(BLOCK_M, TILE_SIZE, SLABS_PER_WARP)` the heuristic path takes.
fn tiling(p: &AttentionProblem) -> (i32, i32, i32) {
    let c = choose_config(p, PathChoice::Heuristic).expect("valid configuration");
    assert_eq!(c.mma, p.mma, "the config keeps the problem's target");
    (c.block_m, c.tile_size, c.slabs_per_warp)
}

#[test]
fn mma_sync_entries_are_unchanged() {
    assert_eq!(tiling(&p0()), (128, 32, 2));
    assert_eq!(tiling(&p1()), (64, 32, 1));
    assert_eq!(tiling(&p3()), (64, 32, 1));
}

#[test]
fn warpgroup_entries_where_measured_and_nowhere_they_would_spill() {
    let wg = |p| tiling(&on(MmaKind::Warpgroup, p));
    assert_eq!(wg(p0()), (128, 128, 1), "D 128: two warpgroups, 128 x 128");
    let p0_alibi = AttentionProblem {
        alibi: AlibiMode::Linear,
        ..p0()
    };
    assert_eq!(wg(p0_alibi), (128, 64, 1), "D 128 with ALiBi: 64 keys");
    let d64 = AttentionProblem {
        head_size: 64,
        ..p0()
    };
    assert_eq!(wg(d64), (128, 128, 1), "D 64: two warpgroups, 128 x 128");
    let d32 = AttentionProblem {
        head_size: 32,
        ..p0()
    };
    assert_eq!(wg(d32), (64, 32, 1), "D 32 keeps the heuristic's 64 x 32");
    assert_eq!(
        wg(p1()),
        (128, 64, 1),
        "D 256, lean scores: two warpgroups, 64 keys"
    );
    assert_eq!(
        wg(p3()),
        (128, 64, 1),
        "clamped image ranges: P1's tiling (the window bounds the V guard)"
    );
    let unclamped = AttentionProblem {
        mm_prefix_clamp_sw: false,
        ..p3()
    };
    assert_eq!(
        wg(unclamped),
        (128, 64, 1),
        "unclamped image ranges listed per sequence: one span, P1's tiling"
    );
    let softcapped = AttentionProblem {
        softcap: 50.0,
        ..p1()
    };
    assert_eq!(wg(softcapped), (128, 64, 1), "softcap: P1's tiling");
    let alibi = AttentionProblem {
        alibi: AlibiMode::Linear,
        ..p1()
    };
    assert_eq!(
        wg(alibi),
        (64, 32, 1),
        "ALiBi keeps 64 rows (not timed at 128 x 64)"
    );
    let short = AttentionProblem {
        max_seqlen_q: 32,
        ..p1()
    };
    assert_eq!(wg(short), (64, 32, 1), "fewer tokens than 128 rows hold");
}

#[test]
fn decode_is_the_same_on_both_targets() {
    assert_eq!(tiling(&d1()), tiling(&on(MmaKind::Warpgroup, d1())));
}

/// 2D decode reads 64-key tiles where that was measured (2-byte K/V, padded head size up
/// to 128); 1-byte K/V, D 256 and the Gemma signature keep the heuristic's 32, and a forced
/// tiling or the split-KV path is not touched.
#[test]
fn two_d_decode_takes_64_key_tiles_where_measured() {
    let tile = |p: AttentionProblem, path| {
        choose_config(&p, path)
            .expect("valid configuration")
            .tile_size
    };
    assert_eq!(tiling(&d1()), (16, 64, 1), "D1");
    let fp8 = AttentionProblem {
        kv_elem_bytes: 1,
        ..d1()
    };
    assert_eq!(tile(fp8, PathChoice::Heuristic), 32, "1-byte K/V");
    let d256 = AttentionProblem {
        head_size: 256,
        ..d1()
    };
    assert_eq!(tile(d256, PathChoice::Heuristic), 32, "D 256");
    let gemma = AttentionProblem {
        sliding_window: 1024,
        ..d1()
    };
    assert_eq!(tile(gemma, PathChoice::Heuristic), 32, "Gemma signature");
    assert_eq!(
        tile(d1(), PathChoice::Force2d),
        64,
        "forced 2D: the table's tile"
    );
    let forced = PathChoice::Force2dTiled {
        block_m: 16,
        tile_size: 16,
        slabs_per_warp: 1,
        num_stages: 2,
    };
    assert_eq!(tile(d1(), forced), 16, "a forced tiling");
    let split = PathChoice::Force3d { num_segments: 4 };
    assert_eq!(tile(d1(), split), 16, "split-KV keeps its tile");
}

#[test]
fn a_warpgroup_launch_is_its_own_specialization() {
    let sync = plan(&p1(), 8192, PathChoice::Heuristic);
    let wg = plan(&on(MmaKind::Warpgroup, p1()), 8192, PathChoice::Heuristic);
    assert_eq!(sync.attention.mma, MmaKind::Sync);
    assert_eq!(wg.attention.mma, MmaKind::Warpgroup);
    assert!(launch_key(&wg.attention).ends_with("+wgmma"));
    assert!(!launch_key(&sync.attention).contains("wgmma"));
    // The same tiling forced on both targets still gives two keys.
    let forced = PathChoice::Force2dTiled {
        block_m: 64,
        tile_size: 32,
        slabs_per_warp: 1,
        num_stages: 2,
    };
    let a = plan(&p1(), 8192, forced);
    let b = plan(&on(MmaKind::Warpgroup, p1()), 8192, forced);
    assert_ne!(launch_key(&a.attention), launch_key(&b.attention));
    // A 3D plan's reduce has no dot: it is generated for mma.sync whatever the target.
    let split = plan(
        &on(MmaKind::Warpgroup, d1()),
        64,
        PathChoice::Force3d { num_segments: 4 },
    );
    assert_eq!(split.reduce.expect("3D reduce").mma, MmaKind::Sync);
}

#[test]
fn only_sm90a_targets_warpgroup_mmas() {
    let sm90a: Arch = "sm_90a".parse().expect("arch");
    assert_eq!(MmaKind::for_arch(sm90a), MmaKind::Warpgroup);
    assert_eq!(MmaKind::for_arch(Arch::SM_90), MmaKind::Sync);
    assert_eq!(MmaKind::for_arch(Arch::SM_80), MmaKind::Sync);
    assert_eq!(MmaKind::for_arch(Arch::native(9, 0)), MmaKind::Warpgroup);
    assert_eq!(MmaKind::for_arch(Arch::native(8, 0)), MmaKind::Sync);
}

/// A warpgroup program whose key tile is as wide as the padded head is a valid configuration
/// (its scores issue split instructions; it used to be refused for wrong results).
#[test]
fn square_warpgroup_tiles_are_accepted() {
    let forced = |block_m, tile_size| PathChoice::Force2dTiled {
        block_m,
        tile_size,
        slabs_per_warp: 1,
        num_stages: 2,
    };
    let d64 = AttentionProblem {
        head_size: 64,
        ..p0()
    };
    assert!(choose_config(&on(MmaKind::Warpgroup, d64), forced(64, 64)).is_ok());
    assert!(choose_config(&on(MmaKind::Warpgroup, p0()), forced(128, 128)).is_ok());
}
