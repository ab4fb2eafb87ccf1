//! P0's producer with every address cut on (`ATTN_CODEGEN_ENABLE=page_pointer,byte_rows,
//! mask_bound,split_row_step,wide_mul,page_row`, all opt-in until timed together), checked
//! without a GPU:
//! NVRTC for sm_90a spill-free and the producer loop's SASS pinned (docs/gpu_ir.md, "The
//! producer's address, cut by cut").

mod sass_support;
mod unified_plans;

use attn_runtime::jit::CudaSource;
use attn_runtime::ops::unified_attention::gpu::emit_launch;
use unified_plans::{p0, warpgroup_launch};

/// Every cut, the feature list the MLA test below sets too.
const ALL_CUTS: &str = "page_pointer,byte_rows,mask_bound,split_row_step,wide_mul,page_row";

#[test]
fn p0_producer_takes_every_address_cut() {
    std::env::set_var("ATTN_CODEGEN_ENABLE", ALL_CUTS);
    let launch = warpgroup_launch(p0(), 16384);
    // The strides promised in `int`'s range are part of the kernel's key.
    let key = attn_runtime::ops::unified_attention::gpu::kernel_key(&launch);
    assert!(
        key.contains("|i32[") && key.contains("kv_stride_block"),
        "{key}"
    );
    let k = emit_launch(&launch).expect("emit");
    assert!(
        k.assumed_i32.iter().any(|n| n == "kv_stride_block"),
        "the launcher checks the promise: {:?}",
        k.assumed_i32
    );
    assert!(
        k.source.contains("attn_page_row(") && k.source.contains(", (int)kv_stride_block)"),
        "rows split at the page, the stride widened"
    );
    assert!(
        k.source.contains(", (int)attn_rows"),
        "V's rows on the pages K's copy kept"
    );
    assert!(
        k.source.contains("(attn_row < attn_wsub(msp"),
        "rows against the tile's bound"
    );
    let (line, c) =
        sass_support::producer_fill_loop("P0 address cuts", &CudaSource::from_kernel(&k));
    // 221 with NVRTC 13.0: 413 as shipped, 334 with page_pointer alone, then 317 with V
    // reading byte offsets, 303 with the bound, 266 with the passes' constant steps, 239
    // with the page times its stride one widening multiply, 221 with rows split at it.
    assert!(sass_support::count(&c, "n") <= 230, "{line}");
}

/// The MLA op makes the same promise of its latent cache's block stride: in the history
/// launch's key, in the kernel the launcher checks, and in the emitted product.
#[test]
fn mla_history_promises_its_block_stride_in_int_range() {
    use attn_runtime::ops::mla_dcp::metadata::DcpLayout;
    use attn_runtime::ops::mla_dcp::plan::DecodeStep;
    use attn_runtime::reference::mla::MlaConfig;
    std::env::set_var("ATTN_CODEGEN_ENABLE", ALL_CUTS);
    let layout = DcpLayout::new(2, 1, 64).expect("layout");
    let scale = MlaConfig::deepseek_v3().softmax_scale() as f32;
    let l = DecodeStep::uniform_decode(128, 4096, 64, layout, scale, 132)
        .plan()
        .expect("plan")
        .history;
    assert_eq!(l.promises.fits_i32, ["cache_stride_block"]);
    assert!(l.key().ends_with("|i32[cache_stride_block]"), "{}", l.key());
    let c = l.compile().expect("compile");
    assert_eq!(c.cuda.assumed_i32, ["cache_stride_block"]);
    assert!(
        c.cuda.source.contains(", (int)cache_stride_block)"),
        "a page times its stride, widened"
    );
}
