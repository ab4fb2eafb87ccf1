//! P0 with five of the producer's address cuts on (`ATTN_CODEGEN_ENABLE=page_pointer,
//! byte_rows,mask_bound,split_row_step,wide_mul`: all but `page_row`, opt-in until timed),
//! checked without a GPU: the producer loop loses 174 of its 413 instructions a warp a tile
//! and the consumers' loop, which the source does not change, keeps its size. All six move
//! the ring's phase word off the uniform datapath in the consumers (974 instructions), so
//! these five are the variant to time against the shipped producer at the power limit
//! (docs/gpu_ir.md, "The cuts under the power limit"). Own binary: the feature list is read
//! once a process.

mod sass_support;
mod unified_plans;

use attn_runtime::jit::CudaSource;
use attn_runtime::ops::unified_attention::gpu::emit_launch;
use unified_plans::{p0, warpgroup_launch};

#[test]
fn five_cuts_shrink_the_producer_and_leave_the_consumers_as_shipped() {
    std::env::set_var(
        "ATTN_CODEGEN_ENABLE",
        "page_pointer,byte_rows,mask_bound,split_row_step,wide_mul",
    );
    let launch = warpgroup_launch(p0(), 16384);
    let k = emit_launch(&launch).expect("emit");
    assert!(
        !k.source.contains("attn_page_row("),
        "page_row is not one of the five"
    );
    let source = CudaSource::from_kernel(&k);
    // 239 with NVRTC 13.0 (413 as shipped).
    let (line, c) = sass_support::producer_fill_loop("P0 five cuts", &source);
    assert!(sass_support::count(&c, "n") <= 245, "producer: {line}");
    // 969 with NVRTC 13.0, as shipped (wgmma_kernels::p0_consumer_loop_keeps_its_size).
    let cubin = sass_support::sm90a_cubin("P0 five cuts", &source);
    let (line, c) = sass_support::innermost_loop_with("P0 five cuts", &cubin, "HGMMA");
    assert!(sass_support::count(&c, "n") <= 970, "consumers: {line}");
}
