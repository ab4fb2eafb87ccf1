//! The source rewrites of `bench/experiments` run from tests: each must still apply to the
//! source the code generator emits now.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::path::Path;

/// Runs `bench/experiments/<script>` under python3 with `input`, `output` and `mode`
/// (its arguments in that order); panics unless it succeeds.
pub fn rewrite(script: &str, input: &Path, output: &Path, mode: &[&str]) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../bench/experiments")
        .join(script);
    let status = std::process::Command::new("python3")
        .arg(path)
        .args([input.as_os_str(), output.as_os_str()])
        .args(mode.iter().map(OsStr::new))
        .status()
        .expect("python3 runs");
    assert!(
        status.success(),
        "{script} {mode:?} failed on {}",
        input.display()
    );
}
