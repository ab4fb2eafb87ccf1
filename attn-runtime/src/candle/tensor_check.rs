//! Each candle tensor of a call against the op's contract: rank, extents, strides, dtype
//! and device, before anything touches device memory. The op itself then validates values
//! (metadata bounds, block ids, scalars) exactly as for a cudarc call.

use attn_dsl::ir::ScalarType;
use candle_core::{DType, Tensor};

use super::error::{CandleOpError, TensorError};
use super::unified_call::{CandleCausal, CandleMmRanges, CandleVariant, HostMeta, UnifiedCall};
use crate::ops::unified_attention::args::TokenLayout;
use crate::ops::unified_attention::paged_cache::CacheGeometry;
use crate::tensor::extent;

/// What the unified-attention call's tensors say about the launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnifiedShapes {
    pub dtype: ScalarType,
    /// q's layout (the output is allocated densely with the same extents).
    pub q: TokenLayout,
    pub cache: CacheGeometry,
    pub block_table_stride: usize,
    /// R of `[S, R, 2]` per-sequence ranges.
    pub mm_max_ranges: usize,
    pub qq_bias_stride0: usize,
    pub aux_i32_stride: usize,
    pub aux_f32_stride: usize,
}

/// What the MLA call's tensors say about the step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MlaShapes {
    pub dtype: ScalarType,
    pub tokens: usize,
    pub heads: usize,
    pub block_table_stride: usize,
}

/// Checks of one op's tensors, naming the op in every error.
struct Checker {
    op: &'static str,
    reference: candle_core::Device,
}

impl Checker {
    fn fail(&self, tensor: &'static str, error: TensorError) -> CandleOpError {
        CandleOpError::Tensor {
            op: self.op,
            tensor,
            error,
        }
    }

    /// Rank, dtype and device of `t`; returns its extents.
    fn dims<'t>(
        &self,
        name: &'static str,
        t: &'t Tensor,
        rank: usize,
        what: &'static str,
        dtypes: (&'static str, &[DType]),
    ) -> Result<&'t [usize], CandleOpError> {
        let dims = t.dims();
        if dims.len() != rank {
            return Err(self.fail(
                name,
                TensorError::Rank {
                    got: dims.to_vec(),
                    rank,
                    what,
                },
            ));
        }
        if !dtypes.1.contains(&t.dtype()) {
            return Err(self.fail(
                name,
                TensorError::DType {
                    got: t.dtype(),
                    expected: dtypes.0,
                },
            ));
        }
        if !t.device().same_device(&self.reference) {
            return Err(self.fail(
                name,
                TensorError::Device {
                    got: format!("{:?}", t.device().location()),
                    expected: format!("{:?}", self.reference.location()),
                },
            ));
        }
        Ok(dims)
    }

    fn extent(
        &self,
        name: &'static str,
        dim: &'static str,
        got: usize,
        expected: usize,
        why: &'static str,
    ) -> Result<(), CandleOpError> {
        if got == expected {
            return Ok(());
        }
        Err(self.fail(
            name,
            TensorError::Extent {
                dim,
                got,
                expected,
                why,
            },
        ))
    }

    fn strides_error(&self, name: &'static str, t: &Tensor, needed: &'static str) -> CandleOpError {
        self.fail(
            name,
            TensorError::Strides {
                shape: t.dims().to_vec(),
                strides: t.stride().to_vec(),
                needed,
            },
        )
    }

    /// The layout is dense row-major (the op indexes it with its own strides).
    fn contiguous(&self, name: &'static str, t: &Tensor) -> Result<(), CandleOpError> {
        if t.is_contiguous() {
            Ok(())
        } else {
            Err(self.strides_error(name, t, "a contiguous (row-major) layout is needed"))
        }
    }

    /// The last dimension is contiguous; returns the leading stride (the row stride).
    fn rows(&self, name: &'static str, t: &Tensor) -> Result<usize, CandleOpError> {
        let (dims, strides) = (t.dims(), t.stride());
        match (dims, strides) {
            ([_, w], [s0, s1]) if (*s1 == 1 || *w <= 1) && *s0 >= *w => Ok(*s0),
            _ => Err(self.strides_error(
                name,
                t,
                "rows must be contiguous (last stride 1) and not overlap",
            )),
        }
    }

    /// An `i32` metadata tensor of `rank` and its host copy of the same length.
    fn meta(
        &self,
        name: &'static str,
        m: &HostMeta<'_>,
        rank: usize,
        what: &'static str,
    ) -> Result<(), CandleOpError> {
        self.dims(name, m.device, rank, what, ("i32", &[DType::I32]))?;
        if rank == 2 {
            self.rows(name, m.device)?;
        } else {
            self.contiguous(name, m.device)?;
        }
        let device = span(m.device);
        if device != m.host.len() {
            return Err(self.fail(
                name,
                TensorError::HostCopy {
                    device,
                    host: m.host.len(),
                },
            ));
        }
        Ok(())
    }

    fn f32_vector(&self, name: &'static str, t: &Tensor, len: usize) -> Result<(), CandleOpError> {
        let dims = self.dims(name, t, 1, "[Hq] f32", ("f32", &[DType::F32]))?;
        self.contiguous(name, t)?;
        self.extent(name, "Hq", dims[0], len, "one value per query head")
    }
}

