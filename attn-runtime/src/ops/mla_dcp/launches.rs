//! The kernel launches of one decode step (spec `mla_dcp.md` §9.2), a builder a kernel: the
//! constexprs each kernel is specialized on, its grid and its arguments, from the step's
//! checked dimensions. [`DecodeStep::plan_tuned`] chooses the history's tiling and calls them
//! in stream order; the order of each launch's constexprs is part of its cache key.

use super::plan::{
    fused_tile_on, next_pow2_at_least, reduce_cols, set_fused_tile, set_reduce_cols, to_i32,
    BufferRole, DecodeStep, ExchangeLayout, HistoryTiling, KernelLaunch, PlanArg, PlanError,
    CURRENT_BLOCK_H, HIST_TMA, NO_OWN_PART, QK_WIDTH, VUP_BLOCK_T,
};
use crate::ops::unified_attention::config::MmaKind;
use attn_dsl::passes::assume::Promises;
use attn_dsl::ConstValue;
use BufferRole as R;
use PlanArg::{Buffer as Buf, F32, I32, I64};

/// The step's sizes as the kernels take them, each checked to fit their `i32` arguments.
#[derive(Clone, Copy, Debug)]
pub(super) struct StepDims {
    /// T: tokens of the step.
    pub tokens: usize,
    /// D: ranks of the DCP group.
    pub dcp: u32,
    /// N: heads a rank owns.
    pub heads: u32,
    /// D·N: heads the history sees.
    pub gathered: u64,
    /// Scalar arguments: T, N and D·N.
    t_arg: i32,
    n_arg: i32,
    dn_arg: i32,
}

impl StepDims {
    pub(super) fn new(step: &DecodeStep) -> Result<Self, PlanError> {
        let tokens = step.num_tokens();
        let dcp = step.layout.dcp_size;
        let heads = step.heads_per_rank;
        let gathered = u64::from(dcp) * u64::from(heads);
        let t_arg = to_i32("num_tokens", tokens as u64)?;
        let n_arg = to_i32("heads_per_rank", u64::from(heads))?;
        let dn_arg = to_i32("dcp_size * heads_per_rank", gathered)?;
        // The history indexes `q_all` as one i32 offset.
        to_i32(
            "num_tokens * gathered heads * 576",
            tokens as u64 * gathered * QK_WIDTH as u64,
        )?;
        Ok(Self {
            tokens,
            dcp,
            heads,
            gathered,
            t_arg,
            n_arg,
            dn_arg,
        })
    }

    /// The grid's token axis.
    fn grid_t(&self) -> u32 {
        self.tokens as u32
    }
}

/// The exchange layout's element strides, the last arguments of every launch that reads or
/// writes the exchange buffers.
fn exchange_strides(exchange: &ExchangeLayout) -> [PlanArg; 3] {
    [
        I64(exchange.chunk_stride_out() as i64),
        I64(exchange.chunk_stride_lse() as i64),
        I64(exchange.lse_offset() as i64),
    ]
}

fn dtype(step: &DecodeStep) -> (&'static str, ConstValue) {
    ("T", ConstValue::Dtype(step.dtype))
}

fn int(v: u32) -> ConstValue {
    ConstValue::Int(v.into())
}

/// How the history runs: its tiling and the choices made for this step.
#[derive(Clone, Copy, Debug)]
pub(super) struct HistoryShape {
    pub tiling: HistoryTiling,
    pub kv_tile: u32,
    pub num_splits: u32,
}

impl HistoryShape {
    /// One split writes the exchange layout itself (`DIRECT`): no reduce launch.
    fn direct(&self) -> bool {
        self.num_splits == 1
    }
}

