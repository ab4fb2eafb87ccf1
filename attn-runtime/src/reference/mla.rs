//! Dense f64 reference of absorbed-MLA decode (spec `mla_dcp.md` §1.2–§1.3), its
//! history/current split under decode context parallelism (§2.2, §4) and the V-up
//! projection (§6.1).
//!
//! Per head h: `q̂ = [q_nope·W_UK_T[h] | q_pe]` (576 wide for DSV3), key `k̂_j = [kv_c_j |
//! k_pe_j]`, value `v̂_j = kv_c_j`, `s = scale·⟨q̂, k̂_j⟩`, `o_lat = softmax(s)·v̂`,
//! `o = o_lat·W_UV[h]`. The query token i of a request's current chunk sees every
//! history key and the chunk keys up to itself (causal within the chunk).

use thiserror::Error;

use super::softmax::softmax_row;
use crate::ops::mla_dcp::merge::{merge_partials, Partial};
use crate::ops::mla_dcp::metadata::{history_len, DcpLayout};

/// YaRN RoPE scaling of the model config (only the fields the softmax scale uses).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct YarnScaling {
    pub factor: f64,
    pub mscale: f64,
    pub mscale_all_dim: f64,
    pub original_max_position_embeddings: u32,
}

/// MLA attention dimensions of a model (§1.1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MlaConfig {
    /// N_total: attention heads of the whole model.
    pub num_heads: usize,
    /// L: latent width of `kv_c`.
    pub kv_lora_rank: usize,
    /// R: decoupled RoPE width.
    pub qk_rope_head_dim: usize,
    /// P: per-head no-RoPE query/key width.
    pub qk_nope_head_dim: usize,
    /// V: per-head value width.
    pub v_head_dim: usize,
    pub rope_scaling: Option<YarnScaling>,
}

impl MlaConfig {
    /// DeepSeek-V3 / V3.1 / R1 (§1.1, §1.2).
    pub fn deepseek_v3() -> Self {
        MlaConfig {
            num_heads: 128,
            kv_lora_rank: 512,
            qk_rope_head_dim: 64,
            qk_nope_head_dim: 128,
            v_head_dim: 128,
            rope_scaling: Some(YarnScaling {
                factor: 40.0,
                mscale: 1.0,
                mscale_all_dim: 1.0,
                original_max_position_embeddings: 4096,
            }),
        }
    }

    /// Width of the absorbed query/key: L + R (576 for DSV3).
    pub fn latent_key_dim(&self) -> usize {
        self.kv_lora_rank + self.qk_rope_head_dim
    }

    /// YaRN attention factor: `0.1 · mscale_all_dim · ln(factor) + 1` (1 without scaling
    /// or with `factor ≤ 1`).
    pub fn yarn_mscale(&self) -> f64 {
        match self.rope_scaling {
            Some(y) if y.factor > 1.0 => 0.1 * y.mscale_all_dim * y.factor.ln() + 1.0,
            _ => 1.0,
        }
    }

    /// §1.2: `(P + R)^(−1/2) · mscale²`, applied to the whole 576-wide dot product.
    pub fn softmax_scale(&self) -> f64 {
        let m = self.yarn_mscale();
        ((self.qk_nope_head_dim + self.qk_rope_head_dim) as f64).powf(-0.5) * m * m
    }
}

/// A shape mismatch in the reference's inputs.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum MlaReferenceError {
    #[error("{what} has {got} values, expected {expected}")]
    Length {
        what: &'static str,
        got: usize,
        expected: usize,
    },
    #[error("request {request} has query_len {query_len} > its {seq_len} latent rows")]
    QueryLongerThanSequence {
        request: usize,
        query_len: usize,
        seq_len: usize,
    },
    #[error(transparent)]
    Merge(#[from] crate::ops::mla_dcp::merge::MergeShapeError),
}

fn expect_len(what: &'static str, got: usize, expected: usize) -> Result<(), MlaReferenceError> {
    if got == expected {
        Ok(())
    } else {
        Err(MlaReferenceError::Length {
            what,
            got,
            expected,
        })
    }
}

/// One decode request: its whole latent sequence `[S_b, L + R]` (`kv_c ⊕ k_pe`, history
/// then the current chunk) and the length of the current chunk (its query tokens).
#[derive(Clone, Copy, Debug)]
pub struct MlaRequest<'a> {
    pub latent: &'a [f32],
    pub query_len: usize,
}

