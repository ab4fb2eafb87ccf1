//! The unified attention kernels as a GPU runs them, checked without one: each launch of a
//! CPU run is the CUDA the op emits for it, run on the simulator (`sim_launcher`) on the
//! run's poisoned buffers and compared with the f64 reference. The plans an sm_90a device
//! gets run their sm_90a branch (warpgroup MMAs through descriptors, warpgroup turns,
//! mbarrier rings, the producer's copies: `sim_wgmma.h` checks each MMA's shared operands
//! unchanged until its wait and its accumulators untouched in flight); an sm_80 device's
//! plans run `mma.sync`. Skipped when g++ is missing. The same grid with the opt-in
//! features on: `sim_opt_in.rs`.

mod sim_launcher;
mod unified_common;
mod unified_sim_cases;

use attn_runtime::ops::unified_attention::config::MmaKind::{Sync, Warpgroup};
use unified_sim_cases as cases;

#[test]
fn p0_class_on_sm90a() {
    cases::p0_class(Warpgroup);
}

#[test]
fn p1_class_on_sm90a() {
    cases::p1_class(Warpgroup);
}

#[test]
fn p3_class_on_sm90a() {
    cases::p3_class(Warpgroup);
}

#[test]
fn d1_class_on_sm90a() {
    cases::d1_class(Warpgroup);
}

#[test]
fn softcap_and_sinks_on_sm90a() {
    cases::mixed_softcap_sinks(Warpgroup);
}

#[test]
fn prefill_masks_on_sm90a() {
    cases::prefill_masks(Warpgroup);
}

#[test]
fn main_grid_on_sm90a_heads_8_2() {
    cases::main_grid((8, 2), 128, 21, Warpgroup);
}

#[test]
fn main_grid_on_sm90a_heads_5_1() {
    cases::main_grid((5, 1), 64, 22, Warpgroup);
}

#[test]
fn launch_table_tilings_on_sm90a() {
    cases::launch_table_tilings(Warpgroup);
}

#[test]
fn p0_and_p3_classes_on_sm80() {
    cases::p0_class(Sync);
    cases::p3_class(Sync);
}

#[test]
fn d1_class_on_sm80() {
    cases::d1_class(Sync);
}
