//! Operand and result typing rules per [`OpKind`], written from the conventions documented
//! in `ops.rs` (not by calling the Builder, so a Builder bug cannot hide here).
//!
//! Elementwise rules compare element type and shape only: layouts are assigned late and an
//! elementwise op whose operands carry different layouts implies a layout conversion that the
//! back end performs. Loop-carried values (`for`/`while` args, inits, yields, results) must
//! match exactly, layout included, because they are one variable in generated code.

use crate::ir::function::{Block, Function, Op, ValueId};
use crate::ir::ops::{BinaryOp, OpKind, Scalar, UnaryOp};
use crate::ir::types::{Elem, ScalarType, Type};

type Rule = Result<(), String>;

fn t(f: &Function, v: ValueId) -> Result<&Type, String> {
    f.values
        .get(v.0 as usize)
        .map(|d| &d.ty)
        .ok_or_else(|| format!("value %{} is out of range", v.0))
}

/// Same element type and shape (layouts may differ).
fn same(a: &Type, b: &Type) -> bool {
    a.elem == b.elem && a.shape == b.shape
}

fn counts(op: &Op, operands: usize, results: usize) -> Rule {
    if op.operands.len() != operands {
        return Err(format!(
            "has {} operand(s), expected {operands}",
            op.operands.len()
        ));
    }
    if op.results.len() != results {
        return Err(format!(
            "has {} result(s), expected {results}",
            op.results.len()
        ));
    }
    Ok(())
}

fn expect_result(f: &Function, op: &Op, want: &Type) -> Rule {
    let got = t(f, op.results[0])?;
    if !same(got, want) {
        return Err(format!("result has type {got}, expected {want}"));
    }
    Ok(())
}

fn bool_ty(shape: &[usize]) -> Type {
    Type::tile(Elem::Scalar(ScalarType::Bool), shape.to_vec())
}

fn i32_scalar() -> Type {
    Type::scalar(ScalarType::I32)
}

