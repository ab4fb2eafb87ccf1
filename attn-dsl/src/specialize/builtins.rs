//! The DSL's functions and methods (DESIGN §3.1): `program_id`, `arange`, `full`, `load`,
//! `store`, `dot`, `select`, math, `cdiv`, and `x.unsqueeze/max/min/sum/cast/trans`.
//! Calls that name a `#[device]` function or a `Device` constexpr are inlined instead.

use super::const_eval::{fold_cdiv, fold_math};
use super::expr::{text, IntRole};
use super::generic_args::segment_generics;
use super::lowerer::{Lowerer, R};
use super::operators::Operator;
use super::typing::default_scalar;
use super::value::{describe_const, Val};
use super::{ConstValue, DslError};
use crate::ir::{BinaryOp, Elem, ReduceKind, ScalarType, UnaryOp, ValueId};
use proc_macro2::Span;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::Token;

type Args = Punctuated<syn::Expr, Token![,]>;

/// The DSL's built-in functions, for "unknown function" messages.
pub(crate) const BUILTINS: [&str; 20] = [
    "program_id",
    "num_programs",
    "arange",
    "full",
    "zeros",
    "load",
    "store",
    "dot",
    "select",
    "exp",
    "exp2",
    "log",
    "log2",
    "sqrt",
    "tanh",
    "abs",
    "min",
    "max",
    "trans",
    "cdiv",
];

fn math_op(name: &str) -> Option<UnaryOp> {
    Some(match name {
        "exp" => UnaryOp::Exp,
        "exp2" => UnaryOp::Exp2,
        "log" => UnaryOp::Log,
        "log2" => UnaryOp::Log2,
        "sqrt" => UnaryOp::Sqrt,
        "tanh" => UnaryOp::Tanh,
        "abs" => UnaryOp::Abs,
        _ => return None,
    })
}

fn arity(name: &str, args: &Args, lo: usize, hi: usize, sig: &str, span: Span) -> R<()> {
    let n = args.len();
    if n < lo || n > hi {
        let count = if lo == hi {
            format!("{lo}")
        } else {
            format!("{lo} to {hi}")
        };
        let plural = if hi == 1 { "argument" } else { "arguments" };
        return Err(DslError::new(
            span,
            format!("`{name}` takes {count} {plural} ({sig}), got {n}"),
        ));
    }
    Ok(())
}

impl<'m, 'f> Lowerer<'m, 'f> {
    pub fn lower_call(&mut self, c: &syn::ExprCall) -> R<Val> {
        let span = c.span();
        let seg = match &*c.func {
            syn::Expr::Path(p) if p.qself.is_none() && p.path.segments.len() == 1 => {
                &p.path.segments[0]
            }
            other => {
                return Err(DslError::new(
                    other.span(),
                    format!(
                        "cannot call `{}`: only DSL and device functions",
                        text(other)
                    ),
                ))
            }
        };
        let name = seg.ident.to_string();
        let generics = segment_generics(seg);
        if let Some(ConstValue::Device(target)) = self.constexpr(&name).cloned() {
            return self.call_device(&target, &generics, &c.args, span);
        }
        if self
            .module
            .item(&name)
            .is_some_and(|i| i.kind == crate::ast::ItemKind::Device)
        {
            return self.call_device(&name, &generics, &c.args, span);
        }
        if !generics.is_empty()
            && !matches!(name.as_str(), "arange" | "full" | "zeros" | "static_range")
        {
            return Err(DslError::new(
                seg.arguments.span(),
                format!("`{name}` takes no `::<..>` arguments"),
            ));
        }
        self.lower_builtin(&name, &generics, &c.args, span)
    }

