//! Recomputed loops and branches (see `gpu_ir::remat` for which qualify): the result of an
//! elementwise `for` or `if` at some elements is the same loop or branch run as statements
//! over those elements, the carried tiles held per element in small arrays and the region's
//! scalars (its loads and tests) computed once per iteration for all of them. A copy's
//! hoisted row reduction runs it once for every element its thread folds; anywhere else it
//! is evaluated for one element, inside a lambda.

use super::c_types::reg_type;
use super::elem_index::ElemIndex;
use super::emitter::Emitter;
use super::remat::Scope;
use super::CodegenError;
use crate::ir::{Block, Op, OpKind, ValueId};

type Res<T> = Result<T, CodegenError>;

/// The elements a recomputed region runs for: `n` items, item `t` being element `at` once
/// the declarations `decl` (in terms of `t`) are made.
pub(crate) struct Batch {
    pub(crate) n: usize,
    /// The item index variable (unused with one item and no declarations).
    pub(crate) t: String,
    pub(crate) decl: String,
    pub(crate) at: ElemIndex,
}

impl Batch {
    /// One element, with coordinates already in scope.
    pub(crate) fn one(at: &ElemIndex) -> Batch {
        Batch {
            n: 1,
            t: String::new(),
            decl: String::new(),
            at: at.clone(),
        }
    }

    /// The index of the current item in the per-item arrays.
    fn slot(&self) -> &str {
        if self.n == 1 {
            "0"
        } else {
            &self.t
        }
    }

    /// Appends `body` run for every item (an unrolled loop over `t`, or a block for one item).
    pub(crate) fn for_items(&self, body: &str, out: &mut Vec<String>) {
        let decl = &self.decl;
        if self.n == 1 {
            let t = if decl.is_empty() {
                String::new()
            } else {
                format!("const int {} = 0; ", self.t)
            };
            out.push(format!("{{ {t}{decl} {body} }}"));
        } else {
            let (t, n) = (&self.t, self.n);
            out.push("#pragma unroll".into());
            out.push(format!(
                "for (int {t} = 0; {t} < {n}; ++{t}) {{ {decl} {body} }}"
            ));
        }
    }
}

impl<'f> Emitter<'f> {
    /// Element `at` of result `v` of the recomputable loop or branch `op`: the region run for
    /// that element inside a lambda.
    pub(crate) fn remat_structured_at(
        &self,
        v: ValueId,
        op: &Op,
        at: &ElemIndex,
        scope: &Scope,
    ) -> Res<String> {
        let batch = Batch::one(at);
        let mut lines = Vec::new();
        let exprs = self.structured_stmts(op, &batch, scope, &mut lines)?;
        let k = op.results.iter().position(|&r| r == v).ok_or_else(|| {
            CodegenError::Malformed(format!("%{} is not a result of its op", v.0))
        })?;
        Ok(format!(
            "([&]() {{ {} return {}; }}())",
            lines.join(" "),
            exprs[k]
        ))
    }

    /// Appends the statements that run loop or branch `op` for every item of `batch` and
    /// returns, per result, its expression at the current item (`name[t]` for tiles).
    pub(crate) fn structured_stmts(
        &self,
        op: &Op,
        batch: &Batch,
        scope: &Scope,
        out: &mut Vec<String>,
    ) -> Res<Vec<String>> {
        let names: Vec<String> = op
            .results
            .iter()
            .map(|r| format!("attn_b{}", r.0))
            .collect();
        for (&r, n) in op.results.iter().zip(&names) {
            out.push(self.batch_decl(r, n, batch));
        }
        let exprs: Vec<String> = op
            .results
            .iter()
            .zip(&names)
            .map(|(&r, n)| self.item_ref(r, n, batch))
            .collect();
        let mut bound = Vec::new();
        let r = self.structured_body(op, batch, scope, out, &names, &exprs, &mut bound);
        self.unbind_locals(&bound);
        r?;
        Ok(exprs)
    }

    #[allow(clippy::too_many_arguments)]
    fn structured_body(
        &self,
        op: &Op,
        batch: &Batch,
        scope: &Scope,
        out: &mut Vec<String>,
        names: &[String],
        exprs: &[String],
        bound: &mut Vec<u32>,
    ) -> Res<()> {
        let region = |i: usize| {
            op.regions
                .get(i)
                .ok_or_else(|| CodegenError::Malformed(format!("{:?} lacks region {i}", op.kind)))
        };
        match op.kind {
            OpKind::For => {
                let body = region(0)?;
                let scalar = |i: usize| self.remat_expr(Self::operand(op, i)?, &batch.at, scope);
                let (lo, hi, step) = (scalar(0)?, scalar(1)?, scalar(2)?);
                self.assign_items(&op.results, names, &op.operands[3..], batch, scope, out)?;
                let (&iv, iters) = body.args.split_first().ok_or_else(|| {
                    CodegenError::Malformed("for without induction variable".into())
                })?;
                let ivn = format!("attn_i{}", iv.0);
                self.bind_local(iv, ivn.clone(), None, bound);
                for (&a, e) in iters.iter().zip(exprs) {
                    let at = (!self.f.ty(a).is_scalar()).then(|| batch.at.clone());
                    self.bind_local(a, e.clone(), at, bound);
                }
                // Recomputed inside a copy, so always within the loop the copy serves.
                out.push(super::emitter::NESTED_LOOP_PRAGMA.to_string());
                out.push(format!(
                    "for (int {ivn} = {lo}; {ivn} < {hi}; {ivn} += {step}) {{"
                ));
                let next = self.block_stmts(body, batch, scope, out, bound)?;
                // Every yield reads this iteration's values: through temporaries.
                let tmps: Vec<String> = op
                    .results
                    .iter()
                    .map(|r| format!("attn_n{}", r.0))
                    .collect();
                for (&r, n) in op.results.iter().zip(&tmps) {
                    out.push(self.batch_decl(r, n, batch));
                }
                self.assign_items(&op.results, &tmps, &next, batch, scope, out)?;
                for ((&r, n), tmp) in op.results.iter().zip(names).zip(&tmps) {
                    if !self.f.ty(r).is_scalar() {
                        batch.for_items(&format!("{n}[{t}] = {tmp}[{t}];", t = batch.slot()), out);
                    } else {
                        out.push(format!("{n} = {tmp};"));
                    }
                }
                out.push("}".into());
                Ok(())
            }
            OpKind::If => {
                let c = Self::operand(op, 0)?;
                let cond = self.remat_expr(c, &batch.at, scope)?;
                for (i, head) in [(0, format!("if ({cond}) {{")), (1, "} else {".into())] {
                    out.push(head);
                    let mut inner = Vec::new();
                    let r = self
                        .block_stmts(region(i)?, batch, scope, out, &mut inner)
                        .and_then(|y| self.assign_items(&op.results, names, &y, batch, scope, out));
                    self.unbind_locals(&inner);
                    r?;
                }
                out.push("}".into());
                Ok(())
            }
            ref k => Err(CodegenError::Malformed(format!(
                "{k:?} is not a loop or branch"
            ))),
        }
    }

