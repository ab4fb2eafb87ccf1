//! Launch errors: everything checked on the host before a kernel touches memory.

use crate::jit::JitError;
use cudarc::driver::DriverError;

/// Why a kernel was not launched.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("the CUDA driver (libcuda.so) could not be loaded: a GPU path needs an NVIDIA driver")]
    NoDriver,
    #[error("no CUDA device {ordinal}: this machine has {count} device(s)")]
    NoDevice { ordinal: usize, count: i32 },
    #[error("CUDA driver call failed while {during}: {source}")]
    Driver {
        during: &'static str,
        source: DriverError,
    },
    #[error(transparent)]
    Jit(#[from] JitError),
    #[error("kernel `{kernel}`: grid dimension {axis} is {value}; it must be in 1..={max}")]
    GridDim {
        kernel: String,
        axis: char,
        value: u32,
        max: u32,
    },
    #[error("kernel `{kernel}`: {threads} threads per block; this kernel allows at most {max} (device limit 1024, fewer when registers run out)")]
    BlockThreads {
        kernel: String,
        threads: u32,
        max: u32,
    },
    #[error(
        "kernel `{kernel}`: needs {dynamic} B dynamic + {static_bytes} B static shared memory; the device allows {max} B per block"
    )]
    SharedMemory {
        kernel: String,
        dynamic: u32,
        static_bytes: u32,
        max: u32,
    },
    #[error("kernel `{kernel}` takes {expected} arguments ({names}); got {got}")]
    ArgCount {
        kernel: String,
        expected: usize,
        got: usize,
        names: String,
    },
    #[error(
        "kernel `{kernel}` argument {index} (`{name}`) is {value}; this specialization was \
         compiled for multiples of {divisor} (respecialize for this value)"
    )]
    Divisibility {
        kernel: String,
        index: usize,
        name: String,
        value: i64,
        divisor: u64,
    },
    #[error(
        "kernel `{kernel}` argument {index} (`{name}`) is {value}; this specialization was \
         compiled for values whose 16-fold fits in an i32 (respecialize for this value)"
    )]
    OutsideI32 {
        kernel: String,
        index: usize,
        name: String,
        value: i64,
    },
    #[error("kernel `{kernel}` argument {index} (`{name}`): expected {expected}, got {got}")]
    ArgKind {
        kernel: String,
        index: usize,
        name: String,
        expected: String,
        got: String,
    },
    #[error(
        "kernel `{kernel}` argument {index} (`{name}`): device address {addr:#x} is not {align}-byte aligned; \
         kernels assume 16-byte aligned buffers (start views at multiples of 16 bytes)"
    )]
    Misaligned {
        kernel: String,
        index: usize,
        name: String,
        addr: u64,
        align: u64,
    },
    /// A TMA tensor map the launcher encodes from the arguments could not be built.
    #[error("kernel `{kernel}` tensor map `{param}`: {why}")]
    TensorMap {
        kernel: String,
        param: String,
        why: String,
    },
}

impl LaunchError {
    pub(crate) fn driver(during: &'static str) -> impl FnOnce(DriverError) -> LaunchError {
        move |source| LaunchError::Driver { during, source }
    }
}

/// Event timing around launches ([`crate::timing::time_runs`]) reports driver errors this way.
impl From<DriverError> for LaunchError {
    fn from(source: DriverError) -> Self {
        LaunchError::Driver {
            during: "timing with CUDA events",
            source,
        }
    }
}
