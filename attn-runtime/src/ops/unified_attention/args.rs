//! The arguments of one GPU unified-attention call (DESIGN §3.7, spec §1.1): device views
//! named as vLLM names them, plus host copies of the small integer metadata the host
//! validates before launching (a bad block table is a typed error, never a wild read).
//!
//! Build it with [`UnifiedAttentionArgs::new`] (the required inputs) and struct-update
//! syntax for the extras:
//! `UnifiedAttentionArgs { sliding_window: 1024, ..UnifiedAttentionArgs::new(..) }`.

#![deny(clippy::indexing_slicing, clippy::arithmetic_side_effects)]

use attn_dsl::ir::ScalarType;
use attn_dsl::kernel::DslType;
use cudarc::driver::{CudaView, CudaViewMut};

use super::config::{
    AlibiMode, AttentionProblem, CausalMode, MmRangeEncoding, MmaKind, SplitKvWorkspace,
};
use super::gpu::AttnError;
use super::limits::ScalarArgs;
use super::paged_cache::{CacheGeometry, PagedKvCache};
use super::plan::{LaunchShape, PathChoice};
use super::validate::{InputError, TensorMeta, UnifiedAttentionInputs};
use super::variant_args::VariantArgs;
use crate::tensor::extent;

/// How a `[T, H, D]` token tensor (q or out) lies in its buffer: D contiguous, token and
/// head strides in elements (a row may be padded, e.g. q sliced out of a fused QKV).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenLayout {
    /// Tokens `T`.
    pub num_tokens: usize,
    /// Heads `H`.
    pub num_heads: usize,
    /// Head size `D`.
    pub head_size: usize,
    /// Elements between consecutive tokens.
    pub token_stride: usize,
    /// Elements between consecutive heads of one token.
    pub head_stride: usize,
}

impl TokenLayout {
    /// Densely packed `[T, H, D]`.
    pub fn contiguous(num_tokens: usize, num_heads: usize, head_size: usize) -> Self {
        TokenLayout {
            num_tokens,
            num_heads,
            head_size,
            token_stride: num_heads.saturating_mul(head_size),
            head_stride: head_size,
        }
    }

    /// `[tokens, heads, head_size]`.
    pub fn shape(&self) -> [usize; 3] {
        [self.num_tokens, self.num_heads, self.head_size]
    }

    /// Element strides of `[token, head, dim]` (the last is 1).
    pub fn strides(&self) -> [usize; 3] {
        [self.token_stride, self.head_stride, 1]
    }

    /// Elements the buffer must hold for every index to be in bounds; `None` when that
    /// count is not representable (it used to wrap: 5 tokens of stride 2^62 "needed" 256).
    pub fn required_len(&self) -> Option<usize> {
        extent(&self.shape(), &self.strides())
    }
}

/// A token tensor: a device buffer (view) and its layout.
#[derive(Debug)]
pub struct Tokens<V> {
    /// The device buffer.
    pub data: V,
    /// Its `[T, H, D]` layout.
    pub layout: TokenLayout,
}

/// Integer metadata on the device, with the host copy the validation reads. Both must hold
/// the same values; only the lengths can be (and are) compared cheaply.
#[derive(Debug)]
pub struct Metadata<'a> {
    /// The device buffer.
    pub device: CudaView<'a, i32>,
    /// Host copy of the same values.
    pub host: &'a [i32],
}

/// `causal` of §1.1: a flag, or an `i32 [S]` tensor of per-sequence flags (nonzero = causal).
#[derive(Debug)]
pub enum Causal<'a> {
    /// Every sequence causal.
    Causal,
    /// No sequence causal.
    NonCausal,
    /// `i32 [S]` per-sequence flags, nonzero = causal.
    PerSequence(CudaView<'a, i32>),
}

/// Multimodal bidirectional ranges (§3.5) in either encoding of §9.4.
#[derive(Debug)]
pub enum MmPrefixRanges<'a> {
    /// No multimodal ranges.
    None,
    /// `int32 [S, R, 2]` inclusive ranges, padded with `(0, 0)`; `max_ranges` = R.
    PerSequence {
        /// The ranges.
        ranges: Metadata<'a>,
        /// R: ranges per sequence.
        max_ranges: usize,
    },
    /// `int32 [T, 2]`: each query token's range, or `(−1, −1)`.
    PerQuery(Metadata<'a>),
}

