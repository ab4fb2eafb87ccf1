//! Turbofish arguments: `arange::<N>()`, `cast::<T>()`, `full::<T>(..)`, `f::<A, B>(..)`.
//! They are types to `syn`, but the DSL reads them as constexpr integers, dtypes, or
//! device-function names, resolved in the caller's scope.

use super::expr::{text, IntRole};
use super::lowerer::{Lowerer, R};
use super::value::Val;
use super::{ConstValue, DslError};
use crate::ir::ScalarType;
use syn::spanned::Spanned;

/// The generic arguments of a path segment (`arange::<N>` → `[N]`).
pub(crate) fn segment_generics(seg: &syn::PathSegment) -> Vec<&syn::GenericArgument> {
    match &seg.arguments {
        syn::PathArguments::AngleBracketed(a) => a.args.iter().collect(),
        _ => vec![],
    }
}

/// `N` in `<N>`: a plain identifier, if the argument is one.
fn arg_ident(g: &syn::GenericArgument) -> Option<String> {
    match g {
        syn::GenericArgument::Type(syn::Type::Path(p)) if p.qself.is_none() => {
            p.path.get_ident().map(|i| i.to_string())
        }
        syn::GenericArgument::Const(syn::Expr::Path(p)) if p.qself.is_none() => {
            p.path.get_ident().map(|i| i.to_string())
        }
        _ => None,
    }
}

impl<'m, 'f> Lowerer<'m, 'f> {
    /// The value of a turbofish argument read as a constexpr number or bool.
    pub fn generic_value(&mut self, g: &syn::GenericArgument, role: IntRole) -> R<ConstValue> {
        let span = g.span();
        let v = match (arg_ident(g), g) {
            (Some(name), _) => self.lookup_value(&name, span)?,
            (None, syn::GenericArgument::Const(e)) => self.lower_expr(e)?,
            _ => {
                return Err(DslError::new(
                    span,
                    format!("`{}` is not a constexpr value", text(g)),
                ))
            }
        };
        match v {
            Val::Const(c) => Ok(c),
            Val::Runtime(_) => Err(DslError::new(span, role.runtime_message(&text(g)))),
            other => Err(DslError::new(
                span,
                format!("`{}` is {}, not a constexpr", text(g), other.kind_name()),
            )),
        }
    }

    /// A turbofish argument that must be a constexpr integer; also returns its text.
    pub fn generic_int(&mut self, g: &syn::GenericArgument, role: IntRole) -> R<(i64, String)> {
        match self.generic_value(g, role)? {
            ConstValue::Int(v) => Ok((v, text(g))),
            other => Err(DslError::new(
                g.span(),
                format!(
                    "`{}` must be an integer constexpr, got {}",
                    text(g),
                    super::value::describe_const(&other)
                ),
            )),
        }
    }

    /// A turbofish argument naming a dtype: `f32`, `bf16`, ... or a dtype constexpr `T`.
    pub fn generic_dtype(&self, g: &syn::GenericArgument) -> R<ScalarType> {
        let name = arg_ident(g);
        if let Some(s) = name.as_deref().and_then(ScalarType::from_name) {
            return Ok(s);
        }
        match name.as_deref().and_then(|n| self.constexpr(n)) {
            Some(ConstValue::Dtype(s)) => Ok(*s),
            _ => Err(DslError::new(
                g.span(),
                format!("unknown dtype `{}`; allowed: bf16, f16, f32, i32, i64, bool or a dtype constexpr", text(g)),
            )),
        }
    }

    /// A turbofish argument naming a device function: a `#[device]` fn or a `Device` constexpr.
    pub fn generic_device(&self, g: &syn::GenericArgument) -> R<String> {
        let name = arg_ident(g).unwrap_or_default();
        if let Some(ConstValue::Device(f)) = self.constexpr(&name) {
            return Ok(f.clone());
        }
        match self.module.item(&name) {
            Some(i) if i.kind == crate::ast::ItemKind::Device => Ok(name),
            _ => Err(DslError::new(
                g.span(),
                format!(
                    "`{}` is not a #[device] function (device functions: {})",
                    text(g),
                    super::binding_check::device_names(self.module)
                ),
            )),
        }
    }
}
