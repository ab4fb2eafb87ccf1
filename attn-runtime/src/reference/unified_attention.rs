//! Dense f64 reference of unified attention (spec `unified_attention.md` §1, §3, §1.4
//! score pipeline), with the project's DSL rules: the mask is the single predicate
//! [`allowed`] (with `k < L` explicit), sinks are one extra logit with a zero value,
//! a fully masked row outputs 0, and the probabilities may be rounded to the value
//! dtype before P·V, as the spec's reference (§7.1 step 7) does.
//!
//! It walks every key of every sequence for every query row: no tiles, no pruning, no
//! online softmax, so it shares nothing with the kernels but the mask definition.

use thiserror::Error;

use super::rounding::{round_opt, Dtype};
use super::softmax::softmax_row;
use crate::ops::unified_attention::mask::{allowed, MaskConfig, SequenceMask};

/// Causality as the op receives it (§1.1 `causal`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Causality<'a> {
    Causal,
    NonCausal,
    /// `bool [S]`: per-sequence causal flag (USE_PER_SEQ_CAUSAL).
    PerSequence(&'a [bool]),
}

/// Multimodal bidirectional ranges in either encoding (§1.1, §3.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MmRanges<'a> {
    None,
    /// `[S, R, 2]` inclusive ranges, padded with `(0, 0)`.
    PerSequence(&'a [[i32; 2]], usize),
    /// `[T, 2]`: each query token's range, or `(−1, −1)`.
    PerQuery(&'a [[i32; 2]]),
}

/// R-SWA (§3.3): window R and per-sequence prefix lengths P.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RSwa<'a> {
    pub window: i32,
    pub prefix_lens: &'a [i32],
}

/// ALiBi slopes (§1.4 step 4), linear or sqrt variant.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Alibi<'a> {
    pub slopes: &'a [f32],
    pub sqrt: bool,
}

/// Query×query additive bias `[rows, stride0]`, row = local query offset, column =
/// local key offset `k − context_len` (§1.1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QqBias<'a> {
    pub values: &'a [f32],
    pub stride0: usize,
}

/// Every option of the op, all off by default.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionOptions<'a> {
    /// SW (0 = off).
    pub sliding_window: i32,
    pub causality: Causality<'a>,
    /// LB (−1 = off); the chunk size is `⌊SW / (LB + 1)⌋`.
    pub chunk_lookback: i32,
    pub mm_ranges: MmRanges<'a>,
    pub mm_prefix_clamp_sw: bool,
    pub r_swa: Option<RSwa<'a>>,
    /// `c · tanh(s / c)` when `Some(c)` with `c > 0`.
    pub softcap: Option<f64>,
    /// `[Hq]` sink logits.
    pub sinks: Option<&'a [f32]>,
    pub alibi: Option<Alibi<'a>>,
    pub qq_bias: Option<QqBias<'a>>,
    /// Round the normalized probabilities to this dtype before P·V.
    pub round_p: Option<Dtype>,
}

impl Default for AttentionOptions<'_> {
    fn default() -> Self {
        AttentionOptions {
            sliding_window: 0,
            causality: Causality::Causal,
            chunk_lookback: -1,
            mm_ranges: MmRanges::None,
            mm_prefix_clamp_sw: false,
            r_swa: None,
            softcap: None,
            sinks: None,
            alibi: None,
            qq_bias: None,
            round_p: None,
        }
    }
}

/// The op's inputs as host arrays (K/V already rounded from bf16/f16 by the caller).
#[derive(Clone, Copy, Debug)]
pub struct UnifiedAttentionProblem<'a> {
    /// `[T, Hq, D]`.
    pub q: &'a [f32],
    pub num_query_heads: usize,
    pub head_size: usize,
    /// `[num_blocks, block_size, Hkv, D]`.
    pub k_cache: &'a [f32],
    pub v_cache: &'a [f32],
    pub block_size: usize,
    pub num_kv_heads: usize,
    /// `[S, block_table_stride]`.
    pub block_table: &'a [i32],
    pub block_table_stride: usize,
    /// `[S + 1]`.
    pub cu_seqlens_q: &'a [i32],
    /// `[S]`.
    pub seq_lens: &'a [i32],
    pub scale: f64,
    pub options: AttentionOptions<'a>,
}

/// An input the reference cannot index (it checks every access instead of panicking).
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ReferenceError {
    #[error("{what}: index {index} is outside its buffer of {len} values")]
    OutOfBounds {
        what: &'static str,
        index: usize,
        len: usize,
    },
    #[error("{what} = {value} is invalid: {allowed}")]
    Invalid {
        what: &'static str,
        value: i64,
        allowed: &'static str,
    },
    /// A float option outside its contract; the value is kept as text so the error stays `Eq`.
    #[error("{what} = {value} is invalid: {allowed}")]
    InvalidFloat {
        what: &'static str,
        value: String,
        allowed: &'static str,
    },
}