/// Checks one op's operand and result types (regions' contents are checked separately, but
/// their terminators' types are checked here against the op's results).
pub(super) fn check(f: &Function, op: &Op) -> Rule {
    match &op.kind {
        OpKind::Const(s) => {
            counts(op, 0, 1)?;
            check_literal(s)?;
            expect_result(f, op, &Type::scalar(s.ty()))
        }
        OpKind::ProgramId(a) | OpKind::NumPrograms(a) => {
            counts(op, 0, 1)?;
            if *a > 2 {
                return Err(format!("axis {a} is out of range 0..3"));
            }
            expect_result(f, op, &i32_scalar())
        }
        OpKind::Arange { n } => {
            counts(op, 0, 1)?;
            if *n == 0 || !n.is_power_of_two() {
                return Err(format!("length {n} is not a power of two"));
            }
            expect_result(f, op, &Type::tile(Elem::Scalar(ScalarType::I32), vec![*n]))
        }
        OpKind::Splat { shape } => {
            counts(op, 1, 1)?;
            let x = t(f, op.operands[0])?;
            if !x.is_scalar() || shape.is_empty() {
                return Err(format!(
                    "splats a scalar to a tile, got {x} to shape {shape:?}"
                ));
            }
            expect_result(f, op, &Type::tile(x.elem, shape.clone()))
        }
        OpKind::Broadcast { shape } => {
            counts(op, 1, 1)?;
            let x = t(f, op.operands[0])?;
            let ok = x.rank() == shape.len()
                && x.shape.iter().zip(shape).all(|(&a, &b)| a == b || a == 1);
            if !ok || x.is_scalar() {
                return Err(format!(
                    "cannot broadcast {x} to shape {shape:?} (same rank, size-1 dims only)"
                ));
            }
            expect_result(f, op, &Type::tile(x.elem, shape.clone()))
        }
        OpKind::ExpandDims { axis } => {
            counts(op, 1, 1)?;
            let x = t(f, op.operands[0])?;
            if x.rank() >= 2 || *axis > x.rank() {
                return Err(format!(
                    "axis {axis} is invalid for {x} (result rank must be ≤ 2)"
                ));
            }
            let mut s = x.shape.clone();
            s.insert(*axis, 1);
            expect_result(f, op, &Type::tile(x.elem, s))
        }
        OpKind::Handoff => {
            counts(op, 1, 1)?;
            let x = t(f, op.operands[0])?;
            if x.is_scalar() || matches!(x.elem, Elem::Ptr(_)) {
                return Err(format!(
                    "hands over a tile of values, got {x} (pointers are computed by each owner)"
                ));
            }
            expect_result(f, op, &Type::tile(x.elem, x.shape.clone()))
        }
        OpKind::Trans => {
            counts(op, 1, 1)?;
            let x = t(f, op.operands[0])?;
            if x.rank() != 2 {
                return Err(format!("expects a rank-2 tile, got {x}"));
            }
            expect_result(f, op, &Type::tile(x.elem, vec![x.shape[1], x.shape[0]]))
        }
        OpKind::Unary(u) => {
            counts(op, 1, 1)?;
            let x = t(f, op.operands[0])?;
            let s = x
                .elem
                .scalar()
                .ok_or_else(|| format!("not defined on {x}"))?;
            let ok = match u {
                UnaryOp::Neg | UnaryOp::Abs => s != ScalarType::Bool,
                UnaryOp::Not => !s.is_float(),
                _ => s.is_float(),
            };
            if !ok {
                return Err(format!("not defined on {x}"));
            }
            expect_result(f, op, x)
        }
        OpKind::Binary(b) => {
            counts(op, 2, 1)?;
            let (x, y) = (t(f, op.operands[0])?, t(f, op.operands[1])?);
            if !same(x, y) {
                return Err(format!(
                    "operands have types {x} and {y}; they must be equal"
                ));
            }
            let s = x
                .elem
                .scalar()
                .ok_or_else(|| format!("not defined on {x}"))?;
            let ok = match b {
                BinaryOp::And | BinaryOp::Or | BinaryOp::Xor => !s.is_float(),
                BinaryOp::Shl | BinaryOp::Shr | BinaryOp::Rem => s.is_int(),
                _ => s != ScalarType::Bool,
            };
            if !ok {
                return Err(format!("not defined on {x}"));
            }
            expect_result(f, op, x)
        }
        OpKind::Cmp(_) => {
            counts(op, 2, 1)?;
            let (x, y) = (t(f, op.operands[0])?, t(f, op.operands[1])?);
            if !same(x, y) || x.elem.scalar().is_none() {
                return Err(format!(
                    "compares {x} with {y}; operands must be equal number types"
                ));
            }
            expect_result(f, op, &bool_ty(&x.shape))
        }
        OpKind::Select => {
            counts(op, 3, 1)?;
            let (c, x, y) = (
                t(f, op.operands[0])?,
                t(f, op.operands[1])?,
                t(f, op.operands[2])?,
            );
            if !same(c, &bool_ty(&x.shape)) || !same(x, y) {
                return Err(format!(
                    "select({c}, {x}, {y}) needs a bool condition and values of one type and shape"
                ));
            }
            expect_result(f, op, x)
        }
        OpKind::Cast(to) => {
            counts(op, 1, 1)?;
            let x = t(f, op.operands[0])?;
            if x.elem.scalar().is_none() {
                return Err(format!("cannot cast {x}: only numbers and bools convert"));
            }
            expect_result(f, op, &Type::tile(Elem::Scalar(*to), x.shape.clone()))
        }
        OpKind::AddPtr => {
            counts(op, 2, 1)?;
            let (p, o) = (t(f, op.operands[0])?, t(f, op.operands[1])?);
            let int_off = matches!(o.elem, Elem::Scalar(ScalarType::I32 | ScalarType::I64));
            if p.elem.pointee().is_none() || !int_off || p.shape != o.shape {
                return Err(format!(
                    "add_ptr({p}, {o}) needs pointers and i32/i64 offsets of one shape"
                ));
            }
            expect_result(f, op, p)
        }
        OpKind::Load {
            has_mask,
            has_other,
        } => check_load(f, op, *has_mask, *has_other),
        OpKind::Store { has_mask } => check_store(f, op, *has_mask),
        OpKind::Dot => check_dot(f, op),
        OpKind::Reduce { axis, .. } => {
            counts(op, 1, 1)?;
            let x = t(f, op.operands[0])?;
            if *axis >= x.rank() || x.elem.scalar().is_none_or(|s| s == ScalarType::Bool) {
                return Err(format!("cannot reduce {x} along axis {axis}"));
            }
            let mut s = x.shape.clone();
            s.remove(*axis);
            expect_result(f, op, &Type::tile(x.elem, s))
        }
        OpKind::For => check_for(f, op),
        OpKind::If => check_if(f, op),
        OpKind::While => check_while(f, op),
        OpKind::Condition | OpKind::Yield => {
            if !op.results.is_empty() {
                return Err("terminators have no results".into());
            }
            Ok(())
        }
        OpKind::Return => counts(op, 0, 0),
    }
}