    fn lower_builtin(
        &mut self,
        name: &str,
        generics: &[&syn::GenericArgument],
        args: &Args,
        span: Span,
    ) -> R<Val> {
        let a: Vec<&syn::Expr> = args.iter().collect();
        match name {
            "program_id" | "num_programs" => {
                arity(name, args, 1, 1, "axis", span)?;
                let axis = self.const_int(a[0], IntRole::Axis)?;
                let axis = u8::try_from(axis).ok().filter(|x| *x < 3).ok_or_else(|| {
                    DslError::new(
                        a[0].span(),
                        format!("`{name}` axis must be 0, 1 or 2, got {axis}"),
                    )
                })?;
                self.at(span);
                let r = if name == "program_id" {
                    self.b.program_id(axis)
                } else {
                    self.b.num_programs(axis)
                };
                r.map(Val::Runtime).map_err(Self::ir_err(span))
            }
            "arange" => self.lower_arange(generics, args, span),
            "full" => self.lower_full(generics, args, span),
            "zeros" => {
                arity(name, args, 1, 1, "shape", span)?;
                let dtype = self
                    .optional_dtype(name, generics, span)?
                    .unwrap_or(ScalarType::F32);
                let shape = self.shape_arg(a[0])?;
                self.splat_const(&ConstValue::Int(0), dtype, &shape, span)
            }
            "load" => self.lower_load(args, span),
            "store" => self.lower_store(args, span),
            "dot" => {
                arity(name, args, 2, 3, "a, b, acc", span)?;
                let x = self.lower_runtime_arg(a[0], "dot")?;
                let y = self.lower_runtime_arg(a[1], "dot")?;
                let acc = match a.get(2) {
                    Some(e) => Some(self.lower_runtime_arg(e, "dot")?),
                    None => None,
                };
                self.at(span);
                self.b
                    .dot(x, y, acc)
                    .map(Val::Runtime)
                    .map_err(Self::ir_err(span))
            }
            "select" => self.lower_select(args, span),
            "min" | "max" => {
                arity(name, args, 2, 2, "a, b", span)?;
                let x = self.lower_expr(a[0])?;
                let y = self.lower_expr(a[1])?;
                let op = if name == "min" {
                    BinaryOp::Min
                } else {
                    BinaryOp::Max
                };
                self.apply_binary(Operator::Arith(op), name, x, y, span)
            }
            "cdiv" => {
                arity(name, args, 2, 2, "a, b", span)?;
                let x = self.lower_expr(a[0])?;
                let y = self.lower_expr(a[1])?;
                if let (Val::Const(p), Val::Const(q)) = (&x, &y) {
                    return fold_cdiv(p, q)
                        .map(Val::Const)
                        .map_err(|m| DslError::new(span, m));
                }
                // (a + b - 1) / b, with the usual operand typing.
                let sum =
                    self.apply_binary(Operator::Arith(BinaryOp::Add), "cdiv", x, y.clone(), span)?;
                let one = Val::Const(ConstValue::Int(1));
                let num =
                    self.apply_binary(Operator::Arith(BinaryOp::Sub), "cdiv", sum, one, span)?;
                self.apply_binary(Operator::Arith(BinaryOp::Div), "cdiv", num, y, span)
            }
            "trans" => {
                arity(name, args, 1, 1, "x", span)?;
                let x = self.lower_runtime_arg(a[0], "trans")?;
                self.at(span);
                self.b
                    .trans(x)
                    .map(Val::Runtime)
                    .map_err(Self::ir_err(span))
            }
            "static_range" => Err(DslError::new(
                span,
                "`static_range::<N>()` is only allowed as a `for` iterable",
            )),
            _ => match math_op(name) {
                Some(op) => {
                    arity(name, args, 1, 1, "x", span)?;
                    match self.lower_expr(a[0])? {
                        Val::Const(c) => fold_math(name, &c)
                            .map(Val::Const)
                            .map_err(|m| DslError::new(span, m)),
                        other => {
                            let x = self.runtime(other, name, span)?;
                            self.at(span);
                            self.b
                                .unary(op, x)
                                .map(Val::Runtime)
                                .map_err(Self::ir_err(span))
                        }
                    }
                }
                None => Err(DslError::new(
                    span,
                    format!(
                        "unknown function `{name}`; DSL functions: {}; device functions: {}",
                        BUILTINS.join(", "),
                        super::binding_check::device_names(self.module)
                    ),
                )),
            },
        }
    }

    /// Lowers an argument that must be a runtime value (tiles, pointers).
    fn lower_runtime_arg(&mut self, e: &syn::Expr, what: &str) -> R<ValueId> {
        let v = self.lower_expr(e)?;
        match v {
            Val::Runtime(id) => Ok(id),
            other => self.runtime(other, what, e.span()),
        }
    }

