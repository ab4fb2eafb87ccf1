//! P0's producer with each page's block-table entry read at a constant from one pointer a
//! tile (`ATTN_CODEGEN_ENABLE=page_pointer`, opt-in), checked without a GPU: NVRTC for
//! sm_90a spill-free and the producer loop's SASS pinned (docs/gpu_ir.md, "What is left of
//! the page arithmetic").

mod sass_support;
mod unified_plans;

use attn_runtime::jit::CudaSource;
use attn_runtime::ops::unified_attention::gpu::emit_launch;
use unified_plans::{p0, warpgroup_launch};

#[test]
fn p0_producer_reads_page_entries_from_the_tiles_pointer() {
    std::env::set_var("ATTN_CODEGEN_ENABLE", "page_pointer");
    let k = emit_launch(&warpgroup_launch(p0(), 16384)).expect("emit");
    assert!(
        k.source.contains(" + (((p * 16 / 16) * 16) >> 4)))"),
        "each pass's page entry at a constant"
    );
    // K's and V's chunks of a tile, only K's block-table loads (V reads K's rows).
    let (line, c) =
        sass_support::producer_fill_loop("P0 page_pointer", &CudaSource::from_kernel(&k));
    // 334 with NVRTC 13.0, against 413 with the page index divided at each pass's run.
    assert!(sass_support::count(&c, "n") <= 345, "{line}");
}
