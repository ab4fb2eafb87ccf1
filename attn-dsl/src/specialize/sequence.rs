//! Statement sequences, `let`, and early `return`.
//!
//! Early exit is structured: when a statement contains a `return` (an `if` with a
//! returning branch, a block), the rest of the enclosing sequences is lowered inside each
//! of its branches — `if c { A; return; } R` becomes `if c { A } else { R }` — so the IR
//! needs no jumps. The items of the rest are carried as a flat list with scope markers,
//! which keeps `let` scoping exact after the concatenation.

use super::branch_join::{BranchValue, Label};
use super::expr::text;
use super::lowerer::{Lowerer, R};
use super::value::Val;
use super::{ConstValue, DslError};
use crate::ir::{Elem, ScalarType, ValueId};
use syn::spanned::Spanned;
use syn::visit::Visit;

/// One step of a statement sequence.
#[derive(Clone, Copy)]
pub(crate) enum SeqItem<'a> {
    Local(&'a syn::Local),
    /// An expression statement; `true` when it ends in `;`.
    Expr(&'a syn::Expr, bool),
    /// Closes the scope of a block whose items preceded it.
    EndScope,
}

/// How a sequence ended.
pub(crate) enum Flow {
    /// Ran to its end; the value of its tail expression (or unit).
    Normal(Val),
    /// Hit a `return` (or absorbed the rest of the function behind one): the function's result.
    Returned(Val),
}

impl Flow {
    fn value(self) -> Val {
        match self {
            Flow::Normal(v) | Flow::Returned(v) => v,
        }
    }
}

/// The condition of an `if`, once evaluated.
pub(crate) enum Cond {
    Const(bool),
    Runtime(ValueId),
}

fn block_items(block: &syn::Block) -> R<Vec<SeqItem<'_>>> {
    block
        .stmts
        .iter()
        .map(|s| match s {
            syn::Stmt::Local(l) => Ok(SeqItem::Local(l)),
            syn::Stmt::Expr(e, semi) => Ok(SeqItem::Expr(e, semi.is_some())),
            other => Err(DslError::new(
                other.span(),
                format!("unsupported statement `{}`", text(other)),
            )),
        })
        .collect()
}

/// Whether `e` contains a `return` (loops cannot: the front end rejects that).
fn contains_return(e: &syn::Expr) -> bool {
    struct Finder(bool);
    impl<'ast> Visit<'ast> for Finder {
        fn visit_expr_return(&mut self, _: &'ast syn::ExprReturn) {
            self.0 = true;
        }
    }
    let mut f = Finder(false);
    f.visit_expr(e);
    f.0
}

/// The first `return` inside `e`, for pointing at it.
fn first_return_span(e: &syn::Expr) -> proc_macro2::Span {
    struct Finder(Option<proc_macro2::Span>);
    impl<'ast> Visit<'ast> for Finder {
        fn visit_expr_return(&mut self, r: &'ast syn::ExprReturn) {
            self.0.get_or_insert(r.span());
        }
    }
    let mut f = Finder(None);
    f.visit_expr(e);
    f.0.unwrap_or_else(|| e.span())
}

impl<'m, 'f> Lowerer<'m, 'f> {
    /// Lowers a function body; returns its result (tail expression or returned value).
    pub fn lower_fn_body(&mut self, block: &syn::Block) -> R<Val> {
        let depth = self.env().depth();
        self.env_mut().push_scope();
        let flow = self.lower_seq(&block_items(block)?);
        self.env_mut().truncate_scopes(depth);
        flow.map(Flow::value)
    }

    /// Lowers a block used as a value (branches, loop bodies, `{ .. }` expressions).
    pub fn lower_block_value(&mut self, block: &syn::Block) -> R<Val> {
        let depth = self.env().depth();
        self.env_mut().push_scope();
        let flow = self.lower_seq(&block_items(block)?);
        self.env_mut().truncate_scopes(depth);
        match flow? {
            Flow::Normal(v) => Ok(v),
            Flow::Returned(_) => Err(DslError::new(
                block.span(),
                "`return` must be a statement of the function body or of an `if` branch in it, not inside an expression",
            )),
        }
    }

    fn lower_seq(&mut self, items: &[SeqItem]) -> R<Flow> {
        let last = items.iter().rposition(|i| !matches!(i, SeqItem::EndScope));
        for (i, item) in items.iter().enumerate() {
            match *item {
                SeqItem::EndScope => self.env_mut().pop_scope(),
                SeqItem::Local(l) => self.lower_local(l)?,
                SeqItem::Expr(syn::Expr::Return(r), _) => {
                    return Ok(Flow::Returned(self.lower_return(r)?))
                }
                SeqItem::Expr(e, semi) if contains_return(e) => {
                    return self.lower_returning(e, semi, &items[i + 1..])
                }
                SeqItem::Expr(e, semi) => {
                    self.at(e.span());
                    let v = self.lower_expr(e)?;
                    if Some(i) == last && !semi {
                        return Ok(Flow::Normal(v));
                    }
                }
            }
        }
        Ok(Flow::Normal(Val::Unit))
    }

    fn lower_return(&mut self, r: &syn::ExprReturn) -> R<Val> {
        let v = match &r.expr {
            Some(e) => self.lower_expr(e)?,
            None => Val::Unit,
        };
        if self.frame().is_kernel && v != Val::Unit {
            return Err(DslError::new(
                r.span(),
                "a kernel returns nothing; write `return;`",
            ));
        }
        Ok(v)
    }

    fn lower_local(&mut self, l: &syn::Local) -> R<()> {
        let init = l
            .init
            .as_ref()
            .ok_or_else(|| DslError::new(l.span(), "`let` needs an initializer"))?;
        self.at(l.span());
        let v = self.lower_expr(&init.expr)?;
        self.bind_pat(&l.pat, v)
    }

