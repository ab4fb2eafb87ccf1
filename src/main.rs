//! `attn`: emit, compile, run and benchmark attn-dsl kernels (logic in `attn_runtime::cli`).

use attn_runtime::parity::interp_executor;
use attn_runtime::registry::Registry;
use std::process::ExitCode;

fn main() -> ExitCode {
    attn_runtime::cli::main_with(Registry::with_cli_kernels(), Some(interp_executor()))
}
