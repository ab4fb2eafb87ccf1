//! The shipped kernels with TMA copies (`ATTN_CODEGEN_ENABLE=tma`, the plans an sm_90a device
//! gets), checked without a GPU: which tensor maps the launcher will encode (viewed buffer,
//! row stride, box), and that NVRTC compiles the source for sm_90a without spills or local
//! memory, its main loop free of `cp.async`. GPU parity of the TMA branch: `gpu_unified` and
//! `gpu_mla_op` run with the feature on.

mod experiment_support;
mod sass_support;
mod unified_plans;

use attn_dsl::codegen::{CudaKernel, RowStride};
use attn_runtime::jit::CudaSource;
use attn_runtime::ops::mla_dcp::metadata::DcpLayout;
use attn_runtime::ops::mla_dcp::plan::DecodeStep;
use attn_runtime::ops::unified_attention::config::{AttentionProblem, MmaKind};
use attn_runtime::ops::unified_attention::gpu::emit_launch;
use attn_runtime::ops::unified_attention::plan::PathChoice;
use attn_runtime::reference::mla::MlaConfig;
use unified_plans::{p0, plan};

/// Every test of this binary runs with the feature on (read once per process).
fn tma_on() {
    std::env::set_var("ATTN_CODEGEN_ENABLE", "tma");
}

/// The maps as (viewed parameter, row-stride parameter or none, coefficient, box rows,
/// box columns).
fn maps(k: &CudaKernel) -> Vec<(String, Option<String>, i64, u32, u32)> {
    let name = |i: usize| k.params[i].name.clone();
    k.tensor_maps
        .iter()
        .map(|m| {
            let RowStride { param, coeff } = m.row_stride;
            (
                name(m.base_param),
                param.map(name),
                coeff,
                m.box_rows,
                m.box_cols,
            )
        })
        .collect()
}

/// NVRTC for sm_90a: no spills, no local memory.
fn sm90a_spill_free(label: &str, k: &CudaKernel) {
    let arch = "sm_90a".parse().expect("arch");
    sass_support::compile_spill_free(
        &format!("{label} with TMA"),
        &CudaSource::from_kernel(k),
        arch,
    );
}

/// P0's sm_90a kernel under `path` with TMA copies, after checking its maps: one per
/// cache, 16-row boxes (a page) by 64 columns, rows `kv_stride_slot` apart.
fn p0_by_boxes(path: PathChoice) -> CudaKernel {
    tma_on();
    let p = AttentionProblem {
        mma: MmaKind::Warpgroup,
        ..p0()
    };
    let k = emit_launch(&plan(&p, 16384, path).attention).expect("emit");
    let stride = Some("kv_stride_slot".to_string());
    assert_eq!(
        maps(&k),
        vec![
            ("k_cache".into(), stride.clone(), 1, 16, 64),
            ("v_cache".into(), stride, 1, 16, 64),
        ]
    );
    k
}

/// P0's paged K and V (pages of 16 keys, rows `kv_stride_slot` apart): one map per cache,
/// eight 16-row boxes per 64-column block of a 128-key tile, on the launch table's tiling
/// with two stages (the loop as written; three below).
#[test]
fn p0_reads_its_pages_as_boxes() {
    let two_stages = PathChoice::Force2dTiled {
        block_m: 128,
        tile_size: 128,
        slabs_per_warp: 1,
        num_stages: 2,
    };
    let k = p0_by_boxes(two_stages);
    // Sixteen boxes per copy and tile (8 pages x 2 column blocks), spread over the 4
    // producer warps.
    assert!(
        k.source.contains("attn_k0_3 < 16) attn_tma_load_2d("),
        "K's boxes"
    );
    // V's boxes share K's coordinates (the same rows of the other cache).
    assert!(
        k.source
            .contains("attn_k0_3 < 16) attn_tma_load_2d(attn_dst_1 +"),
        "V's boxes"
    );
    sm90a_spill_free("P0", &k);
}