    /// Appends the statements of region `b` (scalars as named constants, branches run for
    /// every item; tiles are evaluated where used) and returns what it yields.
    fn block_stmts(
        &self,
        b: &Block,
        batch: &Batch,
        scope: &Scope,
        out: &mut Vec<String>,
        bound: &mut Vec<u32>,
    ) -> Res<Vec<ValueId>> {
        for &o in &b.ops {
            let op = self.f.op(o);
            match op.kind {
                OpKind::Yield => return Ok(op.operands.clone()),
                OpKind::If => {
                    let exprs = self.structured_stmts(op, batch, scope, out)?;
                    for (&r, e) in op.results.iter().zip(exprs) {
                        let at = (!self.f.ty(r).is_scalar()).then(|| batch.at.clone());
                        self.bind_local(r, e, at, bound);
                    }
                }
                _ if op.results.is_empty() || !op.regions.is_empty() => {
                    return Err(CodegenError::Unsupported(format!(
                        "{:?} in a recomputed loop or branch",
                        op.kind
                    )))
                }
                _ => {
                    for &r in &op.results {
                        if !self.f.ty(r).is_scalar() {
                            continue;
                        }
                        let e = self.remat_op(r, op, &batch.at, scope)?;
                        let n = format!("attn_r{}", r.0);
                        out.push(format!("{} const {n} = {e};", reg_type(self.elem(r))));
                        self.bind_local(r, n, None, bound);
                    }
                }
            }
        }
        Err(CodegenError::Malformed(
            "recomputed region without yield".into(),
        ))
    }

    /// `dsts[k] = srcs[k]` at every item (once for scalars).
    fn assign_items(
        &self,
        results: &[ValueId],
        dsts: &[String],
        srcs: &[ValueId],
        batch: &Batch,
        scope: &Scope,
        out: &mut Vec<String>,
    ) -> Res<()> {
        if results.len() != dsts.len() || results.len() != srcs.len() {
            return Err(CodegenError::Malformed(format!(
                "{} values for {} results",
                srcs.len(),
                results.len()
            )));
        }
        for ((&r, d), &s) in results.iter().zip(dsts).zip(srcs) {
            let e = self.remat_expr(s, &batch.at, scope)?;
            let t = batch.slot();
            if self.f.ty(r).is_scalar() {
                out.push(format!("{d} = {e};"));
            } else {
                batch.for_items(&format!("{d}[{t}] = {e};"), out);
            }
        }
        Ok(())
    }

    /// The declaration of `v`'s variable `name`: one per item for tiles.
    fn batch_decl(&self, v: ValueId, name: &str, batch: &Batch) -> String {
        let t = reg_type(self.elem(v));
        if self.f.ty(v).is_scalar() {
            format!("{t} {name};")
        } else {
            format!("{t} {name}[{}];", batch.n)
        }
    }

    /// `name` as read at the current item.
    fn item_ref(&self, v: ValueId, name: &str, batch: &Batch) -> String {
        if self.f.ty(v).is_scalar() {
            name.to_string()
        } else {
            format!("{name}[{}]", batch.slot())
        }
    }

    /// Makes `v` read as `expr` in recomputed expressions (tiles only at element `at`).
    pub(crate) fn bind_local(
        &self,
        v: ValueId,
        expr: String,
        at: Option<ElemIndex>,
        bound: &mut Vec<u32>,
    ) {
        self.remat_locals.borrow_mut().insert(v.0, (expr, at));
        bound.push(v.0);
    }

    pub(crate) fn unbind_locals(&self, bound: &[u32]) {
        let mut l = self.remat_locals.borrow_mut();
        for v in bound {
            l.remove(v);
        }
    }

    /// What `v` reads as at `at` while a recomputed region binds it.
    pub(crate) fn remat_local(&self, v: ValueId, at: &ElemIndex) -> Option<String> {
        let l = self.remat_locals.borrow();
        match l.get(&v.0)? {
            (e, None) => Some(e.clone()),
            (e, Some(want)) if want == at => Some(e.clone()),
            _ => None,
        }
    }
}
