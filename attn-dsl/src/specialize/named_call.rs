//! Calls by name: `F(Contract { a: x, b: y, .. })` binds each parameter of the device
//! function `F` to the field of the same name, so a function plugged into a kernel (a mask,
//! a bounds function) declares only the arguments it uses, in any order.
//!
//! Why: a positional calling convention forces every variant to spell out every argument
//! the kernel offers (20 of them for unified attention's MASK/BOUNDS, most unused), and a
//! new argument breaks every variant. By name, the kernel offers a superset and the callee
//! picks. Because the callee states its parameters' types (`Tile`, `i32`, `bool`, `Ptr`),
//! a confusion (a `bool` flag read as `i32`) is reported at the callee's parameter with the
//! type the contract provides, and the declared return type is checked against the body.

use super::lowerer::{Lowerer, R};
use super::value::Val;
use super::{ConstValue, DslError};
use crate::ir::{Elem, ScalarType, Type};
use proc_macro2::Span;
use quote::ToTokens;
use syn::spanned::Spanned;

/// What a device function parameter or return type of a by-name call says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeclaredTy {
    /// `Tile` (any element type) or `Tile<bool>`, `Tile<i32>`, ...
    Tile(Option<ScalarType>),
    /// `i32`, `bool`, `f32`, `i64`.
    Scalar(ScalarType),
    /// `Ptr` (any element type) or `*const i32`, `*const f32`, ...
    Ptr(Option<ScalarType>),
    /// `(A, B, ..)`.
    Tuple(Vec<DeclaredTy>),
}

impl std::fmt::Display for DeclaredTy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeclaredTy::Tile(None) => f.write_str("Tile"),
            DeclaredTy::Tile(Some(t)) => write!(f, "Tile<{t}>"),
            DeclaredTy::Scalar(t) => write!(f, "{t}"),
            DeclaredTy::Ptr(None) => f.write_str("Ptr"),
            DeclaredTy::Ptr(Some(t)) => write!(f, "*const {t}"),
            DeclaredTy::Tuple(items) => {
                let parts: Vec<String> = items.iter().map(ToString::to_string).collect();
                write!(f, "({})", parts.join(", "))
            }
        }
    }
}

/// Parses a declared DSL type; `None` for anything the by-name convention does not know.
pub fn declared_ty(ty: &syn::Type) -> Option<DeclaredTy> {
    match ty {
        syn::Type::Ptr(p) => Some(DeclaredTy::Ptr(Some(scalar_of(&p.elem)?))),
        syn::Type::Tuple(t) => t
            .elems
            .iter()
            .map(declared_ty)
            .collect::<Option<Vec<_>>>()
            .map(DeclaredTy::Tuple),
        syn::Type::Paren(p) => declared_ty(&p.elem),
        syn::Type::Group(g) => declared_ty(&g.elem),
        syn::Type::Path(p) if p.qself.is_none() && p.path.segments.len() == 1 => {
            let seg = &p.path.segments[0];
            let elem = match &seg.arguments {
                syn::PathArguments::None => None,
                syn::PathArguments::AngleBracketed(a) if a.args.len() == 1 => match &a.args[0] {
                    syn::GenericArgument::Type(t) => Some(scalar_of(t)?),
                    _ => return None,
                },
                _ => return None,
            };
            match (seg.ident.to_string().as_str(), elem) {
                ("Tile", e) => Some(DeclaredTy::Tile(e)),
                ("Ptr", e) => Some(DeclaredTy::Ptr(e)),
                (name, None) => ScalarType::from_name(name).map(DeclaredTy::Scalar),
                _ => None,
            }
        }
        _ => None,
    }
}

fn scalar_of(ty: &syn::Type) -> Option<ScalarType> {
    match ty {
        syn::Type::Path(p) if p.qself.is_none() => {
            ScalarType::from_name(&p.path.get_ident()?.to_string())
        }
        _ => None,
    }
}

/// Whether a value of IR type `ty` (or a constexpr) satisfies `want`.
fn fits(want: &DeclaredTy, got: &Got) -> bool {
    match (want, got) {
        (DeclaredTy::Tile(e), Got::Ir(t)) if !t.shape.is_empty() => {
            matches!(t.elem, Elem::Scalar(s) if e.is_none_or(|e| e == s))
        }
        (DeclaredTy::Scalar(s), Got::Ir(t)) => t.shape.is_empty() && t.elem == Elem::Scalar(*s),
        (DeclaredTy::Scalar(s), Got::Const(c)) => match c {
            ConstValue::Bool(_) => *s == ScalarType::Bool,
            ConstValue::Int(_) => matches!(s, ScalarType::I32 | ScalarType::I64),
            ConstValue::Float(_) => s.is_float(),
            _ => false,
        },
        (DeclaredTy::Ptr(e), Got::Ir(t)) if t.shape.is_empty() => {
            matches!(t.elem, Elem::Ptr(s) if e.is_none_or(|e| e == s))
        }
        (DeclaredTy::Tuple(ws), Got::Tuple(gs)) => {
            ws.len() == gs.len() && ws.iter().zip(gs).all(|(w, g)| fits(w, g))
        }
        _ => false,
    }
}

/// A lowered value's type, as far as the by-name checks look at it.
#[derive(Clone, Debug)]
enum Got {
    Ir(Type),
    Const(ConstValue),
    Tuple(Vec<Got>),
    Nothing,
}

