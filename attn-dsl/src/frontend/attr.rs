//! Arguments of `#[kernel(...)]` / `#[device]`: the launch width, the pipeline depth and the
//! constexpr rules.
//!
//! Grammar: `#[kernel]`, `#[kernel(num_warps = 8, num_stages = 3, fast_math = true,
//! tma = TMA, warp_specialize = true, pingpong = false, require(COND, "message"), ...)]`,
//! where `num_warps`, `num_stages` and the schedule flags (`tma`, `warp_specialize`,
//! `pingpong`) are literals (checked here) or constexpr expressions such as `BLOCK_M / 16`
//! (checked by the specializer once the constexprs are bound),
//! `#[device]` (no arguments: device functions are inlined and have no launch width).

use super::syn_error;
use crate::ast::{ConstFlag, ItemKind, LaunchCount, Require};
use crate::specialize::DslError;
use proc_macro2::{Span, TokenStream};
use syn::parse::{Parse, ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::Token;

/// Warps per program when the attribute does not say.
pub const DEFAULT_NUM_WARPS: u32 = 4;
/// Launch widths the back ends support (one to sixteen warps, powers of two).
pub const ALLOWED_NUM_WARPS: [u32; 5] = [1, 2, 4, 8, 16];
/// Pipeline stages when the attribute gives none (one tile computed while the next lands).
pub const DEFAULT_NUM_STAGES: u32 = 2;
/// Stages a copy ring may have (1: no prefetch).
pub const ALLOWED_NUM_STAGES: [u32; 4] = [1, 2, 3, 4];

/// The parsed attribute of one item.
#[derive(Clone)]
pub struct KernelAttr {
    pub num_warps: LaunchCount,
    pub num_stages: LaunchCount,
    pub requires: Vec<Require>,
    pub fast_math: bool,
    pub tma: ConstFlag,
    /// `warp_specialize = B`; `None`: the compiler's choice.
    pub warp_specialize: Option<ConstFlag>,
    /// `pingpong = B`; `None`: the compiler's choice.
    pub pingpong: Option<ConstFlag>,
}

impl Default for KernelAttr {
    /// An attribute that gives nothing: the default launch width and ring depth, no rules,
    /// exact math, `cp.async` copies, the warp schedule the compiler's.
    fn default() -> Self {
        KernelAttr {
            num_warps: LaunchCount::Fixed(DEFAULT_NUM_WARPS),
            num_stages: LaunchCount::Fixed(DEFAULT_NUM_STAGES),
            requires: vec![],
            fast_math: false,
            tma: ConstFlag::Fixed(false),
            warp_specialize: None,
            pingpong: None,
        }
    }
}

/// The boolean schedule arguments of `#[kernel(...)]`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum FlagName {
    Tma,
    WarpSpecialize,
    Pingpong,
}

/// Each flag with its spelling in the attribute.
const FLAGS: [(FlagName, &str); 3] = [
    (FlagName::Tma, "tma"),
    (FlagName::WarpSpecialize, "warp_specialize"),
    (FlagName::Pingpong, "pingpong"),
];

impl FlagName {
    fn parse(key: &str) -> Option<Self> {
        FLAGS.iter().find(|(_, k)| *k == key).map(|(f, _)| *f)
    }

    fn as_str(self) -> &'static str {
        FLAGS
            .iter()
            .find(|(f, _)| *f == self)
            .map_or("", |(_, k)| k)
    }
}

/// One comma-separated argument of `#[kernel(...)]`.
enum AttrArg {
    NumWarps(LaunchCount, Span),
    NumStages(LaunchCount, Span),
    FastMath(bool),
    Flag(FlagName, ConstFlag, Span),
    Require(Box<Require>),
}

impl Parse for AttrArg {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let key: syn::Ident = input.call(syn::ext::IdentExt::parse_any)?;
        if let Some(name) = FlagName::parse(&key.to_string()) {
            input.parse::<Token![=]>()?;
            let expr: syn::Expr = input.parse()?;
            return Ok(AttrArg::Flag(name, const_flag(expr, name)?, key.span()));
        }
        match key.to_string().as_str() {
            "num_warps" => {
                input.parse::<Token![=]>()?;
                let expr: syn::Expr = input.parse()?;
                Ok(AttrArg::NumWarps(
                    launch_count(expr, "num_warps", &ALLOWED_NUM_WARPS)?,
                    key.span(),
                ))
            }
            "num_stages" => {
                input.parse::<Token![=]>()?;
                let expr: syn::Expr = input.parse()?;
                Ok(AttrArg::NumStages(
                    launch_count(expr, "num_stages", &ALLOWED_NUM_STAGES)?,
                    key.span(),
                ))
            }
            "fast_math" => {
                input.parse::<Token![=]>()?;
                let v: syn::LitBool = input.parse().map_err(|e| {
                    syn::Error::new(e.span(), "`fast_math` takes `true` or `false`")
                })?;
                Ok(AttrArg::FastMath(v.value))
            }
            "require" => {
                let content;
                syn::parenthesized!(content in input);
                let cond: syn::Expr = content.parse()?;
                content.parse::<Token![,]>().map_err(|_| {
                    syn::Error::new(
                        cond.span(),
                        "`require` takes a condition and a message: require(COND, \"message\")",
                    )
                })?;
                let msg: syn::LitStr = content.parse()?;
                if !content.is_empty() {
                    content.parse::<Token![,]>()?;
                }
                if !content.is_empty() {
                    return Err(content.error("`require` takes exactly a condition and a message"));
                }
                Ok(AttrArg::Require(Box::new(Require { cond, message: msg.value(), span: key.span() })))
            }
            other => Err(syn::Error::new(
                key.span(),
                format!("unknown kernel attribute `{other}`; allowed: `num_warps = N`, `num_stages = N` (literals or constexpr expressions), `fast_math = true`, `tma = B`, `warp_specialize = B`, `pingpong = B` (literals or boolean constexpr expressions), `require(COND, \"message\")`"),
            )),
        }
    }
}

