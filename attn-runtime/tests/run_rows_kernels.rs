//! P0's producer with its rows addressed from their page's first (`run_rows`, shipped;
//! `ATTN_CODEGEN_DISABLE=run_rows` turns it off), checked without a GPU: the source's
//! per-pass offset, NVRTC for sm_90a spill-free, and the producer loop's SASS pinned
//! (docs/gpu_ir.md, "What bounds P0 and P1 now").

mod sass_support;
mod unified_plans;

use attn_runtime::jit::CudaSource;
use attn_runtime::ops::unified_attention::gpu::emit_launch;
use unified_plans::{p0, warpgroup_launch};

#[test]
fn p0_producer_addresses_rows_from_their_page() {
    let k = emit_launch(&warpgroup_launch(p0(), 16384)).expect("emit");
    assert!(
        k.source.contains("(long long)(p * 16 % 16 + tid / 8) * ("),
        "each pass's row from its page's first"
    );
    // K's and V's chunks of a tile, only K's block-table loads (V reads K's rows).
    let (line, c) = sass_support::producer_fill_loop("P0 run_rows", &CudaSource::from_kernel(&k));
    // The remainder of each row's key by the page (`LOP3`s) is gone. 413 with NVRTC 13.0
    // over both parts' acquires and arrivals (350 with later passes' shared rows at a
    // constant, `row_step`, which the split ring's producer does not take: slower; with
    // one ring 297, and 346 without `run_rows`).
    assert_eq!(sass_support::count(&c, "LOP3"), 0, "{line}");
    assert!(sass_support::count(&c, "n") <= 425, "{line}");
}
