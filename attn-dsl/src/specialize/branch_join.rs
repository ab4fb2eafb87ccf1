//! Joining the two branches of a runtime `if` into one `If` op.
//!
//! Each branch is lowered into its own block first; only then is it known which values
//! leave the `if` (the `if`'s own value, the variables either branch reassigned) and of
//! which type (a constexpr in one branch adopts the runtime type of the other). The
//! `Yield`s, with any constants they need, are appended to the finished blocks.

use super::lowerer::{Lowerer, R};
use super::typing::{joint_default, same_type};
use super::value::{describe_const, Val};
use super::DslError;
use crate::ir::{Block, OpKind, Type, ValueId};
use proc_macro2::Span;

/// What a value leaving the `if` is, for messages.
#[derive(Clone)]
pub(crate) enum Label {
    /// The `if` expression's value (or the function result after an early return).
    Value,
    /// A variable reassigned in a branch.
    Var(String),
}

/// One value leaving the `if`: its value at the end of each branch and, for a variable,
/// before the `if`.
pub(crate) struct BranchValue {
    pub label: Label,
    pub then_v: Val,
    pub else_v: Val,
    pub before: Option<Val>,
}

/// How one value is produced after the `if`.
enum Plan {
    /// Identical in both branches (constexprs, units): no result needed.
    Same(Val),
    /// An `If` result of this type.
    Yield(Type, Val, Val),
    Tuple(Vec<Plan>),
}

impl Plan {
    fn yields<'p>(&'p self, out: &mut Vec<(&'p Type, &'p Val, &'p Val)>) {
        match self {
            Plan::Same(_) => {}
            Plan::Yield(t, a, b) => out.push((t, a, b)),
            Plan::Tuple(ps) => ps.iter().for_each(|p| p.yields(out)),
        }
    }
    fn rebuild(self, results: &mut impl Iterator<Item = ValueId>) -> Val {
        match self {
            Plan::Same(v) => v,
            Plan::Yield(..) => results.next().map_or(Val::Unit, Val::Runtime),
            Plan::Tuple(ps) => Val::Tuple(ps.into_iter().map(|p| p.rebuild(results)).collect()),
        }
    }
}

fn type_of_leaf(l: &Lowerer, v: &Val) -> Option<Type> {
    match v {
        Val::Runtime(id) => Some(l.b.ty(*id).clone()),
        _ => None,
    }
}

impl<'m, 'f> Lowerer<'m, 'f> {
    /// Emits `If(cond)` over the lowered branch blocks and returns the joined values.
    pub fn join_if(
        &mut self,
        cond: ValueId,
        then_b: Block,
        else_b: Block,
        values: Vec<BranchValue>,
        span: Span,
    ) -> R<Vec<Val>> {
        let plans = values
            .iter()
            .map(|v| self.plan(&v.label, &v.then_v, &v.else_v, v.before.as_ref(), span))
            .collect::<R<Vec<_>>>()?;
        let mut leaves = vec![];
        plans.iter().for_each(|p| p.yields(&mut leaves));
        let tys: Vec<Type> = leaves.iter().map(|l| l.0.clone()).collect();
        let then_vals: Vec<(Type, Val)> =
            leaves.iter().map(|l| (l.0.clone(), l.1.clone())).collect();
        let else_vals: Vec<(Type, Val)> =
            leaves.iter().map(|l| (l.0.clone(), l.2.clone())).collect();
        let then_b = self.append_yield(then_b, &then_vals, span)?;
        let else_b = self.append_yield(else_b, &else_vals, span)?;
        self.at(span);
        let results = self
            .b
            .emit(OpKind::If, vec![cond], tys, vec![then_b, else_b]);
        let mut it = results.into_iter();
        Ok(plans.into_iter().map(|p| p.rebuild(&mut it)).collect())
    }

    /// Ends a finished branch block with `Yield`, materializing constexprs it yields.
    fn append_yield(&mut self, mut block: Block, vals: &[(Type, Val)], span: Span) -> R<Block> {
        self.b.begin_block(&[]);
        let mut ids = vec![];
        for (t, v) in vals {
            let id = self.coerce(v, t, span, &|got| {
                format!("`if` branch value {got} does not fit {t}")
            });
            match id {
                Ok(id) => ids.push(id),
                Err(e) => {
                    self.b.end_block();
                    return Err(e);
                }
            }
        }
        self.at(span);
        self.b.yield_(ids);
        let tail = self.b.end_block();
        block.ops.extend(tail.ops);
        Ok(block)
    }

    fn plan(&self, label: &Label, t: &Val, e: &Val, before: Option<&Val>, span: Span) -> R<Plan> {
        if t == e {
            return Ok(Plan::Same(t.clone()));
        }
        let who = match label {
            Label::Value => "the `if` branches".to_string(),
            Label::Var(n) => format!("variable `{n}`"),
        };
        match (t, e) {
            (Val::Tuple(a), Val::Tuple(b)) if a.len() == b.len() => Ok(Plan::Tuple(
                a.iter()
                    .zip(b)
                    .map(|(x, y)| self.plan(label, x, y, None, span))
                    .collect::<R<_>>()?,
            )),
            (Val::Runtime(_) | Val::Const(_), Val::Runtime(_) | Val::Const(_)) => {
                let ty = self.leaf_type(&who, label, t, e, before, span)?;
                Ok(Plan::Yield(ty, t.clone(), e.clone()))
            }
            _ => Err(DslError::new(
                span,
                format!(
                    "{who} give different kinds of values: {} vs {}",
                    t.kind_name(),
                    e.kind_name()
                ),
            )),
        }
    }

    /// The one type a joined value has; every runtime version of it must have that type.
    fn leaf_type(
        &self,
        who: &str,
        label: &Label,
        t: &Val,
        e: &Val,
        before: Option<&Val>,
        span: Span,
    ) -> R<Type> {
        let before_ty = before.and_then(|v| type_of_leaf(self, v));
        let (tt, et) = (type_of_leaf(self, t), type_of_leaf(self, e));
        if let (Label::Var(n), Some(b)) = (label, &before_ty) {
            for after in [&tt, &et].into_iter().flatten() {
                if !same_type(b, after) {
                    return Err(DslError::new(
                        span,
                        format!("variable `{n}` changes type in `if`: {b} before, {after} after"),
                    ));
                }
            }
        }
        match (tt, et) {
            (Some(a), Some(b)) if !same_type(&a, &b) => Err(DslError::new(
                span,
                format!("{who} have different types: {a} vs {b}"),
            )),
            (Some(a), _) | (None, Some(a)) => Ok(a),
            (None, None) if before_ty.is_some() => {
                Ok(before_ty.unwrap_or_else(|| Type::scalar(crate::ir::ScalarType::I32)))
            }
            (None, None) => match (t, e) {
                (Val::Const(a), Val::Const(b)) => {
                    joint_default(a, b).map(Type::scalar).ok_or_else(|| {
                        DslError::new(
                            span,
                            format!(
                                "{who} have different types: {} vs {}",
                                describe_const(a),
                                describe_const(b)
                            ),
                        )
                    })
                }
                _ => Err(DslError::new(
                    span,
                    format!("{who} give values that cannot be joined"),
                )),
            },
        }
    }
}