/// R-SWA (§3.3): window R and `int32 [S]` prefix lengths P.
#[derive(Debug)]
pub struct Rswa<'a> {
    /// R-SWA window R.
    pub window: i32,
    /// `int32 [S]` prefix lengths P.
    pub prefix_lens: Metadata<'a>,
}

/// ALiBi (§1.4 step 4): `f32 [Hq]` slopes, linear or sqrt variant.
#[derive(Debug)]
pub struct AlibiSlopes<'a> {
    /// `f32 [Hq]` slopes.
    pub slopes: CudaView<'a, f32>,
    /// `true`: the sqrt variant; `false`: linear.
    pub sqrt: bool,
}

/// Query×query additive bias `f32 [rows, stride0]` (§1.1 `qq_bias`).
#[derive(Debug)]
pub struct QqBias<'a> {
    /// `f32 [rows, stride0]` bias values.
    pub values: CudaView<'a, f32>,
    /// Row stride of `values`, in elements.
    pub stride0: usize,
}

/// Everything one unified-attention call reads and writes.
#[derive(Debug)]
pub struct UnifiedAttentionArgs<'a, T> {
    /// `[T, Hq, D]` queries, varlen-packed.
    pub q: Tokens<CudaView<'a, T>>,
    /// `[T, Hq, D]` output (caller-owned; only valid rows and `d < D` are written).
    pub out: Tokens<CudaViewMut<'a, T>>,
    /// Paged K and V `[num_blocks, block_size, Hkv, D]`.
    pub cache: &'a PagedKvCache<T>,
    /// `int32 [S + 1]` query starts (`query_start_loc`).
    pub cu_seqlens_q: Metadata<'a>,
    /// `int32 [S]` KV lengths (`seqused_k`).
    pub seq_lens: Metadata<'a>,
    /// `int32 [S, block_table_stride]`.
    pub block_table: Metadata<'a>,
    /// Row stride of `block_table`, in entries.
    pub block_table_stride: usize,
    /// Multiplier of `q · k` before the softmax.
    pub softmax_scale: f32,
    /// SW = `1 + window_size.left`, 0 = off (see `config::sliding_window_from_left`).
    pub sliding_window: i32,
    /// Causal masking: all, none, or per sequence.
    pub causal: Causal<'a>,
    /// LB, −1 = off; chunk size `⌊SW / (LB + 1)⌋` (§3.4).
    pub chunk_lookback: i32,
    /// Multimodal bidirectional ranges (§3.5).
    pub mm_prefix_ranges: MmPrefixRanges<'a>,
    /// Gemma4: AND each MM term with the window's left edge and keep tile pruning.
    pub mm_prefix_clamp_sliding_window: bool,
    /// R-SWA window and prefix lengths (§3.3); `None` = off.
    pub rswa: Option<Rswa<'a>>,
    /// `c · tanh(s / c)`; `Some(c)` needs `c > 0`.
    pub softcap: Option<f32>,
    /// `f32 [Hq]` per-head sink logits.
    pub sinks: Option<CudaView<'a, f32>>,
    /// ALiBi slopes (§1.4); `None` = off.
    pub alibi_slopes: Option<AlibiSlopes<'a>>,
    /// Query×query additive bias; `None` = off.
    pub qq_bias: Option<QqBias<'a>>,
    /// 2D / 3D override; [`PathChoice::Heuristic`] applies §6 with the context's split-KV settings.
    pub path: PathChoice,
    /// A user variant (mask + bounds as DSL) and its aux tensors; `None`: vLLM's mask.
    pub variant: Option<VariantArgs<'a>>,
}