/// Elements a tensor's view spans from its start offset (what the op receives).
pub(crate) fn span(t: &Tensor) -> usize {
    extent(t.dims(), t.stride()).unwrap_or(usize::MAX)
}

fn scalar_type(d: DType) -> Option<ScalarType> {
    match d {
        DType::BF16 => Some(ScalarType::Bf16),
        DType::F16 => Some(ScalarType::F16),
        DType::F32 => Some(ScalarType::F32),
        _ => None,
    }
}

/// Checks q `[T, Hq, D]`, the paged K and V caches `[num_blocks, block_size, Hkv, D]`
/// (a dense problem is a paged one with an identity block table) and every tensor of
/// `call` on the host; returns the layouts the launch uses.
pub fn check_unified(
    q: &Tensor,
    k_cache: &Tensor,
    v_cache: &Tensor,
    call: &UnifiedCall<'_>,
) -> Result<UnifiedShapes, CandleOpError> {
    let c = Checker {
        op: "unified attention",
        reference: q.device().clone(),
    };
    let (dtype, q_layout, cache) = c.attention_tensors(q, k_cache, v_cache)?;
    let (block_table_stride, mm_max_ranges) = c.unified_metadata(call)?;
    let qq_bias_stride0 = c.unified_options(call, q_layout.num_heads)?;
    let (aux_i32_stride, aux_f32_stride) = match call.variant {
        Some(v) => c.variant_aux(v)?,
        None => (0, 0),
    };
    if !q.device().is_cuda() {
        return Err(CandleOpError::NeedsCuda {
            op: c.op,
            tensor: "q",
        });
    }
    Ok(UnifiedShapes {
        dtype,
        q: q_layout,
        cache,
        block_table_stride,
        mm_max_ranges,
        qq_bias_stride0,
        aux_i32_stride,
        aux_f32_stride,
    })
}

