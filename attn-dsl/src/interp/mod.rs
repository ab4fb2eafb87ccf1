//! CPU executor of specialized IR (DESIGN §3.4): one program instance at a time over the grid.
//!
//! This is how CI, which has no GPU, tests kernel semantics, tile bounds and masks:
//! - tiles are dense row-major buffers (`f64` for floats, rounded to the value's dtype after
//!   every op; `i64` for integers, wrapped to i32 where typed so; `bool`);
//! - numerics follow the GPU: bf16/f16 round to nearest even at load, cast, store and after
//!   arithmetic; `dot` multiplies rounded inputs and accumulates in `f32` (see [`dot`]);
//! - memory is the host buffers behind the arguments ([`CpuArg`], [`HostBuffer`]); loads and
//!   stores honour masks, and an active out-of-bounds access is an error naming the DSL line.

mod cpu_backend;
mod dot;
mod elementwise;
mod error;
mod executor;
mod host_buffer;
mod host_slice;
mod memory;
mod numerics;
mod reduce;
mod shape_ops;
mod tile;

pub use cpu_backend::{Cpu, CpuArg};
pub use error::{Access, ExecError};
pub use executor::{run_with, ExecOptions, ExecStats};
pub use host_buffer::HostBuffer;
pub use host_slice::{HostSlice, HostSliceMut};

use crate::ir::{parser::parse_function, Function};
use crate::kernel::Kernel;

/// Runs `f` over `grid` (x fastest) with default [`ExecOptions`].
pub fn run(f: &Function, grid: [u32; 3], args: Vec<CpuArg<'_>>) -> Result<ExecStats, ExecError> {
    run_with(f, grid, args, &ExecOptions::default())
}

/// Runs a kernel made by `instantiate!` on the CPU: parses its printed IR and runs it with
/// its typed argument struct. Parses on every call (tests, not a hot path).
pub fn launch<K: Kernel>(grid: [u32; 3], args: K::Args<'_, Cpu>) -> Result<ExecStats, ExecError> {
    let f = parse_function(K::INFO.ir_text)?;
    run(&f, grid, K::marshal::<Cpu>(args))
}