/// Absorbed queries `[T, N, L + R]` for a batch whose tokens are the requests' chunks in
/// order, plus the sizes the functions below need.
#[derive(Clone, Debug)]
pub struct AbsorbedBatch<'a> {
    pub config: MlaConfig,
    /// N: heads in this computation (local heads of one TP rank).
    pub num_heads: usize,
    pub q_hat: Vec<f64>,
    pub requests: &'a [MlaRequest<'a>],
}

/// Per-row partial (or final) latent attention: `[T, N, L]` output and `[T, N]` LSE.
#[derive(Clone, Debug, PartialEq)]
pub struct LatentAttention {
    pub out: Vec<f64>,
    pub lse: Vec<f64>,
}

/// §1.3 step 1: `q̂[t,h] = [q_nope[t,h]·W_UK_T[h] | q_pe[t,h]]`, with `q_nope [T, N, P]`,
/// `q_pe [T, N, R]`, `w_uk_t [N, P, L]`.
pub fn absorb_queries(
    cfg: &MlaConfig,
    num_heads: usize,
    q_nope: &[f32],
    q_pe: &[f32],
    w_uk_t: &[f32],
) -> Result<Vec<f64>, MlaReferenceError> {
    let (p, r, l) = (cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.kv_lora_rank);
    let tokens = q_nope.len() / (num_heads * p).max(1);
    expect_len("q_nope", q_nope.len(), tokens * num_heads * p)?;
    expect_len("q_pe", q_pe.len(), tokens * num_heads * r)?;
    expect_len("w_uk_t", w_uk_t.len(), num_heads * p * l)?;
    let mut q_hat = vec![0.0; tokens * num_heads * (l + r)];
    for t in 0..tokens {
        for h in 0..num_heads {
            let dst = &mut q_hat[(t * num_heads + h) * (l + r)..][..l + r];
            let qn = &q_nope[(t * num_heads + h) * p..][..p];
            for (i, &x) in qn.iter().enumerate() {
                let w_row = &w_uk_t[(h * p + i) * l..][..l];
                for (c, &w) in w_row.iter().enumerate() {
                    dst[c] += f64::from(x) * f64::from(w);
                }
            }
            for (c, &x) in q_pe[(t * num_heads + h) * r..][..r].iter().enumerate() {
                dst[l + c] = f64::from(x);
            }
        }
    }
    Ok(q_hat)
}

/// Softmax-weighted latent over the key positions `keys` of one request: `(o, ℓ)`;
/// no keys gives `(0, −∞)`.
fn attend_keys(
    cfg: &MlaConfig,
    q_hat: &[f64],
    latent: &[f32],
    keys: &[usize],
    scale: f64,
) -> (Vec<f64>, f64) {
    let (l, width) = (cfg.kv_lora_rank, cfg.latent_key_dim());
    let scores: Vec<f64> = keys
        .iter()
        .map(|&j| {
            let row = &latent[j * width..][..width];
            scale
                * q_hat
                    .iter()
                    .zip(row)
                    .map(|(&a, &b)| a * f64::from(b))
                    .sum::<f64>()
        })
        .collect();
    let (probs, lse) = softmax_row(&scores, None);
    let mut out = vec![0.0; l];
    for (&pj, &j) in probs.iter().zip(keys) {
        for (o, &v) in out.iter_mut().zip(&latent[j * width..][..l]) {
            *o += pj * f64::from(v);
        }
    }
    (out, lse)
}

/// Latent attention of every `(token, head)` row over the keys chosen by
/// `select(request, i, position)` (i = the token's index in its chunk).
pub fn latent_attention(
    batch: &AbsorbedBatch<'_>,
    scale: f64,
    select: impl Fn(usize, usize, usize) -> bool,
) -> Result<LatentAttention, MlaReferenceError> {
    let (cfg, n) = (&batch.config, batch.num_heads);
    let (l, width) = (cfg.kv_lora_rank, cfg.latent_key_dim());
    let tokens: usize = batch.requests.iter().map(|r| r.query_len).sum();
    expect_len("q_hat", batch.q_hat.len(), tokens * n * width)?;
    let mut res = LatentAttention {
        out: vec![0.0; tokens * n * l],
        lse: vec![0.0; tokens * n],
    };
    let mut t = 0;
    for (b, req) in batch.requests.iter().enumerate() {
        let seq_len = req.latent.len() / width;
        expect_len("request latent", req.latent.len(), seq_len * width)?;
        if req.query_len > seq_len {
            return Err(MlaReferenceError::QueryLongerThanSequence {
                request: b,
                query_len: req.query_len,
                seq_len,
            });
        }
        for i in 0..req.query_len {
            let keys: Vec<usize> = (0..seq_len).filter(|&p| select(b, i, p)).collect();
            for h in 0..n {
                let row = (t * n + h) * width;
                let (o, lse) = attend_keys(
                    cfg,
                    &batch.q_hat[row..row + width],
                    req.latent,
                    &keys,
                    scale,
                );
                res.out[(t * n + h) * l..][..l].copy_from_slice(&o);
                res.lse[t * n + h] = lse;
            }
            t += 1;
        }
    }
    Ok(res)
}

