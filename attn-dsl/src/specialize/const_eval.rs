//! Constexpr arithmetic at specialization: integers in i64 (C semantics: `/` truncates,
//! `%` takes the dividend's sign, overflow is an error), floats in f64, bools.
//! The lowering folds operators on two constexprs with these functions, and `require`
//! rules are evaluated with [`eval`], so both agree on every value.

use super::operators::{classify, Operator};
use super::value::describe_const;
use super::{ConstValue, DslError};
use crate::ir::{BinaryOp, CmpPred, ScalarType};
use quote::ToTokens;
use syn::spanned::Spanned;

/// A literal as written: its value and, for `1i64`, the dtype it insists on.
pub(crate) struct Literal {
    pub value: ConstValue,
    pub fixed: Option<ScalarType>,
}

/// Parses a literal; suffixes other than `i32`, `i64`, `f32` are errors.
pub(crate) fn parse_lit(lit: &syn::Lit) -> Result<Literal, DslError> {
    let plain = |value| Ok(Literal { value, fixed: None });
    match lit {
        syn::Lit::Int(i) => {
            let v: i64 = i
                .base10_parse()
                .map_err(|e| DslError::new(i.span(), e.to_string()))?;
            match i.suffix() {
                "" | "i32" => plain(ConstValue::Int(v)),
                "i64" => Ok(Literal { value: ConstValue::Int(v), fixed: Some(ScalarType::I64) }),
                "f32" => plain(ConstValue::Float(v as f64)),
                s => Err(DslError::new(
                    i.span(),
                    format!("unsupported literal suffix `{s}` in `{i}`; use no suffix (i32), `i64` or `f32`"),
                )),
            }
        }
        syn::Lit::Float(f) => {
            let v: f64 = f
                .base10_parse()
                .map_err(|e| DslError::new(f.span(), e.to_string()))?;
            match f.suffix() {
                "" | "f32" => plain(ConstValue::Float(v)),
                s => Err(DslError::new(
                    f.span(),
                    format!("unsupported literal suffix `{s}` in `{f}`: float literals are f32; write it without a suffix"),
                )),
            }
        }
        syn::Lit::Bool(b) => plain(ConstValue::Bool(b.value)),
        other => Err(DslError::new(
            other.span(),
            format!(
                "unsupported literal `{}`; only integer, float and bool literals",
                other.to_token_stream()
            ),
        )),
    }
}

/// `f32::NEG_INFINITY` and friends.
pub(crate) fn named_constant(path: &syn::Path) -> Option<ConstValue> {
    if path.segments.len() != 2 || path.segments.iter().any(|s| !s.arguments.is_none()) {
        return None;
    }
    let ty = path.segments[0].ident.to_string();
    let name = path.segments[1].ident.to_string();
    Some(match (ty.as_str(), name.as_str()) {
        ("f32", "INFINITY") => ConstValue::Float(f64::INFINITY),
        ("f32", "NEG_INFINITY") => ConstValue::Float(f64::NEG_INFINITY),
        ("f32", "MAX") => ConstValue::Float(f32::MAX as f64),
        ("f32", "MIN") => ConstValue::Float(f32::MIN as f64),
        ("i32", "MAX") => ConstValue::Int(i32::MAX as i64),
        ("i32", "MIN") => ConstValue::Int(i32::MIN as i64),
        ("i64", "MAX") => ConstValue::Int(i64::MAX),
        ("i64", "MIN") => ConstValue::Int(i64::MIN),
        _ => return None,
    })
}

/// Folds `a op b` on two constexprs.
pub(crate) fn fold_binary(
    op: Operator,
    sym: &str,
    a: &ConstValue,
    b: &ConstValue,
) -> Result<ConstValue, String> {
    use ConstValue::{Bool, Float, Int};
    let mismatch = || {
        format!(
            "`{sym}` is not defined on {} and {}",
            describe_const(a),
            describe_const(b)
        )
    };
    match op {
        Operator::LogicAnd | Operator::LogicOr => match (a, b) {
            (Bool(x), Bool(y)) => Ok(Bool(if op == Operator::LogicAnd {
                *x && *y
            } else {
                *x || *y
            })),
            _ => Err(format!(
                "`{sym}` needs bool operands, got {} and {}",
                describe_const(a),
                describe_const(b)
            )),
        },
        Operator::Cmp(p) => {
            let ord = match (a, b) {
                (Int(x), Int(y)) => x.partial_cmp(y),
                (Bool(x), Bool(y)) => x.partial_cmp(y),
                (Int(_) | Float(_), Int(_) | Float(_)) => as_f64(a).partial_cmp(&as_f64(b)),
                _ => return Err(mismatch()),
            };
            Ok(Bool(ord.is_some_and(|o| cmp_holds(p, o))))
        }
        Operator::Arith(bop) => match (a, b) {
            (Int(x), Int(y)) => fold_int(bop, sym, *x, *y).map(Int),
            (Bool(x), Bool(y)) => match bop {
                BinaryOp::And => Ok(Bool(*x & *y)),
                BinaryOp::Or => Ok(Bool(*x | *y)),
                BinaryOp::Xor => Ok(Bool(*x ^ *y)),
                _ => Err(mismatch()),
            },
            (Int(_) | Float(_), Int(_) | Float(_)) => {
                fold_float(bop, sym, as_f64(a), as_f64(b)).map(Float)
            }
            _ => Err(mismatch()),
        },
    }
}

