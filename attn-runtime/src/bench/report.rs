//! `attn bench` results: a table with throughput and % of the floor, and JSON for the lead
//! (`device-out/bench.json`). Times are medians of CUDA-event-timed runs.

use super::floor::Floor;
use serde::Serialize;
use std::path::Path;

/// One benchmarked problem.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct BenchResult {
    pub kernel: String,
    /// The specialization key.
    pub key: String,
    pub problem: String,
    pub runs: usize,
    pub median_us: f64,
    pub min_us: f64,
    pub tflops: f64,
    pub gbps: f64,
    pub floor_us: f64,
    /// `memory` or `compute`.
    pub bound: String,
    pub percent_of_floor: f64,
}

impl BenchResult {
    /// Summarizes per-run milliseconds for a problem of `flops` / `bytes`.
    pub fn from_runs(
        kernel: &str,
        key: &str,
        problem: &str,
        flops: f64,
        bytes: f64,
        runs_ms: &[f64],
    ) -> Self {
        let mut sorted: Vec<f64> = runs_ms.iter().copied().filter(|t| t.is_finite()).collect();
        sorted.sort_by(f64::total_cmp);
        let median_ms = median(&sorted);
        let median_s = median_ms * 1e-3;
        let floor = Floor::new(flops, bytes);
        let rate = |amount: f64| {
            if median_s > 0.0 {
                amount / median_s
            } else {
                0.0
            }
        };
        BenchResult {
            kernel: kernel.into(),
            key: key.into(),
            problem: problem.into(),
            runs: sorted.len(),
            median_us: median_ms * 1e3,
            min_us: sorted.first().copied().unwrap_or(0.0) * 1e3,
            tflops: rate(flops) / 1e12,
            gbps: rate(bytes) / 1e9,
            floor_us: floor.seconds() * 1e6,
            bound: floor.bound().into(),
            percent_of_floor: floor.percent_of_floor(median_s),
        }
    }
}

fn median(sorted: &[f64]) -> f64 {
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]),
    }
}

/// A fixed-width table, one row per result.
pub fn render_table(results: &[BenchResult]) -> String {
    let mut s = format!(
        "{:<10} {:<16} {:>5} {:>11} {:>9} {:>9} {:>10} {:>8} {:>8}\n",
        "kernel", "problem", "runs", "median µs", "TFLOP/s", "GB/s", "floor µs", "bound", "% floor"
    );
    for r in results {
        s.push_str(&format!(
            "{:<10} {:<16} {:>5} {:>11.2} {:>9.2} {:>9.1} {:>10.2} {:>8} {:>7.1}%\n",
            r.kernel,
            r.problem,
            r.runs,
            r.median_us,
            r.tflops,
            r.gbps,
            r.floor_us,
            r.bound,
            r.percent_of_floor
        ));
    }
    s
}

/// Writes results as pretty JSON (creating the directory).
pub fn write_json(path: &Path, device: &str, results: &[BenchResult]) -> std::io::Result<()> {
    #[derive(Serialize)]
    struct Doc<'a> {
        device: &'a str,
        floor_rule: &'static str,
        results: &'a [BenchResult],
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let doc = Doc {
        device,
        floor_rule: "max(bytes / 4.3e12, flops / 790e12) (specs/performance.md §3)",
        results,
    };
    let text = serde_json::to_string_pretty(&doc).map_err(std::io::Error::other)?;
    std::fs::write(path, text + "\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_uses_the_median_and_the_floor() {
        // 12 MB moved: memory floor 12e6 / 4.3e12 s = 2.79 µs.
        let r = BenchResult::from_runs(
            "vadd",
            "vadd<BLOCK=256>",
            "n=1e6",
            1e6,
            12e6,
            &[0.010, 0.004, 0.005, f64::NAN],
        );
        assert_eq!(r.runs, 3, "NaN timings are dropped");
        assert!((r.median_us - 5.0).abs() < 1e-9);
        assert!((r.min_us - 4.0).abs() < 1e-9);
        assert!((r.gbps - 2400.0).abs() < 1e-6);
        assert_eq!(r.bound, "memory");
        assert!((r.percent_of_floor - 100.0 * (12e6 / 4.3e12) / 5e-6).abs() < 1e-9);
        let table = render_table(&[r]);
        assert!(
            table
                .lines()
                .nth(1)
                .is_some_and(|l| l.starts_with("vadd") && l.ends_with('%')),
            "{table}"
        );
    }
}
