//! Shape ops (`Splat`, `Broadcast`, `Trans`; `ExpandDims` only relabels the shape and
//! needs no data movement). Each computes a source index per output element and gathers.

use super::error::{malformed, Fault};
use super::tile::TileData;

/// Repeats a scalar to `n` elements.
pub(crate) fn splat(x: &TileData, n: usize) -> Result<TileData, Fault> {
    if x.len() != 1 {
        return Err(malformed(format!(
            "splat of a value with {} elements (needs a scalar)",
            x.len()
        )));
    }
    Ok(x.gather(&vec![0; n]))
}

/// Repeats size-1 dims of `from` to the dims of `to` (same rank; a scalar `from` splats).
pub(crate) fn broadcast(x: &TileData, from: &[usize], to: &[usize]) -> Result<TileData, Fault> {
    if from.is_empty() {
        return splat(x, to.iter().product());
    }
    let ok = from.len() == to.len() && from.iter().zip(to).all(|(&f, &t)| f == t || f == 1);
    if !ok || x.len() != from.iter().product::<usize>() {
        return Err(malformed(format!("cannot broadcast {from:?} to {to:?}")));
    }
    // Tiles have rank ≤ 2; index loops keep this cheap in debug builds.
    let idx: Vec<usize> = match (from, to) {
        (&[f0], &[t0]) => (0..t0).map(|i| if f0 == 1 { 0 } else { i }).collect(),
        (&[f0, f1], &[t0, t1]) => {
            let mut idx = Vec::with_capacity(t0 * t1);
            for i in 0..t0 {
                let row = if f0 == 1 { 0 } else { i * f1 };
                for j in 0..t1 {
                    idx.push(if f1 == 1 { row } else { row + j });
                }
            }
            idx
        }
        _ => {
            return Err(malformed(format!(
                "broadcast of rank {} (tiles have rank ≤ 2)",
                from.len()
            )))
        }
    };
    Ok(x.gather(&idx))
}

/// Transposes an `m × n` tile to `n × m`.
pub(crate) fn transpose(x: &TileData, from: &[usize]) -> Result<TileData, Fault> {
    let &[m, n] = from else {
        return Err(malformed(format!(
            "transpose of a rank-{} value",
            from.len()
        )));
    };
    if x.len() != m * n {
        return Err(malformed(format!(
            "value has {} elements, shape {from:?} needs {}",
            x.len(),
            m * n
        )));
    }
    let idx: Vec<usize> = (0..n)
        .flat_map(|j| (0..m).map(move |i| i * n + j))
        .collect();
    Ok(x.gather(&idx))
}
