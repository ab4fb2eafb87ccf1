//! The CPU executor (`attn_dsl::interp`) as the parity harness's [`CpuExecutor`]: host
//! values become executor arguments, `*mut` parameters borrowed mutably so the executor
//! writes the (poisoned) output buffers in place.

use super::CpuExecutor;
use crate::launch::Grid;
use crate::problem::HostValue;
use attn_dsl::interp::{self, CpuArg};
use attn_dsl::ir::{Function, ParamKind};
use std::sync::Arc;

/// Runs `ir` on the CPU executor over `grid` with `args` (one per parameter, in order).
pub fn run_interp(ir: &Function, grid: Grid, args: &mut [HostValue]) -> Result<(), String> {
    if args.len() != ir.params.len() {
        return Err(format!(
            "{} takes {} arguments, got {}",
            ir.name,
            ir.params.len(),
            args.len()
        ));
    }
    let cpu_args: Vec<CpuArg<'_>> = ir
        .params
        .iter()
        .zip(args.iter_mut())
        .map(|(p, a)| match (a, p.kind) {
            (HostValue::Scalar(s), _) => CpuArg::Scalar(*s),
            (HostValue::Buffer(b), ParamKind::Ptr { mutable: true, .. }) => b.arg_out(),
            (HostValue::Buffer(b), _) => b.arg_in(),
        })
        .collect();
    interp::run(ir, grid.0, cpu_args)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// [`run_interp`] in the shape the CLI and [`super::check_parity`] take.
pub fn interp_executor() -> Arc<CpuExecutor> {
    Arc::new(run_interp)
}
