//! Host-only checks of the GPU op's launches, so CI (NVRTC, no GPU) catches what would
//! otherwise fail only on the GPU host: for plans covering every optional buffer and both
//! paths, the emitted kernel's parameters line up with the plan's arguments (names, order,
//! writable buffers on `*mut` parameters, stand-in and scalar types), and NVRTC compiles
//! the attention and reduce specializations for sm_90.

use attn_dsl::ir::ScalarType;
use attn_runtime::jit::{compile, Arch, CudaSource, JitOptions};
use attn_runtime::ops::unified_attention::config::{
    AlibiMode, AttentionProblem, CausalMode, MmRangeEncoding,
};
use attn_runtime::ops::unified_attention::gpu::{check_launch_params, emit_launch, launch_key};
use attn_runtime::ops::unified_attention::plan::{
    choose_config, plan_launch, BufferRole, KernelArg, LaunchPlan, LaunchShape, MaskVariant,
    PathChoice,
};

fn problem(heads: (i32, i32), head_size: i32, max_seqlen_q: i32) -> AttentionProblem {
    AttentionProblem {
        max_seqlen_q,
        num_seqs: 3,
        ..AttentionProblem::dense_causal(heads.0, heads.1, head_size)
    }
}

fn plan(p: &AttentionProblem, path: PathChoice) -> LaunchPlan {
    let cfg = choose_config(p, path).expect("valid configuration");
    let (hq, d) = (p.num_query_heads as usize, p.head_size as usize);
    let shape = LaunchShape {
        num_tokens: 40,
        num_seqs: 3,
        max_seqlen_q: p.max_seqlen_q as usize,
        q_strides: [hq * d + 8, d],
        out_strides: [hq * d + 8, d],
        kv_strides: [
            16 * p.num_kv_heads as usize * d,
            p.num_kv_heads as usize * d,
            d,
        ],
        block_table_stride: 64,
        qq_bias_stride0: if p.use_qq_bias { 40 } else { 0 },
        mask_aux_stride: None,
        mask_aux_f32_stride: None,
        softmax_scale: 0.125,
        softcap: p.softcap,
        num_sinks: if p.use_sinks { hq } else { 0 },
    };
    plan_launch(&cfg, &shape, ScalarType::Bf16, &MaskVariant::default()).expect("plan")
}

/// Emits every launch of `plan`, checks its parameters, optionally compiles it.
fn check_plan(label: &str, plan: &LaunchPlan, nvrtc: bool) {
    for launch in std::iter::once(&plan.attention).chain(&plan.reduce) {
        let key = launch_key(launch);
        let cuda = emit_launch(launch).unwrap_or_else(|e| panic!("{label}: {key}: {e}"));
        check_launch_params(launch, &cuda.params).unwrap_or_else(|e| panic!("{label}: {e}"));
        if nvrtc {
            let m = compile(
                &CudaSource::from_kernel(&cuda),
                &JitOptions::new(Arch::from_compute_capability(9, 0)),
            )
            .unwrap_or_else(|e| panic!("{label}: NVRTC: {e}"));
            println!("{label}: {} compiled: {:?}", launch.kernel, m.entry_stats());
        }
    }
}

#[test]
fn two_d_plan_with_window_and_softcap_compiles() {
    let p = AttentionProblem {
        sliding_window: 64,
        softcap: 50.0,
        ..problem((8, 2), 128, 129)
    };
    let plan = plan(&p, PathChoice::Heuristic);
    assert!(!plan.config.is_3d && plan.reduce.is_none());
    check_plan("2D SW 64 softcap 50", &plan, true);
}

#[test]
fn three_d_plan_with_padded_head_size_compiles_with_its_reduce() {
    let plan = plan(
        &problem((5, 1), 96, 1),
        PathChoice::Force3d { num_segments: 16 },
    );
    assert!(plan.config.is_3d && plan.reduce.is_some());
    let roles: Vec<KernelArg> = plan.attention.args.iter().map(|(_, a)| *a).collect();
    for role in [
        BufferRole::SegmentOutput,
        BufferRole::SegmentMax,
        BufferRole::SegmentExpSum,
    ] {
        assert!(
            roles.contains(&KernelArg::Buffer(role)),
            "3D writes {role:?}"
        );
    }
    check_plan("3D D 96", &plan, true);
}