fn get<T: Copy>(what: &'static str, data: &[T], index: usize) -> Result<T, ReferenceError> {
    data.get(index).copied().ok_or(ReferenceError::OutOfBounds {
        what,
        index,
        len: data.len(),
    })
}

fn to_index(what: &'static str, value: i64) -> Result<usize, ReferenceError> {
    usize::try_from(value).map_err(|_| ReferenceError::Invalid {
        what,
        value,
        allowed: "must be >= 0",
    })
}

/// One sequence's resolved facts.
struct SeqInfo {
    index: usize,
    token_start: usize,
    query_len: i64,
    seq_len: i64,
    causal: bool,
    rswa_prefix_len: i64,
}

impl SeqInfo {
    fn context_len(&self) -> i64 {
        self.seq_len - self.query_len
    }
}

/// Computes the `[T, Hq, D]` f64 output.
pub fn unified_attention(p: &UnifiedAttentionProblem<'_>) -> Result<Vec<f64>, ReferenceError> {
    // The op's contract (`limits::check_scalars`): a softcap must be finite and > 0. Ignoring
    // a bad one here would let the reference agree with an op that silently dropped it.
    if let Some(c) = p.options.softcap {
        if !(c.is_finite() && c > 0.0) {
            return Err(ReferenceError::InvalidFloat {
                what: "softcap",
                value: c.to_string(),
                allowed: "must be finite and > 0 (None turns it off)",
            });
        }
    }
    if p.num_kv_heads == 0 || !p.num_query_heads.is_multiple_of(p.num_kv_heads) || p.block_size == 0
    {
        return Err(ReferenceError::Invalid {
            what: "num_query_heads / num_kv_heads / block_size",
            value: p.num_kv_heads as i64,
            allowed: "Hkv >= 1, Hq a multiple of Hkv, block_size >= 1",
        });
    }
    let num_tokens = p.q.len() / (p.num_query_heads * p.head_size).max(1);
    let mut out = vec![0.0; num_tokens * p.num_query_heads * p.head_size];
    let num_seqs = p.cu_seqlens_q.len().saturating_sub(1);
    for seq in 0..num_seqs {
        let info = sequence_info(p, seq)?;
        for t in 0..info.query_len {
            for h in 0..p.num_query_heads {
                let row = attend_row(p, &info, t, h)?;
                let base = ((info.token_start + t as usize) * p.num_query_heads + h) * p.head_size;
                let dst =
                    out.get_mut(base..base + p.head_size)
                        .ok_or(ReferenceError::OutOfBounds {
                            what: "output row (cu_seqlens_q past T)",
                            index: base,
                            len: num_tokens * p.num_query_heads * p.head_size,
                        })?;
                dst.copy_from_slice(&row);
            }
        }
    }
    Ok(out)
}

fn sequence_info(p: &UnifiedAttentionProblem<'_>, seq: usize) -> Result<SeqInfo, ReferenceError> {
    let start = i64::from(get("cu_seqlens_q", p.cu_seqlens_q, seq)?);
    let end = i64::from(get("cu_seqlens_q", p.cu_seqlens_q, seq + 1)?);
    let seq_len = i64::from(get("seq_lens", p.seq_lens, seq)?);
    if end < start || seq_len < end - start {
        return Err(ReferenceError::Invalid {
            what: "sequence query length",
            value: end - start,
            allowed: "cu_seqlens_q monotone and seq_len >= query length",
        });
    }
    let causal = match p.options.causality {
        Causality::Causal => true,
        Causality::NonCausal => false,
        Causality::PerSequence(flags) => get("per-sequence causal flags", flags, seq)?,
    };
    let rswa_prefix_len = match p.options.r_swa {
        Some(r) => i64::from(get("rswa_prefix_lens", r.prefix_lens, seq)?),
        None => 0,
    };
    Ok(SeqInfo {
        index: seq,
        token_start: to_index("cu_seqlens_q", start)?,
        query_len: end - start,
        seq_len,
        causal,
        rswa_prefix_len,
    })
}

fn mask_config(o: &AttentionOptions<'_>) -> MaskConfig {
    let lb = o.chunk_lookback;
    MaskConfig {
        sliding_window: o.sliding_window,
        chunk_lookback: lb,
        chunk_size: if lb >= 0 {
            // i64: LB = i32::MAX must not overflow.
            (i64::from(o.sliding_window) / (i64::from(lb) + 1)) as i32
        } else {
            0
        },
        use_r_swa: o.r_swa.is_some(),
        r_swa_window: o.r_swa.map_or(0, |r| r.window),
        use_mm_prefix: o.mm_ranges != MmRanges::None,
        mm_prefix_clamp_sw: o.mm_prefix_clamp_sw,
    }
}

