//! Lowering of expressions: literals, names, operators, tuples, assignments. Operators on
//! two constexprs fold; otherwise the typing rules of [`super::typing`] apply.

use super::const_eval::{fold_binary, fold_unary, named_constant, parse_lit};
use super::env::AssignError;
use super::lowerer::{Lowerer, R};
use super::operators::{classify, Operator};
use super::value::Val;
use super::{ConstValue, DslError};
use crate::ir::{BinaryOp, Elem, ScalarType, UnaryOp};
use proc_macro2::Span;
use quote::ToTokens;
use syn::spanned::Spanned;

/// The source text of an expression, for messages.
pub(crate) fn text(e: &impl ToTokens) -> String {
    e.to_token_stream().to_string()
}

impl<'m, 'f> Lowerer<'m, 'f> {
    pub fn lower_expr(&mut self, e: &syn::Expr) -> R<Val> {
        use syn::Expr as E;
        match e {
            E::Lit(l) => self.lower_lit(&l.lit),
            E::Path(p) => self.lower_path(p),
            E::Paren(p) => self.lower_expr(&p.expr),
            E::Group(g) => self.lower_expr(&g.expr),
            E::Binary(b) => self.lower_binary(b),
            E::Unary(u) => self.lower_unary(u),
            E::Tuple(t) => Ok(Val::Tuple(
                t.elems
                    .iter()
                    .map(|x| self.lower_expr(x))
                    .collect::<R<_>>()?,
            )),
            E::Block(b) => self.lower_block_value(&b.block),
            E::If(i) => self.lower_if(i),
            E::ForLoop(f) => self.lower_for(f).map(|_| Val::Unit),
            E::While(w) => self.lower_while(w).map(|_| Val::Unit),
            E::Call(c) => self.lower_call(c),
            E::MethodCall(m) => self.lower_method(m),
            E::Assign(a) => {
                let v = self.lower_expr(&a.right)?;
                self.assign_to(&a.left, v)?;
                Ok(Val::Unit)
            }
            E::Return(r) => Err(DslError::new(
                r.span(),
                "`return` must be a statement of the function body or of an `if` branch in it",
            )),
            E::Array(a) => Err(DslError::new(
                a.span(),
                "an array `[..]` is only allowed as the shape argument of `full`/`zeros`",
            )),
            E::Range(r) => Err(DslError::new(
                r.span(),
                "a range `a..b` is only allowed as a `for` iterable",
            )),
            other => Err(DslError::new(
                other.span(),
                format!("unsupported syntax in a kernel: `{}`", text(other)),
            )),
        }
    }

    fn lower_lit(&mut self, lit: &syn::Lit) -> R<Val> {
        let l = parse_lit(lit)?;
        match l.fixed {
            Some(s) => Ok(Val::Runtime(self.const_as(
                &l.value,
                s,
                "literal",
                lit.span(),
            )?)),
            None => Ok(Val::Const(l.value)),
        }
    }

    fn lower_path(&mut self, p: &syn::ExprPath) -> R<Val> {
        let span = p.span();
        if let Some(id) = p.path.get_ident() {
            return self.lookup_value(&id.to_string(), span);
        }
        named_constant(&p.path)
            .map(Val::Const)
            .ok_or_else(|| DslError::new(span, format!("unknown name `{}`", text(&p.path))))
    }

    /// The value of a name: a variable, else a numeric/bool constexpr.
    pub fn lookup_value(&self, name: &str, span: Span) -> R<Val> {
        if let Some(v) = self.env().lookup(name) {
            return Ok(v.val.clone());
        }
        match self.constexpr(name) {
            Some(c @ (ConstValue::Int(_) | ConstValue::Float(_) | ConstValue::Bool(_))) => Ok(Val::Const(c.clone())),
            Some(ConstValue::Dtype(t)) => Err(DslError::new(
                span,
                format!("`{name}` is a dtype ({t}), not a value; use it as `cast::<{name}>()`, `full::<{name}>` or `zeros::<{name}>`"),
            )),
            Some(ConstValue::Device(f)) => Err(DslError::new(
                span,
                format!("`{name}` is a device function (`{f}`), not a value; call it: `{name}(..)`"),
            )),
            None => Err(DslError::new(span, unknown_name(name, &self.frame().func_name))),
        }
    }

