//! JIT errors: NVRTC missing, a rejected arch, a compile error mapped to DSL lines.

use super::line_map::{Diagnostic, Severity};
use super::Arch;

/// Why a kernel could not be compiled.
#[derive(Debug, thiserror::Error)]
pub enum JitError {
    #[error(
        "NVRTC could not be loaded (looked for libnvrtc.so / libnvrtc.so.13 on the loader path): install the CUDA 13 \
         NVRTC library or run `eval \"$(scripts/nvrtc-env)\"`"
    )]
    NvrtcUnavailable,
    #[error("kernel source for `{entry}` contains a NUL byte at offset {offset}; CUDA source must be NUL-free text")]
    NulInSource { entry: String, offset: usize },
    #[error("NVRTC {version} cannot target {arch}: supported architectures are {supported}")]
    UnsupportedArch {
        arch: Arch,
        version: String,
        supported: String,
    },
    #[error("NVRTC failed to compile `{entry}` for {arch}:\n{}", render(.diagnostics, .log))]
    Compile {
        entry: String,
        arch: Arch,
        diagnostics: Vec<Diagnostic>,
        log: String,
    },
    #[error("NVRTC call {call} failed: {message}")]
    Nvrtc { call: &'static str, message: String },
}

impl JitError {
    /// The DSL lines the errors of a failed compile point at (empty for other errors).
    pub fn dsl_lines(&self) -> Vec<u32> {
        match self {
            JitError::Compile { diagnostics, .. } => diagnostics
                .iter()
                .filter(|d| d.severity == Severity::Error)
                .filter_map(|d| d.dsl_line)
                .collect(),
            _ => Vec::new(),
        }
    }
}

/// Errors first, one per line; the raw log when NVRTC said something we could not parse.
fn render(diagnostics: &[Diagnostic], log: &str) -> String {
    let errors: Vec<String> = diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .map(|d| format!("  {d}"))
        .collect();
    if errors.is_empty() {
        log.trim_end().to_string()
    } else {
        errors.join("\n")
    }
}
