//! `Dot`: `acc + a·b` with GPU tensor-core numerics.
//!
//! The inputs are already rounded to their dtype, so each product is exact in `f64`
//! (bf16/f16: 8/11-bit mantissas; f32: 24 + 24 ≤ 53 bits). For each output element the
//! running sum starts at `acc` and takes one product per k step, k ascending, rounded to
//! `f32` after every step, i.e. a chain of `f32` fused multiply-adds. Tensor cores sum
//! in a different order (and f32 inputs may go through tf32 on the GPU), so GPU results
//! agree to accumulated `f32` rounding, not bit for bit.

use super::error::{malformed, Fault};
use super::numerics::round_f32;

/// `acc[m×n] + a[m×k] · b[k×n]`, all row-major.
pub(crate) fn dot(
    a: &[f64],
    b: &[f64],
    acc: &[f64],
    m: usize,
    k: usize,
    n: usize,
) -> Result<Vec<f64>, Fault> {
    if a.len() != m * k || b.len() != k * n || acc.len() != m * n {
        return Err(malformed(format!(
            "dot operand sizes {}, {}, {} do not match {m}×{k} · {k}×{n}",
            a.len(),
            b.len(),
            acc.len()
        )));
    }
    let mut out = acc.to_vec();
    // Index loops over slices: this is the executor's hottest loop, and iterator
    // adapters cost a call per element in debug builds (where CI runs it).
    for i in 0..m {
        let out_row = &mut out[i * n..(i + 1) * n];
        for kk in 0..k {
            let a_ik = a[i * k + kk];
            let b_row = &b[kk * n..(kk + 1) * n];
            for j in 0..n {
                out_row[j] = round_f32(out_row[j] + a_ik * b_row[j]);
            }
        }
    }
    Ok(out)
}
