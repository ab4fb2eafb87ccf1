//! Kernel and device signatures: which generics are constexprs of which kind, and which
//! inputs are runtime parameters of which type. Shared by the front end (which checks them
//! once, without constexpr values) and the specializer (which binds them).

use crate::ir::ScalarType;
use crate::specialize::DslError;
use proc_macro2::Span;
use quote::ToTokens;
use std::fmt;
use syn::spanned::Spanned;

/// Integer types a constexpr may be declared with (their ranges are checked at binding).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntType {
    I32,
    I64,
    U32,
    Usize,
}

impl IntType {
    /// The inclusive range a bound value must lie in.
    pub fn range(self) -> (i64, i64) {
        match self {
            IntType::I32 => (i32::MIN as i64, i32::MAX as i64),
            IntType::I64 => (i64::MIN, i64::MAX),
            IntType::U32 => (0, u32::MAX as i64),
            IntType::Usize => (0, i64::MAX),
        }
    }
}

/// What a constexpr binds to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConstKind {
    /// A generic type parameter `T`: bound to a dtype.
    Dtype,
    Int(IntType),
    Bool,
    /// `f32` or `f64`: evaluated in f64 at specialization.
    Float,
    /// `const MASK: Device`: a `#[device]` function of the module, by name.
    Device,
}

impl fmt::Display for ConstKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ConstKind::Dtype => "dtype",
            ConstKind::Int(IntType::I32) => "i32",
            ConstKind::Int(IntType::I64) => "i64",
            ConstKind::Int(IntType::U32) => "u32",
            ConstKind::Int(IntType::Usize) => "usize",
            ConstKind::Bool => "bool",
            ConstKind::Float => "float",
            ConstKind::Device => "Device",
        })
    }
}

/// One constexpr declaration (a generic parameter of the function).
#[derive(Clone)]
pub struct ConstDecl {
    pub name: String,
    pub kind: ConstKind,
    pub span: Span,
    /// `const N: i32 = 4`: used when no binding is given.
    pub default: Option<syn::Expr>,
}

/// An element type as written: concrete or a dtype parameter of the function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DtypeRef {
    Concrete(ScalarType),
    Param(String),
}

/// The declared type of a runtime kernel parameter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParamTy {
    Ptr { elem: DtypeRef, mutable: bool },
    Scalar(DtypeRef),
}

/// One runtime parameter of a kernel.
#[derive(Clone)]
pub struct ParamDecl {
    pub name: String,
    pub ty: ParamTy,
    /// `mut n: i32`: the body may reassign it.
    pub mutable: bool,
    pub span: Span,
}

const CONST_TYPES: &str =
    "i32, i64, u32, usize, bool, f32, f64, Device (or a type parameter for a dtype)";
const SCALAR_PARAM_TYPES: &str = "i32, i64, f32, bool or a dtype parameter";
const POINTEE_TYPES: &str = "bf16, f16, f32, i32, i64, bool or a dtype parameter";

/// The constexprs of `func`, in declaration order.
pub fn constexpr_decls(func: &syn::ItemFn) -> Result<Vec<ConstDecl>, DslError> {
    let generics = &func.sig.generics;
    if let Some(w) = &generics.where_clause {
        return Err(DslError::new(
            w.span(),
            "`where` clauses are not supported on DSL functions",
        ));
    }
    generics.params.iter().map(const_decl).collect()
}

fn const_decl(p: &syn::GenericParam) -> Result<ConstDecl, DslError> {
    match p {
        syn::GenericParam::Type(t) => {
            if let Some(d) = &t.default {
                return Err(DslError::new(
                    d.span(),
                    "dtype parameters cannot have defaults",
                ));
            }
            Ok(ConstDecl {
                name: t.ident.to_string(),
                kind: ConstKind::Dtype,
                span: t.ident.span(),
                default: None,
            })
        }
        syn::GenericParam::Const(c) => {
            let kind = const_kind(&c.ty).ok_or_else(|| {
                DslError::new(
                    c.ty.span(),
                    format!(
                        "constexpr `{}` has unsupported type `{}`; allowed: {CONST_TYPES}",
                        c.ident,
                        type_text(&c.ty)
                    ),
                )
            })?;
            Ok(ConstDecl {
                name: c.ident.to_string(),
                kind,
                span: c.ident.span(),
                default: c.default.clone(),
            })
        }
        syn::GenericParam::Lifetime(l) => Err(DslError::new(
            l.span(),
            "lifetime parameters are not supported on DSL functions",
        )),
    }
}

fn const_kind(ty: &syn::Type) -> Option<ConstKind> {
    Some(match single_ident(ty)?.as_str() {
        "i32" => ConstKind::Int(IntType::I32),
        "i64" => ConstKind::Int(IntType::I64),
        "u32" => ConstKind::Int(IntType::U32),
        "usize" => ConstKind::Int(IntType::Usize),
        "bool" => ConstKind::Bool,
        "f32" | "f64" => ConstKind::Float,
        "Device" => ConstKind::Device,
        _ => return None,
    })
}

