//! Structured control flow: `if` (folded when the condition is constexpr), runtime
//! `for` ranges and `while` loops (→ `For`/`While` with the reassigned variables carried
//! as block arguments), and `static_range` loops (unrolled, index constexpr per copy).

use super::assigned_vars::{assigned_names, assigned_names_in_expr};
use super::branch_join::{BranchValue, Label};
use super::expr::{text, IntRole};
use super::generic_args::segment_generics;
use super::lowerer::{Lowerer, R};
use super::sequence::Cond;
use super::typing::{default_scalar, same_type};
use super::value::Val;
use super::{ConstValue, DslError};
use crate::ir::{OpKind, ScalarType, Type, ValueId};
use proc_macro2::Span;
use syn::spanned::Spanned;

/// Copies of a `static_range` body beyond this are surely a mistake (and slow to compile).
const MAX_UNROLL: i64 = 4096;

/// What a `for` iterates over.
enum Iterable<'a> {
    Runtime {
        lo: &'a syn::Expr,
        hi: &'a syn::Expr,
        step: Option<&'a syn::Expr>,
    },
    Static(&'a syn::GenericArgument),
}

fn strip(e: &syn::Expr) -> &syn::Expr {
    match e {
        syn::Expr::Paren(p) => strip(&p.expr),
        syn::Expr::Group(g) => strip(&g.expr),
        other => other,
    }
}

fn iterable(e: &syn::Expr) -> R<Iterable<'_>> {
    let bad = || {
        DslError::new(
            e.span(),
            format!(
                "a `for` loop iterates over `lo..hi`, `(lo..hi).step_by(s)` or `static_range::<N>()`, not `{}`",
                text(e)
            ),
        )
    };
    fn range(r: &syn::Expr) -> Option<(&syn::Expr, &syn::Expr)> {
        match strip(r) {
            syn::Expr::Range(syn::ExprRange {
                start: Some(lo),
                end: Some(hi),
                limits: syn::RangeLimits::HalfOpen(_),
                ..
            }) => Some((&**lo, &**hi)),
            _ => None,
        }
    }
    match strip(e) {
        syn::Expr::MethodCall(m) if m.method == "step_by" && m.args.len() == 1 => {
            let (lo, hi) = range(&m.receiver).ok_or_else(bad)?;
            Ok(Iterable::Runtime {
                lo,
                hi,
                step: Some(&m.args[0]),
            })
        }
        syn::Expr::Call(c) if c.args.is_empty() => match &*c.func {
            syn::Expr::Path(p)
                if p.path.segments.len() == 1 && p.path.segments[0].ident == "static_range" =>
            {
                match segment_generics(&p.path.segments[0]).as_slice() {
                    [g] => Ok(Iterable::Static(g)),
                    _ => Err(DslError::new(
                        c.span(),
                        "`static_range` needs its count: `static_range::<N>()`",
                    )),
                }
            }
            _ => Err(bad()),
        },
        other => range(other)
            .map(|(lo, hi)| Iterable::Runtime { lo, hi, step: None })
            .ok_or_else(bad),
    }
}

/// The loop variable's name (`None` for `_`).
fn loop_var(pat: &syn::Pat) -> R<Option<String>> {
    match pat {
        syn::Pat::Ident(pi) if pi.subpat.is_none() && pi.by_ref.is_none() => {
            Ok(Some(pi.ident.to_string()))
        }
        syn::Pat::Wild(_) => Ok(None),
        other => Err(DslError::new(
            other.span(),
            format!("a `for` loop binds one name, not `{}`", text(other)),
        )),
    }
}

impl<'m, 'f> Lowerer<'m, 'f> {
    /// `if` as an expression or statement without `return` in it.
    pub fn lower_if(&mut self, i: &syn::ExprIf) -> R<Val> {
        let c = match self.if_condition(i)? {
            Cond::Const(true) => return self.lower_block_value(&i.then_branch),
            Cond::Const(false) => return self.lower_else(i),
            Cond::Runtime(c) => c,
        };
        let span = i.span();
        let snap = self.env().snapshot();
        self.b.begin_block(&[]);
        let tv = self.lower_block_value(&i.then_branch);
        let then_env = self.env().snapshot();
        let tb = self.b.end_block();
        let tv = tv?;
        self.env_mut().restore(&snap);
        self.b.begin_block(&[]);
        let ev = self.lower_else(i);
        let else_env = self.env().snapshot();
        let eb = self.b.end_block();
        let ev = ev?;
        self.env_mut().restore(&snap);
        if i.else_branch.is_none() && tv != Val::Unit {
            return Err(DslError::new(
                span,
                "an `if` without `else` cannot produce a value",
            ));
        }
        let carried: Vec<usize> = (0..snap.len())
            .filter(|&k| then_env[k] != snap[k] || else_env[k] != snap[k])
            .collect();
        let mut values = vec![BranchValue {
            label: Label::Value,
            then_v: tv,
            else_v: ev,
            before: None,
        }];
        for &k in &carried {
            values.push(BranchValue {
                label: Label::Var(self.env().var(k).name.clone()),
                then_v: then_env[k].clone(),
                else_v: else_env[k].clone(),
                before: Some(snap[k].clone()),
            });
        }
        let mut out = self.join_if(c, tb, eb, values, span)?.into_iter();
        let value = out.next().unwrap_or(Val::Unit);
        for (k, v) in carried.into_iter().zip(out) {
            let name = self.env().var(k).name.clone();
            self.name_value(&v, &name);
            self.env_mut().set(k, v);
        }
        Ok(value)
    }