    fn lower_arange(
        &mut self,
        generics: &[&syn::GenericArgument],
        args: &Args,
        span: Span,
    ) -> R<Val> {
        arity(
            "arange",
            args,
            0,
            0,
            "the length is a constexpr: `arange::<N>()`",
            span,
        )?;
        let [g] = generics else {
            return Err(DslError::new(
                span,
                "`arange` needs its length as `arange::<N>()`",
            ));
        };
        let (n, t) = self.generic_int(g, IntRole::Shape)?;
        if n <= 0 || (n & (n - 1)) != 0 {
            let shown = if t == n.to_string() {
                String::new()
            } else {
                format!(", {t} = {n}")
            };
            return Err(DslError::new(
                g.span(),
                format!("arange::<{t}>() needs a power of two{shown}"),
            ));
        }
        self.at(span);
        self.b
            .arange(n as usize)
            .map(Val::Runtime)
            .map_err(Self::ir_err(span))
    }

    fn optional_dtype(
        &self,
        name: &str,
        generics: &[&syn::GenericArgument],
        span: Span,
    ) -> R<Option<ScalarType>> {
        match generics {
            [] => Ok(None),
            [g] => self.generic_dtype(g).map(Some),
            _ => Err(DslError::new(
                span,
                format!("`{name}` takes one dtype: `{name}::<T>(..)`"),
            )),
        }
    }

    /// `[M, N]`: constexpr dims, rank ≤ 2, each positive.
    pub fn shape_arg(&mut self, e: &syn::Expr) -> R<Vec<usize>> {
        let dims = match e {
            syn::Expr::Array(a) => a.elems.iter().collect::<Vec<_>>(),
            syn::Expr::Group(g) => return self.shape_arg(&g.expr),
            other => {
                return Err(DslError::new(
                    other.span(),
                    format!("a shape is written `[M, N]`, got `{}`", text(other)),
                ))
            }
        };
        if dims.len() > 2 {
            return Err(DslError::new(
                e.span(),
                format!("tiles have rank ≤ 2, got shape `{}`", text(e)),
            ));
        }
        dims.into_iter()
            .map(|d| {
                let v = self.const_int(d, IntRole::Shape)?;
                usize::try_from(v).ok().filter(|x| *x > 0).ok_or_else(|| {
                    DslError::new(
                        d.span(),
                        format!("shape dimensions must be positive, `{}` = {v}", text(d)),
                    )
                })
            })
            .collect()
    }

    fn splat_const(
        &mut self,
        c: &ConstValue,
        s: ScalarType,
        shape: &[usize],
        span: Span,
    ) -> R<Val> {
        let x = self.const_as(c, s, "full", span)?;
        self.b
            .splat(x, shape)
            .map(Val::Runtime)
            .map_err(Self::ir_err(span))
    }

    fn lower_full(
        &mut self,
        generics: &[&syn::GenericArgument],
        args: &Args,
        span: Span,
    ) -> R<Val> {
        arity("full", args, 2, 2, "shape, value", span)?;
        let dtype = self.optional_dtype("full", generics, span)?;
        let shape = self.shape_arg(&args[0])?;
        match self.lower_expr(&args[1])? {
            Val::Const(c) => {
                let s = dtype.or_else(|| default_scalar(&c)).ok_or_else(|| {
                    DslError::new(
                        args[1].span(),
                        format!("`full` needs a number, got {}", describe_const(&c)),
                    )
                })?;
                self.splat_const(&c, s, &shape, span)
            }
            Val::Runtime(id) => {
                let t = self.b.ty(id).clone();
                if !t.is_scalar() {
                    return Err(DslError::new(
                        args[1].span(),
                        format!("`full` needs a scalar value, got {t}"),
                    ));
                }
                if let Some(s) = dtype.filter(|s| t.elem != Elem::Scalar(*s)) {
                    return Err(DslError::new(
                        args[1].span(),
                        format!(
                            "dtype mismatch in `full`: {s} vs {} (insert `.cast::<{s}>()`)",
                            t.elem
                        ),
                    ));
                }
                self.at(span);
                self.b
                    .splat(id, &shape)
                    .map(Val::Runtime)
                    .map_err(Self::ir_err(span))
            }
            other => Err(DslError::new(
                args[1].span(),
                format!("`full` needs a scalar value, got {}", other.kind_name()),
            )),
        }
    }

