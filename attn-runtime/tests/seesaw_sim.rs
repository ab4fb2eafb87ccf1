//! The seesaw (`ATTN_CODEGEN_ENABLE=seesaw`, `attn_dsl::passes::seesaw`) switched on for the
//! MLA step on the sm_90a plan, run on the simulator of the emitted CUDA against the f64
//! reference (one rank; two with a split history). The history's unrolled loop does not fit
//! yet (its second latent tile takes a buffer of its own beside the ring: 288 KB of shared
//! memory), so the code generator leaves its loop as written: switching the schedule on
//! must cost nothing in correctness where it cannot apply.
//! The feature list is read once per process: every test sets the same one first.

mod mla_support;
mod sim_launcher;

use attn_runtime::ops::unified_attention::config::MmaKind::Warpgroup;
use mla_support::{check_case_launched, sm90a_history_cases};
use sim_launcher::Landing;

fn setup() {
    std::env::set_var("ATTN_CODEGEN_ENABLE", "seesaw");
}

#[test]
fn mla_step_on_sm90a_with_the_seesaw_on() {
    setup();
    if !sim_launcher::have_gxx() {
        return;
    }
    for (i, c) in sm90a_history_cases().iter().enumerate() {
        let launcher = sim_launcher::for_target(Warpgroup, Landing::Late);
        check_case_launched(c, 720 + i as u64, Some(launcher));
    }
}
