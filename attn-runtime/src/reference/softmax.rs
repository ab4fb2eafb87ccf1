//! Per-row softmax in f64 with an optional sink logit (an extra logit whose value
//! vector is zero), shared by the references.

/// Probabilities of `scores` (the sink takes its share but has no entry) and the
/// natural-log LSE over scores ∪ {sink}. With no scores and no sink the row is empty:
/// no probabilities and LSE `−∞`, so its output is 0, never NaN.
pub fn softmax_row(scores: &[f64], sink: Option<f64>) -> (Vec<f64>, f64) {
    let max = scores
        .iter()
        .copied()
        .chain(sink)
        .fold(f64::NEG_INFINITY, f64::max);
    if max == f64::NEG_INFINITY {
        return (vec![0.0; scores.len()], f64::NEG_INFINITY);
    }
    let exps: Vec<f64> = scores.iter().map(|&s| (s - max).exp()).collect();
    let total: f64 = exps.iter().sum::<f64>() + sink.map_or(0.0, |s| (s - max).exp());
    (exps.iter().map(|e| e / total).collect(), max + total.ln())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sink_takes_probability_mass() {
        let (p, lse) = softmax_row(&[0.0, 0.0], Some(0.0));
        assert!(p.iter().all(|&x| (x - 1.0 / 3.0).abs() < 1e-15));
        assert!((lse - 3f64.ln()).abs() < 1e-15);
    }

    #[test]
    fn empty_row_is_zero_not_nan() {
        let (p, lse) = softmax_row(&[], None);
        assert!(p.is_empty());
        assert_eq!(lse, f64::NEG_INFINITY);
    }

    #[test]
    fn large_scores_do_not_overflow() {
        let (p, _) = softmax_row(&[1e4, 1e4 - 2f64.ln()], None);
        assert!((p[0] - 2.0 / 3.0).abs() < 1e-12);
    }
}
