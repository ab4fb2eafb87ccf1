//! Progress for the CLI's long work (NVRTC compiles, benches, CPU-executor runs, probing
//! masks and bounds): indicatif spinners and bars on stderr, drawn only when stdout is a
//! terminal — piped output, tests and CI get none (the report on stdout stays clean).

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// Whether progress is drawn at all.
fn wanted() -> bool {
    std::io::stdout().is_terminal()
}

/// A ticking spinner with `msg`; hidden when stdout is not a terminal.
pub fn spinner(msg: impl Into<String>) -> ProgressBar {
    if !wanted() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new_spinner();
    pb.set_message(msg.into());
    pb.enable_steady_tick(Duration::from_millis(100));
    pb
}

/// A bar of `len` steps with a message column; hidden when stdout is not a terminal.
pub fn bar(len: u64) -> ProgressBar {
    if !wanted() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template("{msg:<24} [{bar:30}] {pos}/{len}") {
        pb.set_style(style);
    }
    pb
}
