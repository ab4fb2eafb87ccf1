//! The `attn` command line: `list`, `emit`, `compile`, `run`, `bench` over a [`Registry`]
//! of named kernels. The binary (`src/main.rs` of the root package) only builds the
//! registry (and, once available, the CPU executor hook) and calls [`main_with`].

pub mod check_variant;
mod commands;
pub mod masks;
pub mod progress;
pub mod unified;
pub mod unified_variant;
pub mod variant_file;

use crate::jit::{ArchParseError, JitError};
use crate::launch::LaunchError;
use crate::parity::{CpuExecutor, ParityError};
use crate::registry::{BindingError, Registry, UnknownKernel};
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// attn-dsl: emit, compile, run and benchmark attention kernels.
#[derive(Debug, Parser)]
#[command(name = "attn", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// The demo: every registered kernel checked against its reference (GPU if present, else
    /// the CPU executor), then the unified-attention seed geometry's mask and visited tiles.
    Demo,
    /// Draw a unified-attention mask and the tiles its bounds visit (ASCII + SVG).
    Masks(masks::MasksArgs),
    /// Check a unified-attention variant read from a file: the kernel's contract (as
    /// `#[variant]` does at build time) and bounds ⊇ mask on random geometries, with slack.
    CheckVariant(check_variant::CheckVariantArgs),
    /// List the registered kernels and their default bindings.
    List,
    /// List the code-generation features an A/B can switch: the shipped ones
    /// (`ATTN_CODEGEN_DISABLE`) and the opt-in ones (`ATTN_CODEGEN_ENABLE`).
    Features,
    /// Print the generated CUDA of a kernel specialization.
    Emit {
        kernel: String,
        /// Constexpr/problem bindings, `NAME=VALUE`.
        bindings: Vec<String>,
    },
    /// Compile with NVRTC and print registers, spills, shared memory and timings.
    Compile {
        kernel: String,
        bindings: Vec<String>,
        /// Target arch (default: the GPU's, else sm_90).
        #[arg(long)]
        arch: Option<String>,
    },
    /// Run on the GPU (or the CPU executor without one) and check against the reference.
    /// The `unified_attention*` presets run the public op and take `SEQ=<n>` (sequence
    /// length) and `SEQS=<n>` (sequences) instead of constexprs; with `--variant FILE` they
    /// run a user variant, checked against the dense reference of its own DSL mask.
    Run {
        kernel: String,
        bindings: Vec<String>,
        /// More bindings, `NAME=VALUE` (as `bench --set`).
        #[arg(long = "set", value_name = "NAME=VALUE")]
        set: Vec<String>,
        /// Use the CPU executor even when a GPU is present.
        #[arg(long)]
        cpu: bool,
        #[command(flatten)]
        variant: unified_variant::VariantSelection,
    },
    /// Time kernels with CUDA events; print a table with % of the floor and write JSON.
    Bench {
        /// Kernels to bench (default: all registered).
        kernels: Vec<String>,
        /// Bindings applied to every benched kernel, `NAME=VALUE`.
        #[arg(long = "set", value_name = "NAME=VALUE")]
        bindings: Vec<String>,
        /// Timed runs per kernel (the median is reported).
        #[arg(long, default_value_t = 50)]
        runs: usize,
        #[arg(long, default_value_t = 10)]
        warmup: usize,
        #[arg(long, default_value = "device-out/bench.json")]
        json: PathBuf,
        /// A user variant through the unified-attention op (the presets only; default
        /// preset `unified_attention`).
        #[command(flatten)]
        variant: unified_variant::VariantSelection,
    },
}

/// Everything a command can fail with.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    UnknownKernel(#[from] UnknownKernel),
    #[error(transparent)]
    Binding(#[from] BindingError),
    #[error(transparent)]
    Arch(#[from] ArchParseError),
    #[error("{kernel}: {message}")]
    Build { kernel: String, message: String },
    #[error(transparent)]
    Jit(#[from] JitError),
    #[error(transparent)]
    Launch(#[from] LaunchError),
    /// Boxed: a mismatch report is large and errors travel through every command.
    #[error(transparent)]
    Parity(Box<ParityError>),
    #[error("`attn bench` needs a GPU: {0}")]
    NoGpu(String),
    #[error("{0}")]
    NoCpuPath(String),
    /// `ATTN_CODEGEN_ENABLE` / `ATTN_CODEGEN_DISABLE` name a feature that does not exist.
    #[error("{0} (`attn features` lists them)")]
    Features(String),
    #[error("writing {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl From<ParityError> for CliError {
    fn from(e: ParityError) -> Self {
        CliError::Parity(Box::new(e))
    }
}

/// What the binary needs besides the command line.
pub struct CliContext {
    pub registry: Registry,
    /// The CPU executor (`attn_dsl::interp` adapter); `None` until it is wired in.
    pub cpu: Option<Arc<CpuExecutor>>,
}

/// Parses the process arguments, runs the command, prints errors; exit code 1 on failure.
pub fn main_with(registry: Registry, cpu: Option<Arc<CpuExecutor>>) -> ExitCode {
    let cli = Cli::parse();
    let ctx = CliContext { registry, cpu };
    let mut stdout = std::io::stdout();
    // The feature switches are read deep inside the code generator: a misspelt one is
    // reported here, before any command runs, rather than as a panic there.
    let checked = attn_dsl::features::check_environment().map_err(CliError::Features);
    match checked.and_then(|()| commands::run(&cli.command, &ctx, &mut stdout)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

pub use commands::run;
