//! The MLA decode step's kernels as a GPU runs them, checked without one: the whole step on
//! simulated ranks (`mla_dcp::cpu`), every launch the CUDA the op emits for it run on the
//! simulator (`sim_launcher`), against the dense f64 reference. The sm_90a plan's history
//! (two warpgroups over 64-head tiles, warpgroup MMAs through descriptors, its mbarrier ring)
//! runs its sm_90a branch; its other kernels, and every kernel of an sm_80 plan, `mma.sync`.
//! Skipped when g++ is missing.

mod mla_support;
mod sim_launcher;

use attn_runtime::ops::mla_dcp::plan::{warpgroup_fused_tile, wide_warpgroup_fused_tile};
use attn_runtime::ops::unified_attention::config::MmaKind;
use mla_support::{
    check_case_launched, check_plan_launched, planned_for, sm90a_history_cases, Case,
};
use sim_launcher::Landing;

/// `c` checked with its launches simulated (on `mma`'s launcher), unless g++ is missing.
fn simulated(c: &Case, seed: u64) {
    if !sim_launcher::have_gxx() {
        eprintln!("skipping {c:?}: no g++");
        return;
    }
    // TMA boxes (the history's latent tiles) land at once: a stage refilled while still
    // read changes under its MMAs.
    check_case_launched(
        c,
        seed,
        Some(sim_launcher::for_target(c.mma, Landing::Early)),
    );
}

#[test]
fn history_on_sm90a_one_rank() {
    simulated(&sm90a_history_cases()[0], 700);
}

#[test]
fn history_on_sm90a_two_ranks_split() {
    simulated(&sm90a_history_cases()[1], 701);
}

#[test]
fn decode_step_on_sm80() {
    let c = Case::new(2, 8, 16, 8, &[150, 3], &[2, 1]);
    simulated(&planned_for(c, MmaKind::Sync, None), 702);
}

/// The fused combine + V-up on warpgroup MMAs (`WARPGROUPS`, feature `merge_wgmma`) in the
/// sm_90a step: one rank (two parts, a producer warpgroup feeding the ring) and two ranks
/// (three parts, every thread copying); fewer tokens than the tile's 64 rows, so the masked
/// rows are in it too. The one-rank step also on the source's `mma.sync` branch (what a
/// device without sm_90a's features would run of the same kernel: the consumers' program
/// alone, the producer's threads idle).
#[test]
fn fused_merge_on_warpgroup_mmas() {
    if !sim_launcher::have_gxx() {
        eprintln!("skipping: no g++");
        return;
    }
    for (i, c) in sm90a_history_cases().iter().enumerate() {
        let mut plan = c.plan();
        plan.retile_combine_v_up(warpgroup_fused_tile());
        assert!(plan.combine_v_up.key().contains("WARPGROUPS=true"));
        let launcher = sim_launcher::for_target(c.mma, Landing::Early);
        check_plan_launched(c, &plan, 710 + i as u64, Some(launcher));
        if i == 0 {
            let launcher = sim_launcher::for_target(MmaKind::Sync, Landing::Early);
            check_plan_launched(c, &plan, 720, Some(launcher));
        }
    }
}

/// The fused combine + V-up on warpgroup MMAs over 128 tokens (opt-in `merge_t128`: four
/// consumer warpgroups, two token halves by two column halves, and the producer) in a
/// one-rank sm_90a step of 70 tokens, so both token halves hold rows and the second is
/// ragged; the merge on the simulator's sm_90a branch, the step's other launches on the
/// executor (the simulator would take minutes over 70 tokens of history).
#[test]
fn wide_merge_on_warpgroup_mmas() {
    if !sim_launcher::have_gxx() {
        eprintln!("skipping: no g++");
        return;
    }
    static MERGE: sim_launcher::SimLauncher = sim_launcher::SimLauncher::only(
        "mla_combine_v_up",
        sim_launcher::Branch::Wgmma,
        Landing::Late,
    );
    let c = mla_support::planned_for(
        mla_support::Case::new(1, 1, 64, 16, &[300, 90], &[40, 30]),
        MmaKind::Warpgroup,
        None,
    );
    let mut plan = c.plan();
    plan.retile_combine_v_up(wide_warpgroup_fused_tile());
    assert!(
        plan.combine_v_up.key().contains("BLOCK_T=128"),
        "{}",
        plan.combine_v_up.key()
    );
    assert_eq!(plan.combine_v_up.grid[0], 1);
    check_plan_launched(&c, &plan, 730, Some(&MERGE));
}