/// Every optional input on (and both range encodings): the parameter check covers the
/// role of each buffer the GPU op maps.
#[test]
fn every_optional_buffer_lines_up_with_its_parameter() {
    let extras = AttentionProblem {
        causal: CausalMode::PerSequence,
        r_swa_window: Some(64),
        use_sinks: true,
        alibi: AlibiMode::Sqrt,
        use_qq_bias: true,
        ..problem((4, 2), 64, 40)
    };
    check_plan("extras", &plan(&extras, PathChoice::Heuristic), false);
    for (mm, label) in [
        (
            MmRangeEncoding::PerSequence { max_ranges: 3 },
            "per-sequence ranges",
        ),
        (MmRangeEncoding::PerQuery, "per-query ranges"),
    ] {
        let p = AttentionProblem {
            sliding_window: 128,
            chunk_lookback: 0,
            mm,
            mm_prefix_clamp_sw: true,
            ..problem((4, 2), 64, 40)
        };
        check_plan(label, &plan(&p, PathChoice::Heuristic), false);
    }
}

/// Decode (one query token, BLOCK_M 16) at D 128 on both paths and both tile sizes compiles
/// for sm_90; registers and spills are reported (DESIGN §4), not asserted. It prints whether
/// every dot keeps its accumulator in `mma` fragments: with 16 rows the 4 warps split the
/// columns, which needs N a multiple of 32 — so TILE 32 does, while TILE 16's score dot still
/// stages through shared memory.
#[test]
fn decode_d128_compiles_and_reports_registers() {
    let p = problem((32, 8), 128, 1);
    for (path, label) in [
        (PathChoice::Force2d, "2D"),
        (PathChoice::Force3d { num_segments: 16 }, "3D"),
    ] {
        for tile in [16, 32] {
            let mut cfg = choose_config(&p, path).expect("valid configuration");
            assert_eq!(cfg.block_m, 16, "decode keeps vLLM's BLOCK_M");
            cfg.tile_size = tile;
            let shape = LaunchShape {
                num_tokens: 3,
                max_seqlen_q: 1,
                ..decode_shape(&p)
            };
            let plan =
                plan_launch(&cfg, &shape, ScalarType::Bf16, &MaskVariant::default()).expect("plan");
            let cuda = emit_launch(&plan.attention).expect("emit");
            let label = format!("decode {label} D 128 TILE {tile}");
            let m = compile(
                &CudaSource::from_kernel(&cuda),
                &JitOptions::new(Arch::from_compute_capability(9, 0)),
            )
            .unwrap_or_else(|e| panic!("{label}: NVRTC: {e}"));
            let stats = m.entry_stats().expect("ptxas stats of the entry");
            // Every dot keeps its accumulator in mma fragments (row slabs or column-split warps)
            // when no dot stages one through shared memory.
            let in_fragments = !cuda.source.contains("float frag[");
            println!(
                "{label}: {} threads, fragment accumulators: {in_fragments}, {stats:?}{}",
                cuda.block_threads,
                if stats.spills() { "  [SPILLS]" } else { "" }
            );
        }
    }
}

/// The launch shape of [`plan`] for `p`, before the decode overrides.
fn decode_shape(p: &AttentionProblem) -> LaunchShape {
    let (hq, d) = (p.num_query_heads as usize, p.head_size as usize);
    LaunchShape {
        num_tokens: 3,
        num_seqs: 3,
        max_seqlen_q: 1,
        q_strides: [hq * d, d],
        out_strides: [hq * d, d],
        kv_strides: [
            16 * p.num_kv_heads as usize * d,
            p.num_kv_heads as usize * d,
            d,
        ],
        block_table_stride: 64,
        qq_bias_stride0: 0,
        mask_aux_stride: None,
        mask_aux_f32_stride: None,
        softmax_scale: 0.125,
        softcap: 0.0,
        num_sinks: 0,
    }
}

/// R-SWA and unclamped per-query MM ranges visit two tile ranges (two tile loops): the
/// emitter and NVRTC take the two-loop kernel, in 2D and 3D. (Unclamped ranges listed per
/// sequence keep one span: `UnifiedAttentionConfig::unclamped_ranges_in_one_span`.)
#[test]
fn two_range_plans_compile() {
    let rswa = AttentionProblem {
        r_swa_window: Some(256),
        ..problem((16, 8), 128, 64)
    };
    let mm = AttentionProblem {
        sliding_window: 512,
        mm: MmRangeEncoding::PerQuery,
        ..problem((16, 8), 128, 64)
    };
    for (label, p) in [("R-SWA", rswa), ("unclamped per-query MM", mm)] {
        let two_d = plan(&p, PathChoice::Force2d);
        assert_eq!(two_d.config.tile_ranges, 2, "{label}");
        check_plan(label, &two_d, true);
        let decode = AttentionProblem {
            max_seqlen_q: 1,
            ..p
        };
        check_plan(
            label,
            &plan(&decode, PathChoice::Force3d { num_segments: 8 }),
            true,
        );
    }
}
