//! P0's producer with its rows addressed from their page's first (`ATTN_CODEGEN_ENABLE=
//! run_rows`, opt-in), checked without a GPU: the source's per-pass offset, NVRTC for
//! sm_90a spill-free, and the producer loop's SASS pinned below the shipped form's 346
//! instructions a warp a tile (docs/gpu_ir.md, "What bounds P0 and P1 now").

mod sass_support;
mod unified_plans;

use attn_runtime::jit::{Arch, CudaSource, ModuleImage};
use attn_runtime::ops::unified_attention::config::{AttentionProblem, MmaKind};
use attn_runtime::ops::unified_attention::gpu::emit_launch;
use attn_runtime::ops::unified_attention::plan::PathChoice;
use unified_plans::{p0, plan};

#[test]
fn p0_producer_addresses_rows_from_their_page() {
    std::env::set_var("ATTN_CODEGEN_ENABLE", "run_rows");
    let p = AttentionProblem {
        mma: MmaKind::Warpgroup,
        ..p0()
    };
    let k = emit_launch(&plan(&p, 16384, PathChoice::Heuristic).attention).expect("emit");
    assert!(
        k.source.contains("(long long)(p * 16 % 16 + tid / 8) * ("),
        "each pass's row from its page's first"
    );
    let arch: Arch = "sm_90a".parse().expect("arch");
    let m = sass_support::compile_spill_free("P0 run_rows", &CudaSource::from_kernel(&k), arch);
    let ModuleImage::Cubin(bytes) = m.image else {
        panic!("P0 run_rows: no cubin");
    };
    let (line, c) = sass_support::smallest_loop_with("P0 run_rows", &bytes, "LDGSTS");
    // K's and V's 16-byte chunks of 8 rows, 8 block-table loads.
    assert_eq!(sass_support::count(&c, "LDGSTS"), 32, "{line}");
    assert_eq!(sass_support::count(&c, "LDG"), 8, "{line}");
    // 297 with NVRTC 13.0; the shipped form's loop is 346 and its `LOP3`s (the remainder
    // of each row's key by the page) are gone.
    assert!(sass_support::count(&c, "n") <= 310, "{line}");
    assert_eq!(sass_support::count(&c, "LOP3"), 0, "{line}");
}