impl Checker {
    /// q `[T, Hq, D]` (its head dimension contiguous) and the K and V caches
    /// `[num_blocks, block_size, Hkv, D]` (dense, q's dtype, the same extents).
    fn attention_tensors(
        &self,
        q: &Tensor,
        k_cache: &Tensor,
        v_cache: &Tensor,
    ) -> Result<(ScalarType, TokenLayout, CacheGeometry), CandleOpError> {
        let float = (
            "bf16, f16 or f32",
            &[DType::BF16, DType::F16, DType::F32][..],
        );
        let qd = self.dims("q", q, 3, "[tokens, query heads, head size]", float)?;
        let qs = q.stride();
        if qs[2] != 1 && qd[2] > 1 {
            return Err(self.strides_error(
                "q",
                q,
                "the head dimension must be contiguous (stride 1)",
            ));
        }
        let dtype = scalar_type(q.dtype()).unwrap_or(ScalarType::F32);
        let same = ("the dtype of q", &[q.dtype()][..]);
        let pages = "[num_blocks, block_size, kv heads, head size]";
        let kd = self.dims("k_cache", k_cache, 4, pages, same)?;
        self.contiguous("k_cache", k_cache)?;
        let vd = self.dims("v_cache", v_cache, 4, pages, same)?;
        self.contiguous("v_cache", v_cache)?;
        for (i, dim) in ["num_blocks", "block_size", "kv heads", "head size"]
            .into_iter()
            .enumerate()
        {
            self.extent("v_cache", dim, vd[i], kd[i], "V pages mirror K pages")?;
        }
        self.extent(
            "k_cache",
            "head size",
            kd[3],
            qd[2],
            "q and the cache share the head size",
        )?;
        let q_layout = TokenLayout {
            num_tokens: qd[0],
            num_heads: qd[1],
            head_size: qd[2],
            token_stride: qs[0],
            head_stride: qs[1],
        };
        let cache = CacheGeometry {
            num_blocks: kd[0],
            block_size: kd[1],
            num_kv_heads: kd[2],
            head_size: kd[3],
        };
        Ok((dtype, q_layout, cache))
    }

    /// The batch's metadata (query starts, KV lengths, block table, per-sequence causal
    /// flags, image ranges, R-SWA prefixes); returns the block table's row stride and the
    /// image ranges a sequence may have.
    fn unified_metadata(&self, call: &UnifiedCall<'_>) -> Result<(usize, usize), CandleOpError> {
        self.meta(
            "cu_seqlens_q",
            &call.cu_seqlens_q,
            1,
            "[S + 1] query starts",
        )?;
        self.meta("seq_lens", &call.seq_lens, 1, "[S] KV lengths")?;
        self.meta("block_table", &call.block_table, 2, "[S, max blocks]")?;
        let block_table_stride = call.block_table.device.stride()[0];
        if let CandleCausal::PerSequence(t) = call.causal {
            self.dims(
                "causal",
                t,
                1,
                "[S] per-sequence flags",
                ("i32", &[DType::I32]),
            )?;
            self.contiguous("causal", t)?;
        }
        let mm_max_ranges = match call.mm_prefix_ranges {
            CandleMmRanges::None => 0,
            CandleMmRanges::PerSequence(m) => {
                self.meta("mm_prefix_ranges", &m, 3, "[S, R, 2] inclusive ranges")?;
                let d = m.device.dims();
                self.extent(
                    "mm_prefix_ranges",
                    "pair",
                    d[2],
                    2,
                    "(start, end) per range",
                )?;
                d[1]
            }
            CandleMmRanges::PerQuery(m) => {
                self.meta("mm_prefix_ranges", &m, 2, "[T, 2] per-query ranges")?;
                let d = m.device.dims();
                self.extent(
                    "mm_prefix_ranges",
                    "pair",
                    d[1],
                    2,
                    "(start, end) per query",
                )?;
                0
            }
        };
        if let Some((_, m)) = call.rswa {
            self.meta("rswa prefix_lens", &m, 1, "[S] prefix lengths")?;
        }
        Ok((block_table_stride, mm_max_ranges))
    }

    /// The per-head and bias tensors (sinks, ALiBi slopes, qq_bias); returns qq_bias's row
    /// stride (0 without it).
    fn unified_options(
        &self,
        call: &UnifiedCall<'_>,
        query_heads: usize,
    ) -> Result<usize, CandleOpError> {
        if let Some(t) = call.sinks {
            self.f32_vector("sinks", t, query_heads)?;
        }
        if let Some((t, _)) = call.alibi_slopes {
            self.f32_vector("alibi_slopes", t, query_heads)?;
        }
        let Some(t) = call.qq_bias else {
            return Ok(0);
        };
        self.dims(
            "qq_bias",
            t,
            2,
            "[rows, stride0] f32",
            ("f32", &[DType::F32]),
        )?;
        self.contiguous("qq_bias", t)?;
        Ok(t.dims()[1])
    }

