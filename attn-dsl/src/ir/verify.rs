//! IR verifier: structural and type invariants every pass must preserve.
//!
//! Structure (this file): parameters match the entry block's arguments, every value is
//! defined exactly once and every op appears in exactly one block, every operand is defined
//! before its use in the same or an enclosing block (dominance in structured regions), and
//! every block ends in the terminator its parent expects (and has no other).
//! Types (`op_rules`): operand counts and types per [`OpKind`], re-derived from the
//! conventions in `ops.rs` independently of the [`super::Builder`]. Owners (`ownership`):
//! an op's tiles all live on one warpgroup or all on the whole program.

mod op_rules;
mod ownership;

use super::function::{Block, Function, OpId, ParamKind, ValueId};
use super::ops::OpKind;
use super::printer::mnemonic;
use super::types::Type;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("IR verification failed: {0}")]
pub struct VerifyError(pub String);

/// Checks SSA dominance, operand types per op, region terminators.
pub fn verify(f: &Function) -> Result<(), VerifyError> {
    let mut v = Verifier {
        f,
        defined: vec![false; f.values.len()],
        visible: vec![false; f.values.len()],
        op_seen: vec![false; f.ops.len()],
    };
    v.params()?;
    v.block(&f.body, "kernel body", Terminator::Return, &[])
}

/// Which terminator a block must end with.
#[derive(Clone, Copy, PartialEq)]
enum Terminator {
    Return,
    Yield,
    Condition,
}

impl Terminator {
    fn matches(self, k: &OpKind) -> bool {
        matches!(
            (self, k),
            (Terminator::Return, OpKind::Return)
                | (Terminator::Yield, OpKind::Yield)
                | (Terminator::Condition, OpKind::Condition)
        )
    }
    fn name(self) -> &'static str {
        match self {
            Terminator::Return => "return",
            Terminator::Yield => "yield",
            Terminator::Condition => "condition",
        }
    }
}

struct Verifier<'a> {
    f: &'a Function,
    /// Defined somewhere already (a second definition is an error).
    defined: Vec<bool>,
    /// Defined in the current block or an enclosing one (usable here).
    visible: Vec<bool>,
    op_seen: Vec<bool>,
}

fn err<T>(msg: String) -> Result<T, VerifyError> {
    Err(VerifyError(msg))
}

