//! The MLA decode step's kernels as a GPU runs them, checked without one: the whole step on
//! simulated ranks (`mla_dcp::cpu`), every launch the CUDA the op emits for it run on the
//! simulator (`sim_launcher`), against the dense f64 reference. The sm_90a plan's history
//! (two warpgroups over 64-head tiles, warpgroup MMAs through descriptors, its mbarrier ring)
//! runs its sm_90a branch; its other kernels, and every kernel of an sm_80 plan, `mma.sync`.
//! Skipped when g++ is missing.

mod mla_support;
mod sim_launcher;

use attn_runtime::ops::unified_attention::config::MmaKind;
use mla_support::{check_case_launched, Case};
use sim_launcher::{Branch, Landing, SimLauncher};

/// TMA boxes (the history's latent tiles) land at once: a stage refilled while still read
/// changes under its MMAs.
static WGMMA: SimLauncher = SimLauncher::new(Branch::Wgmma, Landing::Early);
static MMA_SYNC: SimLauncher = SimLauncher::new(Branch::MmaSync, Landing::Late);

fn simulated(mut c: Case, mma: MmaKind, splits: Option<u32>, seed: u64) {
    if !sim_launcher::have_gxx() {
        eprintln!("skipping {c:?}: no g++");
        return;
    }
    c.mma = mma;
    c.splits = splits;
    c.num_sms = 132;
    let launcher: &'static SimLauncher = match mma {
        MmaKind::Warpgroup => &WGMMA,
        MmaKind::Sync => &MMA_SYNC,
    };
    check_case_launched(&c, seed, Some(launcher));
}

/// 64 heads on one rank (L1's tiling): one request long enough for several tiles and a
/// ragged last one, a short one, a chunk of two queries.
#[test]
fn history_on_sm90a_one_rank() {
    let c = Case::new(1, 1, 64, 64, &[300, 3], &[1, 2]);
    simulated(c, MmaKind::Warpgroup, None, 700);
}

/// Two ranks, 80 gathered heads (a ragged head tile), the history split in two and reduced.
#[test]
fn history_on_sm90a_two_ranks_split() {
    let c = Case::new(2, 8, 32, 40, &[190, 70], &[2, 1]);
    simulated(c, MmaKind::Warpgroup, Some(2), 701);
}

#[test]
fn decode_step_on_sm80() {
    let c = Case::new(2, 8, 16, 8, &[150, 3], &[2, 1]);
    simulated(c, MmaKind::Sync, None, 702);
}
