//! A variant's own DSL MASK evaluated on the CPU executor over every (query, key) pair of
//! a problem: the dense allowed-mask a dense f64 reference is built from when the variant
//! has no host definition (a variant read from a file: `attn run --variant`).
//!
//! It runs the same probe kernel as the checking kit ([`super::variant_check`]), with the
//! kernel's row mapping and arguments, so the mask seen here is the mask the kernel
//! applies. The bounds play no part: the reference attends every key the mask allows, and
//! a kernel whose bounds skip one of them disagrees with it.

use super::config::UnifiedAttentionConfig;
use super::variant::Variant;
use super::variant_check::{probe_config, CaseGeometry, VariantCheckError};
use crate::kernels::bounds_probe::{probe_block, ProbeBlock};

/// One sequence of a problem: its geometry and its rows of the variant's aux tensors.
#[derive(Clone, Copy, Debug)]
pub struct SequenceInputs<'a> {
    /// Keys and query length of the sequence.
    pub geometry: CaseGeometry,
    /// The sequence's row of the `i32` (or bool) aux tensor.
    pub aux_i32: &'a [i32],
    /// The sequence's row of the `f32` aux tensor.
    pub aux_f32: &'a [f32],
}

/// `allowed[t][k]` for every query token `t` and key `k < L` of every sequence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DenseMask {
    seqs: Vec<SequenceMask>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct SequenceMask {
    context_len: i64,
    seq_len: i64,
    /// Row-major `[qlen, L]`.
    allowed: Vec<bool>,
}

impl DenseMask {
    /// Whether query `q_abs` (absolute position) of sequence `s` may see key `k`; keys
    /// outside `[0, L)` and positions before the first query never are.
    pub fn allowed(&self, s: usize, q_abs: i64, k: i64) -> bool {
        let Some(m) = self.seqs.get(s) else {
            return false;
        };
        let t = q_abs - m.context_len;
        let qlen = m.allowed.len() as i64 / m.seq_len.max(1);
        if t < 0 || t >= qlen || k < 0 || k >= m.seq_len {
            return false;
        }
        m.allowed[(t * m.seq_len + k) as usize]
    }

    /// Allowed (query, key) pairs over the whole problem (useful-FLOP counts).
    pub fn allowed_pairs(&self) -> u64 {
        self.seqs
            .iter()
            .map(|m| m.allowed.iter().filter(|&&a| a).count() as u64)
            .sum()
    }
}

/// The valid mask rows of one `(sequence, q-block)`.
struct BlockRows {
    seq: usize,
    block: i32,
    rows: Vec<Vec<bool>>,
}

/// Rows per probe: the mask depends on the query position only, not on the head, so one
/// row per query token (a GQA ratio of 1).
const PROBE_ROWS: i32 = 16;

/// Evaluates `variant`'s MASK for every query of every sequence of `seqs` (in parallel over
/// q-blocks on all cores; each worker parses its own module).
pub fn dense_mask(
    variant: &Variant,
    seqs: &[SequenceInputs<'_>],
) -> Result<DenseMask, VariantCheckError> {
    let cfg = probe_config(16, 1)?;
    debug_assert_eq!(cfg.block_q, PROBE_ROWS);
    let jobs: Vec<(usize, i32)> = seqs
        .iter()
        .enumerate()
        .flat_map(|(s, seq)| (0..blocks(seq.geometry.query_len)).map(move |b| (s, b)))
        .collect();
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, jobs.len().max(1));
    let parts: Vec<Result<Vec<BlockRows>, VariantCheckError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let (jobs, cfg) = (&jobs, &cfg);
                scope.spawn(move || {
                    let mine = jobs.iter().skip(i).step_by(threads);
                    probe_rows(variant, cfg, seqs, mine)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a dense-mask worker panicked"))
            .collect()
    });
    let mut out = DenseMask {
        seqs: seqs
            .iter()
            .map(|seq| {
                let g = seq.geometry;
                SequenceMask {
                    context_len: i64::from(g.seq_len - g.query_len),
                    seq_len: i64::from(g.seq_len),
                    allowed: vec![false; (g.query_len.max(0) * g.seq_len.max(0)) as usize],
                }
            })
            .collect(),
    };
    for part in parts {
        for BlockRows { seq, block, rows } in part? {
            let m = &mut out.seqs[seq];
            let l = m.seq_len as usize;
            for (i, row) in rows.into_iter().enumerate() {
                let t = block as usize * PROBE_ROWS as usize + i;
                m.allowed[t * l..(t + 1) * l].copy_from_slice(&row[..l]);
            }
        }
    }
    Ok(out)
}

fn blocks(query_len: i32) -> i32 {
    (query_len.max(0) + PROBE_ROWS - 1) / PROBE_ROWS
}

/// One worker: the mask rows of its `(sequence, q-block)` jobs (valid rows only).
fn probe_rows<'a>(
    variant: &Variant,
    cfg: &UnifiedAttentionConfig,
    seqs: &[SequenceInputs<'_>],
    jobs: impl Iterator<Item = &'a (usize, i32)>,
) -> Result<Vec<BlockRows>, VariantCheckError> {
    let module = variant.module()?;
    let mask_variant = variant.mask_variant();
    let mut out = vec![];
    for &(s, b) in jobs {
        let seq = &seqs[s];
        let g = seq.geometry;
        let block = ProbeBlock {
            context_len: g.seq_len - g.query_len,
            seq_len: g.seq_len,
            query_len: g.query_len,
            q_block: b,
            causal: true,
            rswa_prefix_len: 0,
            mm_ranges: &[],
            query_ranges: &[],
            mask_aux: seq.aux_i32,
            mask_aux_f32: seq.aux_f32,
        };
        // The probe's key axis is a tile: a power of two.
        let keys = (g.seq_len.max(1) as usize).next_power_of_two();
        let r = probe_block(&module, cfg, &mask_variant, &block, keys)?;
        let valid = (g.query_len - b * PROBE_ROWS).clamp(0, PROBE_ROWS) as usize;
        out.push(BlockRows {
            seq: s,
            block: b,
            rows: r.mask.into_iter().take(valid).collect(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A causal window of 5 written as a variant (bounds: the kernel's own, unused here),
    /// checked against its definition on every pair, out-of-range keys included.
    #[test]
    fn a_window_mask_evaluates_to_its_definition() {
        let source = r#"
mod w {
    #[device]
    fn w_mask(q_abs: Tile, k: Tile, seq_len: i32) -> Tile<bool> {
        (k <= q_abs) & (q_abs - k < 5) & (k < seq_len)
    }
}"#;
        let v =
            Variant::from_file(source, "w", "t.rs", "w_mask", "vllm_bounds").expect("variant text");
        let geometry = [(40, 40), (3, 37), (1, 17)];
        let seqs: Vec<SequenceInputs<'_>> = geometry
            .iter()
            .map(|&(q, l)| SequenceInputs {
                geometry: CaseGeometry {
                    seq_len: l,
                    query_len: q,
                },
                aux_i32: &[],
                aux_f32: &[],
            })
            .collect();
        let m = dense_mask(&v, &seqs).expect("dense mask");
        let mut pairs = 0;
        for (s, &(q, l)) in geometry.iter().enumerate() {
            for qa in i64::from(l - q)..i64::from(l) {
                for k in -1..i64::from(l) + 2 {
                    let want = k >= 0 && k < i64::from(l) && k <= qa && qa - k < 5;
                    pairs += u64::from(want);
                    assert_eq!(m.allowed(s, qa, k), want, "seq {s} q {qa} k {k}");
                }
            }
        }
        assert_eq!(m.allowed_pairs(), pairs);
    }
}
