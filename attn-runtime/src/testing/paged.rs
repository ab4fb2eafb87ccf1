//! Deterministic random paged unified-attention problems for tests of the kernels and of
//! user variants: inputs representable in the kernel dtype, shuffled physical blocks, NaN
//! planted in every cache slot past a sequence's length (so an unmasked read shows), and a
//! NaN-proof tolerance check. Exported so a user's crate tests its variant the way this
//! crate tests its own kernels.

use crate::reference::unified_attention::{AttentionOptions, UnifiedAttentionProblem};
use crate::reference::Dtype;

pub use crate::problem::SplitMix64;

/// The shared generator for `seed`, offset as these fixtures always seeded it so that every
/// existing seed keeps its data.
pub fn seeded(seed: u64) -> SplitMix64 {
    SplitMix64(seed ^ 0x9E37_79B9_7F4A_7C15)
}

/// Owned data of one paged problem.
pub struct PagedData {
    pub q: Vec<f32>,
    pub k_cache: Vec<f32>,
    pub v_cache: Vec<f32>,
    pub block_table: Vec<i32>,
    pub block_table_stride: usize,
    pub cu_seqlens_q: Vec<i32>,
    pub seq_lens: Vec<i32>,
    pub num_query_heads: usize,
    pub num_kv_heads: usize,
    pub head_size: usize,
    pub block_size: usize,
    pub dtype: Dtype,
}

/// Geometry of a test problem.
#[derive(Clone, Debug)]
pub struct Geometry {
    /// `(query_len, seq_len)` per sequence.
    pub seqs: Vec<(usize, usize)>,
    pub num_query_heads: usize,
    pub num_kv_heads: usize,
    pub head_size: usize,
    pub block_size: usize,
    pub dtype: Dtype,
}

impl Geometry {
    pub fn new(seqs: &[(usize, usize)], heads: (usize, usize), head_size: usize) -> Self {
        Geometry {
            seqs: seqs.to_vec(),
            num_query_heads: heads.0,
            num_kv_heads: heads.1,
            head_size,
            block_size: 16,
            dtype: Dtype::Bf16,
        }
    }

    pub fn dtype(mut self, dtype: Dtype) -> Self {
        self.dtype = dtype;
        self
    }
}

/// Per-query `[T, 2]` rows equivalent to per-sequence ranges `[S, R, 2]`.
pub fn per_query_rows(data: &PagedData, ranges: &[[i32; 2]], r: usize) -> Vec<[i32; 2]> {
    let mut rows = vec![];
    for s in 0..data.seq_lens.len() {
        let qlen = data.cu_seqlens_q[s + 1] - data.cu_seqlens_q[s];
        let context = data.seq_lens[s] - qlen;
        for t in 0..qlen {
            let q = context + t;
            let hit = ranges[s * r..(s + 1) * r]
                .iter()
                .find(|&&[a, b]| a < b && a <= q && q <= b);
            rows.push(hit.copied().unwrap_or([-1, -1]));
        }
    }
    rows
}

impl PagedData {
    /// Evicts the sliding-window pages of every sequence (what vLLM frees under a window
    /// `window`): K and V of each key no query of the sequence can see through the window,
    /// `k <= first query − window`, become NaN. A kernel whose V guard lets one of them into
    /// `P · V` outputs NaN (0 · NaN); returns how many keys were evicted.
    pub fn evict_below_window(&mut self, window: usize) -> usize {
        let first_kept: Vec<usize> = (0..self.seq_lens.len())
            .map(|s| (self.first_query(s) + 1).saturating_sub(window))
            .collect();
        self.evict_below(&first_kept)
    }

    /// Makes K and V of every key below `first_kept[s]` of sequence `s` NaN (a cache that
    /// keeps only what some query attends); returns how many keys were evicted.
    pub fn evict_below(&mut self, first_kept: &[usize]) -> usize {
        let (bs, row) = (self.block_size, self.num_kv_heads * self.head_size);
        let mut evicted = 0;
        for (s, &kept) in first_kept.iter().enumerate().take(self.seq_lens.len()) {
            for k in 0..kept {
                let phys = self.block_table[s * self.block_table_stride + k / bs] as usize;
                let base = (phys * bs + k % bs) * row;
                self.k_cache[base..base + row].fill(f32::NAN);
                self.v_cache[base..base + row].fill(f32::NAN);
                evicted += 1;
            }
        }
        evicted
    }

    /// The absolute position of sequence `s`'s first query token.
    fn first_query(&self, s: usize) -> usize {
        let qlen = (self.cu_seqlens_q[s + 1] - self.cu_seqlens_q[s]) as usize;
        self.seq_lens[s] as usize - qlen
    }

