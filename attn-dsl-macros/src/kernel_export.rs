//! What `#[module]` / `#[kernel]` emit per kernel in place of its (DSL, not Rust) body:
//! a hidden `macro_rules!` callback carrying the module's tokens, a `use` of it under the
//! kernel's name (so `instantiate!(X = path::to::kernel {..})` can call `path::to::kernel!`),
//! and a run-time [`Template`](attn_dsl::template::Template) constant.

use crate::render::render_preserving_lines;
use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::{Ident, Visibility};

/// One kernel of a module, as the caller sees it.
pub struct KernelExport {
    pub name: Ident,
    pub vis: Visibility,
}

/// Emits the callbacks, `use`s and templates of `kernels`, all carrying `module_tokens`
/// (the tokens `attn_dsl::frontend::parse_module` accepted).
pub fn emit_kernel_exports(module_tokens: &TokenStream, kernels: &[KernelExport]) -> TokenStream {
    let rendered = render_preserving_lines(module_tokens);
    let unique = unique_suffix(&rendered.text);
    let source_const = format_ident!("__ATTN_DSL_SOURCE_{}", unique.to_uppercase());
    let source = &rendered.text;
    let line_offset = rendered.line_offset;
    let mut out = quote! {
        #[doc(hidden)]
        #[allow(dead_code)]
        const #source_const: &str = #source;
    };
    for kernel in kernels {
        out.extend(emit_callback(module_tokens, kernel, &unique));
        out.extend(emit_template(kernel, &source_const, line_offset));
    }
    out
}

/// The `macro_rules!` callback and its `use` under the kernel's name.
///
/// `#[macro_export]` puts the callback at the crate root, which is what makes it reachable
/// from other crates; its name is made unique per module text so that two kernels with the
/// same name in different modules do not collide there.
fn emit_callback(module_tokens: &TokenStream, kernel: &KernelExport, unique: &str) -> TokenStream {
    let name = &kernel.name;
    let vis = &kernel.vis;
    let callback = format_ident!("__attn_kernel_{}_{}", name, unique);
    let doc = format!(
        "DSL kernel `{name}`: instantiate it with \
         `attn_dsl_macros::instantiate!(Name = path::to::{name} {{ CONST = value, .. }})`."
    );
    // `$` must reach the `macro_rules!` definition as a plain punct: quote it verbatim.
    quote_spanned! {Span::call_site()=>
        #[doc(hidden)]
        #[macro_export]
        macro_rules! #callback {
            ($($args:tt)*) => {
                ::attn_dsl_macros::__instantiate_impl! { { #module_tokens } #name $($args)* }
            };
        }
        #[doc = #doc]
        #[allow(unused_imports)]
        #vis use #callback as #name;
    }
}

/// `<KERNEL>_TEMPLATE`: the module source for run-time specialization of this kernel.
fn emit_template(kernel: &KernelExport, source_const: &Ident, line_offset: u32) -> TokenStream {
    let name = kernel.name.to_string();
    let vis = &kernel.vis;
    let const_name = format_ident!(
        "{}_TEMPLATE",
        name.to_uppercase(),
        span = kernel.name.span()
    );
    let doc = format!(
        "Run-time template of DSL kernel `{name}`: `{const_name}.specialize(&[(\"CONST\", value), ..])` \
         runs the same compiler as `instantiate!`, with the same error messages."
    );
    quote! {
        #[doc = #doc]
        #[allow(dead_code)]
        #vis const #const_name: ::attn_dsl::template::Template =
            ::attn_dsl::template::Template::new(#source_const, #name, ::core::file!(), #line_offset);
    }
}

/// A short hash of the module's text and position: stable across builds, distinct per module.
fn unique_suffix(text: &str) -> String {
    let at = Span::call_site().start();
    let mut hasher = blake3::Hasher::new();
    hasher.update(text.as_bytes());
    hasher.update(&(at.line as u64).to_le_bytes());
    hasher.update(&(at.column as u64).to_le_bytes());
    hasher.finalize().to_hex()[..16].to_string()
}