/// `mla_history`: split-KV attention of all D·N gathered heads over the rank's shard.
pub(super) fn history(
    step: &DecodeStep,
    dims: &StepDims,
    shape: HistoryShape,
    exchange: &ExchangeLayout,
) -> KernelLaunch {
    let cache_stride_block = i64::from(step.layout.block_size) * QK_WIDTH as i64;
    let block_stride = [("cache_stride_block", cache_stride_block)];
    let mut args = vec![
        Buf(R::QAll),
        Buf(R::LatentCache),
        Buf(R::BlockTable),
        Buf(R::TokenReq),
        Buf(R::HistLens),
        Buf(R::SplitOut),
        Buf(R::SplitLse),
        Buf(R::SendOut),
        Buf(R::SendLse),
        I32(dims.t_arg),
        I32(dims.n_arg),
        I32(dims.dn_arg),
        F32(step.softmax_scale),
        I64(step.block_table_stride as i64),
        I64(cache_stride_block),
    ];
    args.extend(exchange_strides(exchange));
    KernelLaunch {
        kernel: "mla_history",
        constexprs: [
            dtype(step),
            ("BLOCK_H", int(shape.tiling.block_h)),
            ("KV_TILE", int(shape.kv_tile)),
            ("BLOCK_SIZE", int(step.layout.block_size)),
            ("NUM_SPLITS", int(shape.num_splits)),
            ("DIRECT", ConstValue::Bool(shape.direct())),
            // A positive scale is applied in the exponent, after the row max.
            (
                "SCALE_AFTER_MAX",
                ConstValue::Bool(step.softmax_scale > 0.0),
            ),
            // The copy engine of the key tiles (HIST_TMA).
            ("TMA", ConstValue::Bool(shape.tiling.warpgroups && HIST_TMA)),
        ]
        .into_iter()
        // Bound only when on, so the kernels' keys without it stay as they were.
        .chain(
            attn_dsl::features::lazy_rescale().then_some(("LAZY_RESCALE", ConstValue::Bool(true))),
        )
        .collect(),
        grid: [dims.grid_t() * shape.tiling.head_tiles, shape.num_splits, 1],
        args,
        // Latent rows start 16-byte aligned: they move by `cp.async`; exchange rows
        // (256-byte aligned chunks) take the `DIRECT` output in pairs. With `wide_mul`
        // a page times the block stride is one widening multiply.
        promises: Promises::kept_by(
            &[
                ("cache_stride_block", cache_stride_block),
                ("chunk_stride_out", exchange.chunk_stride_out() as i64),
            ],
            if attn_dsl::features::wide_mul() {
                &block_stride
            } else {
                &[]
            },
        ),
    }
}

/// `mla_history_reduce`: merges the splits into `hist_send`; none for one split (`DIRECT`).
pub(super) fn history_reduce(
    step: &DecodeStep,
    dims: &StepDims,
    shape: HistoryShape,
    exchange: &ExchangeLayout,
) -> Option<KernelLaunch> {
    if shape.direct() {
        return None;
    }
    let num_splits = shape.num_splits;
    let mut args = vec![
        Buf(R::SplitOut),
        Buf(R::SplitLse),
        Buf(R::SendOut),
        Buf(R::SendLse),
        I32(dims.t_arg),
        I32(dims.n_arg),
        I32(dims.dn_arg),
    ];
    args.extend(exchange_strides(exchange));
    let mut l = KernelLaunch {
        kernel: "mla_history_reduce",
        constexprs: vec![
            dtype(step),
            ("NUM_SPLITS", int(num_splits)),
            ("SPLITS_PADDED", int(next_pow2_at_least(num_splits, 1))),
        ],
        grid: [dims.grid_t(), dims.gathered as u32, 1],
        args,
        promises: Promises::default(),
    };
    let cols = reduce_cols(u64::from(dims.grid_t()) * dims.gathered, step.num_sms);
    set_reduce_cols(&mut l, cols);
    Some(l)
}

/// `mla_current`: causal chunk attention of the rank's own heads (side stream).
pub(super) fn current(step: &DecodeStep, dims: &StepDims) -> KernelLaunch {
    let max_q = step.query_lens.iter().copied().max().unwrap_or(1);
    // 32 heads a program on 4 warps: 64 on 4 spilled 192 bytes (sm_90a), and on 8 warps the
    // part ran 37 µs against 31 at L1 (H200, 2026-12-02T18:1xZ).
    let block_h = next_pow2_at_least(dims.heads.min(CURRENT_BLOCK_H), 16);
    KernelLaunch {
        kernel: "mla_current",
        constexprs: vec![
            dtype(step),
            ("BLOCK_H", int(block_h)),
            ("MAX_CHUNK", int(next_pow2_at_least(max_q, 16))),
        ],
        grid: [dims.grid_t(), dims.heads.div_ceil(block_h), 1],
        args: vec![
            Buf(R::QLoc),
            Buf(R::CurKv),
            Buf(R::TokenReq),
            Buf(R::CuSeqlensQ),
            Buf(R::CurOut),
            Buf(R::CurLse),
            I32(dims.n_arg),
            F32(step.softmax_scale),
        ],
        promises: Promises::default(),
    }
}