/// Start of request `b`'s current chunk (= its history length, §2.3).
fn chunk_start(batch: &AbsorbedBatch<'_>, b: usize) -> usize {
    let req = &batch.requests[b];
    let seq_len = req.latent.len() / batch.config.latent_key_dim().max(1);
    history_len(seq_len as u64, req.query_len as u64) as usize
}

/// Full causal decode attention: history plus the chunk up to the query itself.
pub fn dense_decode(
    batch: &AbsorbedBatch<'_>,
    scale: f64,
) -> Result<LatentAttention, MlaReferenceError> {
    latent_attention(batch, scale, |b, i, p| p <= chunk_start(batch, b) + i)
}

/// §4.3 HISTORY partial of one DCP rank: the history keys the rank owns (§2.2), no mask.
pub fn history_partial(
    batch: &AbsorbedBatch<'_>,
    scale: f64,
    layout: &DcpLayout,
    rank: u32,
) -> Result<LatentAttention, MlaReferenceError> {
    latent_attention(batch, scale, |b, _, p| {
        p < chunk_start(batch, b) && layout.place(p as u64).owner == rank
    })
}

/// §4.2 CURRENT partial: chunk keys `j ≤ i` (causal within the chunk).
pub fn current_partial(
    batch: &AbsorbedBatch<'_>,
    scale: f64,
) -> Result<LatentAttention, MlaReferenceError> {
    latent_attention(batch, scale, |b, i, p| {
        let start = chunk_start(batch, b);
        p >= start && p <= start + i
    })
}

/// §3.2 merge of D history partials and the current partial, row by row.
pub fn merge_dcp_partials(
    history: &[LatentAttention],
    current: &LatentAttention,
    width: usize,
) -> Result<LatentAttention, MlaReferenceError> {
    let rows = current.lse.len();
    let mut res = LatentAttention {
        out: vec![0.0; rows * width],
        lse: vec![0.0; rows],
    };
    for r in 0..rows {
        let parts: Vec<Partial<'_>> = history
            .iter()
            .chain(std::iter::once(current))
            .map(|a| Partial {
                out: &a.out[r * width..(r + 1) * width],
                lse: a.lse[r],
            })
            .collect();
        res.lse[r] = merge_partials(&parts, &mut res.out[r * width..(r + 1) * width])?;
    }
    Ok(res)
}

/// The whole DCP decode path on one host: D history shards + current part, merged.
pub fn dcp_decode(
    batch: &AbsorbedBatch<'_>,
    scale: f64,
    layout: &DcpLayout,
) -> Result<LatentAttention, MlaReferenceError> {
    let history: Vec<LatentAttention> = (0..layout.dcp_size)
        .map(|r| history_partial(batch, scale, layout, r))
        .collect::<Result<_, _>>()?;
    let current = current_partial(batch, scale)?;
    merge_dcp_partials(&history, &current, batch.config.kv_lora_rank)
}

/// §6.1 V-up: `y[t, n·V..] = o_lat[t, n, :] · W_UV[n]`, `o_lat [T, N, L]`, `w_uv [N, L, V]`,
/// result `[T, N·V]`.
pub fn v_up(
    cfg: &MlaConfig,
    num_heads: usize,
    o_lat: &[f64],
    w_uv: &[f32],
) -> Result<Vec<f64>, MlaReferenceError> {
    let (l, v) = (cfg.kv_lora_rank, cfg.v_head_dim);
    let tokens = o_lat.len() / (num_heads * l).max(1);
    expect_len("o_lat", o_lat.len(), tokens * num_heads * l)?;
    expect_len("w_uv", w_uv.len(), num_heads * l * v)?;
    let mut y = vec![0.0; tokens * num_heads * v];
    for t in 0..tokens {
        for n in 0..num_heads {
            let x = &o_lat[(t * num_heads + n) * l..][..l];
            let dst = &mut y[(t * num_heads + n) * v..][..v];
            for (i, &xi) in x.iter().enumerate() {
                for (c, &w) in w_uv[(n * l + i) * v..][..v].iter().enumerate() {
                    dst[c] += xi * f64::from(w);
                }
            }
        }
    }
    Ok(y)
}