/// A boolean literal, or a constexpr expression the specializer evaluates (and refuses at
/// its span when it is not a boolean); any other literal is refused here.
fn const_flag(expr: syn::Expr, name: FlagName) -> syn::Result<ConstFlag> {
    match &expr {
        syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Bool(b),
            ..
        }) => Ok(ConstFlag::Fixed(b.value)),
        syn::Expr::Lit(other) => Err(syn::Error::new(
            other.span(),
            format!(
                "`{}` takes `true`, `false` or a boolean constexpr expression",
                name.as_str()
            ),
        )),
        _ => {
            let span = expr.span();
            Ok(ConstFlag::Constexpr {
                expr: Box::new(expr),
                span,
            })
        }
    }
}

/// A literal is checked now (the error stays where the kernel is written); any other
/// expression waits for the specializer, which knows the constexpr values.
fn launch_count(expr: syn::Expr, what: &str, allowed: &[u32]) -> syn::Result<LaunchCount> {
    let syn::Expr::Lit(syn::ExprLit {
        lit: syn::Lit::Int(lit),
        ..
    }) = &expr
    else {
        let span = expr.span();
        return Ok(LaunchCount::Constexpr {
            expr: Box::new(expr),
            span,
        });
    };
    let n: u32 = lit.base10_parse()?;
    if !allowed.contains(&n) {
        return Err(syn::Error::new(
            lit.span(),
            format!(
                "{what} = {n} is not supported; allowed: {}",
                allowed_list(allowed)
            ),
        ));
    }
    Ok(LaunchCount::Fixed(n))
}

/// Parses the attribute arguments of an item of `kind`.
pub fn parse_attr(kind: ItemKind, attr: TokenStream) -> Result<KernelAttr, DslError> {
    let args = Punctuated::<AttrArg, Token![,]>::parse_terminated
        .parse2(attr)
        .map_err(syn_error)?;
    if kind == ItemKind::Device {
        // A device function has no launch width; it may carry `require` rules over its own
        // constexprs (a variant's `NUM_SINKS`), checked when a kernel binds it.
        let mut requires = vec![];
        for arg in args {
            match arg {
                AttrArg::NumWarps(_, span) => {
                    return Err(DslError::new(
                        span,
                        "#[device] takes only `require(COND, \"message\")` rules (no num_warps: device functions are inlined)",
                    ))
                }
                AttrArg::NumStages(_, span) => {
                    return Err(DslError::new(
                        span,
                        "#[device] takes only `require(COND, \"message\")` rules (num_stages is a kernel attribute)",
                    ))
                }
                AttrArg::FastMath(_) => {
                    return Err(DslError::new(
                        proc_macro2::Span::call_site(),
                        "#[device] takes only `require(COND, \"message\")` rules (fast_math is a kernel attribute)",
                    ))
                }
                AttrArg::Flag(name, _, span) => {
                    return Err(DslError::new(
                        span,
                        format!(
                            "#[device] takes only `require(COND, \"message\")` rules ({} is a kernel attribute)",
                            name.as_str()
                        ),
                    ))
                }
                AttrArg::Require(r) => requires.push(*r),
            }
        }
        return Ok(KernelAttr {
            requires,
            ..KernelAttr::default()
        });
    }
    let mut out = KernelAttr::default();
    let (mut warps_seen, mut stages_seen) = (false, false);
    let mut flags_seen = vec![];
    for arg in args {
        match arg {
            AttrArg::NumWarps(n, span) => {
                if warps_seen {
                    return Err(DslError::new(span, "`num_warps` is given twice"));
                }
                warps_seen = true;
                out.num_warps = n;
            }
            AttrArg::NumStages(n, span) => {
                if stages_seen {
                    return Err(DslError::new(span, "`num_stages` is given twice"));
                }
                stages_seen = true;
                out.num_stages = n;
            }
            AttrArg::FastMath(v) => out.fast_math = v,
            AttrArg::Flag(name, flag, span) => {
                if flags_seen.contains(&name) {
                    return Err(DslError::new(
                        span,
                        format!("`{}` is given twice", name.as_str()),
                    ));
                }
                flags_seen.push(name);
                match name {
                    FlagName::Tma => out.tma = flag,
                    FlagName::WarpSpecialize => out.warp_specialize = Some(flag),
                    FlagName::Pingpong => out.pingpong = Some(flag),
                }
            }
            AttrArg::Require(r) => out.requires.push(*r),
        }
    }
    Ok(out)
}

/// `1, 2, 4, 8, 16`: the values an attribute takes, for its error message.
pub(crate) fn allowed_list(allowed: &[u32]) -> String {
    allowed
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