    /// A variant's data rows (`[S, row stride]`, i32 with its host copy, and f32); returns
    /// their row strides (0 where absent).
    fn variant_aux(&self, v: CandleVariant<'_>) -> Result<(usize, usize), CandleOpError> {
        let mut strides = (0, 0);
        if let Some((t, host)) = v.aux_i32 {
            self.dims(
                "variant aux",
                t,
                2,
                "[S, row stride] i32",
                ("i32", &[DType::I32]),
            )?;
            strides.0 = self.rows("variant aux", t)?;
            if let Some(h) = host.filter(|h| h.len() != span(t)) {
                return Err(self.fail(
                    "variant aux",
                    TensorError::HostCopy {
                        device: span(t),
                        host: h.len(),
                    },
                ));
            }
        }
        if let Some(t) = v.aux_f32 {
            self.dims(
                "variant aux_f32",
                t,
                2,
                "[S, row stride] f32",
                ("f32", &[DType::F32]),
            )?;
            strides.1 = self.rows("variant aux_f32", t)?;
        }
        Ok(strides)
    }
}

/// Checks the MLA decode tensors of one rank: `q_loc [T, N, 576]`, `cur_kv [T, 576]`, the
/// latent shard `[num_blocks, B, 576]`, `block_table i32 [batch, stride]` (with its host
/// copy) and `w_uv [N, 512, 128]`, all dense, bf16 or f16.
pub fn check_mla(
    q_loc: &Tensor,
    cur_kv: &Tensor,
    cache: &Tensor,
    block_table: &HostMeta<'_>,
    w_uv: &Tensor,
) -> Result<MlaShapes, CandleOpError> {
    use crate::ops::mla_dcp::plan::{LATENT, QK_WIDTH, V_HEAD};
    let c = Checker {
        op: "MLA decode",
        reference: q_loc.device().clone(),
    };
    let half = ("bf16 or f16", &[DType::BF16, DType::F16][..]);
    let qd = c.dims("q_loc", q_loc, 3, "[tokens, heads, 576]", half)?;
    c.contiguous("q_loc", q_loc)?;
    c.extent(
        "q_loc",
        "width",
        qd[2],
        QK_WIDTH,
        "absorbed query (512) + rope (64)",
    )?;
    let same = ("the dtype of q_loc", &[q_loc.dtype()][..]);
    let kd = c.dims("cur_kv", cur_kv, 2, "[tokens, 576]", same)?;
    c.contiguous("cur_kv", cur_kv)?;
    c.extent(
        "cur_kv",
        "tokens",
        kd[0],
        qd[0],
        "one latent row per query token",
    )?;
    c.extent(
        "cur_kv",
        "width",
        kd[1],
        QK_WIDTH,
        "latent (512) + rope key (64)",
    )?;
    let cd = c.dims("cache", cache, 3, "[num_blocks, block_size, 576]", same)?;
    c.contiguous("cache", cache)?;
    c.extent(
        "cache",
        "width",
        cd[2],
        QK_WIDTH,
        "latent (512) + rope key (64)",
    )?;
    c.meta("block_table", block_table, 2, "[batch, max blocks]")?;
    let wd = c.dims("w_uv", w_uv, 3, "[heads, 512, 128]", same)?;
    c.contiguous("w_uv", w_uv)?;
    c.extent("w_uv", "heads", wd[0], qd[1], "one V-up matrix per head")?;
    c.extent("w_uv", "latent", wd[1], LATENT, "the latent width")?;
    c.extent("w_uv", "v head", wd[2], V_HEAD, "the V head size")?;
    if !q_loc.device().is_cuda() {
        return Err(CandleOpError::NeedsCuda {
            op: c.op,
            tensor: "q_loc",
        });
    }
    Ok(MlaShapes {
        dtype: scalar_type(q_loc.dtype()).unwrap_or(ScalarType::Bf16),
        tokens: qd[0],
        heads: qd[1],
        block_table_stride: block_table.device.stride()[0],
    })
}