fn check_literal(s: &Scalar) -> Rule {
    match *s {
        Scalar::Int(v, ScalarType::I32) if i32::try_from(v).is_err() => {
            Err(format!("literal {v} does not fit in i32"))
        }
        Scalar::Int(_, ty) if !ty.is_int() => Err(format!("integer literal typed {ty}")),
        Scalar::Float(_, ty) if !ty.is_float() => Err(format!("float literal typed {ty}")),
        _ => Ok(()),
    }
}

fn check_load(f: &Function, op: &Op, has_mask: bool, has_other: bool) -> Rule {
    if has_other && !has_mask {
        return Err("`other` without a mask".into());
    }
    counts(op, 1 + has_mask as usize + has_other as usize, 1)?;
    let p = t(f, op.operands[0])?;
    let elem = p
        .elem
        .pointee()
        .ok_or_else(|| format!("loads through pointers, got {p}"))?;
    if has_mask && !same(t(f, op.operands[1])?, &bool_ty(&p.shape)) {
        return Err(format!(
            "mask has type {}, expected {}",
            t(f, op.operands[1])?,
            bool_ty(&p.shape)
        ));
    }
    let want = Type::tile(Elem::Scalar(elem), p.shape.clone());
    if has_other && !same(t(f, op.operands[2])?, &want) {
        return Err(format!(
            "`other` has type {}, expected {want}",
            t(f, op.operands[2])?
        ));
    }
    expect_result(f, op, &want)
}

fn check_store(f: &Function, op: &Op, has_mask: bool) -> Rule {
    counts(op, 2 + has_mask as usize, 0)?;
    let (p, v) = (t(f, op.operands[0])?, t(f, op.operands[1])?);
    let elem = p
        .elem
        .pointee()
        .ok_or_else(|| format!("stores through pointers, got {p}"))?;
    if !same(v, &Type::tile(Elem::Scalar(elem), p.shape.clone())) {
        return Err(format!(
            "stores {v} through {p}; value must be {elem} of the pointers' shape"
        ));
    }
    if has_mask && !same(t(f, op.operands[2])?, &bool_ty(&p.shape)) {
        return Err(format!(
            "mask has type {}, expected {}",
            t(f, op.operands[2])?,
            bool_ty(&p.shape)
        ));
    }
    Ok(())
}

fn check_dot(f: &Function, op: &Op) -> Rule {
    counts(op, 3, 1)?;
    let (a, b, c) = (
        t(f, op.operands[0])?,
        t(f, op.operands[1])?,
        t(f, op.operands[2])?,
    );
    let float_in = a.elem.scalar().is_some_and(|s| s.is_float());
    if a.rank() != 2 || b.rank() != 2 || a.shape[1] != b.shape[0] || a.elem != b.elem || !float_in {
        return Err(format!(
            "dot({a}, {b}) needs float [m, k] and [k, n] tiles of one element type"
        ));
    }
    let out = Type::tile(Elem::Scalar(ScalarType::F32), vec![a.shape[0], b.shape[1]]);
    if !same(c, &out) {
        return Err(format!("accumulator has type {c}, expected {out}"));
    }
    expect_result(f, op, &out)
}