/// `Foo` for a one-segment path type without generics.
fn single_ident(ty: &syn::Type) -> Option<String> {
    match ty {
        syn::Type::Path(p) if p.qself.is_none() && p.path.segments.len() == 1 => {
            let seg = &p.path.segments[0];
            seg.arguments.is_none().then(|| seg.ident.to_string())
        }
        syn::Type::Group(g) => single_ident(&g.elem),
        syn::Type::Paren(p) => single_ident(&p.elem),
        _ => None,
    }
}

/// The source text of a type, for messages.
pub fn type_text(ty: &syn::Type) -> String {
    ty.to_token_stream().to_string()
}

fn dtype_ref(ty: &syn::Type, decls: &[ConstDecl]) -> Option<DtypeRef> {
    let name = single_ident(ty)?;
    if let Some(s) = ScalarType::from_name(&name) {
        return Some(DtypeRef::Concrete(s));
    }
    decls
        .iter()
        .any(|d| d.kind == ConstKind::Dtype && d.name == name)
        .then_some(DtypeRef::Param(name))
}

/// The runtime parameters of a kernel, in declaration order.
pub fn param_decls(func: &syn::ItemFn, decls: &[ConstDecl]) -> Result<Vec<ParamDecl>, DslError> {
    func.sig
        .inputs
        .iter()
        .map(|arg| param_decl(arg, decls))
        .collect()
}

fn param_decl(arg: &syn::FnArg, decls: &[ConstDecl]) -> Result<ParamDecl, DslError> {
    let pt = match arg {
        syn::FnArg::Typed(pt) => pt,
        syn::FnArg::Receiver(r) => {
            return Err(DslError::new(r.span(), "DSL functions cannot take `self`"))
        }
    };
    let (name, mutable, span) = pattern_name(&pt.pat)?;
    let ty = match &*pt.ty {
        syn::Type::Ptr(p) => {
            let elem = dtype_ref(&p.elem, decls).ok_or_else(|| {
                DslError::new(
                    p.elem.span(),
                    format!(
                        "parameter `{name}` points to unsupported type `{}`; allowed: {POINTEE_TYPES}",
                        type_text(&p.elem)
                    ),
                )
            })?;
            ParamTy::Ptr {
                elem,
                mutable: p.mutability.is_some(),
            }
        }
        other => {
            let elem = dtype_ref(other, decls)
                .filter(|d| !matches!(d, DtypeRef::Concrete(ScalarType::Bf16 | ScalarType::F16)))
                .ok_or_else(|| {
                    DslError::new(
                        other.span(),
                        format!(
                            "parameter `{name}` has unsupported type `{}`; allowed: `*const X`, `*mut X`, {SCALAR_PARAM_TYPES}",
                            type_text(other)
                        ),
                    )
                })?;
            ParamTy::Scalar(elem)
        }
    };
    Ok(ParamDecl {
        name,
        ty,
        mutable,
        span,
    })
}

/// The name of a parameter pattern, which must be a plain identifier (`x` or `mut x`).
pub fn pattern_name(pat: &syn::Pat) -> Result<(String, bool, Span), DslError> {
    match pat {
        syn::Pat::Ident(pi) if pi.by_ref.is_none() && pi.subpat.is_none() => Ok((
            pi.ident.to_string(),
            pi.mutability.is_some(),
            pi.ident.span(),
        )),
        other => Err(DslError::new(
            other.span(),
            format!(
                "parameter pattern `{}` is not supported; use a plain name",
                other.to_token_stream()
            ),
        )),
    }
}

/// The parameter names of a device function (their types are ignored: device functions
/// are inlined and generic over tile shapes).
pub fn device_param_names(func: &syn::ItemFn) -> Result<Vec<(String, bool, Span)>, DslError> {
    func.sig
        .inputs
        .iter()
        .map(|arg| match arg {
            syn::FnArg::Typed(pt) => pattern_name(&pt.pat),
            syn::FnArg::Receiver(r) => {
                Err(DslError::new(r.span(), "DSL functions cannot take `self`"))
            }
        })
        .collect()
}

/// Rejects function qualifiers and signature forms the DSL has no meaning for.
pub fn check_signature(func: &syn::ItemFn, is_kernel: bool) -> Result<(), DslError> {
    let sig = &func.sig;
    let bad = [
        sig.constness.map(|t| (t.span, "const fn")),
        sig.asyncness.map(|t| (t.span, "async fn")),
        sig.unsafety.map(|t| (t.span, "unsafe fn")),
        sig.abi.as_ref().map(|a| (a.span(), "extern fn")),
        sig.variadic
            .as_ref()
            .map(|v| (v.span(), "variadic parameters")),
    ];
    if let Some((span, what)) = bad.into_iter().flatten().next() {
        return Err(DslError::new(
            span,
            format!("`{what}` is not supported in the DSL"),
        ));
    }
    if is_kernel {
        if let syn::ReturnType::Type(_, ty) = &sig.output {
            return Err(DslError::new(
                ty.span(),
                format!("a kernel returns nothing (it writes through `*mut` parameters); remove `-> {}`", type_text(ty)),
            ));
        }
    }
    Ok(())
}
