//! Checks a variant's device functions against a [`VariantContract`]: names, declared
//! types, return type and constexprs, each error at the user's token with the expected
//! signature spelled out.

use super::{ContractRole, VariantContract};
use crate::ast::{ItemKind, Module};
use crate::frontend::signature::{constexpr_decls, pattern_name, ConstKind};
use crate::specialize::named_call::{declared_ty, DeclaredTy};
use crate::specialize::DslError;
use proc_macro2::Span;
use quote::ToTokens;
use syn::spanned::Spanned;

/// `#[device] fn <name><..>(<any of> a: T, b: U, ..) -> R`, one argument per line.
pub fn expected_signature(role: &ContractRole, name: &str) -> String {
    let args: Vec<String> = role
        .args
        .iter()
        .map(|a| format!("    {}: {},  // {}", a.name, a.ty, a.doc))
        .collect();
    format!(
        "expected (name only the arguments you use, in any order):\n  #[device] fn {name}(\n{}\n  ) -> {}  // {}",
        args.join("\n"),
        role.returns,
        role.returns_doc
    )
}

/// The functions a variant binds to the contract's roles, each with the span its errors
/// point at when the binding itself is wrong (no such function).
#[derive(Clone, Copy, Debug)]
pub struct VariantFns<'a> {
    pub mask: (&'a str, Span),
    pub bounds: (&'a str, Span),
    /// FULL_TILE is optional.
    pub full_tile: Option<(&'a str, Span)>,
}

/// Checks the variant's MASK, BOUNDS (and FULL_TILE) functions of `items` (the user's
/// module as written, so a plain `fn` is found too) and `module` (the same items, parsed).
pub fn check_variant(
    contract: &VariantContract,
    items: &[syn::Item],
    module: &Module,
    fns: VariantFns<'_>,
) -> Result<(), DslError> {
    check_role(contract, &contract.mask, items, module, fns.mask)?;
    check_role(contract, &contract.bounds, items, module, fns.bounds)?;
    match fns.full_tile {
        Some(f) => check_role(contract, &contract.full_tile, items, module, f),
        None => Ok(()),
    }
}

/// Checks the function bound to one role.
pub fn check_role(
    contract: &VariantContract,
    role: &ContractRole,
    items: &[syn::Item],
    module: &Module,
    (name, at): (&str, Span),
) -> Result<(), DslError> {
    let expected = || expected_signature(role, name);
    check_not_plain(role, items, name)?;
    let item = module
        .item(name)
        .filter(|i| i.kind == ItemKind::Device)
        .ok_or_else(|| {
            DslError::new(
                at,
                format!(
                    "no `#[device] fn {name}` in this module for {} (device functions: {})\n{}",
                    role.role,
                    device_names(module),
                    expected()
                ),
            )
        })?;
    let func = &item.func;
    for arg in &func.sig.inputs {
        check_arg(role, name, arg, &expected)?;
    }
    check_return(role, name, func, &expected)?;
    check_constexprs(contract, name, func)
}

/// A function bound to a role written without `#[device]` (before the module is parsed:
/// the front end would only say it needs an attribute, not which one nor why).
pub fn check_not_plain(
    role: &ContractRole,
    items: &[syn::Item],
    name: &str,
) -> Result<(), DslError> {
    match plain_fn(items, name) {
        Some(plain) => Err(DslError::new(
            plain.sig.ident.span(),
            format!(
                "`{name}` is bound to {} but is a plain `fn`; it must be a `#[device]` function \
                 of this module (the kernel inlines its DSL body)\n{}",
                role.role,
                expected_signature(role, name)
            ),
        )),
        None => Ok(()),
    }
}

fn plain_fn<'a>(items: &'a [syn::Item], name: &str) -> Option<&'a syn::ItemFn> {
    items.iter().find_map(|i| match i {
        syn::Item::Fn(f) if f.sig.ident == name && !has_dsl_attr(f) => Some(f),
        _ => None,
    })
}

fn has_dsl_attr(f: &syn::ItemFn) -> bool {
    f.attrs.iter().any(|a| {
        a.path()
            .segments
            .last()
            .is_some_and(|s| s.ident == "device" || s.ident == "kernel")
    })
}

