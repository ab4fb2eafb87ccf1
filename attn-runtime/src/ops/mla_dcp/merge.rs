//! The N-way log-sum-exp merge of partial attention outputs (spec `mla_dcp.md` §3.2), in
//! f64: the host reference for the DSL combine kernel.
//!
//! Each partial is `(o_i, ℓ_i)`: an attention output normalized over its own key set
//! and the natural-log sum of its exponentiated scores. Over disjoint key sets the
//! softmax of the union is `Σ_i e^{ℓ_i − ℓ*} o_i`, normalized. A partial with a
//! non-finite ℓ (NaN, ±∞) is invalid and must contribute nothing, not even a NaN: its
//! output is selected away *before* it is multiplied by its zero weight.

use thiserror::Error;

/// A partial's output row does not have the merged row's width.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("partial {index} has {got} output values, expected {expected} (the output row width)")]
pub struct MergeShapeError {
    /// Index of the partial.
    pub index: usize,
    /// Its output values.
    pub got: usize,
    /// The output row width.
    pub expected: usize,
}

/// One partial result for one output row.
#[derive(Clone, Copy, Debug)]
pub struct Partial<'a> {
    /// `o_i`: the normalized partial output row.
    pub out: &'a [f64],
    /// `ℓ_i`: natural-log LSE of the partial's scores (scale included).
    pub lse: f64,
}

/// §3.2 merge of `parts` into `out`; returns the merged LSE (`−∞` for an empty row,
/// whose output is all zeros).
pub fn merge_partials(parts: &[Partial<'_>], out: &mut [f64]) -> Result<f64, MergeShapeError> {
    if let Some((index, p)) = parts
        .iter()
        .enumerate()
        .find(|(_, p)| p.out.len() != out.len())
    {
        return Err(MergeShapeError {
            index,
            got: p.out.len(),
            expected: out.len(),
        });
    }
    let valid = |p: &Partial<'_>| p.lse.is_finite();
    let max = parts
        .iter()
        .filter(|p| valid(p))
        .map(|p| p.lse)
        .fold(f64::NEG_INFINITY, f64::max);
    let m = if max.is_finite() { max } else { 0.0 };
    out.fill(0.0);
    let mut weight_sum = 0.0;
    for p in parts {
        let w = if valid(p) { (p.lse - m).exp() } else { 0.0 };
        weight_sum += w;
        for (o, &x) in out.iter_mut().zip(p.out) {
            let selected = if valid(p) { x } else { 0.0 };
            *o += w * selected;
        }
    }
    let denom = if weight_sum == 0.0 { 1.0 } else { weight_sum };
    out.iter_mut().for_each(|o| *o /= denom);
    Ok(if weight_sum == 0.0 {
        f64::NEG_INFINITY
    } else {
        m + weight_sum.ln()
    })
}

/// Merges `rows` rows at once: `outs[i]` is partial i's `[rows, width]` output and
/// `lses[i]` its `[rows]` LSE. Returns the merged `[rows, width]` output and `[rows]` LSE.
pub fn merge_partial_rows(
    outs: &[&[f64]],
    lses: &[&[f64]],
    rows: usize,
    width: usize,
) -> Result<(Vec<f64>, Vec<f64>), MergeShapeError> {
    for (index, (o, l)) in outs.iter().zip(lses).enumerate() {
        if o.len() != rows * width || l.len() != rows {
            return Err(MergeShapeError {
                index,
                got: o.len(),
                expected: rows * width,
            });
        }
    }
    if outs.len() != lses.len() {
        return Err(MergeShapeError {
            index: outs.len().min(lses.len()),
            got: 0,
            expected: rows * width,
        });
    }
    let mut merged = vec![0.0; rows * width];
    let mut merged_lse = vec![0.0; rows];
    for r in 0..rows {
        let parts: Vec<Partial<'_>> = outs
            .iter()
            .zip(lses)
            .map(|(o, l)| Partial {
                out: &o[r * width..(r + 1) * width],
                lse: l[r],
            })
            .collect();
        merged_lse[r] = merge_partials(&parts, &mut merged[r * width..(r + 1) * width])?;
    }
    Ok((merged, merged_lse))
}
