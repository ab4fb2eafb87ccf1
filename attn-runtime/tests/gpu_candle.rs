//! The candle integration on the GPU (features `gpu` and `candle-cuda`; build with
//! `--no-default-features`, see the README): unified attention on candle CUDA tensors —
//! mixed prefill/decode over a paged cache, with a sliding window, softcap and sinks, and
//! q as a strided view of a fused QKV tensor — and one rank's MLA decode, each against the
//! dense f64 reference; a tensor on another device or a bad block table comes back as the
//! op's typed error inside candle's.
//!
//! A user variant (even keys + the diagonal, causal) runs on candle tensors too, against a
//! dense reference of its own definition.
//!
//! Prints `CANDLE <case> max_abs=<..>` per case.

#![cfg(all(feature = "gpu", feature = "candle-cuda"))]

mod gpu_unified_support;
mod mla_support;
mod unified_common;

use attn_dsl_macros::variant;
use attn_runtime::candle::{
    op_error, CandleMlaDecode, CandleOpError, CandleUnifiedAttention, CandleVariant, HostMeta,
    MlaCall, UnifiedCall,
};
use attn_runtime::ops::mla_dcp::op::{ExchangeMode, MlaDcpConfig};
use attn_runtime::ops::mla_dcp::plan::{LATENT, QK_WIDTH, V_HEAD};
use attn_runtime::ops::unified_attention::gpu::{AttnError, ContextOptions};
use attn_runtime::ops::unified_attention::variant::Variant;
use attn_runtime::parity::{compare, Tolerance};
use attn_runtime::reference::unified_attention::unified_attention as reference;
use attn_runtime::testing::masked_reference;
use candle_core::{DType, Device, Tensor};
use gpu_unified_support::Features;
use mla_support::{dsv3_scale, rank_slice, table_and_shards, tolerances, Case, Inputs};
use unified_common::{Geometry, PagedData, ATOL, RTOL};

fn cuda() -> Device {
    Device::new_cuda(0).expect("the gpu feature requires a CUDA device")
}

fn bf16_tensor(v: &[f32], shape: &[usize], dev: &Device) -> Tensor {
    Tensor::from_slice(v, shape, dev)
        .and_then(|t| t.to_dtype(DType::BF16))
        .expect("upload")
}

fn i32_tensor(v: &[i32], shape: &[usize], dev: &Device) -> Tensor {
    Tensor::from_slice(v, shape, dev).expect("upload")
}

/// `[T, Hq, D]` as f32 values, checked finite (NaN never passes).
fn download(out: &Tensor) -> Vec<f64> {
    let v: Vec<f32> = out
        .to_dtype(DType::F32)
        .and_then(|t| t.flatten_all())
        .and_then(|t| t.to_vec1())
        .expect("download");
    assert!(v.iter().all(|x| x.is_finite()), "non-finite output");
    v.into_iter().map(f64::from).collect()
}

