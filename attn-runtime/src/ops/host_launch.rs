//! Who runs the launches of an op's CPU path. By default the CPU executor runs each launch's
//! specialized tile IR; a [`HostLauncher`] runs it instead on the same host buffers (outputs
//! poisoned, workspace included), so everything around the kernel — validation, plan,
//! buffers, later stages, the comparison with the reference — stays the op's. The tests put
//! the simulator of the launch's emitted CUDA here: the code a GPU runs, checked on the CPU
//! path's whole case grid without a GPU.

use attn_dsl::codegen::CudaKernel;
use attn_dsl::interp::{CpuArg, ExecError, ExecStats};
use attn_dsl::ir::Function;

/// One launch of a CPU run, as a [`HostLauncher`] gets it.
#[derive(Clone, Copy)]
pub struct HostLaunch<'a> {
    /// The specialized kernel the executor would run.
    pub kernel: &'a Function,
    /// The launch's grid.
    pub grid: [u32; 3],
    /// The CUDA the GPU op launches for it (emitted on demand, as the op emits it: its
    /// promises and tensor-core target).
    pub cuda: &'a dyn Fn() -> Result<CudaKernel, String>,
}

impl std::fmt::Debug for HostLaunch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostLaunch")
            .field("kernel", &self.kernel.name)
            .field("grid", &self.grid)
            .finish_non_exhaustive()
    }
}

/// Runs launches of a CPU run in place of the executor.
pub trait HostLauncher: std::fmt::Debug + Send + Sync {
    /// Runs `launch` with `args` (in the kernel's parameter order); outputs are written
    /// through the `Out` arguments.
    fn run(&self, launch: HostLaunch<'_>, args: Vec<CpuArg<'_>>) -> Result<(), String>;
}

/// Why a launch of a CPU run failed, by who ran it.
#[derive(Debug)]
pub enum HostRunError {
    /// The CPU executor's error.
    Exec(ExecError),
    /// The launcher's message.
    Launcher(String),
}

/// Runs `launch` with `args` on `launcher`, or on the CPU executor for `None` (whose
/// statistics are returned; a launcher's run has none).
pub fn run_launch(
    launcher: Option<&dyn HostLauncher>,
    launch: HostLaunch<'_>,
    args: Vec<CpuArg<'_>>,
) -> Result<ExecStats, HostRunError> {
    match launcher {
        None => attn_dsl::interp::run(launch.kernel, launch.grid, args).map_err(HostRunError::Exec),
        Some(l) => l
            .run(launch, args)
            .map(|()| ExecStats::default())
            .map_err(HostRunError::Launcher),
    }
}