/// The operands of `block`'s last op when it has kind `want` (else an error naming `what`).
fn terminator_operands<'f>(
    f: &'f Function,
    block: &Block,
    want: &OpKind,
    what: &str,
) -> Result<&'f [ValueId], String> {
    let last = block.ops.last().and_then(|o| f.ops.get(o.0 as usize));
    match last {
        Some(op) if std::mem::discriminant(&op.kind) == std::mem::discriminant(want) => {
            Ok(&op.operands)
        }
        _ => Err(format!(
            "{what} does not end in `{}`",
            crate::ir::printer::mnemonic(want)
        )),
    }
}

/// `vals` have exactly the types `want` (layouts included).
fn carried(f: &Function, vals: &[ValueId], want: &[Type], what: &str) -> Rule {
    if vals.len() != want.len() {
        return Err(format!(
            "{what} passes {} value(s), expected {}",
            vals.len(),
            want.len()
        ));
    }
    for (i, (&v, w)) in vals.iter().zip(want).enumerate() {
        let got = t(f, v)?;
        if got != w {
            return Err(format!(
                "{what} value {i} (%{}) has type {}, expected {}",
                v.0,
                show(got),
                show(w)
            ));
        }
    }
    Ok(())
}

fn show(t: &Type) -> String {
    crate::ir::printer::format_type(t)
}

fn types(f: &Function, vs: &[ValueId]) -> Result<Vec<Type>, String> {
    vs.iter().map(|&v| t(f, v).cloned()).collect()
}

fn check_for(f: &Function, op: &Op) -> Rule {
    if op.operands.len() < 3 {
        return Err(format!(
            "has {} operand(s), expected lo, hi, step and the inits",
            op.operands.len()
        ));
    }
    for (i, name) in ["lo", "hi", "step"].iter().enumerate() {
        let ty = t(f, op.operands[i])?;
        if !same(ty, &i32_scalar()) {
            return Err(format!("`{name}` has type {ty}, expected i32"));
        }
    }
    let results = types(f, &op.results)?;
    carried(f, &op.operands[3..], &results, "init list")?;
    let y = terminator_operands(f, &op.regions[0], &OpKind::Yield, "body")?;
    carried(f, y, &results, "body `yield`")
}

fn check_if(f: &Function, op: &Op) -> Rule {
    counts(op, 1, op.results.len())?;
    let c = t(f, op.operands[0])?;
    if !same(c, &Type::scalar(ScalarType::Bool)) {
        return Err(format!("condition has type {c}, expected a bool scalar"));
    }
    let results = types(f, &op.results)?;
    for (i, name) in ["then region", "else region"].iter().enumerate() {
        let y = terminator_operands(f, &op.regions[i], &OpKind::Yield, name)?;
        carried(f, y, &results, &format!("{name} `yield`"))?;
    }
    Ok(())
}

fn check_while(f: &Function, op: &Op) -> Rule {
    let inits = types(f, &op.operands)?;
    let results = types(f, &op.results)?;
    let c = terminator_operands(f, &op.regions[0], &OpKind::Condition, "before region")?;
    let Some((&flag, vars)) = c.split_first() else {
        return Err("`condition` has no flag operand".into());
    };
    let ft = t(f, flag)?;
    if !same(ft, &Type::scalar(ScalarType::Bool)) {
        return Err(format!(
            "`condition` flag has type {ft}, expected a bool scalar"
        ));
    }
    carried(f, vars, &results, "`condition`")?;
    let y = terminator_operands(f, &op.regions[1], &OpKind::Yield, "body")?;
    carried(f, y, &inits, "body `yield`")
}
