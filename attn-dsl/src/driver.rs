//! The compile pipeline in one call, shared by `instantiate!` (inside rustc), run-time
//! templates and the CLI: specialize → passes → verify → print IR → emit CUDA.

use crate::ast::Module;
use crate::codegen::{emit_cuda, CudaKernel};
use crate::ir::{printer, verify};
use crate::passes;
use crate::specialize::{specialize, Binding, DslError, Specialized};
use proc_macro2::Span;

/// A fully compiled specialization.
#[derive(Clone, Debug)]
pub struct Compiled {
    pub specialized: Specialized,
    /// The optimized IR in text form.
    pub ir_text: String,
    pub cuda: CudaKernel,
}

/// Specializes, optimizes and emits `kernel`. Errors carry the span to report at.
pub fn compile(module: &Module, kernel: &str, bindings: &[Binding]) -> Result<Compiled, DslError> {
    emit(optimize(module, kernel, bindings)?)
}

/// Specializes and optimizes `kernel`, stopping at the verified IR (for callers that add
/// facts to it, such as promised divisibility, before the one emission).
pub fn optimize(
    module: &Module,
    kernel: &str,
    bindings: &[Binding],
) -> Result<Specialized, DslError> {
    let mut specialized = specialize(module, kernel, bindings)?;
    passes::optimize(&mut specialized.ir);
    verify::verify(&specialized.ir)
        .map_err(|e| DslError::new(Span::call_site(), format!("internal compiler error: {e}")))?;
    Ok(specialized)
}

/// Prints and emits an optimized specialization.
pub fn emit(specialized: Specialized) -> Result<Compiled, DslError> {
    let ir_text = printer::print_function(&specialized.ir);
    let cuda =
        emit_cuda(&specialized.ir).map_err(|e| DslError::new(Span::call_site(), e.to_string()))?;
    Ok(Compiled {
        specialized,
        ir_text,
        cuda,
    })
}
