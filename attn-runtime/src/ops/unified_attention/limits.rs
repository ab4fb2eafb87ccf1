//! Host-side limits of unified-attention arguments, and the scalar contract (spec §1.1).
//!
//! The kernels compute positions, window edges and tile counts in `i32`. Every sum they form
//! (`q_abs ± SLIDING_WINDOW`, `context_len + q_hi + 1`, `cdiv(seq_len, NUM_SEGMENTS · TILE)`,
//! `segment · tiles_per_segment · TILE`) stays below `2 · MAX_SEQ_LEN + 2^15 < 2^31` when
//! every sequence length and every window is at most [`MAX_SEQ_LEN`]; that is the proof the
//! host checks here stand on. A window above the limit covers every key of every admissible
//! sequence, so it is replaced by the limit itself ([`effective_sliding_window`]), which
//! selects exactly the same keys.

#![deny(clippy::indexing_slicing, clippy::arithmetic_side_effects)]

use super::validate::InputError;

/// Longest sequence (and largest window edge) the kernels' `i32` arithmetic is proven for:
/// 2^30 tokens, far beyond any model context.
pub const MAX_SEQ_LEN: i32 = 1 << 30;

/// Largest head size: keeps `next_pow2(D)` and the padded-row arithmetic in `i32` (the
/// specs' largest head size is 576).
pub const MAX_HEAD_SIZE: usize = 1 << 16;

/// The window the kernels see for `(sliding_window, chunk_lookback)`.
///
/// Without chunking the window only enters through `|q − k| < SW` with `q, k ∈ [0, L)` and
/// `L ≤ MAX_SEQ_LEN`, so `|q − k| ≤ MAX_SEQ_LEN − 1`: any `SW ≥ MAX_SEQ_LEN` admits every
/// pair, exactly as `SW = MAX_SEQ_LEN` does. With chunking the window fixes the chunk size
/// `⌊SW / (LB + 1)⌋`, so it is never changed (and [`check_scalars`] bounds it instead).
pub fn effective_sliding_window(sliding_window: i32, chunk_lookback: i32) -> i32 {
    if chunk_lookback < 0 {
        sliding_window.min(MAX_SEQ_LEN)
    } else {
        sliding_window
    }
}

/// The scalar arguments the caller controls.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScalarArgs {
    /// Multiplier of `q · k` before the softmax.
    pub softmax_scale: f32,
    /// `Some(c)`: `c · tanh(s / c)`, `c` finite and > 0.
    pub softcap: Option<f32>,
    /// SW, 0 = off.
    pub sliding_window: i32,
    /// LB, −1 = off.
    pub chunk_lookback: i32,
}

/// The scalar contract: a finite scale, softcap finite and > 0 (`+inf` would give
/// `inf · tanh(0) = NaN`; `≤ 0` or NaN would silently turn it off), a chunked window within
/// [`MAX_SEQ_LEN`]. Window signs and chunk rules are the config's §2.1 rules.
pub fn check_scalars(s: &ScalarArgs) -> Result<(), InputError> {
    if !s.softmax_scale.is_finite() {
        return Err(InputError::SoftmaxScale {
            got: s.softmax_scale,
        });
    }
    if let Some(c) = s.softcap {
        if !(c.is_finite() && c > 0.0) {
            return Err(InputError::Softcap { got: c });
        }
    }
    if s.chunk_lookback >= 0 && s.sliding_window > MAX_SEQ_LEN {
        return Err(InputError::ChunkedWindowTooLarge {
            window: s.sliding_window,
            max: MAX_SEQ_LEN,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scalars() -> ScalarArgs {
        ScalarArgs {
            softmax_scale: 0.125,
            softcap: None,
            sliding_window: 0,
            chunk_lookback: -1,
        }
    }

    #[test]
    fn huge_windows_clamp_only_without_chunking() {
        assert_eq!(effective_sliding_window(i32::MAX, -1), MAX_SEQ_LEN);
        assert_eq!(effective_sliding_window(1024, -1), 1024);
        assert_eq!(effective_sliding_window(i32::MAX, 3), i32::MAX);
    }

    #[test]
    fn softcap_must_be_finite_and_positive() {
        for bad in [0.0, -1.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let s = ScalarArgs {
                softcap: Some(bad),
                ..scalars()
            };
            assert!(
                matches!(check_scalars(&s), Err(InputError::Softcap { .. })),
                "{bad}"
            );
        }
        let ok = ScalarArgs {
            softcap: Some(30.0),
            ..scalars()
        };
        assert_eq!(check_scalars(&ok), Ok(()));
    }
}
