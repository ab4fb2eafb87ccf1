//! Random MLA-DCP partials (with an empty shard) and their f64 merge, shared by the one-GPU
//! plumbing tests and the NCCL tests, which check the same §3.2 merge through different
//! collectives.

#![allow(dead_code)]

use attn_runtime::ops::mla_dcp::act_dtype::ActivationElem;
use attn_runtime::ops::mla_dcp::chunk_layout::ChunkLayout;
use attn_runtime::ops::mla_dcp::merge::{merge_partials, Partial};
use attn_runtime::problem::SplitMix64;

/// `n` activations uniform in `[-scale, scale)`, none exactly 0.
pub fn random_act<E: ActivationElem>(rng: &mut SplitMix64, n: usize, scale: f32) -> Vec<E> {
    (0..n)
        .map(|_| E::from_f32(rng.nonzero_unit_f32() * scale))
        .collect()
}

/// Partials of D virtual ranks: out `[T, D·N, L]` and lse `[T, D·N]` per rank, with an empty
/// shard (lse −∞, out NaN) for rank D−1 on token 0 when D > 1: its NaN must not leak.
pub fn random_partials<E: ActivationElem>(
    rng: &mut SplitMix64,
    c: &ChunkLayout,
) -> Vec<(Vec<E>, Vec<f32>)> {
    let dn = c.ranks * c.heads;
    (0..c.ranks)
        .map(|r| {
            let mut out: Vec<E> = random_act(rng, c.tokens * dn * c.latent, 2.0);
            let mut lse: Vec<f32> = (0..c.tokens * dn)
                .map(|_| 4.0 * rng.nonzero_unit_f32() + 1.0)
                .collect();
            if c.ranks > 1 && r == c.ranks - 1 {
                lse[..dn].fill(f32::NEG_INFINITY);
                out[..dn * c.latent].fill(E::from_f32(f32::NAN));
            }
            (out, lse)
        })
        .collect()
}

/// f64 merge of §3.2 for one row of `(output, lse)` partials: (normalized output, lse*);
/// a partial with a non-finite lse contributes nothing.
pub fn merge_f64(parts: &[(Vec<f64>, f64)], width: usize) -> (Vec<f64>, f64) {
    let parts: Vec<Partial<'_>> = parts
        .iter()
        .map(|(out, lse)| Partial { out, lse: *lse })
        .collect();
    let mut out = vec![0.0; width];
    let lse = merge_partials(&parts, &mut out).expect("every partial has the row width");
    (out, lse)
}
