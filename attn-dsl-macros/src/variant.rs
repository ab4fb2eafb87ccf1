//! `#[variant(mask = f, bounds = g[, full_tile = h][, tile_ranges = N])] mod name { .. }`: a user
//! variant of unified attention, checked when the user's crate compiles — signatures
//! against the kernel's contract (`attn_dsl::contract`), bodies specialized in the
//! contract's probe kernel — with every error at the user's token. Emits
//! `name::VARIANT: attn_dsl::contract::VariantSource`, what the runtime's `Variant` is
//! built from (the module text at its file lines, the names to bind).

use crate::definition::to_syn_error;
use crate::render::render_preserving_lines;
use attn_dsl::contract::{
    check_not_plain, check_variant, probe_variant, unified_attention::CONTRACT, VariantFns,
};
use attn_dsl::frontend::parse_module;
use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::parse::{Parse, ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::{Ident, ItemMod, Token};

/// The attribute's arguments.
struct VariantAttr {
    mask: Ident,
    bounds: Ident,
    full_tile: Option<Ident>,
    tile_ranges: i32,
}

/// `name = value`.
struct Arg {
    name: Ident,
    value: syn::Expr,
}

impl Parse for Arg {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let name = input.parse()?;
        input.parse::<Token![=]>()?;
        Ok(Arg {
            name,
            value: input.parse()?,
        })
    }
}

const USAGE: &str = "expected `#[variant(mask = my_mask, bounds = my_bounds)]` (optionally \
                     `full_tile = my_full_tile`, `tile_ranges = N`)";

fn parse_attr(attr: TokenStream) -> syn::Result<VariantAttr> {
    let args = Punctuated::<Arg, Token![,]>::parse_terminated.parse2(attr)?;
    let (mut mask, mut bounds, mut full_tile, mut tile_ranges) = (None, None, None, 1);
    for a in args {
        match a.name.to_string().as_str() {
            "mask" => mask = Some(ident_value(&a.value)?),
            "bounds" => bounds = Some(ident_value(&a.value)?),
            "full_tile" => full_tile = Some(ident_value(&a.value)?),
            "tile_ranges" => tile_ranges = int_value(&a.value)?,
            other => {
                return Err(syn::Error::new(
                    a.name.span(),
                    format!("unknown #[variant] argument `{other}`; {USAGE}"),
                ))
            }
        }
    }
    let missing = |what| {
        syn::Error::new(
            Span::call_site(),
            format!("#[variant] needs `{what} = ..`; {USAGE}"),
        )
    };
    Ok(VariantAttr {
        mask: mask.ok_or_else(|| missing("mask"))?,
        bounds: bounds.ok_or_else(|| missing("bounds"))?,
        full_tile,
        tile_ranges,
    })
}

fn ident_value(e: &syn::Expr) -> syn::Result<Ident> {
    match e {
        syn::Expr::Path(p) if p.path.get_ident().is_some() => Ok(p.path.segments[0].ident.clone()),
        other => Err(syn::Error::new_spanned(
            other,
            "expected the name of a #[device] fn of this module",
        )),
    }
}

fn int_value(e: &syn::Expr) -> syn::Result<i32> {
    let lit = match e {
        syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Int(i),
            ..
        }) => i,
        other => {
            return Err(syn::Error::new_spanned(
                other,
                "expected an integer in 1..=8",
            ))
        }
    };
    let n: i32 = lit.base10_parse()?;
    if !(1..=8).contains(&n) {
        return Err(syn::Error::new(
            lit.span(),
            format!("tile_ranges = {n}; it must be in 1..=8 (the kernel's TILE_RANGES rule)"),
        ));
    }
    Ok(n)
}

/// Expands `#[variant(..)] mod name { .. }`.
pub fn expand_variant(attr: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let a = parse_attr(attr)?;
    let module: ItemMod = syn::parse2(item.clone())?;
    let Some((_, items)) = &module.content else {
        return Err(syn::Error::new_spanned(
            &module,
            "#[variant] needs the module's body inline (`mod name { .. }`)",
        ));
    };
    let (mask, bounds) = (a.mask.to_string(), a.bounds.to_string());
    let full_tile = a.full_tile.as_ref().map(Ident::to_string);
    check_not_plain(&CONTRACT.mask, items, &mask).map_err(to_syn_error)?;
    check_not_plain(&CONTRACT.bounds, items, &bounds).map_err(to_syn_error)?;
    if let Some(f) = &full_tile {
        check_not_plain(&CONTRACT.full_tile, items, f).map_err(to_syn_error)?;
    }
    let parsed = parse_module(item.clone()).map_err(to_syn_error)?;
    let fns = VariantFns {
        mask: (&mask, a.mask.span()),
        bounds: (&bounds, a.bounds.span()),
        full_tile: full_tile
            .as_deref()
            .zip(a.full_tile.as_ref().map(Ident::span)),
    };
    check_variant(&CONTRACT, items, &parsed, fns).map_err(to_syn_error)?;
    probe_variant(&CONTRACT, &parsed, fns, a.tile_ranges, a.mask.span()).map_err(to_syn_error)?;
    let names = Names {
        mask: &mask,
        bounds: &bounds,
        full_tile: full_tile.as_deref(),
    };
    Ok(emit(&module, &item, &names, a.tile_ranges))
}

/// The functions bound to the roles, as `VARIANT` records them.
struct Names<'a> {
    mask: &'a str,
    bounds: &'a str,
    full_tile: Option<&'a str>,
}

/// The module shell with `VARIANT` in place of the DSL bodies.
fn emit(module: &ItemMod, item: &TokenStream, names: &Names<'_>, tile_ranges: i32) -> TokenStream {
    let (mask, bounds) = (names.mask, names.bounds);
    let full_tile = match names.full_tile {
        Some(f) => quote! { ::core::option::Option::Some(#f) },
        None => quote! { ::core::option::Option::None },
    };
    let rendered = render_preserving_lines(item);
    let source = &rendered.text;
    let line_offset = rendered.line_offset;
    let outer = module
        .attrs
        .iter()
        .filter(|a| a.style == syn::AttrStyle::Outer);
    let (vis, name) = (&module.vis, &module.ident);
    let doc = format!("The `{name}` variant (MASK = `{mask}`, BOUNDS = `{bounds}`), checked at build time; build the runtime's `Variant` from it.");
    quote! {
        #(#outer)*
        #vis mod #name {
            #[doc = #doc]
            pub const VARIANT: ::attn_dsl::contract::VariantSource = ::attn_dsl::contract::VariantSource {
                source: #source,
                file: ::core::file!(),
                line_offset: #line_offset,
                mask: #mask,
                bounds: #bounds,
                full_tile: #full_tile,
                tile_ranges: #tile_ranges,
            };
        }
    }
}
