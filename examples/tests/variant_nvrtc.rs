//! Host-only (NVRTC, no GPU): every example variant's attention specialization, as the GPU
//! op plans it, emits CUDA whose parameters line up with the plan and compiles for sm_90,
//! in 2D prefill and 3D decode — so a variant that cannot run on the GPU fails in CI.

use attn_dsl::ir::ScalarType;
use attn_runtime::jit::{compile, Arch, CudaSource, JitOptions};
use attn_runtime::ops::unified_attention::config::AttentionProblem;
use attn_runtime::ops::unified_attention::gpu::{check_launch_params, emit_plan_attention};
use attn_runtime::ops::unified_attention::plan::{
    choose_config, plan_launch, LaunchShape, PathChoice,
};
use attn_runtime::ops::unified_attention::variant::VariantModule;

fn shape(p: &AttentionProblem, aux: bool) -> LaunchShape {
    let (hq, d) = (p.num_query_heads as usize, p.head_size as usize);
    LaunchShape {
        num_tokens: 40,
        num_seqs: 3,
        max_seqlen_q: p.max_seqlen_q as usize,
        q_strides: [hq * d, d],
        out_strides: [hq * d, d],
        kv_strides: [
            16 * p.num_kv_heads as usize * d,
            p.num_kv_heads as usize * d,
            d,
        ],
        block_table_stride: 64,
        qq_bias_stride0: 0,
        mask_aux_stride: aux.then_some(4096),
        mask_aux_f32_stride: None,
        softmax_scale: 0.125,
        softcap: 0.0,
        num_sinks: 0,
    }
}

#[test]
fn every_example_variant_compiles_for_the_gpu() {
    for (name, variant) in attn_examples::all() {
        for (max_q, path) in [
            (64, PathChoice::Force2d),
            (1, PathChoice::Force3d { num_segments: 8 }),
        ] {
            let p = AttentionProblem {
                max_seqlen_q: max_q,
                num_seqs: 3,
                ..AttentionProblem::dense_causal(16, 8, 128)
            };
            let cfg = choose_config(&p, path).expect("config");
            let mut plan = plan_launch(
                &cfg,
                &shape(&p, variant.aux_i32.is_some()),
                ScalarType::Bf16,
                &variant.mask_variant(),
            )
            .unwrap_or_else(|e| panic!("{name}: {e}"));
            plan.variant = Some(VariantModule::of(&variant));
            let cuda = emit_plan_attention(&plan).unwrap_or_else(|e| panic!("{name}: {e}"));
            check_launch_params(&plan.attention, &cuda.params)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let m = compile(
                &CudaSource::from_kernel(&cuda),
                &JitOptions::new(Arch::from_compute_capability(9, 0)),
            )
            .unwrap_or_else(|e| panic!("{name} ({}): NVRTC: {e}", plan.path_name()));
            eprintln!("{name} {}: {:?}", plan.path_name(), m.entry_stats());
        }
    }
}
