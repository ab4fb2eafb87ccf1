//! The unified-attention op's host-side path on a fuzz case, in the op's order (what
//! `UnifiedAttentionContext::plan` runs before any launch): buffer extents, input
//! validation, the scalar contract, the §6 configuration, the launch plan and the 3D
//! workspace fit.

use attn_dsl::ir::ScalarType;
use attn_runtime::ops::unified_attention::config::{
    AlibiMode, AttentionProblem, CausalMode, MmRangeEncoding,
};
use attn_runtime::ops::unified_attention::gpu::{check_workspace, AttnError};
use attn_runtime::ops::unified_attention::limits::{check_scalars, ScalarArgs};
use attn_runtime::ops::unified_attention::plan::{
    choose_config, plan_launch, LaunchPlan, LaunchShape, MaskVariant,
};
use attn_runtime::ops::unified_attention::validate::{
    validate_inputs, InputError, TensorMeta, UnifiedAttentionInputs,
};
use attn_runtime::tensor::extent;

use super::unified_case::UnifiedCase;

const BF: ScalarType = ScalarType::Bf16;

/// Runs the host path; `Ok` means the op would launch.
pub fn host_plan(c: &UnifiedCase) -> Result<LaunchPlan, AttnError> {
    check_buffer("q", c.q_buffer, c.num_tokens, c.hq, c.d, c.q_strides)?;
    check_buffer("out", c.out_buffer, c.out_tokens, c.hq, c.d, c.out_strides)?;
    validate_inputs(&inputs(c))?;
    check_scalars(&ScalarArgs {
        softmax_scale: c.scale,
        softcap: c.softcap,
        sliding_window: c.window,
        chunk_lookback: c.lookback,
    })?;
    let cfg = choose_config(&problem(c), c.path)?;
    let plan = plan_launch(&cfg, &shape(c), BF, &MaskVariant::default())?;
    if let Some(ws) = plan.workspace {
        check_workspace(&ws, &c.workspace)?;
    }
    Ok(plan)
}

/// `check_buffers`: the buffer holds the layout's extent (computed by the library).
fn check_buffer(
    what: &'static str,
    len: usize,
    tokens: usize,
    heads: usize,
    d: usize,
    strides: [usize; 3],
) -> Result<(), AttnError> {
    let needed = extent(&[tokens, heads, d], &strides).ok_or(InputError::Overflow {
        what,
        limit: "usize element counts",
    })?;
    if len < needed {
        return Err(AttnError::BufferTooSmall { what, len, needed });
    }
    Ok(())
}

pub fn inputs(c: &UnifiedCase) -> UnifiedAttentionInputs<'_> {
    let kv = TensorMeta::contiguous([c.num_blocks, c.block_size, c.hkv, c.kv_d], BF);
    let out_dtype = if c.out_dtype_f32 { ScalarType::F32 } else { BF };
    let s = c.num_seqs();
    UnifiedAttentionInputs {
        q: TensorMeta {
            shape: [c.num_tokens, c.hq, c.d],
            strides: c.q_strides,
            dtype: BF,
        },
        k: kv,
        v: kv,
        out: TensorMeta {
            shape: [c.out_tokens, c.hq, c.d],
            strides: c.out_strides,
            dtype: out_dtype,
        },
        cu_seqlens_q: &c.cu,
        seq_lens: &c.seq_lens,
        block_table: &c.table,
        block_table_shape: [c.cu.len().saturating_sub(1), c.table_stride],
        block_table_stride: c.table_stride,
        mm_prefix_range: c.ranges.as_ref().map(|(d, r)| (d.as_slice(), [s, *r, 2])),
        mm_prefix_query_range: None,
        per_seq_causal_len: None,
        rswa_prefix_lens: None,
        sinks_len: c.sinks_len,
        alibi_slopes_len: None,
        qq_bias_shape: c.qq_bias,
    }
}

fn as_i32(x: usize) -> i32 {
    i32::try_from(x).unwrap_or(i32::MAX)
}

/// `UnifiedAttentionArgs::attention_problem` on the case.
pub fn problem(c: &UnifiedCase) -> AttentionProblem {
    let max_q =
        c.cu.windows(2)
            .map(|w| (i64::from(w[1]) - i64::from(w[0])).max(0))
            .max()
            .unwrap_or(0);
    AttentionProblem {
        num_query_heads: as_i32(c.hq),
        num_kv_heads: as_i32(c.hkv),
        head_size: as_i32(c.d),
        block_size: as_i32(c.block_size),
        kv_elem_bytes: 2,
        sliding_window: c.window,
        causal: CausalMode::Causal,
        chunk_lookback: c.lookback,
        mm: match &c.ranges {
            None => MmRangeEncoding::None,
            Some((_, r)) => MmRangeEncoding::PerSequence {
                max_ranges: as_i32(*r),
            },
        },
        mm_prefix_clamp_sw: false,
        r_swa_window: None,
        softcap: c.softcap.unwrap_or(0.0),
        use_sinks: c.sinks_len.is_some(),
        alibi: AlibiMode::None,
        use_qq_bias: c.qq_bias.is_some(),
        max_seqlen_q: i32::try_from(max_q).unwrap_or(i32::MAX),
        num_seqs: as_i32(c.num_seqs()),
        split_kv: None,
        batch_invariant: false,
        mma: attn_runtime::ops::unified_attention::config::MmaKind::Sync,
    }
}

/// `UnifiedAttentionArgs::launch_shape` on the case.
pub fn shape(c: &UnifiedCase) -> LaunchShape {
    let slot = c.hkv.saturating_mul(c.kv_d);
    LaunchShape {
        num_tokens: c.num_tokens,
        num_seqs: c.cu.len().saturating_sub(1),
        max_seqlen_q: usize::try_from(problem(c).max_seqlen_q).unwrap_or(0),
        q_strides: [c.q_strides[0], c.q_strides[1]],
        out_strides: [c.out_strides[0], c.out_strides[1]],
        kv_strides: [c.block_size.saturating_mul(slot), slot, c.kv_d],
        block_table_stride: c.table_stride,
        qq_bias_stride0: c.qq_bias.map_or(0, |b| b[1]),
        mask_aux_stride: None,
        mask_aux_f32_stride: None,
        softmax_scale: c.scale,
        softcap: c.softcap.unwrap_or(0.0),
        num_sinks: c.sinks_len.unwrap_or(0),
    }
}
