//! The 3D segment reduce fits in shared memory for every split the API accepts (issue: at
//! 1024 segments a whole `[NSEG, Dp]` tile asked for 256 KiB), and its specialization is
//! accepted by the code generator for every power-of-two segment count.

use attn_dsl::ir::ScalarType;
use attn_runtime::ops::unified_attention::config::{AttentionProblem, SplitKvWorkspace};
use attn_runtime::ops::unified_attention::gpu::emit_launch;
use attn_runtime::ops::unified_attention::plan::{
    choose_config, plan_launch, LaunchShape, MaskVariant, PathChoice,
};

/// Static shared memory a block may use without an opt-in (all CUDA architectures).
const STATIC_SHARED_LIMIT: u32 = 48 * 1024;

fn shape(num_tokens: usize, hq: usize, d: usize) -> LaunchShape {
    LaunchShape {
        num_tokens,
        num_seqs: num_tokens,
        max_seqlen_q: 1,
        q_strides: [hq * d, d],
        out_strides: [hq * d, d],
        kv_strides: [16 * d, d, d],
        block_table_stride: 4,
        qq_bias_stride0: 0,
        mask_aux_stride: None,
        mask_aux_f32_stride: None,
        softmax_scale: 0.1,
        softcap: 0.0,
        num_sinks: 0,
    }
}

#[test]
fn reduce_shared_memory_is_bounded_for_every_segment_count() {
    for d in [64, 128, 256, 512] {
        for nseg in [1, 2, 16, 64, 256, 1024] {
            let problem = AttentionProblem {
                split_kv: Some(SplitKvWorkspace {
                    seq_threshold_3d: 16,
                    num_segments: nseg,
                }),
                ..AttentionProblem::dense_causal(4, 1, d)
            };
            let cfg = choose_config(&problem, PathChoice::Force3d { num_segments: nseg })
                .expect("valid 3D config");
            let plan = plan_launch(
                &cfg,
                &shape(2, 4, d as usize),
                ScalarType::Bf16,
                &MaskVariant::default(),
            )
            .expect("plan");
            let reduce = plan.reduce.expect("3D has a reduce");
            let k = emit_launch(&reduce).expect("reduce specializes and emits");
            assert!(
                k.shared_bytes <= STATIC_SHARED_LIMIT,
                "D {d}, {nseg} segments: reduce needs {} bytes of shared memory",
                k.shared_bytes
            );
        }
    }
}
