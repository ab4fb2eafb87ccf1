//! Dense f64 unified attention with an arbitrary mask predicate, for variants: every key
//! of every row is scored and kept iff `mask(seq, q_abs, k)`; probabilities are rounded
//! to the data dtype (the kernel casts P before the PV product); a row that sees nothing
//! outputs 0. Written from the definition, independent of the DSL kernels.

use super::paged::PagedData;
use crate::reference::softmax::softmax_row;

/// `[T, Hq, D]` attention of `data` under `mask(seq, q_abs, k)` (absolute positions).
pub fn masked_reference(data: &PagedData, mask: &dyn Fn(usize, i64, i64) -> bool) -> Vec<f64> {
    let mut out = vec![0.0; data.q.len()];
    for s in 0..data.seq_lens.len() {
        let (start, end) = (
            data.cu_seqlens_q[s] as usize,
            data.cu_seqlens_q[s + 1] as usize,
        );
        let l = i64::from(data.seq_lens[s]);
        let context = l - (end - start) as i64;
        for tok in start..end {
            let q_abs = context + (tok - start) as i64;
            let keys: Vec<i64> = (0..l).filter(|&k| mask(s, q_abs, k)).collect();
            for h in 0..data.num_query_heads {
                let row = (tok * data.num_query_heads + h) * data.head_size;
                let o = reference_row(data, s, h, &data.q[row..row + data.head_size], &keys);
                out[row..row + data.head_size].copy_from_slice(&o);
            }
        }
    }
    out
}

/// Element offset of key `k`, head `h`'s K/V vector of sequence `s` in the paged caches.
fn kv_offset(data: &PagedData, s: usize, k: i64, h: usize) -> usize {
    let (bs, d) = (data.block_size, data.head_size);
    let group = data.num_query_heads / data.num_kv_heads.max(1);
    let phys = data.block_table[s * data.block_table_stride + k as usize / bs] as usize;
    ((phys * bs + k as usize % bs) * data.num_kv_heads + h / group.max(1)) * d
}

fn reference_row(data: &PagedData, s: usize, h: usize, q: &[f32], keys: &[i64]) -> Vec<f64> {
    let d = data.head_size;
    let scale = 1.0 / (d as f64).sqrt();
    let scores: Vec<f64> = keys
        .iter()
        .map(|&k| {
            let at = kv_offset(data, s, k, h);
            scale
                * q.iter()
                    .zip(&data.k_cache[at..at + d])
                    .map(|(&a, &b)| f64::from(a) * f64::from(b))
                    .sum::<f64>()
        })
        .collect();
    let (p, _) = softmax_row(&scores, None);
    let mut o = vec![0.0; d];
    for (&pk, &k) in p.iter().zip(keys) {
        let pk = data.dtype.round(pk);
        let at = kv_offset(data, s, k, h);
        for (x, &v) in o.iter_mut().zip(&data.v_cache[at..at + d]) {
            *x += pk * f64::from(v);
        }
    }
    o
}
