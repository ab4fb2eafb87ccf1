//! The user variants (packed documents, prefix-LM) on the CPU executor: parity of the full
//! unified-attention kernel with an f64 reference written here from each variant's
//! definition, and a property test that the variant's DSL bounds cover its DSL mask,
//! which must equal the definition.

#[path = "../../attn-runtime/tests/unified_common/mod.rs"]
mod unified_common;

use attn_examples::{packed_documents, prefix_lm, Variant};
use attn_runtime::kernels::bounds_probe::{probe_block, ProbeBlock};
use attn_runtime::ops::unified_attention::config::{
    block_m_for, AttentionProblem, UnifiedAttentionConfig,
};
use attn_runtime::ops::unified_attention::cpu::{run_unified_attention_cpu, CpuOptions};
use attn_runtime::ops::unified_attention::plan::{choose_config, PathChoice};
use attn_runtime::reference::softmax::softmax_row;
use attn_runtime::reference::unified_attention::AttentionOptions;
use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use unified_common::run::{assert_poison_intact, ROW_PADDING};
use unified_common::{assert_close, Geometry, PagedData, ATOL, RTOL};

/// Dense f64 attention with an arbitrary mask `(seq, q_abs, k) -> bool`; probabilities
/// rounded to the data dtype (the kernel casts P); a row that sees nothing outputs 0.
fn reference(data: &PagedData, mask: &dyn Fn(usize, i64, i64) -> bool) -> Vec<f64> {
    let (hq, hkv, d, bs) = (
        data.num_query_heads,
        data.num_kv_heads,
        data.head_size,
        data.block_size,
    );
    let scale = 1.0 / (d as f64).sqrt();
    let mut out = vec![0.0; data.q.len()];
    for s in 0..data.seq_lens.len() {
        let (start, end) = (
            data.cu_seqlens_q[s] as usize,
            data.cu_seqlens_q[s + 1] as usize,
        );
        let l = data.seq_lens[s] as i64;
        let context = l - (end - start) as i64;
        let kv = |k: i64, h: usize| {
            let phys = data.block_table[s * data.block_table_stride + k as usize / bs] as usize;
            ((phys * bs + k as usize % bs) * hkv + h / (hq / hkv)) * d
        };
        for tok in start..end {
            let q_abs = context + (tok - start) as i64;
            for h in 0..hq {
                let q = &data.q[(tok * hq + h) * d..(tok * hq + h + 1) * d];
                let keys: Vec<i64> = (0..l).filter(|&k| mask(s, q_abs, k)).collect();
                let scores: Vec<f64> = keys
                    .iter()
                    .map(|&k| {
                        let kk = &data.k_cache[kv(k, h)..kv(k, h) + d];
                        scale
                            * q.iter()
                                .zip(kk)
                                .map(|(&a, &b)| f64::from(a) * f64::from(b))
                                .sum::<f64>()
                    })
                    .collect();
                let (p, _) = softmax_row(&scores, None);
                let o = &mut out[(tok * hq + h) * d..(tok * hq + h + 1) * d];
                for (&pk, &k) in p.iter().zip(&keys) {
                    let pk = data.dtype.round(pk);
                    for (x, &v) in o.iter_mut().zip(&data.v_cache[kv(k, h)..kv(k, h) + d]) {
                        *x += pk * f64::from(v);
                    }
                }
            }
        }
    }
    out
}

/// Runs the kernel with the variant and checks it against `mask`'s dense reference.
fn parity(
    name: &str,
    variant: &Variant,
    data: &PagedData,
    aux: &[i32],
    aux_stride: usize,
    path: PathChoice,
    mask: &dyn Fn(usize, i64, i64) -> bool,
) {
    let problem = data.problem(AttentionOptions::default());
    let options = CpuOptions {
        dtype: data.dtype,
        path,
        variant: Some(variant.cpu(aux, aux_stride)),
        row_padding: ROW_PADDING,
        ..Default::default()
    };
    let run =
        run_unified_attention_cpu(&problem, &options).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_poison_intact(&run, data, name);
    assert_close(&run.output, &reference(data, mask), ATOL, RTOL, name);
}