impl std::fmt::Display for Got {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Got::Ir(t) => match (&t.elem, t.shape.is_empty()) {
                (Elem::Scalar(s), true) => write!(f, "{s}"),
                (Elem::Scalar(s), false) => write!(f, "Tile<{s}> {:?}", t.shape),
                (Elem::Ptr(s), true) => write!(f, "*const {s}"),
                (Elem::Ptr(s), false) => write!(f, "a tile of *const {s}"),
            },
            Got::Const(ConstValue::Bool(_)) => f.write_str("bool"),
            Got::Const(ConstValue::Int(_)) => f.write_str("i32"),
            Got::Const(ConstValue::Float(_)) => f.write_str("f32"),
            Got::Const(c) => write!(f, "{c}"),
            Got::Tuple(items) => {
                let parts: Vec<String> = items.iter().map(ToString::to_string).collect();
                write!(f, "({})", parts.join(", "))
            }
            Got::Nothing => f.write_str("no value"),
        }
    }
}

/// `a: Tile<i32> [16, 1], b: bool, ..`: what a contract struct offers, for messages.
fn offered(l: &Lowerer, offers: &[(String, Val)]) -> String {
    let parts: Vec<String> = offers
        .iter()
        .map(|(n, v)| format!("{n}: {}", got(l, v)))
        .collect();
    parts.join(", ")
}

fn got(l: &Lowerer, v: &Val) -> Got {
    match v {
        Val::Runtime(id) => Got::Ir(l.b.ty(*id).clone()),
        Val::Const(c) => Got::Const(c.clone()),
        Val::Tuple(items) => Got::Tuple(items.iter().map(|v| got(l, v)).collect()),
        Val::Unit => Got::Nothing,
    }
}

/// The by-name argument struct of a call, if the call is written that way.
pub fn named_args(
    args: &syn::punctuated::Punctuated<syn::Expr, syn::Token![,]>,
) -> Option<&syn::ExprStruct> {
    match (args.len(), args.first()) {
        (1, Some(syn::Expr::Struct(s))) => Some(s),
        _ => None,
    }
}

impl<'m, 'f> Lowerer<'m, 'f> {
    /// Lowers every field of the contract struct `s` (the caller's side of the contract),
    /// so each is checked once and the callee's parameters can be matched against all.
    pub fn lower_contract_fields(&mut self, s: &syn::ExprStruct) -> R<Vec<(String, Val)>> {
        if let Some(rest) = &s.rest {
            return Err(DslError::new(
                rest.span(),
                "`..rest` is not supported in a by-name call",
            ));
        }
        let mut offers = vec![];
        for f in &s.fields {
            let name = match &f.member {
                syn::Member::Named(i) => i.to_string(),
                syn::Member::Unnamed(i) => {
                    return Err(DslError::new(i.span(), "by-name fields need names"))
                }
            };
            offers.push((name, self.lower_expr(&f.expr)?));
        }
        Ok(offers)
    }

    /// Binds the callee's parameters (`params`: name, mutability, declared type, span) to
    /// the offered values by name, checking each declared type.
    pub fn bind_by_name(
        &mut self,
        target: &str,
        contract: &str,
        params: &[(String, bool, syn::Type, Span)],
        offers: &[(String, Val)],
    ) -> R<Vec<(String, Val, bool)>> {
        let mut bound = vec![];
        for (name, mutable, ty, span) in params {
            let Some((_, v)) = offers.iter().find(|(n, _)| n == name) else {
                return Err(DslError::new(
                    *span,
                    format!(
                        "`{target}` parameter `{name}` is not an argument of `{contract}`; \
                         name only arguments it offers: {}",
                        offered(self, offers)
                    ),
                ));
            };
            let want = declared_ty(ty).ok_or_else(|| {
                DslError::new(
                    ty.span(),
                    format!(
                        "`{target}` parameter `{name}` has type `{}`; a by-name parameter is \
                         `Tile`, `Tile<T>`, a scalar (`i32`, `bool`, `f32`, `i64`), `Ptr` or `*const T`; \
                         `{contract}` gives `{name}: {}`",
                        ty.to_token_stream(),
                        got(self, v)
                    ),
                )
            })?;
            let g = got(self, v);
            if !fits(&want, &g) {
                return Err(DslError::new(
                    ty.span(),
                    format!(
                        "`{target}` declares `{name}: {want}` but `{contract}` gives `{name}: {g}`; \
                         declare `{name}: {}`",
                        suggestion(&g)
                    ),
                ));
            }
            bound.push((name.clone(), v.clone(), *mutable));
        }
        Ok(bound)
    }

    /// Checks a by-name callee's result against its declared return type.
    pub fn check_declared_return(
        &self,
        target: &str,
        output: &syn::ReturnType,
        result: &Val,
        call_span: Span,
    ) -> R<()> {
        let g = got(self, result);
        let (want, span) = match output {
            syn::ReturnType::Default => {
                return match g {
                    Got::Nothing => Ok(()),
                    other => Err(DslError::new(
                        call_span,
                        format!("`{target}` returns `{other}` but declares no return type"),
                    )),
                }
            }
            syn::ReturnType::Type(_, ty) => (declared_ty(ty), ty.span()),
        };
        match want {
            Some(w) if fits(&w, &g) => Ok(()),
            Some(w) => Err(DslError::new(
                span,
                format!("`{target}` declares `-> {w}` but its body returns `{g}`"),
            )),
            None => Err(DslError::new(
                span,
                format!(
                    "`{target}`: unsupported return type in a by-name call; its body returns `{g}`"
                ),
            )),
        }
    }
}

/// The declaration that would accept `g`.
fn suggestion(g: &Got) -> String {
    match g {
        Got::Ir(t) => match (&t.elem, t.shape.is_empty()) {
            (Elem::Scalar(s), true) => s.to_string(),
            (Elem::Scalar(s), false) => format!("Tile<{s}>` (or `Tile"),
            (Elem::Ptr(s), _) => format!("*const {s}` (or `Ptr"),
        },
        other => other.to_string(),
    }
}
