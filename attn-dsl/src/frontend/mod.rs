//! Front end: `syn` syntax of `#[module]` / `#[kernel]` / `#[device]` items → [`crate::ast::Module`].

use crate::ast::{Item, ItemKind, Module};
use crate::specialize::DslError;
use proc_macro2::{Span, TokenStream};

/// Parses a `mod { .. }` of kernels/devices, one annotated fn, or a sequence of them.
pub fn parse_module(tokens: TokenStream) -> Result<Module, DslError> {
    let _ = tokens;
    Err(DslError::new(Span::call_site(), "front end not implemented yet"))
}

/// Same as [`parse_module`], from source text (run-time specialization).
pub fn parse_module_str(src: &str) -> Result<Module, DslError> {
    let tokens: TokenStream =
        src.parse().map_err(|e| DslError::new(Span::call_site(), format!("lex error: {e}")))?;
    parse_module(tokens)
}

/// Builds one item from an attribute's arguments and the function it is attached to.
pub fn parse_kernel_attr(kind: ItemKind, attr: TokenStream, func: syn::ItemFn) -> Result<Item, DslError> {
    let _ = (kind, attr, func);
    Err(DslError::new(Span::call_site(), "front end not implemented yet"))
}