    /// Random q/K/V in `[-1, 1)` rounded to the dtype; shuffled physical blocks (plus a
    /// few spare ones); every cache slot no sequence uses is NaN.
    pub fn random(g: &Geometry, seed: u64) -> Self {
        let mut rng = seeded(seed);
        let (hq, hkv, d, bs) = (g.num_query_heads, g.num_kv_heads, g.head_size, g.block_size);
        let blocks_per_seq: Vec<usize> = g.seqs.iter().map(|&(_, l)| l.div_ceil(bs)).collect();
        let stride = blocks_per_seq.iter().copied().max().unwrap_or(0).max(1) + 1;
        let num_blocks = blocks_per_seq.iter().sum::<usize>() + 3;
        let mut order: Vec<usize> = (0..num_blocks).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i + 1));
        }
        let page = bs * hkv * d;
        let mut k_cache = vec![f32::NAN; num_blocks * page];
        let mut v_cache = vec![f32::NAN; num_blocks * page];
        // Unused table entries point at a real block: an unmasked read would not fault
        // but would pull NaN into the result.
        let mut block_table = vec![order[num_blocks - 1] as i32; g.seqs.len() * stride];
        let mut next = 0;
        for (s, &(_, l)) in g.seqs.iter().enumerate() {
            for j in 0..blocks_per_seq[s] {
                let phys = order[next];
                next += 1;
                block_table[s * stride + j] = phys as i32;
                for slot in 0..bs {
                    if j * bs + slot >= l {
                        continue;
                    }
                    let base = (phys * bs + slot) * hkv * d;
                    for x in base..base + hkv * d {
                        k_cache[x] = g.dtype.round(rng.uniform(-1.0, 1.0)) as f32;
                        v_cache[x] = g.dtype.round(rng.uniform(-1.0, 1.0)) as f32;
                    }
                }
            }
        }
        let num_tokens: usize = g.seqs.iter().map(|&(q, _)| q).sum();
        let q = (0..num_tokens * hq * d)
            .map(|_| g.dtype.round(rng.uniform(-1.0, 1.0)) as f32)
            .collect();
        let mut cu = vec![0i32];
        for &(ql, _) in &g.seqs {
            cu.push(cu.last().copied().unwrap_or(0) + ql as i32);
        }
        PagedData {
            q,
            k_cache,
            v_cache,
            block_table,
            block_table_stride: stride,
            cu_seqlens_q: cu,
            seq_lens: g.seqs.iter().map(|&(_, l)| l as i32).collect(),
            num_query_heads: hq,
            num_kv_heads: hkv,
            head_size: d,
            block_size: bs,
            dtype: g.dtype,
        }
    }

    /// The problem with `D^-0.5` scaling and the given options.
    pub fn problem<'a>(&'a self, options: AttentionOptions<'a>) -> UnifiedAttentionProblem<'a> {
        UnifiedAttentionProblem {
            q: &self.q,
            num_query_heads: self.num_query_heads,
            head_size: self.head_size,
            k_cache: &self.k_cache,
            v_cache: &self.v_cache,
            block_size: self.block_size,
            num_kv_heads: self.num_kv_heads,
            block_table: &self.block_table,
            block_table_stride: self.block_table_stride,
            cu_seqlens_q: &self.cu_seqlens_q,
            seq_lens: &self.seq_lens,
            scale: 1.0 / (self.head_size as f64).sqrt(),
            options,
        }
    }

    pub fn num_tokens(&self) -> usize {
        self.q.len() / (self.num_query_heads * self.head_size)
    }
}

/// Spec §7 tolerances for bf16/f16 outputs.
pub const ATOL: f64 = 1.5e-2;
pub const RTOL: f64 = 1e-2;

/// `|got − want| ≤ atol + rtol·|want|` for every element; NaN (or a length mismatch)
/// always fails. Panics with the worst element and `context`.
pub fn assert_close(got: &[f32], want: &[f64], atol: f64, rtol: f64, context: &str) {
    assert_eq!(got.len(), want.len(), "{context}: output length");
    let mut worst: Option<(usize, f64)> = None;
    let mut max_err = 0.0f64;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let err = (f64::from(g) - w).abs();
        let ok = err <= atol + rtol * w.abs();
        if err.is_finite() {
            max_err = max_err.max(err);
        }
        if !ok && worst.is_none_or(|(_, e)| err > e || err.is_nan()) {
            worst = Some((i, err));
        }
    }
    if let Some((i, err)) = worst {
        panic!(
            "{context}: element {i}: got {}, want {} (|err| = {err:e}, atol {atol}, rtol {rtol}; max finite err {max_err:e})",
            got[i], want[i]
        );
    }
}

/// Largest absolute difference (NaN counts as infinite).
pub fn max_abs_diff(a: &[f32], b: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| {
            let e = (f64::from(x) - y).abs();
            if e.is_nan() {
                f64::INFINITY
            } else {
                e
            }
        })
        .fold(0.0, f64::max)
}
