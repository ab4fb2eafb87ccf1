//! When a bench row ran, by the wall clock: `span=<t0>-<t1>` on its `BENCH` line (Unix
//! seconds), so `bench/results.py ingest --clocks` can take the SM clock and board power
//! sampled meanwhile (`scripts/bench-h200`). Under the board's power limit a row's time
//! is read with the clock it ran at (docs/performance.md, "Under the power limit").

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

/// The wall-clock interval a row's timed calls ran in.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Span {
    start: f64,
    end: f64,
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl Span {
    /// A span that starts now.
    pub fn start() -> Self {
        let t = now();
        Span { start: t, end: t }
    }

    /// Extends the span to now (its first call's start kept).
    pub fn extend(&mut self) {
        self.end = now();
    }

    /// Widens `span` (or starts one) to cover now: for timing loops called several times.
    pub fn cover(span: &mut Option<Span>) {
        span.get_or_insert_with(Span::start).extend();
    }
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "span={:.3}-{:.3}", self.start, self.end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_span_covers_every_call_and_prints_as_bench_lines_carry_it() {
        let mut span = None;
        Span::cover(&mut span);
        std::thread::sleep(std::time::Duration::from_millis(20));
        Span::cover(&mut span);
        let s = span.expect("started");
        assert!(s.end - s.start >= 0.019, "{s:?}");
        let text = s.to_string();
        let (t0, t1) = text["span=".len()..].split_once('-').expect("two ends");
        let (t0, t1): (f64, f64) = (t0.parse().unwrap(), t1.parse().unwrap());
        assert!(t0 > 1.7e9 && t1 >= t0, "{text}");
    }
}
