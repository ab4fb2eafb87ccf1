//! `attn`: emit, compile, run and benchmark attn-dsl kernels (logic in `attn_runtime::cli`).

use attn_runtime::registry::Registry;
use std::process::ExitCode;

fn main() -> ExitCode {
    // The proof kernels and the CPU executor hook are registered here as they land.
    attn_runtime::cli::main_with(Registry::with_builtins(), None)
}