fn device_names(module: &Module) -> String {
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

fn check_arg(
    role: &ContractRole,
    fname: &str,
    arg: &syn::FnArg,
    expected: &dyn Fn() -> String,
) -> Result<(), DslError> {
    let syn::FnArg::Typed(pt) = arg else {
        return Err(DslError::new(
            arg.span(),
            "DSL functions cannot take `self`",
        ));
    };
    let (name, _, span) = pattern_name(&pt.pat)?;
    let Some(offered) = role.args.iter().find(|a| a.name == name) else {
        return Err(DslError::new(
            span,
            format!(
                "`{fname}` takes `{name}`, which {} does not provide\n{}",
                role.role,
                expected()
            ),
        ));
    };
    let want = parse_ty(offered.ty);
    let got = declared_ty(&pt.ty);
    if !accepts(got.as_ref(), want.as_ref()) {
        return Err(DslError::new(
            pt.ty.span(),
            format!(
                "{} gives `{name}: {}` ({}); `{fname}` declares `{name}: {}`\n{}",
                role.role,
                offered.ty,
                offered.doc,
                shown(&pt.ty),
                expected()
            ),
        ));
    }
    Ok(())
}

/// Whether a parameter declared `got` accepts the contract's `want` (`Tile` accepts any
/// tile, `Ptr` any pointer).
fn accepts(got: Option<&DeclaredTy>, want: Option<&DeclaredTy>) -> bool {
    match (got, want) {
        (Some(DeclaredTy::Tile(None)), Some(DeclaredTy::Tile(_))) => true,
        (Some(DeclaredTy::Ptr(None)), Some(DeclaredTy::Ptr(_))) => true,
        (Some(g), Some(w)) => g == w,
        _ => false,
    }
}

fn parse_ty(text: &str) -> Option<DeclaredTy> {
    syn::parse_str::<syn::Type>(text)
        .ok()
        .and_then(|t| declared_ty(&t))
}

fn check_return(
    role: &ContractRole,
    fname: &str,
    func: &syn::ItemFn,
    expected: &dyn Fn() -> String,
) -> Result<(), DslError> {
    let want = parse_ty(role.returns);
    match &func.sig.output {
        syn::ReturnType::Default => Err(DslError::new(
            func.sig.ident.span(),
            format!(
                "`{fname}` returns nothing; {} returns `{}` ({})\n{}",
                role.role,
                role.returns,
                role.returns_doc,
                expected()
            ),
        )),
        syn::ReturnType::Type(_, ty) if declared_ty(ty) != want => Err(DslError::new(
            ty.span(),
            format!(
                "`{fname}` declares `-> {}`; {} returns `{}` ({})\n{}",
                shown(ty),
                role.role,
                role.returns,
                role.returns_doc,
                expected()
            ),
        )),
        _ => Ok(()),
    }
}

/// A constexpr is the kernel's (same kind) or the variant's own (declared with a default).
fn check_constexprs(
    contract: &VariantContract,
    fname: &str,
    func: &syn::ItemFn,
) -> Result<(), DslError> {
    for d in constexpr_decls(func)? {
        let kind = kind_text(d.kind);
        match contract.constexprs.iter().find(|c| c.name == d.name) {
            Some(c) if c.ty != kind => {
                return Err(DslError::new(
                    d.span,
                    format!(
                        "`{}` is `{}` in `{}`; `{fname}` declares it `{kind}`",
                        d.name, c.ty, contract.kernel
                    ),
                ))
            }
            Some(_) => {}
            None if d.default.is_some()
                && matches!(
                    d.kind,
                    ConstKind::Int(_) | ConstKind::Bool | ConstKind::Float
                ) => {}
            None => {
                let shared: Vec<&str> = contract.constexprs.iter().map(|c| c.name).collect();
                return Err(DslError::new(
                    d.span,
                    format!(
                        "constexpr `{}` of `{fname}` is not a constexpr of `{}`; a variant's own \
                         constexpr needs a default (`const {}: i32 = 4`, bound at run time with \
                         `Variant::with_constexpr`). Constexprs `{}` shares: {}",
                        d.name,
                        contract.kernel,
                        d.name,
                        contract.kernel,
                        shared.join(", ")
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn kind_text(k: ConstKind) -> String {
    k.to_string()
}

/// A declared type as the user would write it (`Tile<i32>`, not `Tile < i32 >`).
fn shown(ty: &syn::Type) -> String {
    declared_ty(ty).map_or_else(|| ty.to_token_stream().to_string(), |d| d.to_string())
}