/// Document ids `[S, stride]`: contiguous documents of random lengths, then padding (−1).
fn doc_ids(seq_lens: &[i32], stride: usize, seed: u64, padding: usize) -> Vec<i32> {
    let mut rng = unified_common::seeded(seed);
    let mut ids = vec![-1; seq_lens.len() * stride];
    for (s, &l) in seq_lens.iter().enumerate() {
        let real = (l as usize).saturating_sub(padding);
        let (mut doc, mut left) = (0, 1 + rng.below(40));
        for k in 0..real {
            if left == 0 {
                doc += 1;
                left = 1 + rng.below(40);
            }
            ids[s * stride + k] = doc;
            left -= 1;
        }
    }
    ids
}

const SEQS: &[(usize, usize)] = &[(1, 150), (37, 90), (29, 93)];

#[test]
fn packed_documents_match_reference_and_pad_rows_are_zero() {
    let variant = packed_documents::variant().expect("variant");
    let data = PagedData::random(&Geometry::new(SEQS, (4, 2), 64), 41);
    let stride = 160;
    // The last 5 keys (hence queries) of every sequence are padding: fully masked rows.
    let ids = doc_ids(&data.seq_lens, stride, 42, 5);
    let mask = |s: usize, q: i64, k: i64| {
        let doc = |x: i64| ids[s * stride + x as usize];
        doc(q) >= 0 && doc(q) == doc(k) && k <= q
    };
    parity(
        "packed documents",
        &variant,
        &data,
        &ids,
        stride,
        PathChoice::Force2d,
        &mask,
    );
    let decode = PagedData::random(
        &Geometry::new(&[(1, 123), (1, 37), (1, 150)], (4, 2), 64),
        43,
    );
    let ids = doc_ids(&decode.seq_lens, stride, 44, 0);
    let mask = |s: usize, q: i64, k: i64| {
        let doc = |x: i64| ids[s * stride + x as usize];
        doc(q) >= 0 && doc(q) == doc(k) && k <= q
    };
    parity(
        "packed documents 3D",
        &variant,
        &decode,
        &ids,
        stride,
        PathChoice::Force3d { num_segments: 4 },
        &mask,
    );
    // Padding rows are exactly 0 (checked through the reference, which gives 0 for them).
    let pad_rows = {
        let ids = doc_ids(&data.seq_lens, stride, 42, 5);
        (0..3)
            .filter(|&s| ids[s * stride + data.seq_lens[s] as usize - 1] == -1)
            .count()
    };
    assert_eq!(pad_rows, 3, "every sequence ends in padding rows");
}

#[test]
fn prefix_lm_matches_reference() {
    let variant = prefix_lm::variant().expect("variant");
    let data = PagedData::random(&Geometry::new(SEQS, (8, 2), 64), 45);
    let prefix = [100, 70, 0];
    let mask = |s: usize, q: i64, k: i64| k <= q || k < i64::from(prefix[s]);
    parity(
        "prefix-LM",
        &variant,
        &data,
        &prefix,
        1,
        PathChoice::Force2d,
        &mask,
    );
}

/// A 2D configuration for probing (the variants ignore the vLLM mask constexprs).
fn probe_config(tile: i32, nqpkv: i32) -> UnifiedAttentionConfig {
    let block_m = block_m_for(nqpkv);
    choose_config(
        &AttentionProblem {
            max_seqlen_q: 2,
            ..AttentionProblem::dense_causal(nqpkv, 1, 64)
        },
        PathChoice::Force2d,
    )
    .map(|c| UnifiedAttentionConfig {
        tile_size: tile,
        block_m,
        block_q: block_m / nqpkv,
        ..c
    })
    .expect("config")
}

const KEYS: usize = 256;

