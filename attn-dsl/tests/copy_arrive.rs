//! The producer's copies arriving on their stage (`ATTN_CODEGEN_ENABLE=copy_arrive` while
//! opt-in): the producer announces a stage by `cp.async.mbarrier.arrive.noinc` after each
//! fill instead of waiting for its copies at the top of every iteration, the full
//! mbarriers count one arrival a producer thread, the consumers fence the async proxy after
//! their wait; the split simulated (late-landing copies) matches the executor.

mod codegen_common;

use attn_dsl::codegen::emit_cuda;
use attn_dsl::gpu_ir::{self, GpuOp, StageSync};
use attn_dsl::ir::ScalarType;
use codegen_common::flash_fwd;
use codegen_common::sim_check::{check, flash_args, paged_args};

fn setup() {
    std::env::set_var("ATTN_CODEGEN_ENABLE", "copy_arrive");
    std::env::set_var("ATTN_SIM_LANDING_DELAY_US", "300");
}

/// The producer's handshake: an `Issued` after every fill (the prologue's stages and the
/// loop's next one), no `Filled`; the source's full mbarriers count 128 producer threads.
#[test]
fn the_producer_announces_each_fill() {
    setup();
    let f = flash_fwd(64, 64, true);
    let p = gpu_ir::compile(&f).expect("gpu ir");
    let ws = p.specialization.as_ref().expect("split");
    assert!(ws.copies_arrive);
    let mut syncs = Vec::new();
    gpu_ir::walk_block(&ws.producer, &mut |op| {
        if let GpuOp::Stage(s) = op {
            syncs.push(*s);
        }
    });
    let issued = syncs
        .iter()
        .filter(|s| matches!(s, StageSync::Issued { .. }))
        .count();
    assert_eq!(issued, f.num_stages as usize, "{syncs:?}");
    assert!(!syncs.contains(&StageSync::Filled), "{syncs:?}");
    let src = emit_cuda(&f).expect("emit").source;
    assert!(src.contains("attn_mbar_init(&attn_ws_bar[s], 128u);"));
    assert!(src.contains("attn_cp_mbar_arrive(&attn_ws_bar["));
}

/// Dense (D 64 and 128) and paged flash attention, split, against the executor.
#[test]
fn split_kernels_match_the_executor() {
    setup();
    for d in [64, 128] {
        let f = flash_fwd(64, d, true);
        let args = flash_args(ScalarType::Bf16, 2, 150, d as usize, 101);
        check(&format!("copies arrive D{d}"), &f, [3, 2, 1], args, 2e-2);
    }
    let f = codegen_common::paged_fwd(64, 64, 16);
    check(
        "copies arrive paged",
        &f,
        [2, 2, 1],
        paged_args(2, 100, 64, 16, 102),
        2e-2,
    );
}
