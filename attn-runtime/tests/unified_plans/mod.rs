//! The benchmark shapes (P0, P1, P3, D1) as the op plans them, and the specialized IR of a
//! plan's attention kernel: what the no-GPU kernel tests compile and pin.

#![allow(dead_code)]

use attn_dsl::ir::ScalarType;
use attn_runtime::ops::unified_attention::config::{AttentionProblem, MmRangeEncoding, MmaKind};
use attn_runtime::ops::unified_attention::plan::{
    choose_config, plan_launch, KernelLaunch, LaunchPlan, LaunchShape, MaskVariant, PathChoice,
};

/// A paged problem's plan with vLLM's cache layout [blocks, 16, Hkv, D].
pub fn plan(p: &AttentionProblem, tokens: usize, path: PathChoice) -> LaunchPlan {
    let cfg = choose_config(p, path).expect("valid configuration");
    let (hq, hkv, d) = (
        p.num_query_heads as usize,
        p.num_kv_heads as usize,
        p.head_size as usize,
    );
    let shape = LaunchShape {
        num_tokens: tokens,
        num_seqs: p.num_seqs as usize,
        max_seqlen_q: p.max_seqlen_q as usize,
        q_strides: [hq * d, d],
        out_strides: [hq * d, d],
        kv_strides: [16 * hkv * d, hkv * d, d],
        block_table_stride: 1024,
        qq_bias_stride0: 0,
        mask_aux_stride: None,
        mask_aux_f32_stride: None,
        softmax_scale: 0.0625,
        softcap: p.softcap,
        num_sinks: 0,
    };
    plan_launch(&cfg, &shape, ScalarType::Bf16, &MaskVariant::default()).expect("plan")
}

pub fn p1() -> AttentionProblem {
    AttentionProblem {
        max_seqlen_q: 8192,
        num_seqs: 1,
        sliding_window: 1024,
        ..AttentionProblem::dense_causal(16, 8, 256)
    }
}

pub fn p0() -> AttentionProblem {
    AttentionProblem {
        max_seqlen_q: 16384,
        num_seqs: 1,
        ..AttentionProblem::dense_causal(16, 16, 128)
    }
}

/// The launch table's warpgroup entry for a problem (the op's choice on an sm_90a device).
pub fn warpgroup(p: AttentionProblem) -> AttentionProblem {
    AttentionProblem {
        mma: MmaKind::Warpgroup,
        ..p
    }
}

/// The attention launch of `p` on `tokens` query tokens as an sm_90a device plans it
/// (warpgroup MMAs, the heuristic path).
pub fn warpgroup_launch(p: AttentionProblem, tokens: usize) -> KernelLaunch {
    plan(&warpgroup(p), tokens, PathChoice::Heuristic).attention
}

pub fn p3() -> AttentionProblem {
    AttentionProblem {
        mm: MmRangeEncoding::PerSequence { max_ranges: 30 },
        mm_prefix_clamp_sw: true,
        ..p1()
    }
}

pub fn d1() -> AttentionProblem {
    AttentionProblem {
        max_seqlen_q: 1,
        num_seqs: 64,
        ..AttentionProblem::dense_causal(32, 8, 128)
    }
}

/// The specialized IR the op emits for the plan (with its divisibility promises).
pub fn lowered_ir(plan: &LaunchPlan) -> attn_dsl::ir::Function {
    use attn_runtime::kernels::{specialization_cache::specialize_cached, unified_attention};
    let module = unified_attention::module().expect("module");
    let f = specialize_cached(&module, plan.attention.kernel, &plan.attention.bindings)
        .expect("specialize");
    let mut f = (*f).clone();
    let div = attn_runtime::ops::unified_attention::gpu::divisible_strides(&plan.attention);
    attn_dsl::passes::assume::divisible(&mut f, &div).expect("assume");
    f
}
