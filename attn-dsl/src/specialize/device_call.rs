//! Inlining of `#[device]` calls. The callee's constexprs come from the turbofish in
//! declaration order, then from the caller's constexprs of the same name, then from
//! defaults; its parameters bind the lowered arguments (their declared types are ignored,
//! so one device function serves every tile shape).

use super::binding_check::check_kind;
use super::const_eval;
use super::env::Env;
use super::expr::IntRole;
use super::lowerer::{Frame, Lowerer, MAX_INLINE_DEPTH, R};
use super::value::Val;
use super::{ConstValue, DslError};
use crate::frontend::signature::{constexpr_decls, device_param_names, ConstDecl, ConstKind};
use proc_macro2::Span;
use quote::ToTokens;
use syn::punctuated::Punctuated;
use syn::Token;

impl<'m, 'f> Lowerer<'m, 'f> {
    pub fn call_device(
        &mut self,
        target: &str,
        generics: &[&syn::GenericArgument],
        args: &Punctuated<syn::Expr, Token![,]>,
        span: Span,
    ) -> R<Val> {
        let module = self.module;
        let item = module
            .item(target)
            .filter(|i| i.kind == crate::ast::ItemKind::Device)
            .ok_or_else(|| {
                DslError::new(
                    span,
                    format!("no #[device] function `{target}` in the module"),
                )
            })?;
        if self.frames.len() > MAX_INLINE_DEPTH {
            return Err(DslError::new(
                span,
                format!(
                    "device calls nest deeper than {MAX_INLINE_DEPTH} (is `{target}` recursive?)"
                ),
            ));
        }
        let decls = constexpr_decls(&item.func)?;
        if generics.len() > decls.len() {
            return Err(DslError::new(
                span,
                format!(
                    "`{target}` takes {} constexpr(s), got {}",
                    decls.len(),
                    generics.len()
                ),
            ));
        }
        let mut constexprs: Vec<(String, ConstValue)> = vec![];
        for (i, d) in decls.iter().enumerate() {
            let v =
                self.device_constexpr(target, d, generics.get(i).copied(), &constexprs, span)?;
            constexprs.push((d.name.clone(), v));
        }
        if let Some(named) = super::named_call::named_args(args) {
            return self.call_device_by_name(target, item, constexprs, named, span);
        }
        let params = device_param_names(&item.func)?;
        if params.len() != args.len() {
            return Err(DslError::new(
                span,
                format!(
                    "`{target}` takes {} argument(s), got {}",
                    params.len(),
                    args.len()
                ),
            ));
        }
        let mut env = Env::default();
        for ((name, mutable, _), a) in params.iter().zip(args) {
            let v = self.lower_expr(a)?;
            env.define(name, v, *mutable);
        }
        self.frames.push(Frame {
            func_name: target.to_string(),
            is_kernel: false,
            constexprs,
            env,
        });
        let result = self.lower_fn_body(&item.func.block);
        self.frames.pop();
        result
    }

    /// `target(Contract { name: value, .. })`: parameters bound by name (see `named_call`).
    fn call_device_by_name(
        &mut self,
        target: &str,
        item: &'m crate::ast::Item,
        constexprs: Vec<(String, ConstValue)>,
        named: &syn::ExprStruct,
        span: Span,
    ) -> R<Val> {
        let contract = named.path.to_token_stream().to_string();
        let offers = self.lower_contract_fields(named)?;
        let params = typed_params(&item.func)?;
        let bound = self.bind_by_name(target, &contract, &params, &offers)?;
        let mut env = Env::default();
        for (name, v, mutable) in bound {
            env.define(&name, v, mutable);
        }
        self.frames.push(Frame {
            func_name: target.to_string(),
            is_kernel: false,
            constexprs,
            env,
        });
        let result = self.lower_fn_body(&item.func.block);
        self.frames.pop();
        let result = result?;
        self.check_declared_return(target, &item.func.sig.output, &result, span)?;
        Ok(result)
    }

    /// The value of the callee's constexpr `d` at this call.
    fn device_constexpr(
        &mut self,
        target: &str,
        d: &ConstDecl,
        given: Option<&syn::GenericArgument>,
        earlier: &[(String, ConstValue)],
        span: Span,
    ) -> R<ConstValue> {
        let (value, at) = match given {
            Some(g) => {
                let v = match d.kind {
                    ConstKind::Dtype => ConstValue::Dtype(self.generic_dtype(g)?),
                    ConstKind::Device => ConstValue::Device(self.generic_device(g)?),
                    _ => self.generic_value(g, IntRole::Shape)?,
                };
                (v, syn::spanned::Spanned::span(g))
            }
            None => match (self.constexpr(&d.name).cloned(), &d.default) {
                (Some(v), _) => (v, span),
                (None, Some(expr)) => {
                    let lookup = |n: &str| earlier.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
                    (const_eval::eval(expr, &lookup)?, span)
                }
                (None, None) => {
                    return Err(DslError::new(
                        span,
                        format!(
                            "device function `{target}` needs constexpr `{0}`: pass it as `{target}::<..>(..)` or declare `{0}` in `{1}`",
                            d.name,
                            self.frame().func_name
                        ),
                    ))
                }
            },
        };
        check_kind(self.module, d, value)
            .map_err(|m| DslError::new(at, format!("in a call of `{target}`: {m}")))
    }
}

/// Name, mutability, declared type and span of each parameter of a device function.
fn typed_params(func: &syn::ItemFn) -> R<Vec<(String, bool, syn::Type, Span)>> {
    let names = device_param_names(func)?;
    Ok(names
        .into_iter()
        .zip(&func.sig.inputs)
        .filter_map(|((name, mutable, span), arg)| match arg {
            syn::FnArg::Typed(pt) => Some((name, mutable, (*pt.ty).clone(), span)),
            syn::FnArg::Receiver(_) => None,
        })
        .collect())
}