/// The ranges that may contain the query token `token` of sequence `seq` (§3.5).
fn ranges_for<'a>(
    o: &AttentionOptions<'a>,
    seq: usize,
    token: usize,
) -> Result<&'a [[i32; 2]], ReferenceError> {
    match o.mm_ranges {
        MmRanges::None => Ok(&[]),
        MmRanges::PerSequence(all, r) => {
            all.get(seq * r..(seq + 1) * r)
                .ok_or(ReferenceError::OutOfBounds {
                    what: "mm_prefix_range",
                    index: (seq + 1) * r,
                    len: all.len(),
                })
        }
        MmRanges::PerQuery(rows) => rows
            .get(token..token + 1)
            .ok_or(ReferenceError::OutOfBounds {
                what: "mm_prefix_query_range",
                index: token,
                len: rows.len(),
            }),
    }
}

/// One output row `(t, h)`: masked scores, softmax with optional sink, optional
/// probability rounding, then P·V.
fn attend_row(
    p: &UnifiedAttentionProblem<'_>,
    s: &SeqInfo,
    t: i64,
    h: usize,
) -> Result<Vec<f64>, ReferenceError> {
    let o = &p.options;
    let token = s.token_start + t as usize;
    let mask_cfg = mask_config(o);
    let seq_mask = SequenceMask {
        seq_len: s.seq_len,
        causal: s.causal,
        rswa_prefix_len: s.rswa_prefix_len,
        mm_ranges: ranges_for(o, s.index, token)?,
    };
    let q_abs = s.context_len() + t;
    let q_row = q_vector(p, token, h)?;
    let kv_head = h / (p.num_query_heads / p.num_kv_heads);
    let mut keys = Vec::new();
    let mut scores = Vec::new();
    for k in 0..s.seq_len {
        if allowed(&mask_cfg, &seq_mask, q_abs, k) {
            let kv = kv_offset(p, s.index, k, kv_head)?;
            scores.push(score(p, s, &q_row, kv, (t, h, q_abs, k))?);
            keys.push(kv);
        }
    }
    let sink = match o.sinks {
        Some(sinks) => Some(f64::from(get("sinks", sinks, h)?)),
        None => None,
    };
    let (probs, _) = softmax_row(&scores, sink);
    let mut acc = vec![0.0; p.head_size];
    for (&prob, &kv) in probs.iter().zip(&keys) {
        let pr = round_opt(o.round_p, prob);
        for (d, a) in acc.iter_mut().enumerate() {
            *a += pr * f64::from(get("v_cache", p.v_cache, kv + d)?);
        }
    }
    Ok(acc)
}

fn q_vector(
    p: &UnifiedAttentionProblem<'_>,
    token: usize,
    h: usize,
) -> Result<Vec<f64>, ReferenceError> {
    let base = (token * p.num_query_heads + h) * p.head_size;
    (0..p.head_size)
        .map(|d| get("q", p.q, base + d).map(f64::from))
        .collect()
}

/// §1.3 paged addressing: start of `K[k, kv_head, :]` in the cache buffers.
fn kv_offset(
    p: &UnifiedAttentionProblem<'_>,
    seq: usize,
    k: i64,
    kv_head: usize,
) -> Result<usize, ReferenceError> {
    let k = to_index("key position", k)?;
    let phys = get(
        "block_table",
        p.block_table,
        seq * p.block_table_stride + k / p.block_size,
    )?;
    let phys = to_index("block_table entry", i64::from(phys))?;
    let slot = k % p.block_size;
    Ok(((phys * p.block_size + slot) * p.num_kv_heads + kv_head) * p.head_size)
}

/// §1.4 steps 1–5 for one allowed key: scale·(q·k), softcap, ALiBi, qq_bias.
fn score(
    p: &UnifiedAttentionProblem<'_>,
    s: &SeqInfo,
    q_row: &[f64],
    kv: usize,
    (t, h, q_abs, k): (i64, usize, i64, i64),
) -> Result<f64, ReferenceError> {
    let o = &p.options;
    let mut dot = 0.0;
    for (d, &qd) in q_row.iter().enumerate() {
        dot += qd * f64::from(get("k_cache", p.k_cache, kv + d)?);
    }
    let mut x = p.scale * dot;
    if let Some(c) = o.softcap {
        x = c * (x / c).tanh();
    }
    if let Some(alibi) = o.alibi {
        let slope = f64::from(get("alibi_slopes", alibi.slopes, h)?);
        x += if !alibi.sqrt {
            slope * (k - s.context_len()) as f64
        } else if k <= q_abs {
            -slope * ((q_abs - k) as f64).sqrt()
        } else {
            0.0
        };
    }
    if let Some(bias) = o.qq_bias {
        let col = k - s.context_len();
        if col >= 0 && (col as usize) < bias.stride0 {
            x += f64::from(get(
                "qq_bias",
                bias.values,
                t as usize * bias.stride0 + col as usize,
            )?);
        }
    }
    Ok(x)
}