    fn lower_else(&mut self, i: &syn::ExprIf) -> R<Val> {
        match &i.else_branch {
            None => Ok(Val::Unit),
            Some((_, e)) => self.lower_expr(e),
        }
    }

    pub fn lower_for(&mut self, f: &syn::ExprForLoop) -> R<()> {
        let var = loop_var(&f.pat)?;
        match iterable(&f.expr)? {
            Iterable::Static(g) => self.unroll(g, var, &f.body),
            Iterable::Runtime { lo, hi, step } => self.lower_runtime_for(f, var, lo, hi, step),
        }
    }

    /// `for i in static_range::<N>()`: N copies of the body, `i` a constexpr in each.
    fn unroll(
        &mut self,
        g: &syn::GenericArgument,
        var: Option<String>,
        body: &syn::Block,
    ) -> R<()> {
        let (n, t) = self.generic_int(g, IntRole::Shape)?;
        if !(0..=MAX_UNROLL).contains(&n) {
            return Err(DslError::new(
                g.span(),
                format!("static_range::<{t}>() unrolls {n} copies; allowed 0..={MAX_UNROLL}"),
            ));
        }
        for k in 0..n {
            self.env_mut().push_scope();
            if let Some(v) = &var {
                self.env_mut()
                    .define(v, Val::Const(ConstValue::Int(k)), false);
            }
            let r = self.lower_block_value(body);
            self.env_mut().pop_scope();
            r?;
        }
        Ok(())
    }

    /// A loop bound or step as an i32 scalar.
    fn loop_bound(&mut self, e: &syn::Expr) -> R<ValueId> {
        let v = self.lower_expr(e)?;
        self.loop_bound_of(v, e)
    }

    fn loop_bound_of(&mut self, v: Val, e: &syn::Expr) -> R<ValueId> {
        let span = e.span();
        match v {
            Val::Const(c @ ConstValue::Int(_)) => self.const_as(&c, ScalarType::I32, "for", span),
            Val::Runtime(id) if *self.b.ty(id) == Type::scalar(ScalarType::I32) => Ok(id),
            Val::Runtime(id) => Err(DslError::new(
                span,
                format!(
                    "`for` bounds must be i32 scalars, `{}` is {}",
                    text(e),
                    self.b.ty(id)
                ),
            )),
            other => Err(DslError::new(
                span,
                format!(
                    "`for` bounds must be i32 scalars, `{}` is {}",
                    text(e),
                    other.kind_name()
                ),
            )),
        }
    }

    /// Env positions of the outer variables a loop may reassign, in declaration order.
    fn carried_vars(&self, names: Vec<String>) -> Vec<usize> {
        let mut idx: Vec<usize> = names
            .iter()
            .filter_map(|n| self.env().index_of(n))
            .collect();
        idx.sort_unstable();
        idx.dedup();
        idx
    }

    /// Loop-entry values of carried variables (constexprs materialize with default dtypes).
    fn loop_inits(&mut self, carried: &[usize], what: &str, span: Span) -> R<Vec<ValueId>> {
        carried
            .iter()
            .map(|&k| {
                let var = self.env().var(k).clone();
                match &var.val {
                    Val::Runtime(id) => Ok(*id),
                    Val::Const(c) if default_scalar(c).is_some() => {
                        self.runtime(var.val.clone(), what, span)
                    }
                    other => Err(DslError::new(
                        span,
                        format!(
                            "variable `{}` is reassigned in a `{what}` loop but holds {}",
                            var.name,
                            other.kind_name()
                        ),
                    )),
                }
            })
            .collect()
    }

    /// Binds carried variables to region arguments (named after them).
    fn bind_carried(&mut self, carried: &[usize], vals: &[ValueId]) {
        for (&k, &v) in carried.iter().zip(vals) {
            let name = self.env().var(k).name.clone();
            self.name_value(&Val::Runtime(v), &name);
            self.env_mut().set(k, Val::Runtime(v));
        }
    }

    /// The carried variables' current values, with the types they entered the loop with.
    fn carried_now(
        &mut self,
        carried: &[usize],
        tys: &[Type],
        what: &str,
        span: Span,
    ) -> R<Vec<ValueId>> {
        carried
            .iter()
            .zip(tys)
            .map(|(&k, t)| {
                let var = self.env().var(k).clone();
                let msg = |got: String| {
                    format!(
                        "variable `{}` changes type in `{what}` loop: {t} before, {got} after",
                        var.name
                    )
                };
                self.coerce(&var.val, t, span, &msg)
            })
            .collect()
    }

