//! Masked fills through `attn_fill_select` with no MMA in flight too
//! (`ATTN_CODEGEN_ENABLE=fill_select_all`, opt-in until timed), checked without a GPU: with
//! the plain `?:`, P1's consumers copied every score to other registers after the scores'
//! wait, ahead of the mask's branch and so on full tiles too (32 moves a thread a tile);
//! with the select in its own instruction the full tiles branch straight after the wait.
//! NVRTC for sm_90a spill-free (docs/gpu_ir.md, "Masked fills while MMAs are in flight").

mod sass_support;
mod unified_plans;

use attn_runtime::jit::CudaSource;
use attn_runtime::ops::unified_attention::gpu::emit_launch;
use unified_plans::{p1, warpgroup_launch};

#[test]
fn p1_full_tiles_branch_right_after_the_scores_wait() {
    std::env::set_var("ATTN_CODEGEN_ENABLE", "fill_select_all");
    let k = emit_launch(&warpgroup_launch(p1(), 8192)).expect("emit");
    assert!(
        k.source.contains("attn_fill_select("),
        "the mask's fill as its own select"
    );
    let cubin = sass_support::sm90a_cubin("P1", &CudaSource::from_kernel(&k));
    let sass = sass_support::instructions("P1", &cubin);
    // The scores' wait is the first full wait after the loop's first HGMMA (PV's comes
    // after the softmax).
    let first = sass
        .iter()
        .position(|i| i.starts_with("HGMMA"))
        .expect("P1: an HGMMA");
    let wait = first
        + sass[first..]
            .iter()
            .position(|i| i.starts_with("WARPGROUP.DEPBAR.LE gsb0, 0x0"))
            .expect("P1: the scores' wait");
    let branch = wait
        + sass[wait..]
            .iter()
            .position(|i| i.contains("BRA"))
            .expect("P1: the mask's branch");
    let moves = sass[wait..branch]
        .iter()
        .filter(|i| i.starts_with("IMAD.MOV") || i.starts_with("MOV"))
        .count();
    assert!(
        moves <= 2,
        "P1: {moves} moves between the scores' wait and the mask's branch"
    );
}
