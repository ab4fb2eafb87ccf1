//! Shape ops (`Splat`, `Broadcast`, `Trans`; `ExpandDims` only relabels the shape and
//! needs no data movement). Each computes a source index per output element and gathers.

use super::error::{malformed, Fault};
use super::tile::TileData;

/// Repeats a scalar to `n` elements.
pub(crate) fn splat(x: &TileData, n: usize) -> Result<TileData, Fault> {
    if x.len() != 1 {
        return Err(malformed(format!("splat of a value with {} elements (needs a scalar)", x.len())));
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
    // Row-major strides of the source, with 0 for repeated (size-1) dims.
    let mut strides = vec![0usize; from.len()];
    let mut s = 1;
    for d in (0..from.len()).rev() {
        strides[d] = if from[d] == 1 { 0 } else { s };
        s *= from[d];
    }
    let mut idx = Vec::with_capacity(to.iter().product());
    let mut counter = vec![0usize; to.len()];
    for _ in 0..to.iter().product::<usize>() {
        idx.push(counter.iter().zip(&strides).map(|(c, s)| c * s).sum());
        for d in (0..to.len()).rev() {
            counter[d] += 1;
            if counter[d] < to[d] {
                break;
            }
            counter[d] = 0;
        }
    }
    Ok(x.gather(&idx))
}

/// Transposes an `m × n` tile to `n × m`.
pub(crate) fn transpose(x: &TileData, from: &[usize]) -> Result<TileData, Fault> {
    let &[m, n] = from else {
        return Err(malformed(format!("transpose of a rank-{} value", from.len())));
    };
    if x.len() != m * n {
        return Err(malformed(format!("value has {} elements, shape {from:?} needs {}", x.len(), m * n)));
    }
    let idx: Vec<usize> = (0..n).flat_map(|j| (0..m).map(move |i| i * n + j)).collect();
    Ok(x.gather(&idx))
}
