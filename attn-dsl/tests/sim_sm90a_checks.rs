//! The simulator's sm_90a branch catches what it is there to catch: the proof flash kernel's
//! emitted CUDA (warp-specialized, three stages, PV from the previous stage) passes as
//! emitted, and fails once broken the ways a schedule can break on the GPU — the consumers'
//! async-proxy fence removed, a warpgroup MMA's wait removed (its accumulators read in
//! flight), a descriptor's stride wrong, a stage never released (a deadlock the
//! simulator's watchdog ends instead of hanging the test run).

mod codegen_common;

use attn_dsl::codegen::emit_cuda;
use attn_dsl::ir::ScalarType;
use codegen_common::cpu_sim::{have_gxx, Branch};
use codegen_common::sim_check::{flash_args, outcome};

/// The emitted kernel with `edit` applied run on the sm_90a branch (`Ok` when it matches).
fn run_edited(edit: impl Fn(&str) -> String) -> Result<(), String> {
    std::env::set_var("ATTN_SIM_LANDING_DELAY_US", "300");
    // Every run of this binary ends within seconds unless it deadlocks.
    std::env::set_var("ATTN_SIM_TIMEOUT_S", "30");
    let mut f = codegen_common::flash_fwd(64, 128, true);
    f.num_stages = 3;
    let mut k = emit_cuda(&f).expect("emit");
    k.source = edit(&k.source);
    let args = flash_args(ScalarType::Bf16, 2, 150, 128, 95);
    outcome(&f, &k, Branch::Wgmma, [3, 2, 1], args, 2e-2)
}

/// `src` with every occurrence of `from` replaced, which must occur.
fn replaced(src: &str, from: &str, to: &str) -> String {
    assert!(src.contains(from), "`{from}` not in the emitted source");
    src.replace(from, to)
}

#[test]
fn the_emitted_kernel_passes() {
    if !have_gxx() {
        return;
    }
    run_edited(str::to_string).expect("as emitted");
}

#[test]
fn a_missing_proxy_fence_is_caught() {
    if !have_gxx() {
        return;
    }
    let err = run_edited(|s| replaced(s, "attn_fence_proxy_async();", ""))
        .expect_err("no fence.proxy.async");
    assert!(err.contains("fence.proxy.async"), "{err}");
}

#[test]
fn accumulators_read_in_flight_are_caught() {
    if !have_gxx() {
        return;
    }
    // The scores' wait with PV in flight dropped: the softmax reads the scores' accumulators
    // before their MMAs retire.
    let err = run_edited(|s| replaced(s, "attn_wgmma_wait<1>();", ""))
        .expect_err("no wait for the scores");
    assert!(
        err.contains("NaN") || err.contains("in flight") || err.contains("changed"),
        "{err}"
    );
}

#[test]
fn a_wrong_descriptor_stride_is_caught() {
    if !have_gxx() {
        return;
    }
    // Read past the tile: wrong values, or bytes of other buffers the async proxy may not see.
    let err = run_edited(|s| replaced(s, ", 16, 1024)", ", 16, 2048)"))
        .expect_err("8-row atoms 2048 bytes apart");
    assert!(
        err.contains("element") || err.contains("simulator:"),
        "{err}"
    );
}

#[test]
fn a_stage_never_released_is_stopped() {
    if !have_gxx() {
        return;
    }
    // The consumers never release a stage: the producer waits for it forever.
    let err = run_edited(|s| replaced(s, "attn_mbar_arrive(", "(void)("))
        .expect_err("stages never released");
    assert!(err.contains("no end after"), "{err}");
}