impl<'a, T: DslType> UnifiedAttentionArgs<'a, T> {
    /// The required inputs, causal, scale `D^-0.5`, every extra off.
    pub fn new(
        q: Tokens<CudaView<'a, T>>,
        out: Tokens<CudaViewMut<'a, T>>,
        cache: &'a PagedKvCache<T>,
        cu_seqlens_q: Metadata<'a>,
        seq_lens: Metadata<'a>,
        block_table: Metadata<'a>,
        block_table_stride: usize,
    ) -> Self {
        let d = q.layout.head_size.max(1);
        UnifiedAttentionArgs {
            q,
            out,
            cache,
            cu_seqlens_q,
            seq_lens,
            block_table,
            block_table_stride,
            softmax_scale: 1.0 / (d as f32).sqrt(),
            sliding_window: 0,
            causal: Causal::Causal,
            chunk_lookback: -1,
            mm_prefix_ranges: MmPrefixRanges::None,
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

    /// Everything host validation and planning read of this call: layouts, geometry, the
    /// host copies of the metadata, the lengths of the device views, scalars and flags.
    /// [`super::gpu::UnifiedAttentionContext::plan`] runs on it alone, so the same checks
    /// run without a GPU on a [`HostCall`] built by hand.
    pub fn host_call(&self) -> HostCall<'_> {
        fn meta<'m>(m: &'m Metadata<'_>) -> HostMetadata<'m> {
            HostMetadata {
                host: m.host,
                device_len: m.device.len(),
            }
        }
        HostCall {
            dtype: T::TYPE,
            q: self.q.layout,
            q_len: self.q.data.len(),
            out: self.out.layout,
            out_len: self.out.data.len(),
            cache: self.cache.geometry(),
            cu_seqlens_q: meta(&self.cu_seqlens_q),
            seq_lens: meta(&self.seq_lens),
            block_table: meta(&self.block_table),
            block_table_stride: self.block_table_stride,
            softmax_scale: self.softmax_scale,
            sliding_window: self.sliding_window,
            causal: match &self.causal {
                Causal::Causal => HostCausal::Causal,
                Causal::NonCausal => HostCausal::NonCausal,
                Causal::PerSequence(f) => HostCausal::PerSequence { len: f.len() },
            },
            chunk_lookback: self.chunk_lookback,
            mm_prefix_ranges: match &self.mm_prefix_ranges {
                MmPrefixRanges::None => HostMmRanges::None,
                MmPrefixRanges::PerSequence { ranges, max_ranges } => HostMmRanges::PerSequence {
                    ranges: meta(ranges),
                    max_ranges: *max_ranges,
                },
                MmPrefixRanges::PerQuery(rows) => HostMmRanges::PerQuery(meta(rows)),
            },
            mm_prefix_clamp_sliding_window: self.mm_prefix_clamp_sliding_window,
            rswa: self.rswa.as_ref().map(|r| HostRswa {
                window: r.window,
                prefix_lens: meta(&r.prefix_lens),
            }),
            softcap: self.softcap,
            sinks_len: self.sinks.as_ref().map(CudaView::len),
            alibi: self.alibi_slopes.as_ref().map(|a| HostAlibi {
                len: a.slopes.len(),
                sqrt: a.sqrt,
            }),
            qq_bias: self.qq_bias.as_ref().map(|b| HostQqBias {
                values_len: b.values.len(),
                stride0: b.stride0,
            }),
            path: self.path,
            mask_aux_stride: self
                .variant
                .as_ref()
                .and_then(|v| v.aux_i32.as_ref())
                .map(|a| a.row_stride),
            mask_aux_f32_stride: self
                .variant
                .as_ref()
                .and_then(|v| v.aux_f32.as_ref())
                .map(|a| a.row_stride),
        }
    }

    /// S.
    pub fn num_seqs(&self) -> usize {
        self.host_call().num_seqs()
    }

    /// Longest query of the batch (see [`HostCall::max_seqlen_q`]).
    pub fn max_seqlen_q(&self) -> usize {
        self.host_call().max_seqlen_q()
    }

    /// The scalar arguments, for `limits::check_scalars`.
    pub fn scalars(&self) -> ScalarArgs {
        self.host_call().scalars()
    }

    /// See [`HostCall::check_buffers`].
    pub fn check_buffers(&self) -> Result<(), AttnError> {
        self.host_call().check_buffers()
    }

    /// The host-visible view `validate::validate_inputs` checks.
    pub fn inputs(&self) -> UnifiedAttentionInputs<'_> {
        self.host_call().inputs()
    }

    /// The §6 view: geometry and enabled features.
    pub fn attention_problem(&self, split_kv: Option<SplitKvWorkspace>) -> AttentionProblem {
        self.host_call().attention_problem(split_kv)
    }

    /// Sizes, strides and scalars of the launch plan.
    pub fn launch_shape(&self) -> LaunchShape {
        self.host_call().launch_shape()
    }
}

