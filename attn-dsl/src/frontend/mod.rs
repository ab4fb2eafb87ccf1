//! Front end: `syn` syntax of `#[module]` / `#[kernel]` / `#[device]` items → [`crate::ast::Module`].
//!
//! Everything that does not depend on constexpr values is checked here, so the proc macros
//! report it where the kernel is written: attribute grammar, constexpr and parameter
//! types, unsupported Rust syntax in bodies, `return` inside loops, and `require` rules
//! naming undeclared constexprs. Bodies stay syntax trees; [`crate::specialize`](mod@crate::specialize) lowers them.

pub mod attr;
pub mod expr_idents;
pub mod signature;
pub mod syntax_check;

use crate::ast::{Item, ItemKind, Module};
use crate::specialize::DslError;
use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use syn::spanned::Spanned;

/// Converts a `syn` parse error into a diagnostic at the same span.
pub(crate) fn syn_error(e: syn::Error) -> DslError {
    DslError::new(e.span(), e.to_string())
}

/// Parses a `mod { .. }` of kernels/devices, one annotated fn, or a sequence of them.
pub fn parse_module(tokens: TokenStream) -> Result<Module, DslError> {
    let file: syn::File = syn::parse2(tokens).map_err(syn_error)?;
    let items = match file.items.as_slice() {
        [syn::Item::Mod(m)] => match &m.content {
            Some((_, items)) => items.clone(),
            None => {
                return Err(DslError::new(
                    m.span(),
                    "a DSL module needs a body: `mod name { ... }`",
                ))
            }
        },
        items => items.to_vec(),
    };
    let mut module = Module { items: vec![] };
    for item in items {
        let parsed = parse_item(item)?;
        if module.item(&parsed.name()).is_some() {
            return Err(DslError::new(
                parsed.func.sig.ident.span(),
                format!("`{}` is defined twice in the module", parsed.name()),
            ));
        }
        module.items.push(parsed);
    }
    Ok(module)
}

/// Same as [`parse_module`], from source text (run-time specialization).
pub fn parse_module_str(src: &str) -> Result<Module, DslError> {
    let tokens: TokenStream = src
        .parse()
        .map_err(|e| DslError::new(Span::call_site(), format!("lex error: {e}")))?;
    parse_module(tokens)
}

/// One module item: a fn carrying exactly one `#[kernel]` or `#[device]` attribute.
fn parse_item(item: syn::Item) -> Result<Item, DslError> {
    let mut func = match item {
        syn::Item::Fn(f) => f,
        other => {
            return Err(DslError::new(
                other.span(),
                "only `#[kernel]` and `#[device]` functions are allowed in a DSL module",
            ))
        }
    };
    let mut found: Option<(ItemKind, TokenStream)> = None;
    let mut kept = vec![];
    for a in std::mem::take(&mut func.attrs) {
        match dsl_attr_kind(&a) {
            Some(kind) if found.is_some() => {
                return Err(DslError::new(
                    a.span(),
                    format!(
                        "a function takes one DSL attribute; `#[{}]` is extra",
                        kind_name(kind)
                    ),
                ))
            }
            Some(kind) => found = Some((kind, attr_args(&a)?)),
            None if a.path().is_ident("doc") => kept.push(a),
            None => {
                return Err(DslError::new(
                    a.span(),
                    format!(
                        "unsupported attribute `#[{}]` on a DSL function",
                        a.path().to_token_stream()
                    ),
                ))
            }
        }
    }
    func.attrs = kept;
    let (kind, args) = found.ok_or_else(|| {
        DslError::new(
            func.sig.ident.span(),
            format!("`{}` needs `#[kernel]` or `#[device]`", func.sig.ident),
        )
    })?;
    parse_kernel_attr(kind, args, func)
}

fn kind_name(kind: ItemKind) -> &'static str {
    match kind {
        ItemKind::Kernel => "kernel",
        ItemKind::Device => "device",
    }
}

/// `#[kernel]`, `#[attn_dsl::kernel(..)]`, `#[device]` → the kind; other attributes → None.
fn dsl_attr_kind(a: &syn::Attribute) -> Option<ItemKind> {
    match a.path().segments.last()?.ident.to_string().as_str() {
        "kernel" => Some(ItemKind::Kernel),
        "device" => Some(ItemKind::Device),
        _ => None,
    }
}

fn attr_args(a: &syn::Attribute) -> Result<TokenStream, DslError> {
    match &a.meta {
        syn::Meta::Path(_) => Ok(TokenStream::new()),
        syn::Meta::List(l) => Ok(l.tokens.clone()),
        syn::Meta::NameValue(nv) => Err(DslError::new(
            nv.span(),
            "DSL attributes take a list: `#[kernel(num_warps = 4)]`",
        )),
    }
}

/// Builds one item from an attribute's arguments and the function it is attached to.
pub fn parse_kernel_attr(
    kind: ItemKind,
    attr: TokenStream,
    func: syn::ItemFn,
) -> Result<Item, DslError> {
    let parsed = attr::parse_attr(kind, attr)?;
    let is_kernel = kind == ItemKind::Kernel;
    signature::check_signature(&func, is_kernel)?;
    let decls = signature::constexpr_decls(&func)?;
    if is_kernel {
        signature::param_decls(&func, &decls)?;
    } else {
        signature::device_param_names(&func)?;
    }
    syntax_check::check_body(&func.block, is_kernel)?;
    for r in &parsed.requires {
        check_constexpr_names(&r.cond, "require", &decls)?;
    }
    if let crate::ast::LaunchCount::Constexpr { expr, .. } = &parsed.num_warps {
        check_constexpr_names(expr, "num_warps", &decls)?;
    }
    if let crate::ast::LaunchCount::Constexpr { expr, .. } = &parsed.num_stages {
        check_constexpr_names(expr, "num_stages", &decls)?;
    }
    let flags = [
        ("tma", Some(&parsed.tma)),
        ("warp_specialize", parsed.warp_specialize.as_ref()),
        ("pingpong", parsed.pingpong.as_ref()),
    ];
    for (what, flag) in flags {
        if let Some(crate::ast::ConstFlag::Constexpr { expr, .. }) = flag {
            check_constexpr_names(expr, what, &decls)?;
        }
    }
    Ok(Item {
        kind,
        func,
        requires: parsed.requires,
        num_warps: parsed.num_warps,
        num_stages: parsed.num_stages,
        fast_math: parsed.fast_math,
        tma: parsed.tma,
        warp_specialize: parsed.warp_specialize,
        pingpong: parsed.pingpong,
    })
}

/// A `require` rule or a `num_warps` expression may only mention the kernel's own
/// constexprs (`what` names the attribute argument in the error).
fn check_constexpr_names(
    e: &syn::Expr,
    what: &str,
    decls: &[signature::ConstDecl],
) -> Result<(), DslError> {
    for id in expr_idents::value_idents(e) {
        let name = id.to_string();
        if !decls.iter().any(|d| d.name == name) {
            let declared: Vec<&str> = decls.iter().map(|d| d.name.as_str()).collect();
            return Err(DslError::new(
                id.span(),
                format!(
                    "unknown constexpr `{name}` in `{what}`; declared constexprs: {}",
                    if declared.is_empty() {
                        "none".to_string()
                    } else {
                        declared.join(", ")
                    }
                ),
            ));
        }
    }
    Ok(())
}