    fn lower_runtime_for(
        &mut self,
        f: &syn::ExprForLoop,
        var: Option<String>,
        lo: &syn::Expr,
        hi: &syn::Expr,
        step: Option<&syn::Expr>,
    ) -> R<()> {
        let span = f.span();
        let lo = self.loop_bound(lo)?;
        let hi = self.loop_bound(hi)?;
        let step = match step {
            Some(s) => {
                let v = self.lower_expr(s)?;
                if let Val::Const(ConstValue::Int(k)) = v {
                    if k <= 0 {
                        return Err(DslError::new(
                            s.span(),
                            format!("`step_by` needs a positive step, got {k}"),
                        ));
                    }
                }
                self.loop_bound_of(v, s)?
            }
            None => {
                self.at(span);
                self.b.const_i32(1)
            }
        };
        let carried = self.carried_vars(assigned_names(&f.body));
        let inits = self.loop_inits(&carried, "for", span)?;
        let tys: Vec<Type> = inits.iter().map(|&v| self.b.ty(v).clone()).collect();
        let mut arg_tys = vec![Type::scalar(ScalarType::I32)];
        arg_tys.extend(tys.iter().cloned());
        let args = self.b.begin_block(&arg_tys);
        let body = self.for_body(f, &var, &carried, &args, &tys, span);
        let region = self.b.end_block();
        body?;
        let mut operands = vec![lo, hi, step];
        operands.extend(&inits);
        self.at(span);
        let results = self.b.emit(OpKind::For, operands, tys, vec![region]);
        self.bind_carried(&carried, &results);
        Ok(())
    }

    fn for_body(
        &mut self,
        f: &syn::ExprForLoop,
        var: &Option<String>,
        carried: &[usize],
        args: &[ValueId],
        tys: &[Type],
        span: Span,
    ) -> R<()> {
        self.bind_carried(carried, &args[1..]);
        self.env_mut().push_scope();
        if let Some(v) = var {
            self.name_value(&Val::Runtime(args[0]), v);
            self.env_mut().define(v, Val::Runtime(args[0]), false);
        }
        let r = self.lower_block_value(&f.body);
        self.env_mut().pop_scope();
        r?;
        let next = self.carried_now(carried, tys, "for", span)?;
        self.at(span);
        self.b.yield_(next);
        Ok(())
    }

    pub fn lower_while(&mut self, w: &syn::ExprWhile) -> R<()> {
        let span = w.span();
        let mut names = assigned_names_in_expr(&w.cond);
        names.extend(assigned_names(&w.body));
        let carried = self.carried_vars(names);
        let inits = self.loop_inits(&carried, "while", span)?;
        let tys: Vec<Type> = inits.iter().map(|&v| self.b.ty(v).clone()).collect();
        let before_args = self.b.begin_block(&tys);
        let cond = self.while_cond(w, &carried, &before_args, &tys);
        let before = self.b.end_block();
        cond?;
        let body_args = self.b.begin_block(&tys);
        let body = self.while_body(w, &carried, &body_args, &tys);
        let after = self.b.end_block();
        body?;
        self.at(span);
        let results = self.b.emit(OpKind::While, inits, tys, vec![before, after]);
        self.bind_carried(&carried, &results);
        Ok(())
    }

    fn while_cond(
        &mut self,
        w: &syn::ExprWhile,
        carried: &[usize],
        args: &[ValueId],
        tys: &[Type],
    ) -> R<()> {
        let span = w.cond.span();
        self.bind_carried(carried, args);
        let c = match self.lower_expr(&w.cond)? {
            Val::Const(c @ ConstValue::Bool(_)) => {
                self.const_as(&c, ScalarType::Bool, "while", span)?
            }
            Val::Runtime(id) if *self.b.ty(id) == Type::scalar(ScalarType::Bool) => id,
            Val::Runtime(id) => {
                return Err(DslError::new(
                    span,
                    format!(
                        "`while` condition must be a bool scalar, got {}",
                        self.b.ty(id)
                    ),
                ))
            }
            other => {
                return Err(DslError::new(
                    span,
                    format!(
                        "`while` condition must be a bool, got {}",
                        other.kind_name()
                    ),
                ))
            }
        };
        let vars = self.carried_now(carried, tys, "while", span)?;
        let mut operands = vec![c];
        operands.extend(vars);
        self.at(span);
        self.b.emit(OpKind::Condition, operands, vec![], vec![]);
        Ok(())
    }

    fn while_body(
        &mut self,
        w: &syn::ExprWhile,
        carried: &[usize],
        args: &[ValueId],
        tys: &[Type],
    ) -> R<()> {
        let span = w.span();
        self.bind_carried(carried, args);
        self.lower_block_value(&w.body)?;
        let next = self.carried_now(carried, tys, "while", span)?;
        debug_assert!(next
            .iter()
            .zip(tys)
            .all(|(v, t)| same_type(self.b.ty(*v), t)));
        self.at(span);
        self.b.yield_(next);
        Ok(())
    }
}