/// Integer metadata as the host sees it: the host copy and the length of its device view.
#[derive(Clone, Copy, Debug)]
pub struct HostMetadata<'a> {
    /// Host copy of the values.
    pub host: &'a [i32],
    /// Length of the device view, in elements.
    pub device_len: usize,
}

impl<'a> HostMetadata<'a> {
    /// A host copy whose device view has the same length.
    pub fn mirrored(host: &'a [i32]) -> Self {
        HostMetadata {
            host,
            device_len: host.len(),
        }
    }
}

/// [`Causal`] without the device view (only the flags' length is checked on the host).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostCausal {
    /// Every sequence causal.
    Causal,
    /// No sequence causal.
    NonCausal,
    /// Per-sequence flags.
    PerSequence {
        /// Length of the flags' device view.
        len: usize,
    },
}

/// [`MmPrefixRanges`] as the host sees it.
#[derive(Clone, Copy, Debug)]
pub enum HostMmRanges<'a> {
    /// No multimodal ranges.
    None,
    /// `[S, R, 2]` per-sequence ranges.
    PerSequence {
        /// The ranges.
        ranges: HostMetadata<'a>,
        /// R: ranges per sequence.
        max_ranges: usize,
    },
    /// `[T, 2]` per-query ranges.
    PerQuery(HostMetadata<'a>),
}

/// [`Rswa`] as the host sees it.
#[derive(Clone, Copy, Debug)]
pub struct HostRswa<'a> {
    /// R-SWA window R.
    pub window: i32,
    /// `int32 [S]` prefix lengths P.
    pub prefix_lens: HostMetadata<'a>,
}

/// [`AlibiSlopes`] as the host sees it: the slopes' length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostAlibi {
    /// Elements of the slopes' device view.
    pub len: usize,
    /// `true`: the sqrt variant; `false`: linear.
    pub sqrt: bool,
}

/// [`QqBias`] as the host sees it: the values' length and the row stride.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostQqBias {
    /// Elements of the bias' device view.
    pub values_len: usize,
    /// Row stride of the bias, in elements.
    pub stride0: usize,
}

/// The host-visible part of one call ([`UnifiedAttentionArgs::host_call`]): what
/// validation and planning read, with device views reduced to their lengths.
#[derive(Clone, Copy, Debug)]
pub struct HostCall<'a> {
    /// Element type of q, out and the cache.
    pub dtype: ScalarType,
    /// Layout of q.
    pub q: TokenLayout,
    /// Elements of q's device view.
    pub q_len: usize,
    /// Layout of out.
    pub out: TokenLayout,
    /// Elements of out's device view.
    pub out_len: usize,
    /// Geometry of the paged KV cache.
    pub cache: CacheGeometry,
    /// `int32 [S + 1]` query starts.
    pub cu_seqlens_q: HostMetadata<'a>,
    /// `int32 [S]` KV lengths.
    pub seq_lens: HostMetadata<'a>,
    /// `int32 [S, block_table_stride]` block table.
    pub block_table: HostMetadata<'a>,
    /// Row stride of `block_table`, in entries.
    pub block_table_stride: usize,
    /// Multiplier of `q · k` before the softmax.
    pub softmax_scale: f32,
    /// SW, 0 = off (as [`UnifiedAttentionArgs::sliding_window`]).
    pub sliding_window: i32,
    /// Causal masking: all, none, or per sequence (flags' length).
    pub causal: HostCausal,
    /// LB, −1 = off (as [`UnifiedAttentionArgs::chunk_lookback`]).
    pub chunk_lookback: i32,
    /// Multimodal bidirectional ranges.
    pub mm_prefix_ranges: HostMmRanges<'a>,
    /// Gemma4 clamp of the MM terms to the window (as [`UnifiedAttentionArgs::mm_prefix_clamp_sliding_window`]).
    pub mm_prefix_clamp_sliding_window: bool,
    /// R-SWA, `None` = off.
    pub rswa: Option<HostRswa<'a>>,
    /// Softcap `c`, `None` = off.
    pub softcap: Option<f32>,
    /// Length of `sinks` (one per query head), `None` = off.
    pub sinks_len: Option<usize>,
    /// ALiBi, `None` = off.
    pub alibi: Option<HostAlibi>,
    /// Query×query bias, `None` = off.
    pub qq_bias: Option<HostQqBias>,
    /// 2D / 3D override or the heuristic.
    pub path: PathChoice,
    /// Row stride of a variant's `i32`/bool aux tensor (None: no such tensor).
    pub mask_aux_stride: Option<usize>,
    /// Row stride of a variant's `f32` aux tensor (None: no such tensor).
    pub mask_aux_f32_stride: Option<usize>,
}

