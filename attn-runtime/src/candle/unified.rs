//! Unified attention as a candle op: `attn.forward(&q, &k_cache, &v_cache, &call)` returns
//! the `[T, Hq, D]` output as a new tensor on q's device, computed by the op on the candle
//! device's stream from the tensors' storage in place.

use attn_dsl::ir::ScalarType;
use attn_dsl::kernel::DslType;
use candle_core::cuda_backend::CudaDType;
use candle_core::{CpuStorage, CudaStorage, CustomOp3, Layout, Shape, Tensor};
use cudarc::driver::{DeviceRepr, ValidAsZeroBits};
use half::{bf16, f16};

use super::error::{CandleOpError, TensorError};
use super::storage_view::{view, AliasedCache, Held};
use super::tensor_check::{check_unified, UnifiedShapes};
use super::unified_call::{CandleCausal, CandleMmRanges, UnifiedCall};
use crate::launch::CudaDevice;
use crate::ops::unified_attention::args::{
    AlibiSlopes, Causal, Metadata, MmPrefixRanges, QqBias, Rswa, TokenLayout, Tokens,
    UnifiedAttentionArgs,
};
use crate::ops::unified_attention::gpu::{
    unified_attention, AttnError, ContextOptions, UnifiedAttentionContext,
};
use crate::ops::unified_attention::variant_args::{AuxTensor, VariantArgs};

const OP: &str = "unified attention";

/// The op's reusable context on one candle CUDA device (its stream, compiled kernels, 3D
/// workspace): create once per device and layer family, call [`Self::forward`] per step.
pub struct CandleUnifiedAttention {
    ctx: UnifiedAttentionContext,
    device: candle_core::CudaDevice,
}

impl CandleUnifiedAttention {
    /// A context launching on `device`'s own stream.
    pub fn new(
        device: &candle_core::CudaDevice,
        options: ContextOptions,
    ) -> candle_core::Result<Self> {
        let stream = device.cuda_stream();
        let dev = CudaDevice::from_context(stream.context().clone())
            .map_err(|e| CandleOpError::Attention(AttnError::Launch(e)))?;
        let ctx =
            UnifiedAttentionContext::new(&dev, stream, options).map_err(CandleOpError::from)?;
        Ok(CandleUnifiedAttention {
            ctx,
            device: device.clone(),
        })
    }

    /// The underlying op context (precompiling, plans, graph capture).
    pub fn context(&self) -> &UnifiedAttentionContext {
        &self.ctx
    }

    /// Attention of q over the paged K/V caches with `call`'s metadata and options.
    pub fn forward(
        &self,
        q: &Tensor,
        k_cache: &Tensor,
        v_cache: &Tensor,
        call: &UnifiedCall<'_>,
    ) -> candle_core::Result<Tensor> {
        let shapes = check_unified(q, k_cache, v_cache, call)?;
        let on_device = match q.device() {
            candle_core::Device::Cuda(d) => d.id() == self.device.id(),
            _ => false,
        };
        if !on_device {
            return Err(CandleOpError::Tensor {
                op: OP,
                tensor: "q",
                error: TensorError::Device {
                    got: format!("{:?}", q.device().location()),
                    expected: format!("the context's device {:?}", self.device.id()),
                },
            }
            .into());
        }
        q.apply_op3_no_bwd(
            k_cache,
            v_cache,
            &UnifiedOp {
                attn: self,
                call,
                shapes,
            },
        )
    }
}

struct UnifiedOp<'a> {
    attn: &'a CandleUnifiedAttention,
    call: &'a UnifiedCall<'a>,
    shapes: UnifiedShapes,
}

impl CustomOp3 for UnifiedOp<'_> {
    fn name(&self) -> &'static str {
        "attn-dsl unified attention"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        Err(CandleOpError::NeedsCuda {
            op: OP,
            tensor: "q",
        }
        .into())
    }

    fn cuda_fwd(
        &self,
        q: &CudaStorage,
        ql: &Layout,
        k: &CudaStorage,
        kl: &Layout,
        v: &CudaStorage,
        vl: &Layout,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        match self.shapes.dtype {
            ScalarType::Bf16 => self.run::<bf16>(q, ql, k, kl, v, vl),
            ScalarType::F16 => self.run::<f16>(q, ql, k, kl, v, vl),
            _ => self.run::<f32>(q, ql, k, kl, v, vl),
        }
    }
}

