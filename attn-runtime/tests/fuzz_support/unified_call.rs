//! The GPU fuzz's cases and the op's view of them, without a GPU: the case generator of
//! `gpu_fuzz_unified.rs`, the lengths of the device views that test hands the op, and the
//! [`HostCall`] those views make — what `UnifiedAttentionContext::plan` validates and plans
//! before any launch. The GPU test slices its buffers with [`ViewLens`], so the CPU check
//! (`fuzz_unified_gpu_cases.rs`) classifies exactly the calls the GPU run makes.

use attn_dsl::ir::ScalarType;
use attn_runtime::ops::unified_attention::args::{
    HostCall, HostCausal, HostMetadata, HostMmRanges, HostQqBias, TokenLayout,
};
use attn_runtime::ops::unified_attention::gpu::ContextOptions;
use attn_runtime::ops::unified_attention::paged_cache::CacheGeometry;
use attn_runtime::split_mix64::SplitMix64;

use super::unified_case::{mutate, valid_base_in, UnifiedCase, GPU_PROFILE, MUTATIONS};

/// Argument sets the GPU fuzz runs.
pub const GPU_CASES: u64 = 2_400;
/// Largest buffer the fuzz allocates (elements); a layout needing more gets a short buffer.
pub const MAX_ALLOC: usize = 1 << 22;
/// Mutations the device API cannot express (D stride, out dtype, ranges, capacity).
pub const HOST_ONLY: [usize; 5] = [3, 19, 20, 21, 29];

/// The case of `seed`, with buffers the GPU run can really allocate.
pub fn gpu_case(seed: u64) -> UnifiedCase {
    let mut rng = SplitMix64(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut c = valid_base_in(&mut rng, 60, &GPU_PROFILE);
    for _ in 0..rng.below(3) {
        let m = rng.below(MUTATIONS);
        if !HOST_ONLY.contains(&m) {
            mutate(&mut c, m, &mut rng);
        }
    }
    c.q_buffer = c.q_buffer.min(MAX_ALLOC);
    c.out_buffer = c.out_buffer.min(MAX_ALLOC);
    c
}

/// The context the GPU fuzz creates (2D heuristic, the probe case's 3D workspace).
pub fn gpu_options() -> ContextOptions {
    ContextOptions {
        split_kv: None,
        workspace: Some(gpu_case(0).workspace),
    }
}

pub fn geometry(c: &UnifiedCase) -> CacheGeometry {
    CacheGeometry {
        num_blocks: c.num_blocks,
        block_size: c.block_size,
        num_kv_heads: c.hkv,
        head_size: c.kv_d,
    }
}

/// Elements of the K and V host pages the GPU fuzz uploads (0 when the geometry is not
/// representable or too big to allocate: the cache is then refused).
pub fn cache_elems(c: &UnifiedCase) -> usize {
    geometry(c)
        .elements()
        .ok()
        .filter(|&n| n <= MAX_ALLOC)
        .unwrap_or(0)
}

/// Whether `PagedKvCache::from_host` accepts the pages the GPU fuzz uploads.
pub fn cache_accepted(c: &UnifiedCase) -> bool {
    let g = geometry(c);
    g.check().is_ok() && g.elements().is_ok_and(|n| n == cache_elems(c))
}

/// Elements of the qq_bias values the GPU fuzz fills (`rows · cols`, capped).
pub fn qq_bias_values(c: &UnifiedCase) -> usize {
    c.qq_bias
        .map_or(0, |[r, k]| r.saturating_mul(k))
        .min(MAX_ALLOC)
}

/// Lengths of the device views the GPU fuzz passes for a case. A zero-length allocation is
/// not possible, so empty host data is uploaded as a 1-element buffer; the view handed to
/// the op is still cut to the case's length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ViewLens {
    pub q: usize,
    pub out: usize,
    pub cu: usize,
    pub seq_lens: usize,
    pub table: usize,
    pub sinks: Option<usize>,
    pub qq_bias: Option<usize>,
}

pub fn view_lens(c: &UnifiedCase) -> ViewLens {
    ViewLens {
        q: c.q_buffer,
        out: c.out_buffer,
        cu: c.cu.len(),
        seq_lens: c.seq_lens.len(),
        table: c.table.len(),
        sinks: c.sinks_len,
        qq_bias: c.qq_bias.map(|_| qq_bias_values(c)),
    }
}

/// The op's host view of the GPU fuzz's call for `c` (bf16 q, out and cache).
pub fn host_call(c: &UnifiedCase) -> HostCall<'_> {
    let v = view_lens(c);
    let layout = |tokens, strides: [usize; 3]| TokenLayout {
        num_tokens: tokens,
        num_heads: c.hq,
        head_size: c.d,
        token_stride: strides[0],
        head_stride: strides[1],
    };
    let meta = |host, device_len| HostMetadata { host, device_len };
    HostCall {
        dtype: ScalarType::Bf16,
        q: layout(c.num_tokens, c.q_strides),
        q_len: v.q,
        out: layout(c.out_tokens, c.out_strides),
        out_len: v.out,
        cache: geometry(c),
        cu_seqlens_q: meta(&c.cu, v.cu),
        seq_lens: meta(&c.seq_lens, v.seq_lens),
        block_table: meta(&c.table, v.table),
        block_table_stride: c.table_stride,
        softmax_scale: c.scale,
        sliding_window: c.window,
        causal: HostCausal::Causal,
        chunk_lookback: c.lookback,
        mm_prefix_ranges: HostMmRanges::None,
        mm_prefix_clamp_sliding_window: false,
        rswa: None,
        softcap: c.softcap,
        sinks_len: v.sinks,
        alibi: None,
        qq_bias: c.qq_bias.zip(v.qq_bias).map(|([_, cols], len)| HostQqBias {
            values_len: len,
            stride0: cols,
        }),
        path: c.path,
        mask_aux_stride: None,
        mask_aux_f32_stride: None,
    }
}
