//! A kernel problem on the host: typed input buffers, output sizes, scalars, grid, and
//! the work it represents (FLOPs, compulsory bytes). The CLI, the parity harness and the
//! benches all describe a run this way, independent of where it executes.

use crate::launch::Grid;
use attn_dsl::ir::ScalarType;
use attn_dsl::kernel::ScalarArg;

/// Re-exported where the test inputs of a problem are drawn.
pub use crate::split_mix64::SplitMix64;
pub use attn_dsl::interp::{HostBuffer, INT_POISON};

/// One kernel argument of a problem, in parameter order.
#[derive(Clone, Debug, PartialEq)]
pub enum ProblemArg {
    Input(HostBuffer),
    /// An output of `len` elements, poisoned before the run.
    Output {
        elem: ScalarType,
        len: usize,
    },
    Scalar(ScalarArg),
}

/// One run of a kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct Problem {
    /// A short description of the shape (`n=100003`), for reports.
    pub label: String,
    pub grid: Grid,
    pub args: Vec<ProblemArg>,
    /// Useful floating-point operations (for TFLOP/s).
    pub flops: f64,
    /// Compulsory HBM bytes (inputs read once, outputs written once; for GB/s).
    pub bytes: f64,
}

impl Problem {
    /// Parameter indices of the outputs, in order.
    pub fn output_indices(&self) -> Vec<usize> {
        self.args
            .iter()
            .enumerate()
            .filter(|(_, a)| matches!(a, ProblemArg::Output { .. }))
            .map(|(i, _)| i)
            .collect()
    }

    /// Bytes of every input plus every output: the compulsory traffic when each is
    /// touched once.
    pub fn io_bytes(&self) -> f64 {
        self.args
            .iter()
            .map(|a| match a {
                ProblemArg::Input(b) => b.num_bytes(),
                ProblemArg::Output { elem, len } => elem.size_bytes() * len,
                ProblemArg::Scalar(_) => 0,
            })
            .sum::<usize>() as f64
    }
}

/// A kernel argument on the host as the CPU executor sees it.
#[derive(Clone, Debug, PartialEq)]
pub enum HostValue {
    Buffer(HostBuffer),
    Scalar(ScalarArg),
}

impl Problem {
    /// Host arguments with outputs poisoned, ready for a CPU executor.
    pub fn host_values(&self) -> Vec<HostValue> {
        self.args
            .iter()
            .map(|a| match a {
                ProblemArg::Input(b) => HostValue::Buffer(b.clone()),
                ProblemArg::Output { elem, len } => {
                    HostValue::Buffer(HostBuffer::poisoned(*elem, *len))
                }
                ProblemArg::Scalar(s) => HostValue::Scalar(*s),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poisoned_outputs_are_nan_or_sentinel() {
        assert!(HostBuffer::poisoned(ScalarType::Bf16, 3)
            .to_f64s()
            .iter()
            .all(|x| x.is_nan()));
        assert!(HostBuffer::poisoned(ScalarType::F32, 3)
            .to_f64s()
            .iter()
            .all(|x| x.is_nan()));
        assert_eq!(
            HostBuffer::poisoned(ScalarType::I32, 2),
            HostBuffer::I32(vec![-559038737; 2])
        );
    }
}