impl<'a> UnifiedOp<'a> {
    fn run<T: DslType + DeviceRepr + CudaDType + ValidAsZeroBits>(
        &self,
        q: &CudaStorage,
        ql: &Layout,
        k: &CudaStorage,
        kl: &Layout,
        v: &CudaStorage,
        vl: &Layout,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        let s = &self.shapes;
        let stream = self.attn.ctx.stream();
        let held = Held::lock(OP, self.call.tensors())?;
        // SAFETY: K and V are the storages of this op's inputs, alive for the whole call,
        // and used on the context's stream, which is candle's stream for the device.
        let cache =
            unsafe { AliasedCache::new(stream, s.cache, view::<T>(k, kl)?, view::<T>(v, vl)?) }?;
        let Some(cache) = cache.cache() else {
            candle_core::bail!("internal error: no cache alias");
        };
        let q_layout = s.q;
        let out_layout =
            TokenLayout::contiguous(q_layout.num_tokens, q_layout.num_heads, q_layout.head_size);
        let n = out_layout.required_len().unwrap_or(0);
        let mut out = q.device.alloc_zeros::<T>(n)?;
        {
            let mut args = self.args(
                &held,
                Tokens {
                    data: view::<T>(q, ql)?,
                    layout: q_layout,
                },
                Tokens {
                    data: out.slice_mut(..),
                    layout: out_layout,
                },
                cache,
            )?;
            unified_attention(&self.attn.ctx, &mut args).map_err(CandleOpError::from)?;
        }
        let shape = Shape::from((q_layout.num_tokens, q_layout.num_heads, q_layout.head_size));
        Ok((CudaStorage::wrap_cuda_slice(out, q.device.clone()), shape))
    }

    /// The op's arguments over the held views (every option of the call).
    fn args<'v, T: DslType>(
        &self,
        held: &'v Held<'_>,
        q: Tokens<cudarc::driver::CudaView<'v, T>>,
        out: Tokens<cudarc::driver::CudaViewMut<'v, T>>,
        cache: &'v crate::ops::unified_attention::paged_cache::PagedKvCache<T>,
    ) -> candle_core::Result<UnifiedAttentionArgs<'v, T>>
    where
        'a: 'v,
    {
        let c = self.call;
        let meta = |name: &str, host: &'v [i32]| -> candle_core::Result<Metadata<'v>> {
            Ok(Metadata {
                device: held.view::<i32>(name)?,
                host,
            })
        };
        let mut args = UnifiedAttentionArgs::new(
            q,
            out,
            cache,
            meta("cu_seqlens_q", c.cu_seqlens_q.host)?,
            meta("seq_lens", c.seq_lens.host)?,
            meta("block_table", c.block_table.host)?,
            self.shapes.block_table_stride,
        );
        if let Some(scale) = c.softmax_scale {
            args.softmax_scale = scale;
        }
        args.sliding_window = c.sliding_window;
        args.chunk_lookback = c.chunk_lookback;
        args.mm_prefix_clamp_sliding_window = c.mm_prefix_clamp_sliding_window;
        args.softcap = c.softcap;
        args.path = c.path;
        args.causal = match c.causal {
            CandleCausal::Causal => Causal::Causal,
            CandleCausal::NonCausal => Causal::NonCausal,
            CandleCausal::PerSequence(_) => Causal::PerSequence(held.view::<i32>("causal")?),
        };
        args.mm_prefix_ranges = match c.mm_prefix_ranges {
            CandleMmRanges::None => MmPrefixRanges::None,
            CandleMmRanges::PerSequence(m) => MmPrefixRanges::PerSequence {
                ranges: meta("mm_prefix_ranges", m.host)?,
                max_ranges: self.shapes.mm_max_ranges,
            },
            CandleMmRanges::PerQuery(m) => {
                MmPrefixRanges::PerQuery(meta("mm_prefix_ranges", m.host)?)
            }
        };
        args.rswa = match c.rswa {
            Some((window, m)) => Some(Rswa {
                window,
                prefix_lens: meta("rswa prefix_lens", m.host)?,
            }),
            None => None,
        };
        args.sinks = match c.sinks {
            Some(_) => Some(held.view::<f32>("sinks")?),
            None => None,
        };
        args.alibi_slopes = match c.alibi_slopes {
            Some((_, sqrt)) => Some(AlibiSlopes {
                slopes: held.view::<f32>("alibi_slopes")?,
                sqrt,
            }),
            None => None,
        };
        args.qq_bias = match c.qq_bias {
            Some(_) => Some(QqBias {
                values: held.view::<f32>("qq_bias")?,
                stride0: self.shapes.qq_bias_stride0,
            }),
            None => None,
        };
        args.variant = match c.variant {
            Some(var) => Some(VariantArgs {
                variant: var.variant,
                aux_i32: match var.aux_i32 {
                    Some((_, host)) => Some(AuxTensor {
                        device: held.view::<i32>("variant aux")?,
                        host,
                        row_stride: self.shapes.aux_i32_stride,
                    }),
                    None => None,
                },
                aux_f32: match var.aux_f32 {
                    Some(_) => Some(AuxTensor {
                        device: held.view::<f32>("variant aux_f32")?,
                        host: None,
                        row_stride: self.shapes.aux_f32_stride,
                    }),
                    None => None,
                },
            }),
            None => None,
        };
        Ok(args)
    }
}