    /// The pointee dtype of a pointer argument.
    fn pointee(&self, p: ValueId, what: &str, span: Span) -> R<ScalarType> {
        let t = self.b.ty(p);
        t.elem
            .pointee()
            .ok_or_else(|| DslError::new(span, format!("`{what}` needs pointers, got {t}")))
    }

    /// A mask argument: a bool tile/scalar, or a bool constexpr.
    fn mask_arg(&mut self, e: &syn::Expr, what: &str) -> R<ValueId> {
        let span = e.span();
        let m = match self.lower_expr(e)? {
            Val::Const(c @ ConstValue::Bool(_)) => {
                self.const_as(&c, ScalarType::Bool, what, span)?
            }
            Val::Runtime(id) => id,
            other => {
                return Err(DslError::new(
                    span,
                    format!("`{what}` mask must be bool, got {}", other.kind_name()),
                ))
            }
        };
        let t = self.b.ty(m);
        if t.elem != Elem::Scalar(ScalarType::Bool) {
            return Err(DslError::new(
                span,
                format!("`{what}` mask must be bool, got {t}"),
            ));
        }
        Ok(m)
    }

    /// A value to combine with memory of dtype `s`: constexprs adopt it.
    fn value_for(&mut self, e: &syn::Expr, s: ScalarType, what: &str) -> R<ValueId> {
        let span = e.span();
        match self.lower_expr(e)? {
            Val::Const(c) => self.const_as(&c, s, what, span),
            other => self.runtime(other, what, span),
        }
    }

    fn lower_load(&mut self, args: &Args, span: Span) -> R<Val> {
        arity("load", args, 1, 3, "ptr, mask, other", span)?;
        let p = self.lower_runtime_arg(&args[0], "load")?;
        let elem = self.pointee(p, "load", args[0].span())?;
        let mask = match args.get(1) {
            Some(e) => Some(self.mask_arg(e, "load")?),
            None => None,
        };
        let other = match args.get(2) {
            Some(e) => Some(self.value_for(e, elem, "load")?),
            None => None,
        };
        self.at(span);
        self.b
            .load(p, mask, other)
            .map(Val::Runtime)
            .map_err(Self::ir_err(span))
    }

    fn lower_store(&mut self, args: &Args, span: Span) -> R<Val> {
        arity("store", args, 2, 3, "ptr, value, mask", span)?;
        let p = self.lower_runtime_arg(&args[0], "store")?;
        let elem = self.pointee(p, "store", args[0].span())?;
        if let Some(param) = read_only_root(self.b.func, p) {
            return Err(DslError::new(
                args[0].span(),
                format!(
                    "`store` through `{param}`, which is declared `*const`; declare it `*mut` to write to it"
                ),
            ));
        }
        let v = self.value_for(&args[1], elem, "store")?;
        let mask = match args.get(2) {
            Some(e) => Some(self.mask_arg(e, "store")?),
            None => None,
        };
        self.at(span);
        self.b
            .store(p, v, mask)
            .map(|_| Val::Unit)
            .map_err(Self::ir_err(span))
    }

    fn lower_select(&mut self, args: &Args, span: Span) -> R<Val> {
        arity("select", args, 3, 3, "cond, a, b", span)?;
        let c = self.lower_expr(&args[0])?;
        let a = self.lower_expr(&args[1])?;
        let b = self.lower_expr(&args[2])?;
        let c = match c {
            // A constexpr condition picks a side at specialization.
            Val::Const(ConstValue::Bool(k)) => return Ok(if k { a } else { b }),
            Val::Runtime(id) => id,
            other => {
                return Err(DslError::new(
                    args[0].span(),
                    format!("`select` condition must be bool, got {}", other.kind_name()),
                ))
            }
        };
        let t = self.b.ty(c);
        if t.elem != Elem::Scalar(ScalarType::Bool) {
            return Err(DslError::new(
                args[0].span(),
                format!("`select` condition must be bool, got {t}"),
            ));
        }
        let (x, y) = self.operands("select", a, b, span)?;
        self.at(span);
        self.b
            .select(c, x, y)
            .map(Val::Runtime)
            .map_err(Self::ir_err(span))
    }

