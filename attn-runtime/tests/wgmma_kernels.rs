//! The shipped prefill specializations on Hopper's warpgroup MMA, checked without a GPU: with
//! `ATTN_CODEGEN_ENABLE=wgmma` (set for this whole test binary, before any code generation)
//! the plan's attention kernel carries a `wgmma` path beside its `mma.sync` one, and NVRTC
//! compiles it for sm_90a without spills or local memory, the KV-tile loop issuing warpgroup
//! MMAs (HGMMA) and no `mma.sync` (HMMA) or B-operand `ldmatrix`.

mod sass_support;
mod unified_plans;

use attn_runtime::jit::{compile, Arch, CudaSource, JitOptions, ModuleImage};
use attn_runtime::ops::unified_attention::gpu::emit_launch;
use attn_runtime::ops::unified_attention::plan::{LaunchPlan, PathChoice};
use unified_plans::{p0, p1, p3, plan};

fn enable_wgmma() {
    std::env::set_var("ATTN_CODEGEN_ENABLE", "wgmma");
}

/// The loop's SASS counts of the plan's kernel compiled for sm_90a (spill-free, asserted).
fn sm90a_loop(
    label: &str,
    plan: &LaunchPlan,
) -> (String, std::collections::BTreeMap<String, usize>) {
    enable_wgmma();
    let cuda = emit_launch(&plan.attention).unwrap_or_else(|e| panic!("{label}: {e}"));
    assert!(
        cuda.source.contains("__CUDA_ARCH_FEAT_SM90_ALL")
            && cuda.source.contains("wgmma.mma_async"),
        "{label}: no warpgroup MMA path in the source"
    );
    if let Ok(dir) = std::env::var("ATTN_DUMP_DIR") {
        let _ = std::fs::write(format!("{dir}/{label}-wgmma.cu"), &cuda.source);
    }
    let arch: Arch = "sm_90a".parse().expect("arch");
    let m = compile(&CudaSource::from_kernel(&cuda), &JitOptions::new(arch))
        .unwrap_or_else(|e| panic!("{label}: NVRTC: {e}"));
    let stats = m.entry_stats().expect("ptxas stats");
    println!("{label} sm_90a: {stats:?}");
    assert_eq!(
        (
            stats.spill_store_bytes,
            stats.spill_load_bytes,
            stats.stack_frame_bytes
        ),
        (0, 0, 0),
        "{label}: spills or local memory: {stats:?}"
    );
    let ModuleImage::Cubin(bytes) = &m.image else {
        panic!("{label}: no cubin");
    };
    if let Ok(dir) = std::env::var("ATTN_DUMP_DIR") {
        let _ = std::fs::write(format!("{dir}/{label}-wgmma.cubin"), bytes);
    }
    let (line, counts) = sass_support::main_loop(label, bytes);
    println!("{label} sm_90a SASS {line}");
    (line, counts)
}

/// 128 rows on two warpgroups over 128-key tiles (one slab per warp).
#[test]
fn p0_runs_both_dots_on_warpgroup_mmas() {
    let path = PathChoice::Force2dTiled {
        block_m: 128,
        tile_size: 128,
        slabs_per_warp: 1,
        num_stages: 2,
    };
    let (line, c) = sm90a_loop("P0-m128t128s1", &plan(&p0(), 16384, path));
    let n = |k: &str| sass_support::count(&c, k);
    println!("{line} {}", n("HGMMA"));
}

#[test]
fn p1_runs_both_dots_on_warpgroup_mmas() {
    let (line, c) = sm90a_loop("P1", &plan(&p1(), 8192, PathChoice::Heuristic));
    let n = |k: &str| sass_support::count(&c, k);
    println!("{line} {}", n("HGMMA"));
}

#[test]
fn p3_runs_both_dots_on_warpgroup_mmas() {
    let (line, c) = sm90a_loop("P3", &plan(&p3(), 8192, PathChoice::Heuristic));
    let n = |k: &str| sass_support::count(&c, k);
    println!("{line} {}", n("HGMMA"));
}
