//! `Reduce` along one axis.
//!
//! Float sums accumulate in `f32` (the running sum is rounded to `f32` after each element,
//! indices ascending) and the result is rounded to the value's dtype: the GPU also reduces
//! in `f32`, though in tree order, so results agree to `f32` rounding, not bit for bit.
//! Float `max`/`min` ignore NaN like `fmaxf`/`fminf`. Integer sums wrap.

use super::error::{malformed, Fault};
use super::numerics::{round_f32, round_float, wrap_int};
use super::tile::TileData;
use crate::ir::{ReduceKind, ScalarType};

/// Reduces `x` (of `shape` and dtype `ty`) along `axis`.
pub(crate) fn reduce(
    kind: ReduceKind,
    ty: ScalarType,
    x: &TileData,
    shape: &[usize],
    axis: usize,
) -> Result<TileData, Fault> {
    if axis >= shape.len() || x.len() != shape.iter().product::<usize>() || shape[axis] == 0 {
        return Err(malformed(format!(
            "reduce along axis {axis} of shape {shape:?}"
        )));
    }
    let outer: usize = shape[..axis].iter().product();
    let len = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    // Visits the reduced elements of output lane (o, i) in ascending order.
    let lanes = |o: usize, i: usize| (0..len).map(move |k| (o * len + k) * inner + i);
    let outputs = (0..outer).flat_map(|o| (0..inner).map(move |i| (o, i)));
    match x {
        TileData::Float(v) => {
            let out = outputs
                .map(|(o, i)| {
                    let mut it = lanes(o, i).map(|j| v[j]);
                    let r = match kind {
                        ReduceKind::Sum => it.fold(0.0, |acc, x| round_f32(acc + x)),
                        ReduceKind::Max => {
                            it.next().map_or(f64::NAN, |first| it.fold(first, f64::max))
                        }
                        ReduceKind::Min => {
                            it.next().map_or(f64::NAN, |first| it.fold(first, f64::min))
                        }
                    };
                    round_float(ty, r)
                })
                .collect();
            Ok(TileData::Float(out))
        }
        TileData::Int(v) => {
            let out = outputs
                .map(|(o, i)| {
                    let it = lanes(o, i).map(|j| v[j]);
                    let r = match kind {
                        ReduceKind::Sum => it.fold(0i64, i64::wrapping_add),
                        ReduceKind::Max => it.max().unwrap_or(i64::MIN),
                        ReduceKind::Min => it.min().unwrap_or(i64::MAX),
                    };
                    wrap_int(ty, r)
                })
                .collect();
            Ok(TileData::Int(out))
        }
        other => Err(malformed(format!(
            "reduce is not defined on {} values",
            other.family()
        ))),
    }
}