/// The launch table's own three-stage tiling takes TMA in the previous-stage form (PV reading
/// V one stage back, the stage announced once its boxes landed): the same maps, each cache's
/// masked-chunk bits kept per fill in flight (two at three stages), spill-free.
#[test]
fn p0_table_tiling_reads_its_pages_as_boxes_in_the_previous_stage_form() {
    let k = p0_by_boxes(PathChoice::Heuristic);
    assert!(
        k.source.contains(" ? attn_stage"),
        "PV reads the previous stage"
    );
    assert!(
        k.source.contains("unsigned attn_zb1_1 = 0u;")
            && k.source.contains("unsigned attn_zb2_1 = 0u;"),
        "bits per fill in flight"
    );
    sm90a_spill_free("P0 three stages", &k);
}

/// FlashAttention-3's handoff in P0's TMA form: the consumers wait on each cache's box
/// mbarrier after the stage's hand-over (K's at `0 + stage`, V's at `3 + stage`), and the
/// producer waits for a stage's boxes only inside its masked-chunk branch. The cluster
/// experiment (`bench/experiments/tma_multicast.py`: docs/gpu_ir.md, "What bounds P0 and
/// P1 now") still applies to that source and compiles spill-free.
#[test]
fn p0_consumers_wait_on_the_boxes_and_the_multicast_rewrite_applies() {
    let k = p0_by_boxes(PathChoice::Heuristic);
    let consumers = &k.source[k
        .source
        .find("attn_setmaxnreg_inc")
        .expect("the consumers' part")..];
    for mb in ["0", "3"] {
        assert!(
            consumers.contains(&format!("const int attn_mb = {mb} + attn_stage__;")),
            "the consumers wait on box mbarrier {mb} + stage"
        );
    }
    let producer = &k.source[..k.source.find("attn_setmaxnreg_inc").expect("split")];
    // The zeroers' wait (the parity flipped just before) only: K's and V's.
    assert_eq!(
        producer
            .matches("attn_mbar_wait(&attn_mbar[attn_mb], ")
            .count(),
        2,
        "the producer's box waits"
    );
    assert_eq!(
        producer
            .matches(
                "attn_mbar_wait(&attn_mbar[attn_mb], ((attn_tma_phase >> attn_mb) & 1u) ^ 1u);"
            )
            .count(),
        2,
        "each inside its masked-chunk branch"
    );
    let dir = std::env::temp_dir().join(format!("attn-multicast-{}", std::process::id()));
    let (src, dst) = (dir.join("generated"), dir.join("multicast"));
    std::fs::create_dir_all(&src).expect("temp dir");
    std::fs::write(src.join("p0.cu"), &k.source).expect("write");
    experiment_support::rewrite("tma_multicast.py", &src, &dst, &[]);
    let edited = std::fs::read_to_string(dst.join("p0.cu")).expect("the rewrite");
    assert!(edited.contains("__cluster_dims__(2, 1, 1)"));
    let mc = CudaKernel {
        source: edited,
        ..k.clone()
    };
    sm90a_spill_free("P0 multicast", &mc);
    let _ = std::fs::remove_dir_all(&dir);
}

/// MLA's history on two warpgroups (L1): a page of 64 latent rows is the whole key tile,
/// rows 576 elements apart: nine 64-row boxes a tile (eight latent, one rope).
#[test]
fn mla_history_reads_a_page_per_box() {
    tma_on();
    let layout = DcpLayout::new(1, 1, 64).expect("layout");
    let scale = MlaConfig::deepseek_v3().softmax_scale() as f32;
    let l = DecodeStep::uniform_decode(128, 4096, 128, layout, scale, 132)
        .plan_tuned(MmaKind::Warpgroup, None, None, None)
        .expect("plan")
        .history;
    let c = l.compile().expect("compile");
    assert_eq!(maps(&c.cuda), vec![("cache".into(), None, 576, 64, 64)]);
    // Eight latent boxes and one rope box per tile, one per warp.
    assert!(
        c.cuda.source.contains("attn_k0_0 < 8) attn_tma_load_2d("),
        "latent boxes"
    );
    assert!(
        c.cuda.source.contains("attn_k1_0 < 1) attn_tma_load_2d("),
        "rope box"
    );
    sm90a_spill_free("L1 history", &c.cuda);
}
