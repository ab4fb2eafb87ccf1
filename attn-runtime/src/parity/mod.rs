//! GPU parity harness (DESIGN §4): run a kernel on the GPU and on the CPU executor and
//! compare both with an f64 reference — NaN-poisoned outputs, NaN never passes — plus
//! GPU against CPU. Generic over the kernel (a [`CudaKernelHandle`] and optional IR) and a
//! reference closure; the proof kernels plug in as data.

mod compare;
mod cpu_run;
mod device_run;

pub use compare::{compare, CompareError, Comparison, Tolerance};
pub use cpu_run::{interp_executor, run_interp};
pub use device_run::{run_on_gpu, DeviceProblem};

use crate::launch::{CudaKernelHandle, Grid, LaunchError};
use crate::problem::{HostBuffer, HostValue, Problem};
use attn_dsl::ir::Function;
use cudarc::driver::CudaStream;
use std::sync::Arc;

/// Runs specialized IR on the host ([`interp_executor`] is the CPU executor):
/// `args` arrive with outputs poisoned; the executor writes the output buffers in place.
pub type CpuExecutor =
    dyn Fn(&Function, Grid, &mut [HostValue]) -> Result<(), String> + Send + Sync;

/// Outputs (in argument order) of running `problem` on the CPU executor.
pub fn run_on_cpu(
    exec: &CpuExecutor,
    ir: &Function,
    problem: &Problem,
) -> Result<Vec<HostBuffer>, String> {
    let mut values = problem.host_values();
    exec(ir, problem.grid, &mut values)?;
    Ok(problem
        .output_indices()
        .into_iter()
        .filter_map(|i| match &values[i] {
            HostValue::Buffer(b) => Some(b.clone()),
            HostValue::Scalar(_) => None,
        })
        .collect())
}

/// A failed parity check.
#[derive(Debug, thiserror::Error)]
pub enum ParityError {
    #[error("{case}: GPU run failed: {source}")]
    Gpu {
        case: String,
        source: Box<LaunchError>,
    },
    #[error("{case}: CPU executor failed: {message}")]
    Cpu { case: String, message: String },
    #[error("{case}: the reference returned {got} outputs; the problem has {want}")]
    OutputCount {
        case: String,
        got: usize,
        want: usize,
    },
    #[error("{case} [{against}]: {source}")]
    Mismatch {
        case: String,
        against: &'static str,
        source: Box<CompareError>,
    },
}

/// Comparisons of one passing case.
#[derive(Clone, Debug)]
pub struct ParityReport {
    pub case: String,
    pub gpu_vs_reference: Vec<Comparison>,
    pub cpu_vs_reference: Vec<Comparison>,
    pub gpu_vs_cpu: Vec<Comparison>,
}

/// Compares each output with its reference.
pub fn compare_outputs(
    case: &str,
    against: &'static str,
    got: &[HostBuffer],
    want: &[Vec<f64>],
    tol: Tolerance,
) -> Result<Vec<Comparison>, ParityError> {
    if got.len() != want.len() {
        return Err(ParityError::OutputCount {
            case: case.into(),
            got: want.len(),
            want: got.len(),
        });
    }
    got.iter()
        .zip(want)
        .enumerate()
        .map(|(i, (g, w))| {
            compare(&format!("output {i}"), &g.to_f64s(), w, tol).map_err(|source| {
                ParityError::Mismatch {
                    case: case.into(),
                    against,
                    source: Box::new(source),
                }
            })
        })
        .collect()
}

/// One parity case: a kernel, its IR for the CPU executor (optional), a problem, the
/// reference closure and the tolerances.
pub struct ParityCase<'a> {
    pub name: String,
    pub kernel: &'a CudaKernelHandle,
    pub ir: Option<&'a Function>,
    pub problem: Problem,
    pub reference: &'a dyn Fn(&Problem) -> Vec<Vec<f64>>,
    /// GPU and CPU against the f64 reference.
    pub tolerance: Tolerance,
    /// GPU against the CPU executor (same rounding points: usually tighter).
    pub gpu_cpu_tolerance: Tolerance,
}

/// Runs `case` on the GPU (and the CPU executor when both it and the IR are given) and
/// checks every output.
pub fn check_parity(
    stream: &Arc<CudaStream>,
    case: &ParityCase<'_>,
    cpu: Option<&CpuExecutor>,
) -> Result<ParityReport, ParityError> {
    let name = case.name.clone();
    let want = (case.reference)(&case.problem);
    let gpu =
        run_on_gpu(stream, case.kernel, &case.problem).map_err(|source| ParityError::Gpu {
            case: name.clone(),
            source: Box::new(source),
        })?;
    let gpu_vs_reference = compare_outputs(&name, "GPU vs reference", &gpu, &want, case.tolerance)?;
    let (mut cpu_vs_reference, mut gpu_vs_cpu) = (Vec::new(), Vec::new());
    if let (Some(exec), Some(ir)) = (cpu, case.ir) {
        let cpu_out = run_on_cpu(exec, ir, &case.problem).map_err(|message| ParityError::Cpu {
            case: name.clone(),
            message,
        })?;
        cpu_vs_reference =
            compare_outputs(&name, "CPU vs reference", &cpu_out, &want, case.tolerance)?;
        let cpu_f64: Vec<Vec<f64>> = cpu_out.iter().map(HostBuffer::to_f64s).collect();
        gpu_vs_cpu = compare_outputs(
            &name,
            "GPU vs CPU executor",
            &gpu,
            &cpu_f64,
            case.gpu_cpu_tolerance,
        )?;
    }
    Ok(ParityReport {
        case: name,
        gpu_vs_reference,
        cpu_vs_reference,
        gpu_vs_cpu,
    })
}
