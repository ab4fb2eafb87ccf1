//! `#[module]`, `#[kernel]` and `#[device]` at their definition: run the front end (every
//! check that does not need constexpr values), then emit, instead of the DSL bodies, the
//! per-kernel exports of [`crate::kernel_export`].

use crate::kernel_export::{emit_kernel_exports, KernelExport};
use attn_dsl::ast::{ItemKind, Module};
use attn_dsl::frontend::parse_module;
use attn_dsl::DslError;
use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::{AttrStyle, ItemFn, ItemMod};

/// `#[module] mod name { .. }`: the module's kernels become instantiable, its device
/// functions travel with them.
pub fn expand_module(attr: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    if let Some(extra) = attr.into_iter().next() {
        return Err(syn::Error::new(
            extra.span(),
            "#[module] takes no arguments; put them on each #[kernel(..)]",
        ));
    }
    let module: ItemMod = syn::parse2(item.clone())?;
    if module.content.is_none() {
        return Err(syn::Error::new_spanned(
            &module,
            "#[module] needs the module's body inline (`mod name { .. }`): the macro must see the DSL source",
        ));
    }
    let parsed = parse_module(item.clone()).map_err(to_syn_error)?;
    let exports = emit_kernel_exports(&item, &kernel_exports(&parsed));
    let outer = module.attrs.iter().filter(|a| a.style == AttrStyle::Outer);
    let inner = module.attrs.iter().filter(|a| a.style != AttrStyle::Outer);
    let (vis, name) = (&module.vis, &module.ident);
    Ok(quote! {
        #(#outer)*
        #vis mod #name {
            #(#inner)*
            #exports
        }
    })
}

/// A stand-alone `#[kernel(..)] fn`: a module of one kernel.
pub fn expand_kernel(attr: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let func: ItemFn = syn::parse2(item.clone())?;
    // Give the front end the attribute back: it reads num_warps and the require rules there.
    // `Span::call_site()` is the attribute's own span, so rendered lines stay right.
    let args = if attr.is_empty() {
        quote!()
    } else {
        quote!((#attr))
    };
    let module_tokens = quote::quote_spanned! {Span::call_site()=> #[kernel #args] #func };
    let parsed = parse_module(module_tokens.clone()).map_err(to_syn_error)?;
    let kernels = kernel_exports(&parsed);
    if kernels.iter().all(|k| k.name != func.sig.ident) {
        return Err(syn::Error::new(
            func.sig.ident.span(),
            "internal error: the front end did not return this kernel",
        ));
    }
    Ok(emit_kernel_exports(&module_tokens, &kernels))
}

/// A stand-alone `#[device] fn` has no kernel to travel with: say where it belongs.
pub fn expand_device(item: TokenStream) -> syn::Result<TokenStream> {
    let func: ItemFn = syn::parse2(item)?;
    Err(syn::Error::new(
        func.sig.ident.span(),
        format!(
            "#[device] fn `{}` must be inside a #[module] together with the kernels that call it \
             (device functions are inlined from the module's source)",
            func.sig.ident
        ),
    ))
}

/// The kernels of a parsed module, in source order.
fn kernel_exports(module: &Module) -> Vec<KernelExport> {
    module
        .items
        .iter()
        .filter(|item| item.kind == ItemKind::Kernel)
        .map(|item| KernelExport {
            name: item.func.sig.ident.clone(),
            vis: item.func.vis.clone(),
        })
        .collect()
}

/// A compiler diagnostic as a `syn::Error` at the DSL span it carries.
pub fn to_syn_error(e: DslError) -> syn::Error {
    syn::Error::new(e.span, e.message)
}

/// Compile errors plus, for `#[module]`, the (empty) module so later code still resolves.
pub fn error_with_module_shell(err: syn::Error, item: &TokenStream) -> TokenStream {
    let mut out = err.to_compile_error();
    if let Ok(module) = syn::parse2::<ItemMod>(item.clone()) {
        let (vis, name) = (&module.vis, &module.ident);
        out.extend(quote!(#vis mod #name {}));
    }
    out
}
