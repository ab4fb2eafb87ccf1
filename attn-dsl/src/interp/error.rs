//! Errors of the CPU executor. Every error raised while running an op carries the op's
//! DSL line and column, so a CI failure points at the kernel source, not at the executor.

use crate::ir::parser::ParseError;
use crate::ir::Loc;

/// Why a run of the CPU executor failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ExecError {
    #[error("kernel `{kernel}` takes {expected} arguments, got {got}")]
    ArgCount {
        kernel: String,
        expected: usize,
        got: usize,
    },
    #[error("argument {index} (`{name}`): the kernel expects {expected}, got {got}")]
    ArgMismatch {
        index: usize,
        name: String,
        expected: String,
        got: String,
    },
    #[error(
        "argument {index}: Rust type `{type_name}` implements DslType but is not one of \
         bf16, f16, f32, i32, i64, bool, so it has no host buffer form"
    )]
    UnsupportedHostType {
        index: usize,
        type_name: &'static str,
    },
    #[error("grid {grid:?} is invalid: every dimension must be at least 1")]
    EmptyGrid { grid: [u32; 3] },
    #[error(
        "line {line}:{col}: {access} out of bounds in program {program:?}: `{param}`[{offset}] \
         but the buffer holds {len} elements (valid offsets 0..{len})"
    )]
    OutOfBounds {
        line: u32,
        col: u32,
        access: Access,
        param: String,
        offset: i64,
        len: usize,
        program: [u32; 3],
    },
    #[error("line {line}:{col}: store through read-only argument `{param}` (declared `*const`)")]
    StoreToReadOnly { line: u32, col: u32, param: String },
    #[error("line {line}:{col}: integer {op} by zero")]
    DivisionByZero {
        line: u32,
        col: u32,
        op: &'static str,
    },
    #[error("line {line}:{col}: shift amount {amount} out of range 0..{bits}")]
    ShiftOutOfRange {
        line: u32,
        col: u32,
        amount: i64,
        bits: u32,
    },
    #[error("line {line}:{col}: `for` step must be > 0, got {step}")]
    NonPositiveStep { line: u32, col: u32, step: i64 },
    #[error("line {line}:{col}: `while` ran more than {limit} iterations (raise ExecOptions::max_while_iterations if intended)")]
    WhileLimit { line: u32, col: u32, limit: u64 },
    #[error("line {line}:{col}: malformed IR: {msg}")]
    Malformed { line: u32, col: u32, msg: String },
    #[error("cannot run kernel: {0}")]
    IrParse(#[from] ParseError),
}

impl ExecError {
    /// The DSL line the error comes from, when it comes from an op.
    pub fn line(&self) -> Option<u32> {
        match self {
            ExecError::OutOfBounds { line, .. }
            | ExecError::StoreToReadOnly { line, .. }
            | ExecError::DivisionByZero { line, .. }
            | ExecError::ShiftOutOfRange { line, .. }
            | ExecError::NonPositiveStep { line, .. }
            | ExecError::WhileLimit { line, .. }
            | ExecError::Malformed { line, .. } => Some(*line),
            _ => None,
        }
    }
}

/// Which memory access went out of bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Load,
    Store,
}

impl std::fmt::Display for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Access::Load => "load",
            Access::Store => "store",
        })
    }
}

/// A failure inside an op's arithmetic, before the op's location is known; the
/// executor turns it into an [`ExecError`] with [`Fault::at`]. Keeps the numeric
/// helpers free of location plumbing.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Fault {
    DivisionByZero(&'static str),
    ShiftOutOfRange { amount: i64, bits: u32 },
    Malformed(String),
}

impl Fault {
    pub(crate) fn at(self, loc: Loc) -> ExecError {
        let (line, col) = (loc.line, loc.col);
        match self {
            Fault::DivisionByZero(op) => ExecError::DivisionByZero { line, col, op },
            Fault::ShiftOutOfRange { amount, bits } => ExecError::ShiftOutOfRange {
                line,
                col,
                amount,
                bits,
            },
            Fault::Malformed(msg) => ExecError::Malformed { line, col, msg },
        }
    }
}

/// Shorthand for an IR-shape fault (something the typed builder never produces).
pub(crate) fn malformed(msg: impl Into<String>) -> Fault {
    Fault::Malformed(msg.into())
}