fn as_f64(c: &ConstValue) -> f64 {
    match c {
        ConstValue::Int(v) => *v as f64,
        ConstValue::Float(v) => *v,
        _ => f64::NAN,
    }
}

fn cmp_holds(p: CmpPred, o: std::cmp::Ordering) -> bool {
    use std::cmp::Ordering::*;
    match p {
        CmpPred::Eq => o == Equal,
        CmpPred::Ne => o != Equal,
        CmpPred::Lt => o == Less,
        CmpPred::Le => o != Greater,
        CmpPred::Gt => o == Greater,
        CmpPred::Ge => o != Less,
    }
}

fn fold_int(op: BinaryOp, sym: &str, x: i64, y: i64) -> Result<i64, String> {
    let overflow = || format!("integer overflow in constexpr `{x} {sym} {y}`");
    match op {
        BinaryOp::Add => x.checked_add(y).ok_or_else(overflow),
        BinaryOp::Sub => x.checked_sub(y).ok_or_else(overflow),
        BinaryOp::Mul => x.checked_mul(y).ok_or_else(overflow),
        BinaryOp::Div | BinaryOp::Rem if y == 0 => {
            Err(format!("division by zero in constexpr `{x} {sym} {y}`"))
        }
        BinaryOp::Div => x.checked_div(y).ok_or_else(overflow),
        BinaryOp::Rem => x.checked_rem(y).ok_or_else(overflow),
        BinaryOp::Min => Ok(x.min(y)),
        BinaryOp::Max => Ok(x.max(y)),
        BinaryOp::And => Ok(x & y),
        BinaryOp::Or => Ok(x | y),
        BinaryOp::Xor => Ok(x ^ y),
        BinaryOp::Shl | BinaryOp::Shr if !(0..64).contains(&y) => Err(format!(
            "shift amount {y} out of range 0..64 in constexpr `{x} {sym} {y}`"
        )),
        BinaryOp::Shl => Ok(x << y),
        BinaryOp::Shr => Ok(x >> y),
    }
}

fn fold_float(op: BinaryOp, sym: &str, x: f64, y: f64) -> Result<f64, String> {
    match op {
        BinaryOp::Add => Ok(x + y),
        BinaryOp::Sub => Ok(x - y),
        BinaryOp::Mul => Ok(x * y),
        BinaryOp::Div => Ok(x / y),
        BinaryOp::Min => Ok(x.min(y)),
        BinaryOp::Max => Ok(x.max(y)),
        _ => Err(format!(
            "`{sym}` needs integer operands, got {x:?} and {y:?}"
        )),
    }
}

/// Folds `-a` (`neg`) or `!a` on a constexpr.
pub(crate) fn fold_unary(neg: bool, a: &ConstValue) -> Result<ConstValue, String> {
    match (neg, a) {
        (true, ConstValue::Int(v)) => v
            .checked_neg()
            .map(ConstValue::Int)
            .ok_or_else(|| format!("integer overflow in constexpr `-{v}`")),
        (true, ConstValue::Float(v)) => Ok(ConstValue::Float(-v)),
        (false, ConstValue::Bool(v)) => Ok(ConstValue::Bool(!v)),
        (false, ConstValue::Int(v)) => Ok(ConstValue::Int(!v)),
        _ => Err(format!(
            "`{}` is not defined on {}",
            if neg { "-" } else { "!" },
            describe_const(a)
        )),
    }
}

/// Folds a math function (`exp`, `sqrt`, `abs`, ...) on a constexpr.
pub(crate) fn fold_math(name: &str, a: &ConstValue) -> Result<ConstValue, String> {
    if let (ConstValue::Int(v), "abs") = (a, name) {
        return v
            .checked_abs()
            .map(ConstValue::Int)
            .ok_or_else(|| format!("integer overflow in `abs({v})`"));
    }
    let x = match a {
        ConstValue::Int(_) | ConstValue::Float(_) => as_f64(a),
        _ => return Err(format!("`{name}` is not defined on {}", describe_const(a))),
    };
    let y = match name {
        "exp" => x.exp(),
        "exp2" => x.exp2(),
        "log" => x.ln(),
        "log2" => x.log2(),
        "sqrt" => x.sqrt(),
        "tanh" => x.tanh(),
        "abs" => x.abs(),
        _ => return Err(format!("`{name}` cannot be evaluated on constexprs")),
    };
    Ok(ConstValue::Float(y))
}

