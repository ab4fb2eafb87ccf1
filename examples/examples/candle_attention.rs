//! A small attention block through candle on the GPU: x → q, k, v projections → attention →
//! output projection, with the attention computed by attn-dsl's unified-attention op over a
//! paged KV cache (blocks stored out of order, GQA 8/2) and, independently, by candle's own
//! matmul / softmax composition; the two block outputs must agree. Twice: with the built-in
//! causal mask, and with a custom mask written as a `#[variant]` (causal, even keys only
//! besides the diagonal), the user code of which is the 13 lines marked below.
//!
//! Build and run (the candle feature links CUDA; see the README, "candle"):
//! `eval "$(scripts/cuda-toolkit-env --link)"; cargo run --release -p attn-examples
//! --no-default-features --features candle-cuda --example candle_attention`

use attn_dsl_macros::variant;
use attn_runtime::candle::{CandleUnifiedAttention, CandleVariant, HostMeta, UnifiedCall};
use attn_runtime::ops::unified_attention::gpu::ContextOptions;
use attn_runtime::ops::unified_attention::variant::Variant;
use candle_core::{DType, Device, Tensor, D};

const TOKENS: usize = 100;
const HIDDEN: usize = 512;
const HEADS_Q: usize = 8;
const HEADS_KV: usize = 2;
const HEAD: usize = 64;
const BLOCK: usize = 16;

/// A random `[rows, cols]` projection scaled to keep activations near unit variance.
fn weight(rows: usize, cols: usize, dev: &Device) -> candle_core::Result<Tensor> {
    Tensor::randn(0f32, 1f32, (rows, cols), dev)?
        .affine(1.0 / (rows as f64).sqrt(), 0.0)?
        .to_dtype(DType::BF16)
}

/// `[T, H, D]` pages of `[num_blocks, BLOCK, H, D]` with physical block p holding logical
/// block `num_blocks - 1 - p`, and the block table `[1, num_blocks]` that undoes it.
fn paged(x: &Tensor, reversed: &Tensor) -> candle_core::Result<Tensor> {
    let blocks = TOKENS.div_ceil(BLOCK);
    x.pad_with_zeros(0, 0, blocks * BLOCK - TOKENS)?
        .reshape((blocks, BLOCK, HEADS_KV, HEAD))?
        .index_select(reversed, 0)?
        .contiguous()
}

// ---- the user's mask: checked against the kernel's contract when this file compiles ----
#[variant(mask = even_mask, bounds = even_bounds)]
mod even_keys {
    /// Causal, and only even keys besides the diagonal.
    #[device]
    fn even_mask(q_abs: Tile, k: Tile, seq_len: i32) -> Tile<bool> {
        (k <= q_abs) & ((k % 2 == 0) | (k == q_abs)) & (k < seq_len)
    }

    /// Tiles up to the block's last query (causal bounds).
    #[device]
    fn even_bounds<const TILE_SIZE: i32, const BLOCK_Q: i32>(
        context_len: i32,
        seq_len: i32,
        qlen: i32,
        b: i32,
    ) -> (i32, i32, i32) {
        let last_q = context_len + min(b * BLOCK_Q + BLOCK_Q - 1, qlen - 1);
        let msp = min(last_q + 1, seq_len);
        (0, cdiv(msp, TILE_SIZE), msp)
    }
}

/// The same masks on the host, for candle's composition: `[T, T]` of 0 (allowed) / -1e30.
fn additive_mask(even_keys: bool, dev: &Device) -> candle_core::Result<Tensor> {
    let allowed = |q: usize, k: usize| k <= q && (!even_keys || k.is_multiple_of(2) || k == q);
    let m: Vec<f32> = (0..TOKENS * TOKENS)
        .map(|i| {
            if allowed(i / TOKENS, i % TOKENS) {
                0.0
            } else {
                -1e30
            }
        })
        .collect();
    Tensor::from_slice(&m, (TOKENS, TOKENS), dev)
}

/// Attention of `[T, Hq, D]` q over `[T, Hkv, D]` k, v with candle ops, in f32, under the
/// additive `[T, T]` mask.
fn reference(q: &Tensor, k: &Tensor, v: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
    let group = HEADS_Q / HEADS_KV;
    let heads_first = |x: &Tensor, h: usize| -> candle_core::Result<Tensor> {
        x.to_dtype(DType::F32)?
            .transpose(0, 1)?
            .contiguous()?
            .reshape((h, TOKENS, HEAD))
    };
    let expand = |x: &Tensor| -> candle_core::Result<Tensor> {
        heads_first(x, HEADS_KV)?
            .unsqueeze(1)?
            .broadcast_as((HEADS_KV, group, TOKENS, HEAD))?
            .reshape((HEADS_Q, TOKENS, HEAD))
    };
    let (q, k, v) = (heads_first(q, HEADS_Q)?, expand(k)?, expand(v)?);
    let scores = q.matmul(&k.t()?)?.affine(1.0 / (HEAD as f64).sqrt(), 0.0)?;
    let scores = scores.broadcast_add(mask)?;
    let e = scores
        .broadcast_sub(&scores.max_keepdim(D::Minus1)?)?
        .exp()?;
    let p = e.broadcast_div(&e.sum_keepdim(D::Minus1)?)?;
    p.matmul(&v)?.transpose(0, 1)?.contiguous()
}

