//! Numeric comparison for parity tests: `|got - want| <= atol + rtol * |want|` per element,
//! written so that NaN never passes (an unwritten, NaN-poisoned output fails).

/// Allowed error per element.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    pub atol: f64,
    pub rtol: f64,
}

impl Tolerance {
    pub const fn new(atol: f64, rtol: f64) -> Self {
        Tolerance { atol, rtol }
    }
    /// Exact equality (integer outputs, bit-exact executors).
    pub const EXACT: Tolerance = Tolerance {
        atol: 0.0,
        rtol: 0.0,
    };

    /// The allowed error at reference value `want`.
    pub fn bound(&self, want: f64) -> f64 {
        self.atol + self.rtol * want.abs()
    }

    /// Whether `got` is within the tolerance of `want`; only when the comparison is
    /// defined: infinities and NaN fail.
    pub fn admits(&self, got: f64, want: f64) -> bool {
        (got - want)
            .abs()
            .partial_cmp(&self.bound(want))
            .is_some_and(|o| o != std::cmp::Ordering::Greater)
    }
}

/// Statistics of a passing comparison.
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    pub name: String,
    pub checked: usize,
    pub max_abs_err: f64,
    pub max_rel_err: f64,
}

/// Why outputs did not match.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CompareError {
    #[error("{name}: got {got} elements, the reference has {want}")]
    Length {
        name: String,
        got: usize,
        want: usize,
    },
    #[error("{name}: the reference itself is not finite at element {index} ({value}); fix the reference or the inputs")]
    BadReference {
        name: String,
        index: usize,
        value: f64,
    },
    #[error(
        "{name}: {count} of {total} elements never written (still NaN-poisoned or NaN); first at element {first}"
    )]
    NotANumber {
        name: String,
        count: usize,
        total: usize,
        first: usize,
    },
    #[error(
        "{name}: {count} of {total} elements outside atol {atol:e} + rtol {rtol:e}·|want|; worst element {index}: \
         got {got}, want {want} (abs err {abs_err:e})"
    )]
    OutOfTolerance {
        name: String,
        count: usize,
        total: usize,
        atol: f64,
        rtol: f64,
        index: usize,
        got: f64,
        want: f64,
        abs_err: f64,
    },
}

/// Compares `got` against `want` element by element.
pub fn compare(
    name: &str,
    got: &[f64],
    want: &[f64],
    tol: Tolerance,
) -> Result<Comparison, CompareError> {
    if got.len() != want.len() {
        return Err(CompareError::Length {
            name: name.into(),
            got: got.len(),
            want: want.len(),
        });
    }
    if let Some((index, &value)) = want.iter().enumerate().find(|(_, w)| !w.is_finite()) {
        return Err(CompareError::BadReference {
            name: name.into(),
            index,
            value,
        });
    }
    let nan: Vec<usize> = got
        .iter()
        .enumerate()
        .filter(|(_, g)| g.is_nan())
        .map(|(i, _)| i)
        .collect();
    if let Some(&first) = nan.first() {
        return Err(CompareError::NotANumber {
            name: name.into(),
            count: nan.len(),
            total: got.len(),
            first,
        });
    }
    let (mut max_abs, mut max_rel, mut fails, mut worst) =
        (0.0f64, 0.0f64, 0usize, None::<(usize, f64)>);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let (err, bound) = ((g - w).abs(), tol.bound(w));
        if !tol.admits(g, w) {
            fails += 1;
            let excess = if err.is_finite() {
                err - bound
            } else {
                f64::INFINITY
            };
            if worst.is_none_or(|(_, e)| excess > e) {
                worst = Some((i, excess));
            }
        }
        max_abs = max_abs.max(err);
        if w != 0.0 {
            max_rel = max_rel.max(err / w.abs());
        }
    }
    if let Some((index, _)) = worst {
        return Err(CompareError::OutOfTolerance {
            name: name.into(),
            count: fails,
            total: got.len(),
            atol: tol.atol,
            rtol: tol.rtol,
            index,
            got: got[index],
            want: want[index],
            abs_err: (got[index] - want[index]).abs(),
        });
    }
    Ok(Comparison {
        name: name.into(),
        checked: got.len(),
        max_abs_err: max_abs,
        max_rel_err: max_rel,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOL: Tolerance = Tolerance::new(1e-3, 1e-2);

    #[test]
    fn within_tolerance_passes_with_stats() {
        let c = compare("o", &[1.0, 2.005, -3.0], &[1.0, 2.0, -3.0], TOL).expect("close");
        assert_eq!(c.checked, 3);
        assert!((c.max_abs_err - 0.005).abs() < 1e-12);
    }

    #[test]
    fn nan_never_passes_even_against_nan() {
        let e = compare(
            "o",
            &[1.0, f64::NAN],
            &[1.0, 2.0],
            Tolerance::new(f64::INFINITY, 0.0),
        )
        .expect_err("NaN");
        assert!(
            matches!(
                e,
                CompareError::NotANumber {
                    count: 1,
                    first: 1,
                    ..
                }
            ),
            "{e}"
        );
        let e = compare("o", &[f64::NAN], &[f64::NAN], TOL).expect_err("NaN reference");
        assert!(matches!(e, CompareError::BadReference { .. }));
    }

    #[test]
    fn infinities_and_large_errors_fail_with_the_worst_element() {
        let e = compare("o", &[1.0, 5.0, f64::INFINITY], &[1.0, 2.0, 3.0], TOL).expect_err("off");
        let CompareError::OutOfTolerance { count, index, .. } = e else {
            panic!("{e}")
        };
        assert_eq!((count, index), (2, 2));
        assert!(compare("o", &[1.0], &[1.0, 2.0], TOL).is_err());
    }

    #[test]
    fn exact_tolerance_rejects_one_ulp() {
        let one_up = f64::from_bits(1.0f64.to_bits() + 1);
        assert!(compare("o", &[one_up], &[1.0], Tolerance::EXACT).is_err());
        assert!(compare("o", &[1.0], &[1.0], Tolerance::EXACT).is_ok());
    }
}