    /// Binds a `let` pattern: a name, `_`, or a tuple of those.
    fn bind_pat(&mut self, pat: &syn::Pat, v: Val) -> R<()> {
        match pat {
            syn::Pat::Ident(pi) if pi.by_ref.is_none() && pi.subpat.is_none() => {
                let name = pi.ident.to_string();
                self.name_value(&v, &name);
                self.env_mut().define(&name, v, pi.mutability.is_some());
                Ok(())
            }
            syn::Pat::Wild(_) => Ok(()),
            syn::Pat::Type(pt) => self.bind_pat(&pt.pat, v),
            syn::Pat::Paren(p) => self.bind_pat(&p.pat, v),
            syn::Pat::Tuple(t) => match v {
                Val::Tuple(vals) if vals.len() == t.elems.len() => t
                    .elems
                    .iter()
                    .zip(vals)
                    .try_for_each(|(p, v)| self.bind_pat(p, v)),
                other => Err(DslError::new(
                    t.span(),
                    format!(
                        "pattern `{}` expects a tuple of {}, got {}",
                        text(t),
                        t.elems.len(),
                        other.kind_name()
                    ),
                )),
            },
            other => Err(DslError::new(
                other.span(),
                format!("unsupported pattern `{}`", text(other)),
            )),
        }
    }

    /// A statement containing a `return`, followed by the `rest` of the function.
    fn lower_returning(&mut self, e: &syn::Expr, semi: bool, rest: &[SeqItem]) -> R<Flow> {
        match e {
            syn::Expr::Block(b) if b.label.is_none() => {
                let mut items = block_items(&b.block)?;
                items.push(SeqItem::EndScope);
                items.extend_from_slice(rest);
                self.env_mut().push_scope();
                self.lower_seq(&items)
            }
            syn::Expr::If(i) => self.lower_returning_if(i, semi, rest),
            syn::Expr::Group(g) => self.lower_returning(&g.expr, semi, rest),
            other => Err(DslError::new(
                first_return_span(other),
                "`return` must be a statement of the function body or of an `if` branch in it",
            )),
        }
    }

    /// `if c { A } else { B } R` with a `return` in A or B: `if c { A; R } else { B; R }`.
    fn lower_returning_if(&mut self, i: &syn::ExprIf, semi: bool, rest: &[SeqItem]) -> R<Flow> {
        let mut then_items = block_items(&i.then_branch)?;
        then_items.push(SeqItem::EndScope);
        then_items.extend_from_slice(rest);
        let mut else_items = match &i.else_branch {
            None => vec![],
            Some((_, e)) => match &**e {
                syn::Expr::Block(b) => block_items(&b.block)?,
                other => vec![SeqItem::Expr(other, semi)],
            },
        };
        else_items.push(SeqItem::EndScope);
        else_items.extend_from_slice(rest);
        let cond = self.if_condition(i)?;
        let c = match cond {
            Cond::Const(k) => {
                self.env_mut().push_scope();
                return self.lower_seq(if k { &then_items } else { &else_items });
            }
            Cond::Runtime(c) => c,
        };
        let snap = self.env().snapshot();
        let depth = self.env().depth();
        let branch = |l: &mut Self, items: &[SeqItem]| -> R<(Val, crate::ir::Block)> {
            l.b.begin_block(&[]);
            l.env_mut().push_scope();
            let flow = l.lower_seq(items);
            l.env_mut().truncate_scopes(depth);
            let block = l.b.end_block();
            l.env_mut().restore(&snap);
            Ok((flow?.value(), block))
        };
        let (tv, tb) = branch(self, &then_items)?;
        let (ev, eb) = branch(self, &else_items)?;
        let value = BranchValue {
            label: Label::Value,
            then_v: tv,
            else_v: ev,
            before: None,
        };
        let mut out = self.join_if(c, tb, eb, vec![value], i.span())?;
        Ok(Flow::Returned(out.pop().unwrap_or(Val::Unit)))
    }

    /// Evaluates an `if` condition: `if const { C }` must be constexpr; a runtime condition
    /// must be a bool scalar.
    pub fn if_condition(&mut self, i: &syn::ExprIf) -> R<Cond> {
        let (v, forced, span, txt) = match &*i.cond {
            syn::Expr::Const(c) => {
                let inner = match c.block.stmts.as_slice() {
                    [syn::Stmt::Expr(e, None)] => text(e),
                    _ => text(&c.block),
                };
                (self.lower_block_value(&c.block)?, true, c.span(), inner)
            }
            e => (self.lower_expr(e)?, false, e.span(), text(e)),
        };
        match v {
            Val::Const(ConstValue::Bool(k)) => Ok(Cond::Const(k)),
            Val::Runtime(_) if forced => Err(DslError::new(
                span,
                format!("constexpr `if` on a runtime value `{txt}`"),
            )),
            Val::Runtime(id) => {
                let t = self.b.ty(id);
                if t.elem != Elem::Scalar(ScalarType::Bool) || !t.is_scalar() {
                    return Err(DslError::new(
                        span,
                        format!("`if` condition must be a bool scalar, got {t} (use `select` for an elementwise choice)"),
                    ));
                }
                Ok(Cond::Runtime(id))
            }
            Val::Const(c) => Err(DslError::new(
                span,
                format!(
                    "`if` condition must be a bool, got {}",
                    super::value::describe_const(&c)
                ),
            )),
            other => Err(DslError::new(
                span,
                format!("`if` condition must be a bool, got {}", other.kind_name()),
            )),
        }
    }
}
