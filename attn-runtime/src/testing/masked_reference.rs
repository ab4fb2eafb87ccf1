//! Dense f64 unified attention with an arbitrary mask predicate, for variants: every key
//! of every row is scored and kept iff `mask(seq, q_abs, k)`; probabilities are rounded
//! to the data dtype (the kernel casts P before the PV product); a row that sees nothing
//! outputs 0. Written from the definition, independent of the DSL kernels.

use super::paged::PagedData;
use crate::reference::softmax::softmax_row;

/// `[T, Hq, D]` attention of `data` under `mask(seq, q_abs, k)` (absolute positions).
/// Query tokens are independent: they are split over all cores (same result as serial).
pub fn masked_reference(
    data: &PagedData,
    mask: &(dyn Fn(usize, i64, i64) -> bool + Sync),
) -> Vec<f64> {
    let row = data.num_query_heads * data.head_size;
    let mut out = vec![0.0; data.q.len()];
    let tokens = out.len() / row.max(1);
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, tokens.max(1));
    let per = tokens.div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        for (i, chunk) in out.chunks_mut(per * row.max(1)).enumerate() {
            scope.spawn(move || token_rows(data, mask, i * per, chunk));
        }
    });
    out
}

/// The output rows of tokens `first..` into `out` (whole `[Hq, D]` rows).
fn token_rows(
    data: &PagedData,
    mask: &(dyn Fn(usize, i64, i64) -> bool + Sync),
    first: usize,
    out: &mut [f64],
) {
    let (hq, d) = (data.num_query_heads, data.head_size);
    for (i, token_out) in out.chunks_mut(hq * d).enumerate() {
        let tok = first + i;
        // The sequence owning `tok`: the last s with cu_seqlens_q[s] <= tok.
        let s = data.cu_seqlens_q[1..].partition_point(|&c| c as usize <= tok);
        let (start, end) = (
            data.cu_seqlens_q[s] as usize,
            data.cu_seqlens_q[s + 1] as usize,
        );
        let l = i64::from(data.seq_lens[s]);
        let q_abs = l - (end - start) as i64 + (tok - start) as i64;
        let keys: Vec<i64> = (0..l).filter(|&k| mask(s, q_abs, k)).collect();
        for h in 0..hq {
            let at = (tok * hq + h) * d;
            let o = reference_row(data, s, h, &data.q[at..at + d], &keys);
            token_out[h * d..(h + 1) * d].copy_from_slice(&o);
        }
    }
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
