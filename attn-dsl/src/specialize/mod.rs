//! Specialization: lowers a kernel's syntax tree to typed IR with its constexprs bound
//! (Triton's model: constexpr expressions, `if` on constexprs and `static_range` loops are
//! evaluated here, device functions are inlined), after checking the `require` rules.
//!
//! The same function serves `instantiate!` (inside rustc, spans from the macro input) and
//! run-time templates (spans from re-parsed text): the messages are identical.
//! Typing rules: see [`typing`]. Early return: see `sequence`.

mod assigned_vars;
mod binding_check;
mod bindings;
mod branch_join;
mod builtins;
mod const_eval;
mod control;
mod device_call;
mod env;
mod expr;
mod generic_args;
mod launch_count;
mod lowerer;
pub mod named_call;
mod operators;
mod requires;
mod sequence;
pub mod typing;
mod value;

pub use bindings::{Binding, ConstValue};

use crate::ast::{ItemKind, Module};
use crate::frontend::signature::{constexpr_decls, param_decls, DtypeRef, ParamTy};
use crate::ir::{Function, ParamKind, ScalarType};
use proc_macro2::Span;

/// A diagnostic with the span it belongs to (a binding in `instantiate!`, a DSL expression).
#[derive(Clone, Debug)]
pub struct DslError {
    pub span: Span,
    pub message: String,
}

impl DslError {
    pub fn new(span: Span, message: impl Into<String>) -> Self {
        DslError {
            span,
            message: message.into(),
        }
    }
}

/// A kernel specialized on concrete constexpr values.
#[derive(Clone, Debug)]
pub struct Specialized {
    pub kernel: String,
    /// The bindings in declaration order, as used in the specialization key.
    pub bindings: Vec<(String, ConstValue)>,
    pub ir: Function,
}

impl Specialized {
    /// `kernel<NAME=value,...>`: identifies the specialization in reports and caches.
    pub fn key(&self) -> String {
        let b: Vec<String> = self
            .bindings
            .iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect();
        format!("{}<{}>", self.kernel, b.join(","))
    }
}

/// Specializes `kernel` of `module` on `bindings`.
pub fn specialize(
    module: &Module,
    kernel: &str,
    bindings: &[Binding],
) -> Result<Specialized, DslError> {
    let item = find_kernel(module, kernel)?;
    let decls = constexpr_decls(&item.func)?;
    let bound = binding_check::bind_constexprs(module, item, &decls, bindings)?;
    requires::check_requires(item, &bound, bindings)?;
    requires::check_device_requires(module, &bound, bindings)?;
    let num_warps = launch_count::resolve_num_warps(item, &bound, bindings)?;
    let num_stages = launch_count::resolve_num_stages(item, &bound, bindings)?;
    let tma = launch_count::resolve_tma(item, &bound)?;
    let (warp_specialize, pingpong) = launch_count::resolve_schedule(item, &bound)?;
    let mut spec = Specialized {
        kernel: kernel.to_string(),
        bindings: bound.clone(),
        ir: Function::new("", num_warps),
    };
    spec.ir.fast_math = item.fast_math;
    spec.ir.num_stages = num_stages;
    spec.ir.tma_copies = tma;
    spec.ir.warp_specialize = warp_specialize;
    spec.ir.pingpong = pingpong;
    let key = spec.key();
    let hash = blake3::hash(key.as_bytes()).to_hex();
    spec.ir.name = format!("{kernel}_{}", &hash.as_str()[..8]);
    let mut params = vec![];
    for p in param_decls(&item.func, &decls)? {
        let kind = match &p.ty {
            ParamTy::Ptr { elem, mutable } => ParamKind::Ptr {
                elem: resolve_dtype(elem, &bound),
                mutable: *mutable,
            },
            ParamTy::Scalar(elem) => ParamKind::Scalar(resolve_dtype(elem, &bound)),
        };
        let v = spec.ir.add_param(&p.name, kind);
        params.push((p, v));
    }
    lowerer::lower_kernel(module, item, bound, &mut spec.ir, &params)?;
    Ok(spec)
}

fn find_kernel<'m>(module: &'m Module, kernel: &str) -> Result<&'m crate::ast::Item, DslError> {
    let kernels: Vec<String> = module
        .items
        .iter()
        .filter(|i| i.kind == ItemKind::Kernel)
        .map(|i| i.name())
        .collect();
    match module.item(kernel) {
        Some(i) if i.kind == ItemKind::Kernel => Ok(i),
        Some(_) => Err(DslError::new(
            Span::call_site(),
            format!(
                "`{kernel}` is a #[device] function, not a kernel; kernels: {}",
                kernels.join(", ")
            ),
        )),
        None => Err(DslError::new(
            Span::call_site(),
            format!(
                "no kernel `{kernel}` in the module; kernels: {}",
                if kernels.is_empty() {
                    "none".to_string()
                } else {
                    kernels.join(", ")
                }
            ),
        )),
    }
}

/// A declared element type with dtype parameters replaced by their bindings (the front
/// end guarantees every parameter named is a declared dtype constexpr, and binding
/// guarantees it is bound to a dtype).
fn resolve_dtype(d: &DtypeRef, bound: &[(String, ConstValue)]) -> ScalarType {
    match d {
        DtypeRef::Concrete(s) => *s,
        DtypeRef::Param(n) => bound
            .iter()
            .find_map(|(k, v)| match v {
                ConstValue::Dtype(s) if k == n => Some(*s),
                _ => None,
            })
            .unwrap_or(ScalarType::F32),
    }
}