/// Ceiling division `(a + b - 1) / b` (the DSL's `cdiv`, for a ≥ 0, b > 0).
pub(crate) fn fold_cdiv(a: &ConstValue, b: &ConstValue) -> Result<ConstValue, String> {
    match (a, b) {
        (ConstValue::Int(x), ConstValue::Int(y)) if *y > 0 => {
            let n = x
                .checked_add(y - 1)
                .ok_or_else(|| format!("integer overflow in `cdiv({x}, {y})`"))?;
            Ok(ConstValue::Int(n / y))
        }
        _ => Err(format!(
            "`cdiv` needs integers with a positive divisor, got {} and {}",
            describe_const(a),
            describe_const(b)
        )),
    }
}

/// [`eval`] over the bound constexprs `bound` (name, value).
pub(crate) fn eval_bound(
    e: &syn::Expr,
    bound: &[(String, ConstValue)],
) -> Result<ConstValue, DslError> {
    eval(e, &|n: &str| {
        bound.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone())
    })
}

/// Evaluates an expression over constexprs only (a `require` rule, a constexpr default).
pub(crate) fn eval(
    e: &syn::Expr,
    lookup: &dyn Fn(&str) -> Option<ConstValue>,
) -> Result<ConstValue, DslError> {
    let err = |m: String| DslError::new(e.span(), m);
    match e {
        syn::Expr::Lit(l) => Ok(parse_lit(&l.lit)?.value),
        syn::Expr::Paren(p) => eval(&p.expr, lookup),
        syn::Expr::Group(g) => eval(&g.expr, lookup),
        syn::Expr::Block(b) if b.block.stmts.len() == 1 => match &b.block.stmts[0] {
            syn::Stmt::Expr(inner, None) => eval(inner, lookup),
            _ => Err(err(unsupported(e))),
        },
        syn::Expr::Path(p) if p.qself.is_none() => {
            if let Some(id) = p.path.get_ident() {
                return lookup(&id.to_string())
                    .ok_or_else(|| err(format!("unknown constexpr `{id}`")));
            }
            named_constant(&p.path)
                .ok_or_else(|| err(format!("unknown constant `{}`", p.path.to_token_stream())))
        }
        syn::Expr::Unary(u) => {
            let v = eval(&u.expr, lookup)?;
            match u.op {
                syn::UnOp::Neg(_) => fold_unary(true, &v).map_err(err),
                syn::UnOp::Not(_) => fold_unary(false, &v).map_err(err),
                _ => Err(err(unsupported(e))),
            }
        }
        syn::Expr::Binary(b) => {
            let info = classify(&b.op)
                .filter(|i| !i.assign)
                .ok_or_else(|| err(unsupported(e)))?;
            let x = eval(&b.left, lookup)?;
            // Constexpr `&&`/`||` short-circuit, so `!A || B` may guard a B only valid when A holds.
            match (info.op, &x) {
                (Operator::LogicAnd, ConstValue::Bool(false)) => return Ok(x),
                (Operator::LogicOr, ConstValue::Bool(true)) => return Ok(x),
                _ => {}
            }
            let y = eval(&b.right, lookup)?;
            fold_binary(info.op, info.sym, &x, &y).map_err(err)
        }
        syn::Expr::Call(c) => {
            let name = match &*c.func {
                syn::Expr::Path(p) => p.path.get_ident().map(|i| i.to_string()),
                _ => None,
            }
            .ok_or_else(|| err(unsupported(e)))?;
            let args = c
                .args
                .iter()
                .map(|a| eval(a, lookup))
                .collect::<Result<Vec<_>, _>>()?;
            match (name.as_str(), args.as_slice()) {
                ("cdiv", [a, b]) => fold_cdiv(a, b).map_err(err),
                ("min", [a, b]) => {
                    fold_binary(Operator::Arith(BinaryOp::Min), "min", a, b).map_err(err)
                }
                ("max", [a, b]) => {
                    fold_binary(Operator::Arith(BinaryOp::Max), "max", a, b).map_err(err)
                }
                (f @ ("abs" | "exp" | "exp2" | "log" | "log2" | "sqrt" | "tanh"), [a]) => {
                    fold_math(f, a).map_err(err)
                }
                _ => Err(err(unsupported(e))),
            }
        }
        syn::Expr::MethodCall(m) if m.method == "is_power_of_two" && m.args.is_empty() => {
            match eval(&m.receiver, lookup)? {
                ConstValue::Int(v) => Ok(ConstValue::Bool(v > 0 && (v & (v - 1)) == 0)),
                other => Err(err(format!(
                    "`is_power_of_two` needs an integer, got {}",
                    describe_const(&other)
                ))),
            }
        }
        _ => Err(err(unsupported(e))),
    }
}

fn unsupported(e: &syn::Expr) -> String {
    format!(
        "cannot evaluate `{}` on constexprs: use literals, constexprs, operators, cdiv/min/max/abs and `.is_power_of_two()`",
        e.to_token_stream()
    )
}