    fn lower_binary(&mut self, e: &syn::ExprBinary) -> R<Val> {
        let span = e.span();
        let info = classify(&e.op).ok_or_else(|| {
            DslError::new(span, format!("unsupported operator `{}`", text(&e.op)))
        })?;
        if info.assign {
            let cur = match &*e.left {
                syn::Expr::Path(p) if p.path.get_ident().is_some() => self.lower_path(p)?,
                other => {
                    return Err(DslError::new(
                        other.span(),
                        format!("only variables can be assigned, not `{}`", text(other)),
                    ))
                }
            };
            let rhs = self.lower_expr(&e.right)?;
            let v = self.apply_binary(info.op, info.sym, cur, rhs, span)?;
            self.assign_to(&e.left, v)?;
            return Ok(Val::Unit);
        }
        let a = self.lower_expr(&e.left)?;
        // A constexpr-false `&&` (true `||`) decides alone: the right side is not lowered,
        // so it may use things that only exist when the flag is set.
        match (info.op, &a) {
            (Operator::LogicAnd, Val::Const(ConstValue::Bool(false)))
            | (Operator::LogicOr, Val::Const(ConstValue::Bool(true))) => return Ok(a),
            _ => {}
        }
        let b = self.lower_expr(&e.right)?;
        self.apply_binary(info.op, info.sym, a, b, span)
    }

    /// `a op b` on lowered operands.
    pub fn apply_binary(&mut self, op: Operator, sym: &str, a: Val, b: Val, span: Span) -> R<Val> {
        if let (Val::Const(x), Val::Const(y)) = (&a, &b) {
            return fold_binary(op, sym, x, y)
                .map(Val::Const)
                .map_err(|m| DslError::new(span, m));
        }
        if let Some(v) = self.pointer_arith(op, sym, &a, &b, span)? {
            return Ok(v);
        }
        match op {
            Operator::LogicAnd | Operator::LogicOr => self.logic(op, sym, a, b, span),
            Operator::Arith(bop) => {
                let (x, y) = self.operands(sym, a, b, span)?;
                self.check_broadcast(sym, x, y, span)?;
                self.at(span);
                self.b
                    .binary(bop, x, y)
                    .map(Val::Runtime)
                    .map_err(Self::ir_err(span))
            }
            Operator::Cmp(p) => {
                let (x, y) = self.operands(sym, a, b, span)?;
                self.check_broadcast(sym, x, y, span)?;
                self.at(span);
                self.b
                    .cmp(p, x, y)
                    .map(Val::Runtime)
                    .map_err(Self::ir_err(span))
            }
        }
    }

    /// `p + offsets` / `offsets + p` → `AddPtr`; other operators on pointers are errors.
    fn pointer_arith(
        &mut self,
        op: Operator,
        sym: &str,
        a: &Val,
        b: &Val,
        span: Span,
    ) -> R<Option<Val>> {
        let is_ptr = |l: &Self, v: &Val| matches!(v, Val::Runtime(id) if matches!(l.b.ty(*id).elem, Elem::Ptr(_)));
        let (p, off) = match (is_ptr(self, a), is_ptr(self, b)) {
            (false, false) => return Ok(None),
            (true, false) => (a, b),
            (false, true) => (b, a),
            (true, true) => {
                return Err(DslError::new(
                    span,
                    format!("`{sym}` of two pointers is not supported"),
                ))
            }
        };
        if op != Operator::Arith(BinaryOp::Add) {
            return Err(DslError::new(
                span,
                format!("`{sym}` is not defined on pointers (only `pointer + offsets`)"),
            ));
        }
        let off = match off {
            Val::Const(c @ ConstValue::Int(v)) => {
                let s = if i32::try_from(*v).is_ok() {
                    ScalarType::I32
                } else {
                    ScalarType::I64
                };
                self.const_as(c, s, sym, span)?
            }
            other => self.runtime(other.clone(), "pointer offset", span)?,
        };
        let Val::Runtime(p) = p else { return Ok(None) };
        self.at(span);
        self.b
            .add_ptr(*p, off)
            .map(|v| Some(Val::Runtime(v)))
            .map_err(Self::ir_err(span))
    }

    fn logic(&mut self, op: Operator, sym: &str, a: Val, b: Val, span: Span) -> R<Val> {
        // One side constexpr: `true && x` is x, `false || x` is x; the other cases decide alone.
        let (k, other) = match (&a, &b) {
            (Val::Const(c), _) => (Some(c.clone()), b.clone()),
            (_, Val::Const(c)) => (Some(c.clone()), a.clone()),
            _ => (None, Val::Unit),
        };
        if let Some(c) = k {
            let id = self.runtime(other, sym, span)?;
            self.expect_bool(id, sym, span)?;
            return match (op, c) {
                (Operator::LogicAnd, ConstValue::Bool(true))
                | (Operator::LogicOr, ConstValue::Bool(false)) => Ok(Val::Runtime(id)),
                (_, ConstValue::Bool(v)) => Ok(Val::Const(ConstValue::Bool(v))),
                (_, c) => Err(DslError::new(
                    span,
                    format!(
                        "`{sym}` needs bool operands, got {}",
                        super::value::describe_const(&c)
                    ),
                )),
            };
        }
        let (x, y) = self.operands(sym, a, b, span)?;
        self.expect_bool(x, sym, span)?;
        self.check_broadcast(sym, x, y, span)?;
        let bop = if op == Operator::LogicAnd {
            BinaryOp::And
        } else {
            BinaryOp::Or
        };
        self.at(span);
        self.b
            .binary(bop, x, y)
            .map(Val::Runtime)
            .map_err(Self::ir_err(span))
    }