impl Verifier<'_> {
    fn params(&self) -> Result<(), VerifyError> {
        let f = self.f;
        if f.num_warps == 0 {
            return err("num_warps is 0; a program needs at least one warp".into());
        }
        if f.params.len() != f.body.args.len() {
            return err(format!(
                "{} parameter(s) but the entry block has {} argument(s); they must match one to one",
                f.params.len(),
                f.body.args.len()
            ));
        }
        for (i, (p, &a)) in f.params.iter().zip(&f.body.args).enumerate() {
            if p.value != a {
                return err(format!(
                    "parameter {i} `{}` carries %{} but entry argument {i} is %{}",
                    p.name, p.value.0, a.0
                ));
            }
            let want = match p.kind {
                ParamKind::Ptr { elem, .. } => Type::ptr(elem),
                ParamKind::Scalar(s) => Type::scalar(s),
            };
            let got = self.ty(a)?;
            if *got != want {
                return err(format!(
                    "parameter `{}` is declared {want} but its value has type {got}",
                    p.name
                ));
            }
        }
        Ok(())
    }

    fn ty(&self, v: ValueId) -> Result<&Type, VerifyError> {
        match self.f.values.get(v.0 as usize) {
            Some(d) => Ok(&d.ty),
            None => err(format!(
                "value %{} is out of range (the function has {} values)",
                v.0,
                self.f.values.len()
            )),
        }
    }

    /// Marks `v` defined and visible; records it in `scope` so the block can hide it at exit.
    fn define(
        &mut self,
        v: ValueId,
        what: &str,
        scope: &mut Vec<ValueId>,
    ) -> Result<(), VerifyError> {
        self.ty(v)?;
        let i = v.0 as usize;
        if self.defined[i] {
            return err(format!("value %{} is defined twice (again as {what})", v.0));
        }
        self.defined[i] = true;
        self.visible[i] = true;
        scope.push(v);
        Ok(())
    }

    /// Verifies a block whose arguments must have types `arg_tys` (when given) and which
    /// must end in `term`.
    fn block(
        &mut self,
        b: &Block,
        what: &str,
        term: Terminator,
        arg_tys: &[Type],
    ) -> Result<(), VerifyError> {
        let mut scope = vec![];
        let res = self.block_inner(b, what, term, arg_tys, &mut scope);
        for v in scope {
            self.visible[v.0 as usize] = false;
        }
        res
    }

    fn block_inner(
        &mut self,
        b: &Block,
        what: &str,
        term: Terminator,
        arg_tys: &[Type],
        scope: &mut Vec<ValueId>,
    ) -> Result<(), VerifyError> {
        if !std::ptr::eq(b, &self.f.body) {
            if b.args.len() != arg_tys.len() {
                return err(format!(
                    "{what} has {} argument(s), expected {}",
                    b.args.len(),
                    arg_tys.len()
                ));
            }
            for (i, (&a, want)) in b.args.iter().zip(arg_tys).enumerate() {
                self.define(a, &format!("argument {i} of {what}"), scope)?;
                let got = self.ty(a)?;
                if got != want {
                    return err(format!(
                        "argument {i} (%{}) of {what} has type {got}, expected {want}",
                        a.0
                    ));
                }
            }
        } else {
            for &a in &b.args {
                self.define(a, "a kernel parameter", scope)?;
            }
        }
        let Some((&last, init)) = b.ops.split_last() else {
            return err(format!("{what} is empty; it must end in `{}`", term.name()));
        };
        for &o in init {
            self.op(o, scope)?;
            if self.f.ops[o.0 as usize].kind.is_terminator() {
                return err(format!(
                    "{what}: terminator `{}` (op {}) is not the last op of its block",
                    mnemonic(&self.f.ops[o.0 as usize].kind),
                    o.0
                ));
            }
        }
        self.op(last, scope)?;
        let k = &self.f.ops[last.0 as usize].kind;
        if !term.matches(k) {
            return err(format!(
                "{what} ends in `{}` (op {}), expected `{}`",
                mnemonic(k),
                last.0,
                term.name()
            ));
        }
        Ok(())
    }

    fn op(&mut self, id: OpId, scope: &mut Vec<ValueId>) -> Result<(), VerifyError> {
        let Some(op) = self.f.ops.get(id.0 as usize) else {
            return err(format!(
                "op {} is out of range (the function has {} ops)",
                id.0,
                self.f.ops.len()
            ));
        };
        let here = || {
            let l = op.loc;
            format!(
                "`{}` (op {}, loc {}:{})",
                mnemonic(&op.kind),
                id.0,
                l.line,
                l.col
            )
        };
        if self.op_seen[id.0 as usize] {
            return err(format!("{} appears in more than one block", here()));
        }
        self.op_seen[id.0 as usize] = true;
        for (i, &v) in op.operands.iter().enumerate() {
            self.ty(v)
                .map_err(|e| VerifyError(format!("{}: operand {i}: {}", here(), e.0)))?;
            if !self.visible[v.0 as usize] {
                let why = if self.defined[v.0 as usize] {
                    "is defined in a region that does not enclose this use"
                } else {
                    "is used before it is defined"
                };
                return err(format!("{}: operand {i} (%{}) {why}", here(), v.0));
            }
        }
        if op.regions.len() != op.kind.num_regions() {
            return err(format!(
                "{} has {} region(s), expected {}",
                here(),
                op.regions.len(),
                op.kind.num_regions()
            ));
        }
        op_rules::check(self.f, op).map_err(|m| VerifyError(format!("{}: {m}", here())))?;
        ownership::check(self.f, op).map_err(|m| VerifyError(format!("{}: {m}", here())))?;
        self.regions(id)?;
        for &r in &op.results {
            self.define(r, &format!("a result of {}", here()), scope)?;
        }
        Ok(())
    }

    /// Verifies the regions of a `for`/`if`/`while` with the argument types its kind implies.
    fn regions(&mut self, id: OpId) -> Result<(), VerifyError> {
        let f = self.f;
        let op = &f.ops[id.0 as usize];
        let operand_tys: Vec<Type> = op.operands.iter().map(|&v| f.ty(v).clone()).collect();
        let what = |r: &str| format!("{r} of `{}` (op {})", mnemonic(&op.kind), id.0);
        match op.kind {
            OpKind::For => {
                let mut args = vec![Type::scalar(super::types::ScalarType::I32)];
                args.extend(operand_tys.iter().skip(3).cloned());
                self.block(&op.regions[0], &what("body"), Terminator::Yield, &args)
            }
            OpKind::If => {
                self.block(&op.regions[0], &what("then region"), Terminator::Yield, &[])?;
                self.block(&op.regions[1], &what("else region"), Terminator::Yield, &[])
            }
            OpKind::While => {
                let results: Vec<Type> = op.results.iter().map(|&v| f.ty(v).clone()).collect();
                self.block(
                    &op.regions[0],
                    &what("before region"),
                    Terminator::Condition,
                    &operand_tys,
                )?;
                self.block(&op.regions[1], &what("body"), Terminator::Yield, &results)
            }
            _ => Ok(()),
        }
    }
}
