//! `unified_sim.rs`'s classes and `mla_sim.rs`'s steps with every opt-in feature the next
//! device call is to time (`OPT_IN` below): the producer's address cuts, the exact rescale
//! factor, the lazy running max, the masked fills as selects and the turns' warpgroup index
//! broadcast from lane 0 (exact_alpha and lazy_rescale ship since session 20; naming them
//! still asks for what is so), all on the sm_90a branch of
//! the kernels a GPU would run, against the f64 reference. Session 18 built them without a
//! GPU and simulated them only on test kernels and on `mma.sync`; this runs them in the
//! benchmark rows' plans.
//! The feature list is read once per process: every test sets the same one first.

mod mla_support;
mod sim_launcher;
mod unified_common;
mod unified_sim_cases;

use attn_runtime::ops::unified_attention::config::MmaKind::{Sync, Warpgroup};
use mla_support::{check_case_launched, sm90a_history_cases};
use sim_launcher::Landing;
use unified_sim_cases as cases;

const OPT_IN: &str = "page_pointer,byte_rows,mask_bound,split_row_step,wide_mul,page_row,\
                      exact_alpha,lazy_rescale,fill_select_all,pv_wait_behind";

fn setup() {
    std::env::set_var("ATTN_CODEGEN_ENABLE", OPT_IN);
}

/// P0's kernel with the features in it: the producer's page rows and widening products,
/// the exact factor, the lazy max, the turns' barriers named by the broadcast warpgroup.
#[test]
fn p0_class_on_sm90a() {
    setup();
    let Some(src) = cases::p0_class(Warpgroup) else {
        return;
    };
    for piece in [
        "attn_page_row(",
        "attn_mul_wide(",
        "attn_fast_exp_sub_exact(",
        // The slack of `LAZY_RESCALE` (`m_raw - m_i > 5.5`).
        "= 5.5f;",
        "attn_bar_sync(1 + attn_wg, ",
    ] {
        assert!(src.contains(piece), "P0 without {piece}");
    }
}

#[test]
fn p1_class_on_sm90a() {
    setup();
    cases::p1_class(Warpgroup);
}

#[test]
fn p3_class_on_sm90a() {
    setup();
    cases::p3_class(Warpgroup);
}

#[test]
fn d1_class_on_sm90a() {
    setup();
    cases::d1_class(Warpgroup);
}

#[test]
fn softcap_and_sinks_on_sm90a() {
    setup();
    cases::mixed_softcap_sinks(Warpgroup);
}

#[test]
fn prefill_masks_on_sm90a() {
    setup();
    cases::prefill_masks(Warpgroup);
}

#[test]
fn p3_class_on_sm80() {
    setup();
    cases::p3_class(Sync);
}

/// The MLA step on the sm_90a plan: the history's lazy max and its promised block stride
/// (`wide_mul`), one rank and two with a split history.
#[test]
fn mla_step_on_sm90a() {
    setup();
    if !sim_launcher::have_gxx() {
        return;
    }
    for (i, c) in sm90a_history_cases().iter().enumerate() {
        let plan = c.plan();
        let bound = |n: &str| plan.history.bindings().iter().any(|b| b.name == n);
        assert!(
            bound("LAZY_RESCALE"),
            "case {i}: the history binds the lazy max"
        );
        // Boxes landing at the first wait on their barrier (`mla_sim.rs` lands them at once).
        let launcher = sim_launcher::for_target(Warpgroup, Landing::Late);
        check_case_launched(c, 710 + i as u64, Some(launcher));
    }
}
