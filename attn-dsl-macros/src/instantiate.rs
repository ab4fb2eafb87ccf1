//! `instantiate!(vis Name = path::to::kernel { NAME = value, .. })` and the hidden
//! `__instantiate_impl!` it reaches through the kernel's callback macro.
//!
//! `instantiate!` cannot see the kernel's source (it may live in another crate), so it only
//! rewrites itself into a call of the kernel's callback, `path::to::kernel! { vis Name { .. } }`;
//! the callback adds the module's tokens and calls `__instantiate_impl!`, which runs the
//! compiler (`attn_dsl::frontend` + `attn_dsl::driver::compile`) inside rustc.

use crate::binding_syntax::BindingList;
use crate::definition::to_syn_error;
use crate::specialization_type::emit_specialization;
use attn_dsl::driver::compile;
use attn_dsl::frontend::parse_module;
use attn_dsl::DslError;
use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{braced, Ident, Path, Token, Visibility};

/// One `vis Name = path { bindings }` of `instantiate!`.
struct Instantiation {
    vis: Visibility,
    name: Ident,
    path: Path,
    /// The raw binding tokens, forwarded with their spans.
    bindings: TokenStream,
}

impl Parse for Instantiation {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let vis: Visibility = input.parse()?;
        let name: Ident = input.parse()?;
        input.parse::<Token![=]>()?;
        let path = Path::parse_mod_style(input)?;
        let bindings = if input.peek(syn::token::Brace) {
            let content;
            braced!(content in input);
            let tokens: TokenStream = content.parse()?;
            // Check the syntax here so that errors show even when the path is wrong.
            syn::parse2::<BindingList>(tokens.clone())?;
            tokens
        } else {
            TokenStream::new()
        };
        Ok(Instantiation {
            vis,
            name,
            path,
            bindings,
        })
    }
}

/// `instantiate!`: one or more `;`-separated instantiations, each forwarded to its kernel.
pub fn expand_instantiate(input: TokenStream) -> syn::Result<TokenStream> {
    let list = syn::parse::Parser::parse2(
        Punctuated::<Instantiation, Token![;]>::parse_terminated,
        input,
    )?;
    if list.is_empty() {
        return Err(syn::Error::new(
            proc_macro2::Span::call_site(),
            "instantiate! needs `Name = path::to::kernel { CONST = value, .. }`",
        ));
    }
    Ok(list
        .into_iter()
        .map(
            |Instantiation {
                 vis,
                 name,
                 path,
                 bindings,
             }| quote! { #path! { #vis #name { #bindings } } },
        )
        .collect())
}

/// What the kernel's callback hands to `__instantiate_impl!`:
/// `{ module tokens } kernel_name vis Name { bindings }`.
struct ImplInput {
    module: TokenStream,
    kernel: Ident,
    vis: Visibility,
    name: Ident,
    bindings: BindingList,
}

impl Parse for ImplInput {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let module;
        braced!(module in input);
        let module: TokenStream = module.parse()?;
        let kernel: Ident = input.parse()?;
        let vis: Visibility = input.parse()?;
        let name: Ident = input.parse()?;
        let bindings;
        braced!(bindings in input);
        let bindings: BindingList = bindings.parse()?;
        Ok(ImplInput {
            module,
            kernel,
            vis,
            name,
            bindings,
        })
    }
}

/// `__instantiate_impl!`: parse the module, compile the kernel, emit its type.
pub fn expand_instantiate_impl(input: TokenStream) -> syn::Result<TokenStream> {
    let ImplInput {
        module,
        kernel,
        vis,
        name,
        bindings,
    } = syn::parse2(input)?;
    let at_instantiation = |e: DslError| to_syn_error(point_call_site_at(e, name.span()));
    let module = parse_module(module).map_err(at_instantiation)?;
    let compiled = compile(&module, &kernel.to_string(), &bindings.0).map_err(at_instantiation)?;
    emit_specialization(&vis, &name, &compiled)
}

/// Errors the compiler reports at `Span::call_site()` (a missing constexpr, a codegen
/// failure) would point at the kernel's `#[module]` attribute, where the callback macro was
/// written; they belong to the instantiation, so they are moved to its name.
fn point_call_site_at(e: DslError, instantiation: Span) -> DslError {
    let call_site = Span::call_site();
    let same =
        |a: Span, b: Span| a.start() == b.start() && a.end() == b.end() && a.file() == b.file();
    if same(e.span, call_site) {
        DslError {
            span: instantiation,
            ..e
        }
    } else {
        e
    }
}