fn main() -> candle_core::Result<()> {
    let dev = Device::new_cuda(0)?;
    let x = Tensor::randn(0f32, 1f32, (TOKENS, HIDDEN), &dev)?.to_dtype(DType::BF16)?;
    let (wq, wk, wv) = (
        weight(HIDDEN, HEADS_Q * HEAD, &dev)?,
        weight(HIDDEN, HEADS_KV * HEAD, &dev)?,
        weight(HIDDEN, HEADS_KV * HEAD, &dev)?,
    );
    let wo = weight(HEADS_Q * HEAD, HIDDEN, &dev)?;
    let q = x.matmul(&wq)?.reshape((TOKENS, HEADS_Q, HEAD))?;
    let k = x.matmul(&wk)?.reshape((TOKENS, HEADS_KV, HEAD))?;
    let v = x.matmul(&wv)?.reshape((TOKENS, HEADS_KV, HEAD))?;

    let blocks = TOKENS.div_ceil(BLOCK);
    let reversed: Vec<u32> = (0..blocks as u32).rev().collect();
    let reversed = Tensor::new(reversed.as_slice(), &dev)?;
    let (k_cache, v_cache) = (paged(&k, &reversed)?, paged(&v, &reversed)?);
    let table_host: Vec<i32> = (0..blocks as i32).rev().collect();
    let cu_host = vec![0, TOKENS as i32];
    let seq_host = vec![TOKENS as i32];
    let table = Tensor::from_slice(&table_host, (1, blocks), &dev)?;
    let cu = Tensor::from_slice(&cu_host, 2, &dev)?;
    let seq = Tensor::from_slice(&seq_host, 1, &dev)?;
    let call = UnifiedCall::new(
        HostMeta {
            device: &cu,
            host: &cu_host,
        },
        HostMeta {
            device: &seq,
            host: &seq_host,
        },
        HostMeta {
            device: &table,
            host: &table_host,
        },
    );

    let wo32 = wo.to_dtype(DType::F32)?;
    let project = |o: &Tensor| -> candle_core::Result<Tensor> {
        o.to_dtype(DType::F32)?
            .reshape((TOKENS, HEADS_Q * HEAD))?
            .matmul(&wo32)
    };

    let attn = CandleUnifiedAttention::new(dev.as_cuda_device()?, ContextOptions::two_d_only())?;
    let causal = attn.forward(&q, &k_cache, &v_cache, &call)?;
    check(
        "causal",
        &project(&causal)?,
        &project(&reference(&q, &k, &v, &additive_mask(false, &dev)?)?)?,
    )?;

    // ---- a custom mask on candle tensors: the user code ----
    let variant = Variant::from_source(&even_keys::VARIANT);
    let call = UnifiedCall {
        variant: Some(CandleVariant {
            variant: &variant,
            aux_i32: None,
            aux_f32: None,
        }),
        ..call
    };
    let even = attn.forward(&q, &k_cache, &v_cache, &call)?;
    // ---- end of the user code ----
    check(
        "even keys",
        &project(&even)?,
        &project(&reference(&q, &k, &v, &additive_mask(true, &dev)?)?)?,
    )
}

/// Compares one block output with candle's, printing the worst error; NaN never passes.
fn check(case: &str, y: &Tensor, y_ref: &Tensor) -> candle_core::Result<()> {
    let err = (y - y_ref)?.abs()?;
    let bound = y_ref.abs()?.affine(2e-2, 2e-2)?;
    let worst = err.flatten_all()?.max(0)?.to_scalar::<f32>()?;
    let over = err
        .gt(&bound)?
        .to_dtype(DType::F32)?
        .sum_all()?
        .to_scalar::<f32>()?;
    // NaN compares false against the bound, so count it separately: it must never pass.
    let nan = err
        .ne(&err)?
        .to_dtype(DType::F32)?
        .sum_all()?
        .to_scalar::<f32>()?;
    let blocks = TOKENS.div_ceil(BLOCK);
    println!(
        "CANDLE attention block ({case}) T={TOKENS} Hq={HEADS_Q} Hkv={HEADS_KV} D={HEAD} paged({blocks} blocks): \
         max_abs={worst:.3e} outside_tol={over} nan={nan}"
    );
    if over > 0.0 || nan > 0.0 || !worst.is_finite() {
        candle_core::bail!("{case}: the op's block output differs from candle's composition");
    }
    Ok(())
}
