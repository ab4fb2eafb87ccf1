//! Everything of one unified-attention call besides q, K and V, as candle tensors: the same
//! fields as [`crate::ops::unified_attention::args::UnifiedAttentionArgs`], with each small
//! integer tensor paired with the host copy the op validates (a serving loop has it on the
//! host already; reading it back from the GPU would synchronize every call).

use candle_core::Tensor;

use crate::ops::unified_attention::plan::PathChoice;
use crate::ops::unified_attention::variant::Variant;

/// An `i32` tensor on the device and the same values on the host.
#[derive(Clone, Copy, Debug)]
pub struct HostMeta<'a> {
    pub device: &'a Tensor,
    pub host: &'a [i32],
}

/// `causal`: a flag, or `i32 [S]` per-sequence flags.
#[derive(Clone, Copy, Debug)]
pub enum CandleCausal<'a> {
    Causal,
    NonCausal,
    PerSequence(&'a Tensor),
}

/// Multimodal bidirectional ranges in either encoding.
#[derive(Clone, Copy, Debug)]
pub enum CandleMmRanges<'a> {
    None,
    /// `i32 [S, R, 2]` inclusive ranges.
    PerSequence(HostMeta<'a>),
    /// `i32 [T, 2]`: each query token's range or `(-1, -1)`.
    PerQuery(HostMeta<'a>),
}

/// A user variant and its aux tensors (`[S, row_stride]`, row-contiguous).
#[derive(Clone, Copy, Debug)]
pub struct CandleVariant<'a> {
    pub variant: &'a Variant,
    /// `i32` (or bool as 0 / 1) aux, with its host copy when the variant's checks need it.
    pub aux_i32: Option<(&'a Tensor, Option<&'a [i32]>)>,
    pub aux_f32: Option<&'a Tensor>,
}

/// The metadata and options of one call (build with [`UnifiedCall::new`] and struct update).
#[derive(Clone, Copy, Debug)]
pub struct UnifiedCall<'a> {
    /// `i32 [S + 1]` query starts.
    pub cu_seqlens_q: HostMeta<'a>,
    /// `i32 [S]` KV lengths.
    pub seq_lens: HostMeta<'a>,
    /// `i32 [S, W]` (row-contiguous; its row stride is the op's `block_table_stride`).
    pub block_table: HostMeta<'a>,
    /// `None`: `D^-0.5`.
    pub softmax_scale: Option<f32>,
    pub sliding_window: i32,
    pub causal: CandleCausal<'a>,
    pub chunk_lookback: i32,
    pub mm_prefix_ranges: CandleMmRanges<'a>,
    pub mm_prefix_clamp_sliding_window: bool,
    /// R-SWA window and `i32 [S]` prefix lengths.
    pub rswa: Option<(i32, HostMeta<'a>)>,
    pub softcap: Option<f32>,
    /// `f32 [Hq]` sink logits.
    pub sinks: Option<&'a Tensor>,
    /// `f32 [Hq]` ALiBi slopes and whether the sqrt variant applies.
    pub alibi_slopes: Option<(&'a Tensor, bool)>,
    /// `f32 [rows, stride0]` query×query bias (row-contiguous).
    pub qq_bias: Option<&'a Tensor>,
    pub path: PathChoice,
    pub variant: Option<CandleVariant<'a>>,
}

impl<'a> UnifiedCall<'a> {
    /// The required metadata, causal, every extra off.
    pub fn new(
        cu_seqlens_q: HostMeta<'a>,
        seq_lens: HostMeta<'a>,
        block_table: HostMeta<'a>,
    ) -> Self {
        UnifiedCall {
            cu_seqlens_q,
            seq_lens,
            block_table,
            softmax_scale: None,
            sliding_window: 0,
            causal: CandleCausal::Causal,
            chunk_lookback: -1,
            mm_prefix_ranges: CandleMmRanges::None,
            mm_prefix_clamp_sliding_window: false,
            rswa: None,
            softcap: None,
            sinks: None,
            alibi_slopes: None,
            qq_bias: None,
            path: PathChoice::Heuristic,
            variant: None,
        }
    }

    /// Every tensor of the call with its argument name, in a fixed order.
    pub fn tensors(&self) -> Vec<(&'static str, &'a Tensor)> {
        let mut v = vec![
            ("cu_seqlens_q", self.cu_seqlens_q.device),
            ("seq_lens", self.seq_lens.device),
            ("block_table", self.block_table.device),
        ];
        if let CandleCausal::PerSequence(t) = self.causal {
            v.push(("causal", t));
        }
        match self.mm_prefix_ranges {
            CandleMmRanges::None => {}
            CandleMmRanges::PerSequence(m) | CandleMmRanges::PerQuery(m) => {
                v.push(("mm_prefix_ranges", m.device));
            }
        }
        if let Some((_, m)) = self.rswa {
            v.push(("rswa prefix_lens", m.device));
        }
        if let Some(t) = self.sinks {
            v.push(("sinks", t));
        }
        if let Some((t, _)) = self.alibi_slopes {
            v.push(("alibi_slopes", t));
        }
        if let Some(t) = self.qq_bias {
            v.push(("qq_bias", t));
        }
        if let Some(var) = self.variant {
            if let Some((t, _)) = var.aux_i32 {
                v.push(("variant aux", t));
            }
            if let Some(t) = var.aux_f32 {
                v.push(("variant aux_f32", t));
            }
        }
        v
    }
}
