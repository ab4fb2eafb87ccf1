//! What one fuzz case did, compared with the oracle, and the tally over a run.

use std::fmt;

/// One case's outcome. Only `Rejected` and `Accepted` are correct.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Oracle: malformed; op: typed error.
    Rejected,
    /// Oracle: valid; op: accepted.
    Accepted,
    /// Oracle: malformed; op: accepted (a kernel would have run on bad input).
    AcceptedMalformed,
    /// Oracle: valid; op: typed error.
    RejectedValid,
    /// The op panicked (caught with `catch_unwind`).
    Panicked,
}

impl Outcome {
    /// Classifies a host-side result against the oracle's verdict.
    pub fn of<T, E>(result: std::thread::Result<Result<T, E>>, oracle_valid: bool) -> Outcome {
        match (result, oracle_valid) {
            (Err(_), _) => Outcome::Panicked,
            (Ok(Ok(_)), true) => Outcome::Accepted,
            (Ok(Err(_)), false) => Outcome::Rejected,
            (Ok(Ok(_)), false) => Outcome::AcceptedMalformed,
            (Ok(Err(_)), true) => Outcome::RejectedValid,
        }
    }

    pub fn is_correct(self) -> bool {
        matches!(self, Outcome::Rejected | Outcome::Accepted)
    }
}

/// Judges one host-fuzz case: classifies the op's result against the oracle's verdict,
/// counts it, and fails the proptest case (with the oracle's and the op's words and `case`)
/// when they disagree or the op panicked.
pub fn judge<T, E: fmt::Display, V: fmt::Debug>(
    tally: &std::cell::RefCell<Tally>,
    ran: std::thread::Result<Result<T, E>>,
    verdict: &Result<(), V>,
    case: impl fmt::Debug,
) -> Result<(), proptest::test_runner::TestCaseError> {
    let detail = match &ran {
        Ok(Err(e)) => e.to_string(),
        Ok(Ok(_)) => "accepted".to_string(),
        Err(_) => "panicked".to_string(),
    };
    let outcome = Outcome::of(ran, verdict.is_ok());
    tally.borrow_mut().add(outcome);
    if outcome.is_correct() {
        return Ok(());
    }
    Err(proptest::test_runner::TestCaseError::fail(format!(
        "{outcome:?}: oracle {verdict:?}, op {detail}; {case:?}"
    )))
}

/// Counts of every outcome over a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub rejected: usize,
    pub accepted: usize,
    pub accepted_malformed: usize,
    pub rejected_valid: usize,
    pub panicked: usize,
    /// GPU runs only: accepted calls whose output disagreed with the reference.
    pub wrong_results: usize,
    /// GPU runs only: driver errors after a launch.
    pub cuda_errors: usize,
}

impl Tally {
    pub fn add(&mut self, o: Outcome) {
        match o {
            Outcome::Rejected => self.rejected += 1,
            Outcome::Accepted => self.accepted += 1,
            Outcome::AcceptedMalformed => self.accepted_malformed += 1,
            Outcome::RejectedValid => self.rejected_valid += 1,
            Outcome::Panicked => self.panicked += 1,
        }
    }

    pub fn total(&self) -> usize {
        self.rejected
            + self.accepted
            + self.accepted_malformed
            + self.rejected_valid
            + self.panicked
    }

    /// No incorrect outcome at all.
    pub fn clean(&self) -> bool {
        self.accepted_malformed == 0
            && self.rejected_valid == 0
            && self.panicked == 0
            && self.wrong_results == 0
            && self.cuda_errors == 0
    }
}

impl fmt::Display for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} cases: {} typed errors on malformed input, {} valid accepted, {} accepted-malformed, \
             {} rejected-valid, {} panics, {} wrong results, {} CUDA errors",
            self.total(),
            self.rejected,
            self.accepted,
            self.accepted_malformed,
            self.rejected_valid,
            self.panicked,
            self.wrong_results,
            self.cuda_errors
        )
    }
}