impl<'a> HostCall<'a> {
    /// S.
    pub fn num_seqs(&self) -> usize {
        self.cu_seqlens_q.host.len().saturating_sub(1)
    }

    /// Longest query of the batch (from the host copy of `cu_seqlens_q`; differences in
    /// i64, so a malformed table cannot overflow before validation rejects it).
    pub fn max_seqlen_q(&self) -> usize {
        max_query_len(self.cu_seqlens_q.host)
    }

    /// The scalar arguments, for `limits::check_scalars`.
    pub fn scalars(&self) -> ScalarArgs {
        ScalarArgs {
            softmax_scale: self.softmax_scale,
            softcap: self.softcap,
            sliding_window: self.sliding_window,
            chunk_lookback: self.chunk_lookback,
        }
    }

    /// Host/device consistency of every buffer: metadata lengths agree, q/out buffers hold
    /// their layouts. (Values are validated by `validate::validate_inputs`.)
    pub fn check_buffers(&self) -> Result<(), AttnError> {
        let mut metadata = vec![
            ("cu_seqlens_q", self.cu_seqlens_q),
            ("seq_lens", self.seq_lens),
            ("block_table", self.block_table),
        ];
        match self.mm_prefix_ranges {
            HostMmRanges::None => {}
            HostMmRanges::PerSequence { ranges, .. } => metadata.push(("mm_prefix_range", ranges)),
            HostMmRanges::PerQuery(rows) => metadata.push(("mm_prefix_query_range", rows)),
        }
        if let Some(r) = &self.rswa {
            metadata.push(("rswa_prefix_lens", r.prefix_lens));
        }
        for (what, m) in metadata {
            if m.host.len() != m.device_len {
                return Err(AttnError::HostDeviceMismatch {
                    what,
                    host: m.host.len(),
                    device: m.device_len,
                });
            }
        }
        for (what, len, layout) in [("q", self.q_len, &self.q), ("out", self.out_len, &self.out)] {
            let needed = layout.required_len().ok_or(InputError::Overflow {
                what,
                limit: "usize element counts",
            })?;
            if len < needed {
                return Err(AttnError::BufferTooSmall { what, len, needed });
            }
        }
        Ok(())
    }

