//! The seesaw (`ATTN_CODEGEN_ENABLE=seesaw`, `attn_dsl::passes::seesaw`) switched on for the
//! MLA step on the sm_90a plan, run on the simulator of emitted CUDA against the f64
//! reference (one rank; two with a split history). These histories' tiles move by
//! `cp.async` (short programs), so the seesaw is placed: each half's tile one buffer of a
//! ring whose stage is the tile (`gpu_ir::seesaw_ring`), each warpgroup a loop of its own
//! (`codegen::warpgroup_loops`), the second half of a pair past the last tile adding
//! nothing (64 heads on two warpgroups, ragged histories: odd tile counts; the 32-head
//! case runs one warpgroup, where the seesaw does not apply).
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