/// A merging launch's arguments: the partials and its outputs, the token and head counts, its
/// own part (the fused merge's; none until the op says), the exchange's strides.
fn merge_args(
    dims: &StepDims,
    exchange: &ExchangeLayout,
    buffers: &[BufferRole],
    own: &[PlanArg],
) -> Vec<PlanArg> {
    let bufs = buffers.iter().map(|&r| Buf(r));
    bufs.chain([I32(dims.t_arg), I32(dims.n_arg)])
        .chain(own.iter().copied())
        .chain(exchange_strides(exchange))
        .collect()
}

fn merge_constexprs(step: &DecodeStep, dims: &StepDims) -> Vec<(&'static str, ConstValue)> {
    vec![dtype(step), ("DCP_SIZE", int(dims.dcp))]
}

/// `mla_combine`: D received history partials + the current part → `lat_out`.
pub(super) fn combine(
    step: &DecodeStep,
    dims: &StepDims,
    exchange: &ExchangeLayout,
) -> KernelLaunch {
    let buffers = [R::RecvOut, R::RecvLse, R::CurOut, R::CurLse, R::LatOut];
    let mut constexprs = merge_constexprs(step, dims);
    constexprs.push(("PARTS_PADDED", int(next_pow2_at_least(dims.dcp + 1, 1))));
    KernelLaunch {
        kernel: "mla_combine",
        constexprs,
        grid: [dims.grid_t(), dims.heads, 1],
        args: merge_args(dims, exchange, &buffers, &[]),
        promises: Promises::default(),
    }
}

/// `mla_combine_v_up`: the combine and V-up in one kernel, `y` straight from the parts.
pub(super) fn combine_v_up(
    step: &DecodeStep,
    dims: &StepDims,
    exchange: &ExchangeLayout,
    mma: MmaKind,
) -> KernelLaunch {
    let buffers = [
        R::RecvOut,
        R::RecvLse,
        R::SendOut,
        R::SendLse,
        R::CurOut,
        R::CurLse,
        R::WUv,
        R::Y,
    ];
    let mut l = KernelLaunch {
        kernel: "mla_combine_v_up",
        // The tile's constexprs follow (`set_fused_tile`).
        constexprs: merge_constexprs(step, dims),
        grid: [dims.grid_t(), dims.heads, 1],
        args: merge_args(dims, exchange, &buffers, &[I32(NO_OWN_PART)]),
        // Exchange chunks are 256-byte aligned (§9.1): the received rows move by
        // `cp.async` like the current part's.
        promises: Promises::kept_by(
            &[("chunk_stride_out", exchange.chunk_stride_out() as i64)],
            &[],
        ),
    };
    let tile = fused_tile_on(mma, dims.tokens, dims.heads, dims.dcp + 1, step.num_sms);
    set_fused_tile(&mut l, tile, dims.tokens);
    l
}

/// `mla_v_up`: the V-up fallback kernel (the GPU op prefers cuBLAS).
pub(super) fn v_up(step: &DecodeStep, dims: &StepDims) -> KernelLaunch {
    KernelLaunch {
        kernel: "mla_v_up",
        constexprs: vec![dtype(step), ("BLOCK_T", int(VUP_BLOCK_T))],
        grid: [dims.grid_t().div_ceil(VUP_BLOCK_T), dims.heads, 1],
        args: vec![
            Buf(R::LatOut),
            Buf(R::WUv),
            Buf(R::Y),
            I32(dims.t_arg),
            I32(dims.n_arg),
        ],
        promises: Promises::default(),
    }
}