#[test]
fn unified_attention_on_candle_tensors_matches_the_reference() {
    let dev = cuda();
    let data = PagedData::random(
        &Geometry::new(&[(1, 523), (5, 18), (17, 300)], (8, 2), 128),
        0xCA7D1E,
    );
    let (t, hq, hkv, d) = (
        data.num_tokens(),
        data.num_query_heads,
        data.num_kv_heads,
        data.head_size,
    );
    let nb = data.k_cache.len() / (data.block_size * hkv * d);
    let cache_shape = [nb, data.block_size, hkv, d];
    let k = bf16_tensor(&data.k_cache, &cache_shape, &dev);
    let v = bf16_tensor(&data.v_cache, &cache_shape, &dev);
    // q as the first Hq heads of a fused [T, Hq + 2, D] tensor (+ padding): a strided view.
    let fused_heads = hq + 2;
    let mut fused = vec![f32::NAN; t * fused_heads * d];
    for tok in 0..t {
        for i in 0..hq * d {
            fused[tok * fused_heads * d + i] = data.q[tok * hq * d + i];
        }
    }
    let q = bf16_tensor(&fused, &[t, fused_heads, d], &dev)
        .narrow(1, 0, hq)
        .expect("q view");
    let cu = i32_tensor(&data.cu_seqlens_q, &[data.cu_seqlens_q.len()], &dev);
    let seq = i32_tensor(&data.seq_lens, &[data.seq_lens.len()], &dev);
    let rows = data.seq_lens.len();
    let table = i32_tensor(&data.block_table, &[rows, data.block_table_stride], &dev);
    let sinks_host: Vec<f32> = (0..hq).map(|h| 0.25 * h as f32 - 1.0).collect();
    let sinks = Tensor::from_slice(&sinks_host, hq, &dev).expect("sinks");
    let attn = CandleUnifiedAttention::new(
        dev.as_cuda_device().expect("cuda"),
        ContextOptions::vllm_defaults(hq, hkv, d),
    )
    .expect("context");
    let base = UnifiedCall::new(
        HostMeta {
            device: &cu,
            host: &data.cu_seqlens_q,
        },
        HostMeta {
            device: &seq,
            host: &data.seq_lens,
        },
        HostMeta {
            device: &table,
            host: &data.block_table,
        },
    );
    let windowed = UnifiedCall {
        sliding_window: 100,
        softcap: Some(30.0),
        sinks: Some(&sinks),
        ..base
    };
    for (name, call, features, with_sinks) in [
        ("causal", base, Features::default(), false),
        (
            "window+softcap+sinks",
            windowed,
            Features {
                sliding_window: 100,
                softcap: Some(30.0),
                ..Features::default()
            },
            true,
        ),
    ] {
        let mut options = features.reference_options(data.dtype);
        if with_sinks {
            options.sinks = Some(&sinks_host);
        }
        let want = reference(&data.problem(options)).expect("reference");
        let out = attn
            .forward(&q, &k, &v, &call)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(out.dims(), &[t, hq, d]);
        let c = compare(name, &download(&out), &want, Tolerance::new(ATOL, RTOL))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        println!("CANDLE unified {name} max_abs={:.3e}", c.max_abs_err);
    }

    // A block id past the cache: the op's own typed error, inside candle's.
    let mut bad_table = data.block_table.clone();
    bad_table[0] = nb as i32 + 5;
    let bad = i32_tensor(&bad_table, &[rows, data.block_table_stride], &dev);
    let call = UnifiedCall {
        block_table: HostMeta {
            device: &bad,
            host: &bad_table,
        },
        ..base
    };
    let err = attn.forward(&q, &k, &v, &call).expect_err("bad block id");
    assert!(
        matches!(
            op_error(&err),
            Some(CandleOpError::Attention(AttnError::Input(_)))
        ),
        "{err}"
    );
    // A tensor on the CPU among CUDA ones.
    let cpu_seq = i32_tensor(&data.seq_lens, &[rows], &Device::Cpu);
    let call = UnifiedCall {
        seq_lens: HostMeta {
            device: &cpu_seq,
            host: &data.seq_lens,
        },
        ..base
    };
    let err = attn.forward(&q, &k, &v, &call).expect_err("cpu tensor");
    assert!(
        matches!(
            op_error(&err),
            Some(CandleOpError::Tensor {
                tensor: "seq_lens",
                ..
            })
        ),
        "{err}"
    );
}