    /// The host-visible view `validate::validate_inputs` checks.
    pub fn inputs(&self) -> UnifiedAttentionInputs<'a> {
        let meta = |l: &TokenLayout| TensorMeta {
            shape: l.shape(),
            strides: l.strides(),
            dtype: self.dtype,
        };
        let rows = self.num_seqs();
        let (seq_ranges, query_ranges) = match self.mm_prefix_ranges {
            HostMmRanges::None => (None, None),
            HostMmRanges::PerSequence { ranges, max_ranges } => {
                (Some((ranges.host, [rows, max_ranges, 2])), None)
            }
            HostMmRanges::PerQuery(r) => (None, Some((r.host, [r.host.len() / 2, 2]))),
        };
        let cache = TensorMeta::contiguous(self.cache.shape(), self.dtype);
        UnifiedAttentionInputs {
            q: meta(&self.q),
            k: cache,
            v: cache,
            out: meta(&self.out),
            cu_seqlens_q: self.cu_seqlens_q.host,
            seq_lens: self.seq_lens.host,
            block_table: self.block_table.host,
            block_table_shape: [rows, self.block_table_stride],
            block_table_stride: self.block_table_stride,
            mm_prefix_range: seq_ranges,
            mm_prefix_query_range: query_ranges,
            per_seq_causal_len: match self.causal {
                HostCausal::PerSequence { len } => Some(len),
                _ => None,
            },
            rswa_prefix_lens: self.rswa.as_ref().map(|r| r.prefix_lens.host),
            sinks_len: self.sinks_len,
            alibi_slopes_len: self.alibi.map(|a| a.len),
            qq_bias_shape: self.qq_bias.map(|b| {
                let rows = b.values_len.checked_div(b.stride0.max(1)).unwrap_or(0);
                [rows, b.stride0]
            }),
        }
    }

    /// The §6 view: geometry and enabled features.
    pub fn attention_problem(&self, split_kv: Option<SplitKvWorkspace>) -> AttentionProblem {
        let g = self.cache;
        let as_i32 = |x: usize| i32::try_from(x).unwrap_or(i32::MAX);
        AttentionProblem {
            num_query_heads: as_i32(self.q.num_heads),
            num_kv_heads: as_i32(g.num_kv_heads),
            head_size: as_i32(self.q.head_size),
            block_size: as_i32(g.block_size),
            kv_elem_bytes: as_i32(self.dtype.size_bytes()),
            sliding_window: self.sliding_window,
            causal: match self.causal {
                HostCausal::Causal => CausalMode::Causal,
                HostCausal::NonCausal => CausalMode::NonCausal,
                HostCausal::PerSequence { .. } => CausalMode::PerSequence,
            },
            chunk_lookback: self.chunk_lookback,
            mm: match self.mm_prefix_ranges {
                HostMmRanges::None => MmRangeEncoding::None,
                // Saturation is harmless: validation rejects 2 · R beyond i32 first.
                HostMmRanges::PerSequence { max_ranges, .. } => MmRangeEncoding::PerSequence {
                    max_ranges: as_i32(max_ranges),
                },
                HostMmRanges::PerQuery(_) => MmRangeEncoding::PerQuery,
            },
            mm_prefix_clamp_sw: self.mm_prefix_clamp_sliding_window,
            r_swa_window: self.rswa.as_ref().map(|r| r.window),
            softcap: self.softcap.unwrap_or(0.0),
            use_sinks: self.sinks_len.is_some(),
            alibi: match self.alibi {
                None => AlibiMode::None,
                Some(a) if a.sqrt => AlibiMode::Sqrt,
                Some(_) => AlibiMode::Linear,
            },
            use_qq_bias: self.qq_bias.is_some(),
            max_seqlen_q: as_i32(self.max_seqlen_q()),
            num_seqs: as_i32(self.num_seqs()),
            split_kv,
            batch_invariant: false,
            // Arch-neutral: the GPU context sets its device's.
            mma: MmaKind::Sync,
        }
    }

    /// Sizes, strides and scalars of the launch plan.
    pub fn launch_shape(&self) -> LaunchShape {
        LaunchShape {
            num_tokens: self.q.num_tokens,
            num_seqs: self.num_seqs(),
            max_seqlen_q: self.max_seqlen_q(),
            q_strides: [self.q.token_stride, self.q.head_stride],
            out_strides: [self.out.token_stride, self.out.head_stride],
            kv_strides: self.cache.strides(),
            block_table_stride: self.block_table_stride,
            qq_bias_stride0: self.qq_bias.as_ref().map_or(0, |b| b.stride0),
            mask_aux_stride: self.mask_aux_stride,
            mask_aux_f32_stride: self.mask_aux_f32_stride,
            softmax_scale: self.softmax_scale,
            softcap: self.softcap.unwrap_or(0.0),
            num_sinks: self.sinks_len.unwrap_or(0),
        }
    }
}

/// Longest `cu[i + 1] − cu[i]` (negative differences count as 0), without i32 overflow.
pub fn max_query_len(cu_seqlens_q: &[i32]) -> usize {
    cu_seqlens_q
        .windows(2)
        .filter_map(|w| match w {
            &[a, b] => usize::try_from(i64::from(b).checked_sub(i64::from(a))?).ok(),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_layouts_know_their_extent() {
        let l = TokenLayout::contiguous(3, 4, 8);
        assert_eq!(l.strides(), [32, 8, 1]);
        assert_eq!(l.required_len(), Some(96));
        let padded = TokenLayout {
            token_stride: 40,
            ..l
        };
        // Last token starts at 80 and spans 32 elements.
        assert_eq!(padded.required_len(), Some(112));
        assert_eq!(TokenLayout::contiguous(0, 4, 8).required_len(), Some(0));
    }

    #[test]
    fn huge_strides_do_not_wrap() {
        let l = TokenLayout {
            token_stride: 1 << 62,
            ..TokenLayout::contiguous(5, 4, 8)
        };
        assert_eq!(l.required_len(), None);
        assert_eq!(max_query_len(&[i32::MIN, i32::MAX]), u32::MAX as usize);
    }
}
