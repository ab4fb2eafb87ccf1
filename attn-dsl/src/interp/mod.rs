//! CPU executor of specialized IR (DESIGN §3.4): one program instance at a time over the grid.
//!
//! This is how CI, which has no GPU, tests kernel semantics, tile bounds and masks:
//! - tiles are dense row-major buffers (`f64` for floats, rounded to the value's dtype after
//!   every op; `i64` for integers, wrapped to i32 where typed so; `bool`);
//! - numerics follow the GPU: bf16/f16 round to nearest even at load, cast, store and after
//!   arithmetic (computed in `f32`, then narrowed); `dot` multiplies rounded inputs and
//!   accumulates in `f32`;
//! - memory is the host buffers behind the arguments ([`CpuArg`], [`HostBuffer`]); loads and
//!   stores honour masks, and an active out-of-bounds access is an error naming the DSL line.
//!
//! Where the GPU leaves an order or a result open, the executor fixes one (tests rely on it):
//! - grid order: x fastest, then y, then z; a program's stores are visible to later programs;
//! - one `Store` writes its lanes in row-major order: duplicate addresses, last lane wins;
//! - `dot`: per output element, start from `acc` and add one exact product per k step,
//!   k ascending, rounding the running sum to `f32` after each step (a chain of f32 FMAs);
//! - `Reduce` sum: ascending order, running sum rounded to `f32`; float `min`/`max` (binary
//!   and reduce) return the non-NaN operand, like `fminf`/`fmaxf`;
//! - math functions (`exp`, `log`, ...) run in `f64`, rounded to `f32`, then to the dtype;
//! - integer `/` and `%` truncate toward zero (`i32::MIN / -1` wraps), a zero divisor is
//!   an error; shifts outside `0..bits` are an error; `>>` is arithmetic;
//! - `for` counts its induction variable in `i64` (no wrap-around near `i32::MAX`);
//! - a `while` longer than [`ExecOptions::max_while_iterations`] is an error, not a hang;
//! - bf16/f16 scalar parameters are passed as [`ScalarArg::F32`](crate::kernel::ScalarArg)
//!   and rounded.

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
pub use host_buffer::{HostBuffer, INT_POISON};
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