    pub fn expect_bool(&self, v: crate::ir::ValueId, what: &str, span: Span) -> R<()> {
        let t = self.b.ty(v);
        if t.elem != Elem::Scalar(ScalarType::Bool) {
            return Err(DslError::new(
                span,
                format!("`{what}` needs bool operands, got {t}"),
            ));
        }
        Ok(())
    }

    fn lower_unary(&mut self, u: &syn::ExprUnary) -> R<Val> {
        let span = u.span();
        let neg = match u.op {
            syn::UnOp::Neg(_) => true,
            syn::UnOp::Not(_) => false,
            _ => {
                return Err(DslError::new(
                    span,
                    "unsupported syntax in a kernel: dereference `*p` (use `load(p)`)",
                ))
            }
        };
        match self.lower_expr(&u.expr)? {
            Val::Const(c) => fold_unary(neg, &c)
                .map(Val::Const)
                .map_err(|m| DslError::new(span, m)),
            other => {
                let x = self.runtime(other, if neg { "-" } else { "!" }, span)?;
                self.at(span);
                let op = if neg { UnaryOp::Neg } else { UnaryOp::Not };
                self.b
                    .unary(op, x)
                    .map(Val::Runtime)
                    .map_err(Self::ir_err(span))
            }
        }
    }

    /// `lhs = v` where lhs is a variable or a tuple of variables.
    pub fn assign_to(&mut self, lhs: &syn::Expr, v: Val) -> R<()> {
        match lhs {
            syn::Expr::Path(p) if p.path.get_ident().is_some() => {
                let name = p.path.segments[0].ident.to_string();
                let span = p.span();
                self.env_mut()
                    .assign(&name, v.clone())
                    .map_err(|e| match e {
                        AssignError::Immutable => DslError::new(
                            span,
                            format!("cannot assign to `{name}`: it is not declared `let mut`"),
                        ),
                        AssignError::Unknown if self.constexpr(&name).is_some() => {
                            DslError::new(span, format!("cannot assign to constexpr `{name}`"))
                        }
                        AssignError::Unknown => {
                            DslError::new(span, format!("unknown variable `{name}`"))
                        }
                    })?;
                self.name_value(&v, &name);
                Ok(())
            }
            syn::Expr::Paren(p) => self.assign_to(&p.expr, v),
            syn::Expr::Tuple(t) => match v {
                Val::Tuple(vals) if vals.len() == t.elems.len() => t
                    .elems
                    .iter()
                    .zip(vals)
                    .try_for_each(|(target, val)| self.assign_to(target, val)),
                other => Err(DslError::new(
                    t.span(),
                    format!(
                        "cannot assign {} to a tuple of {} variables",
                        other.kind_name(),
                        t.elems.len()
                    ),
                )),
            },
            other => Err(DslError::new(
                other.span(),
                format!("only variables can be assigned, not `{}`", text(other)),
            )),
        }
    }

    /// Evaluates `e`, which must be a constexpr integer (shapes, axes, unroll counts).
    pub fn const_int(&mut self, e: &syn::Expr, role: IntRole) -> R<i64> {
        match self.lower_expr(e)? {
            Val::Const(ConstValue::Int(v)) => Ok(v),
            Val::Runtime(_) => Err(DslError::new(e.span(), role.runtime_message(&text(e)))),
            Val::Const(c) => Err(DslError::new(
                e.span(),
                format!(
                    "{} must be an integer, got {}",
                    role.noun(),
                    super::value::describe_const(&c)
                ),
            )),
            other => Err(DslError::new(
                e.span(),
                format!(
                    "{} must be an integer, got {}",
                    role.noun(),
                    other.kind_name()
                ),
            )),
        }
    }
}

/// Where a constexpr integer is required (decides the wording of the error).
#[derive(Clone, Copy)]
pub(crate) enum IntRole {
    Shape,
    Axis,
}

impl IntRole {
    fn noun(self) -> &'static str {
        match self {
            IntRole::Shape => "a shape",
            IntRole::Axis => "an axis",
        }
    }
    pub fn runtime_message(self, text: &str) -> String {
        match self {
            IntRole::Shape => {
                format!("runtime value `{text}` used as a shape; shapes must be constexprs")
            }
            IntRole::Axis => {
                format!("runtime value `{text}` used as an axis; axes must be constexprs")
            }
        }
    }
}

/// `unknown variable`, with the declaration to add when the name reads as a constexpr
/// (upper case): a function sees only the constexprs its generics declare.
fn unknown_name(name: &str, func: &str) -> String {
    let looks_const = name.chars().any(|c| c.is_ascii_uppercase())
        && name
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    if looks_const {
        format!(
            "unknown variable `{name}`; a constexpr must be declared in `{func}`'s generics \
             (`const {name}: i32 = ..`) to be visible in its body"
        )
    } else {
        format!("unknown variable `{name}`")
    }
}