    pub fn lower_method(&mut self, m: &syn::ExprMethodCall) -> R<Val> {
        let span = m.span();
        let name = m.method.to_string();
        let generics: Vec<&syn::GenericArgument> =
            m.turbofish.iter().flat_map(|t| t.args.iter()).collect();
        if name != "cast" && !generics.is_empty() {
            return Err(DslError::new(
                span,
                format!("`.{name}()` takes no `::<..>` arguments"),
            ));
        }
        let recv = self.lower_expr(&m.receiver)?;
        let a: Vec<&syn::Expr> = m.args.iter().collect();
        match name.as_str() {
            "cast" => {
                arity(".cast::<T>", &m.args, 0, 0, "the dtype is the `::<T>` argument", span)?;
                let [g] = generics.as_slice() else {
                    return Err(DslError::new(span, "`.cast` needs its dtype: `.cast::<T>()`"));
                };
                let to = self.generic_dtype(g)?;
                match recv {
                    Val::Const(c) => self.const_as(&c, to, "cast", span).map(Val::Runtime),
                    other => {
                        let x = self.runtime(other, "cast", span)?;
                        self.at(span);
                        self.b.cast(x, to).map(Val::Runtime).map_err(Self::ir_err(span))
                    }
                }
            }
            "unsqueeze" | "max" | "min" | "sum" => {
                arity(&format!(".{name}"), &m.args, 1, 1, "axis", span)?;
                let x = self.method_receiver(recv, &name, m.receiver.span())?;
                let axis = self.const_int(a[0], IntRole::Axis)?;
                let axis = usize::try_from(axis)
                    .map_err(|_| DslError::new(a[0].span(), format!("axis must be ≥ 0, got {axis}")))?;
                self.at(span);
                let r = match name.as_str() {
                    "unsqueeze" => self.b.expand_dims(x, axis),
                    "max" => self.b.reduce(ReduceKind::Max, x, axis),
                    "min" => self.b.reduce(ReduceKind::Min, x, axis),
                    _ => self.b.reduce(ReduceKind::Sum, x, axis),
                };
                r.map(Val::Runtime).map_err(Self::ir_err(span))
            }
            "trans" => {
                arity(".trans", &m.args, 0, 0, "no arguments", span)?;
                let x = self.method_receiver(recv, &name, m.receiver.span())?;
                self.at(span);
                self.b.trans(x).map(Val::Runtime).map_err(Self::ir_err(span))
            }
            "step_by" => Err(DslError::new(span, "`.step_by(s)` is only allowed on a `for` range: `for i in (lo..hi).step_by(s)`")),
            other => Err(DslError::new(
                m.method.span(),
                format!("unsupported syntax in a kernel: method call `.{other}()` (DSL methods: unsqueeze, max, min, sum, cast, trans)"),
            )),
        }
    }

    fn method_receiver(&mut self, recv: Val, name: &str, span: Span) -> R<ValueId> {
        match recv {
            Val::Runtime(id) => Ok(id),
            other => Err(DslError::new(
                span,
                format!("`.{name}()` needs a tile, got {}", other.kind_name()),
            )),
        }
    }
}

/// The read-only (`*const`) kernel parameter a pointer value is derived from, when that is
/// certain: follows pointer offsets, broadcasts and selects back to an entry argument. A
/// pointer carried through a loop is not followed (the executor and the runtime still reject
/// the store).
fn read_only_root(func: &crate::ir::Function, v: crate::ir::ValueId) -> Option<String> {
    use crate::ir::{OpKind, ParamKind};
    if let Some(p) = func.params.iter().find(|p| p.value == v) {
        return match p.kind {
            ParamKind::Ptr { mutable: false, .. } => Some(p.name.clone()),
            _ => None,
        };
    }
    let op = func.ops.iter().find(|op| op.results.contains(&v))?;
    match op.kind {
        OpKind::AddPtr
        | OpKind::Broadcast { .. }
        | OpKind::Splat { .. }
        | OpKind::ExpandDims { .. }
        | OpKind::Trans => read_only_root(func, op.operands[0]),
        OpKind::Select => {
            let a = read_only_root(func, op.operands[1])?;
            read_only_root(func, op.operands[2]).map(|_| a)
        }
        _ => None,
    }
}