#[test]
fn mla_decode_on_candle_tensors_matches_the_reference() {
    let dev = cuda();
    let case = Case::new(1, 1, 64, 8, &[400, 90, 3], &[1, 2, 3]);
    let inputs = Inputs::random(&case, 0xCA7);
    let plan = case.plan();
    let (table_host, shards) = table_and_shards(&plan, &inputs);
    let (n, t) = (case.heads as usize, case.tokens());
    let cache_vals: Vec<f32> = shards[0]
        .cache
        .to_f64s()
        .iter()
        .map(|&x| x as f32)
        .collect();
    let blocks = cache_vals.len() / (64 * QK_WIDTH);
    let cache = bf16_tensor(&cache_vals, &[blocks, 64, QK_WIDTH], &dev);
    let q = bf16_tensor(&inputs.queries[..t * n * QK_WIDTH], &[t, n, QK_WIDTH], &dev);
    let cur: Vec<f32> = attn_runtime::ops::mla_dcp::cpu::current_kv(&plan, &inputs.latents);
    let cur_kv = bf16_tensor(&cur, &[t, QK_WIDTH], &dev);
    let w_uv = bf16_tensor(
        &inputs.w_uv[..n * LATENT * V_HEAD],
        &[n, LATENT, V_HEAD],
        &dev,
    );
    let stride = plan.step.block_table_stride;
    let table = i32_tensor(&table_host, &[table_host.len() / stride, stride], &dev);
    let mut config = MlaDcpConfig::new(
        case.step().layout,
        0,
        case.heads,
        dsv3_scale(),
        t + 2,
        case.seq_lens.len() + 1,
    );
    config.exchange = ExchangeMode::A2a;
    let mla = CandleMlaDecode::<half::bf16>::new(dev.as_cuda_device().expect("cuda"), config, None)
        .expect("context");
    let call = MlaCall {
        query_lens: &case.query_lens,
        seq_lens: &case.seq_lens,
        block_table: HostMeta {
            device: &table,
            host: &table_host,
        },
    };
    let y = mla
        .forward(&q, &cur_kv, &cache, &w_uv, &call)
        .unwrap_or_else(|e| panic!("MLA: {e}"));
    assert_eq!(y.dims(), &[t, n * V_HEAD]);
    let (_, y_ref) = mla_support::reference(&case, &inputs);
    let got = download(&y);
    let c = compare(
        "mla y",
        &got,
        &rank_slice(&y_ref, &case, 0, V_HEAD),
        tolerances(case.dtype).1,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    println!("CANDLE mla max_abs={:.3e}", c.max_abs_err);
}

/// A user's mask, checked against the kernel's contract when this file compiles.
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

/// The README's candle snippet: a custom mask on candle tensors through the op.
#[test]
fn a_user_variant_runs_on_candle_tensors() {
    let dev = cuda();
    let data = PagedData::random(
        &Geometry::new(&[(1, 300), (40, 200), (9, 9)], (8, 2), 128),
        0xE7E4,
    );
    let (hq, hkv, d) = (data.num_query_heads, data.num_kv_heads, data.head_size);
    let nb = data.k_cache.len() / (data.block_size * hkv * d);
    let cache = [nb, data.block_size, hkv, d];
    let (k_cache, v_cache) = (
        bf16_tensor(&data.k_cache, &cache, &dev),
        bf16_tensor(&data.v_cache, &cache, &dev),
    );
    let q = bf16_tensor(&data.q, &[data.num_tokens(), hq, d], &dev);
    let cu = i32_tensor(&data.cu_seqlens_q, &[data.cu_seqlens_q.len()], &dev);
    let lens = i32_tensor(&data.seq_lens, &[data.seq_lens.len()], &dev);
    let rows = data.seq_lens.len();
    let table = i32_tensor(&data.block_table, &[rows, data.block_table_stride], &dev);

    // What a candle user writes, given q, the paged caches and the metadata tensors:
    let variant = Variant::from_source(&even_keys::VARIANT);
    let attn = CandleUnifiedAttention::new(
        dev.as_cuda_device().expect("cuda"),
        ContextOptions::measured(hq, hkv, d),
    )
    .expect("context");
    let meta = |device, host| HostMeta { device, host };
    let call = UnifiedCall {
        variant: Some(CandleVariant {
            variant: &variant,
            aux_i32: None,
            aux_f32: None,
        }),
        ..UnifiedCall::new(
            meta(&cu, &data.cu_seqlens_q),
            meta(&lens, &data.seq_lens),
            meta(&table, &data.block_table),
        )
    };
    let out = attn
        .forward(&q, &k_cache, &v_cache, &call)
        .expect("variant on candle");

    let want = masked_reference(&data, &|_, q, k| k <= q && (k % 2 == 0 || k == q));
    assert_eq!(out.dims(), &[data.num_tokens(), hq, d]);
    let c = compare(
        "candle variant",
        &download(&out),
        &want,
        Tolerance::new(ATOL, RTOL),
    )
    .unwrap_or_else(|e| panic!("candle variant: {e}"));
    println!("CANDLE variant even_keys max_abs={:.3e}", c.max_abs_err);
}
