//! Binding constexprs: every binding names a declared constexpr, has a value of the
//! declared kind and range, and every constexpr without a default is bound. Errors point
//! at the binding (the `instantiate!` argument or the run-time binding's span).

use super::const_eval;
use super::{Binding, ConstValue, DslError};
use crate::ast::{Item, ItemKind, Module};
use crate::frontend::signature::{ConstDecl, ConstKind};
use crate::ir::ScalarType;
use proc_macro2::Span;

/// The constexpr values of `item`, in declaration order.
pub(crate) fn bind_constexprs(
    module: &Module,
    item: &Item,
    decls: &[ConstDecl],
    bindings: &[Binding],
) -> Result<Vec<(String, ConstValue)>, DslError> {
    let kernel = item.name();
    let mut extras: Vec<(String, ConstValue)> = vec![];
    for (i, b) in bindings.iter().enumerate() {
        if let (false, Some(d)) = (
            decls.iter().any(|d| d.name == b.name),
            variant_decl(module, &b.name)?,
        ) {
            // A constexpr a device function of the module declares (a variant's own, e.g.
            // `NUM_SINKS`): bound here, it reaches every device call that declares it.
            if bindings[..i].iter().any(|p| p.name == b.name) {
                return Err(DslError::new(
                    b.span,
                    format!("constexpr `{}` is bound twice", b.name),
                ));
            }
            let v =
                check_kind(module, &d, b.value.clone()).map_err(|m| DslError::new(b.span, m))?;
            extras.push((b.name.clone(), v));
            continue;
        }
        if !decls.iter().any(|d| d.name == b.name) {
            return Err(DslError::new(
                b.span,
                format!(
                    "unknown constexpr `{}` for kernel `{kernel}`; declared constexprs: {}",
                    b.name,
                    names(decls)
                ),
            ));
        }
        if bindings[..i].iter().any(|p| p.name == b.name) {
            return Err(DslError::new(
                b.span,
                format!("constexpr `{}` is bound twice", b.name),
            ));
        }
    }
    let mut bound: Vec<(String, ConstValue)> = vec![];
    let mut missing = vec![];
    for d in decls {
        let value = match bindings.iter().find(|b| b.name == d.name) {
            Some(b) => {
                check_kind(module, d, b.value.clone()).map_err(|m| DslError::new(b.span, m))?
            }
            None => match &d.default {
                Some(expr) => {
                    let v = default_value(d, expr, &bound)?;
                    check_kind(module, d, v).map_err(|m| DslError::new(d.span, m))?
                }
                None => {
                    missing.push(d.name.clone());
                    continue;
                }
            },
        };
        bound.push((d.name.clone(), value));
    }
    if !missing.is_empty() {
        return Err(DslError::new(
            Span::call_site(),
            format!(
                "missing constexpr binding(s) for kernel `{kernel}`: {}",
                missing.join(", ")
            ),
        ));
    }
    bound.extend(extras);
    Ok(bound)
}

/// The declaration of constexpr `name` by a `#[device]` function of the module (the first
/// one that declares it), if any; device functions that declare one name must agree on its kind.
fn variant_decl(module: &Module, name: &str) -> Result<Option<ConstDecl>, DslError> {
    for item in module.items.iter().filter(|i| i.kind == ItemKind::Device) {
        let decls = crate::frontend::signature::constexpr_decls(&item.func)?;
        if let Some(d) = decls
            .into_iter()
            .find(|d| d.name == name && d.kind != ConstKind::Device)
        {
            return Ok(Some(d));
        }
    }
    Ok(None)
}

/// The value of a declared default: a `#[device]` function's name for a `Device` constexpr
/// (`const MASK: Device = vllm_mask`), else a constexpr expression over the constexprs
/// declared before it.
fn default_value(
    d: &ConstDecl,
    expr: &syn::Expr,
    bound: &[(String, ConstValue)],
) -> Result<ConstValue, DslError> {
    if let (ConstKind::Device, syn::Expr::Path(p)) = (d.kind, expr) {
        if let Some(name) = p.path.get_ident() {
            return Ok(ConstValue::Device(name.to_string()));
        }
    }
    const_eval::eval_bound(expr, bound)
}

fn names(decls: &[ConstDecl]) -> String {
    if decls.is_empty() {
        return "none".into();
    }
    decls
        .iter()
        .map(|d| d.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Checks `value` against the declaration of `d`, converting where the meaning is
/// unambiguous (an integer for a float constexpr, a dtype name given as an identifier).
pub(crate) fn check_kind(
    module: &Module,
    d: &ConstDecl,
    value: ConstValue,
) -> Result<ConstValue, String> {
    let wrong = |v: &ConstValue| {
        format!(
            "constexpr `{}` is declared `{}` but bound to `{v}` ({}); expected {}",
            d.name,
            d.kind,
            value_kind(v),
            expected(d.kind)
        )
    };
    match (d.kind, value) {
        (ConstKind::Int(t), ConstValue::Int(v)) => {
            let (lo, hi) = t.range();
            if v < lo || v > hi {
                return Err(format!("constexpr `{}` = {v} does not fit in {}", d.name, d.kind));
            }
            Ok(ConstValue::Int(v))
        }
        (ConstKind::Float, ConstValue::Float(v)) => Ok(ConstValue::Float(v)),
        (ConstKind::Float, ConstValue::Int(v)) => Ok(ConstValue::Float(v as f64)),
        (ConstKind::Bool, ConstValue::Bool(v)) => Ok(ConstValue::Bool(v)),
        (ConstKind::Dtype, ConstValue::Dtype(t)) => Ok(ConstValue::Dtype(t)),
        (ConstKind::Dtype, ConstValue::Device(n)) if ScalarType::from_name(&n).is_some() => {
            Ok(ConstValue::Dtype(ScalarType::from_name(&n).unwrap_or(ScalarType::F32)))
        }
        (ConstKind::Device, ConstValue::Device(n)) => match module.item(&n) {
            Some(i) if i.kind == ItemKind::Device => Ok(ConstValue::Device(n)),
            _ => Err(format!(
                "constexpr `{}` is bound to `{n}`, which is not a #[device] function of the module (device functions: {}); \
                 only the kernel's own module is searched: write your function as a `#[device]` fn of a `#[variant]` module \
                 and pass that to the op as a `Variant` (docs/writing-a-variant.md)",
                d.name,
                device_names(module)
            )),
        },
        (_, v) => Err(wrong(&v)),
    }
}

/// The `#[device]` functions of `module`, for messages.
pub(crate) fn device_names(module: &Module) -> String {
    let v: Vec<String> = module
        .items
        .iter()
        .filter(|i| i.kind == ItemKind::Device)
        .map(|i| i.name())
        .collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

fn value_kind(v: &ConstValue) -> &'static str {
    match v {
        ConstValue::Int(_) => "an integer",
        ConstValue::Bool(_) => "a bool",
        ConstValue::Float(_) => "a float",
        ConstValue::Dtype(_) => "a dtype",
        ConstValue::Device(_) => "a device function",
    }
}

fn expected(k: ConstKind) -> &'static str {
    match k {
        ConstKind::Int(_) => "an integer",
        ConstKind::Bool => "`true` or `false`",
        ConstKind::Float => "a number",
        ConstKind::Dtype => "one of bf16, f16, f32, i32, i64, bool",
        ConstKind::Device => "the name of a #[device] function",
    }
}