/// Bounds ⊇ mask, and DSL mask == definition, for one block of one random geometry.
fn bounds_cover(
    variant: &Variant,
    g: &Geom,
    aux: &[i32],
    mask: &dyn Fn(i64, i64) -> bool,
) -> Result<(), TestCaseError> {
    let Geom {
        tile,
        nqpkv,
        l,
        qlen,
        b,
        ..
    } = *g;
    let cfg = probe_config(tile, nqpkv);
    let module = variant
        .module()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let block = ProbeBlock {
        context_len: l - qlen,
        seq_len: l,
        query_len: qlen,
        q_block: b,
        causal: true,
        rswa_prefix_len: 0,
        mm_ranges: &[],
        query_ranges: &[],
        mask_aux: aux,
    };
    let r = probe_block(&module, &cfg, &variant.mask_variant(), &block, KEYS)
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert!(r.max_seq_prefix_len <= l);
    for row in 0..cfg.block_m {
        let t = b * cfg.block_q + row / nqpkv;
        let valid = row < cfg.block_q * nqpkv && t < qlen;
        let q = i64::from(l - qlen + t);
        for k in 0..KEYS as i64 {
            let want = valid && k < i64::from(l) && mask(q, k);
            prop_assert_eq!(
                r.mask[row as usize][k as usize],
                want,
                "row {} q {} key {}",
                row,
                q,
                k
            );
            if want {
                prop_assert!(
                    i64::from(tile * r.loop_lo) <= k
                        && k < i64::from(tile * r.loop_hi)
                        && k < i64::from(r.max_seq_prefix_len),
                    "key {} of q {} outside [{}, {}) x {} / msp {}",
                    k,
                    q,
                    r.loop_lo,
                    r.loop_hi,
                    tile,
                    r.max_seq_prefix_len
                );
            }
        }
    }
    Ok(())
}

/// One random probe geometry: tile, GQA ratio, L, qlen, q-block, data seed.
#[derive(Clone, Copy, Debug)]
struct Geom {
    tile: i32,
    nqpkv: i32,
    l: i32,
    qlen: i32,
    b: i32,
    seed: u64,
}

prop_compose! {
    fn geometry()(
        tile in prop::sample::select(vec![16, 32]),
        nqpkv in prop::sample::select(vec![1, 2, 3, 5, 8]),
        l in 1..(KEYS as i32 + 1),
        qlen_frac in 0.0..1.0f64,
        block_frac in 0.0..1.0f64,
        seed in any::<u64>(),
    ) -> Geom {
        let qlen = ((f64::from(l) * qlen_frac) as i32).clamp(1, l);
        let block_q = block_m_for(nqpkv) / nqpkv;
        let blocks = (qlen + block_q - 1) / block_q;
        let b = ((f64::from(blocks) * block_frac) as i32).min(blocks - 1);
        Geom { tile, nqpkv, l, qlen, b, seed }
    }
}

fn runner() -> TestRunner {
    TestRunner::new(ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::with_cases(100)
    })
}

#[test]
fn packed_documents_bounds_cover_mask() {
    let variant = packed_documents::variant().expect("variant");
    runner()
        .run(&geometry(), |g| {
            let ids = doc_ids(&[g.l], g.l as usize, g.seed, (g.seed % 4) as usize);
            let mask = |q: i64, k: i64| {
                let doc = |x: i64| ids[x as usize];
                doc(q) >= 0 && doc(q) == doc(k) && k <= q
            };
            bounds_cover(&variant, &g, &ids, &mask)
        })
        .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn prefix_lm_bounds_cover_mask() {
    let variant = prefix_lm::variant().expect("variant");
    runner()
        .run(&geometry(), |g| {
            let p = (g.seed % (g.l as u64 + 1)) as i32;
            let mask = |q: i64, k: i64| k <= q || k < i64::from(p);
            bounds_cover(&variant, &g, &[p], &mask)
        })
        .unwrap_or_else(|e| panic!("{e}"));
}
