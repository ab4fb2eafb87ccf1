//! Constant folding: scalar and splat arithmetic, comparisons, selects and casts whose
//! operands are literals become literals (see [`super::const_eval`] for the exact semantics
//! and for what is deliberately left unfolded); an `if` on a constant condition is replaced by
//! the ops of the branch taken; a `for` whose bounds are constants with `lo >= hi` disappears
//! (its results are its inits).
//!
//! A folded tile becomes `splat(const)`, so the executor and the emitter see one literal and a
//! broadcast of it, never a materialized constant tile.

use super::const_eval;
use crate::ir::{Function, Op, OpId, OpKind, Scalar, Type, ValueId};
use std::collections::BTreeMap;

/// Folds constants in `f` in one forward walk (uses always follow definitions, so one walk
/// reaches a fixpoint for straight-line code).
pub fn run(f: &mut Function) {
    let mut cx = Folder {
        subst: BTreeMap::new(),
        known: BTreeMap::new(),
    };
    let body = f.body.ops.clone();
    f.body.ops = cx.block(f, &body);
}

struct Folder {
    /// Values replaced by other values (a removed op's result → its replacement).
    subst: BTreeMap<ValueId, ValueId>,
    /// Values every element of which equals the literal (consts and splats of consts).
    known: BTreeMap<ValueId, Scalar>,
}

/// What a region-free op folds to.
enum Folded {
    Keep,
    /// The result is this existing value.
    Value(ValueId),
    /// Every element of the result is this literal.
    Literal(Scalar),
}

impl Folder {
    fn resolve(&self, mut v: ValueId) -> ValueId {
        while let Some(&n) = self.subst.get(&v) {
            v = n;
        }
        v
    }

    /// Folds the ops of one block; returns the new op list.
    fn block(&mut self, f: &mut Function, ops: &[OpId]) -> Vec<OpId> {
        let mut out = vec![];
        for &o in ops {
            let operands: Vec<ValueId> =
                f.op(o).operands.iter().map(|&v| self.resolve(v)).collect();
            f.op_mut(o).operands = operands;
            match f.op(o).kind {
                OpKind::If => self.fold_if(f, o, &mut out),
                OpKind::For => self.fold_for(f, o, &mut out),
                OpKind::While => {
                    self.fold_regions(f, o);
                    out.push(o);
                }
                _ => self.fold_simple(f, o, &mut out),
            }
        }
        out
    }

    fn fold_regions(&mut self, f: &mut Function, o: OpId) {
        for i in 0..f.op(o).regions.len() {
            let ops = f.op(o).regions[i].ops.clone();
            let new = self.block(f, &ops);
            f.op_mut(o).regions[i].ops = new;
        }
    }

    /// `if` on a literal: splice the taken branch (without its `yield`) into `out`.
    fn fold_if(&mut self, f: &mut Function, o: OpId, out: &mut Vec<OpId>) {
        let cond = f.op(o).operands[0];
        let Some(Scalar::Bool(c)) = self.known.get(&cond).copied() else {
            self.fold_regions(f, o);
            out.push(o);
            return;
        };
        let taken = f.op(o).regions[if c { 0 } else { 1 }].ops.clone();
        let mut inlined = self.block(f, &taken);
        let Some(y) = inlined.pop() else { return };
        let yielded = f.op(y).operands.clone();
        let results = f.op(o).results.clone();
        for (r, v) in results.into_iter().zip(yielded) {
            self.subst.insert(r, v);
        }
        out.extend(inlined);
    }

    /// `for` with literal bounds and `lo >= hi` runs zero times: results = inits.
    fn fold_for(&mut self, f: &mut Function, o: OpId, out: &mut Vec<OpId>) {
        let ops = &f.op(o).operands;
        if let (Some(Scalar::Int(lo, _)), Some(Scalar::Int(hi, _))) = (
            self.known.get(&ops[0]).copied(),
            self.known.get(&ops[1]).copied(),
        ) {
            if lo >= hi {
                let inits = ops[3..].to_vec();
                for (r, v) in f.op(o).results.clone().into_iter().zip(inits) {
                    self.subst.insert(r, v);
                }
                return;
            }
        }
        self.fold_regions(f, o);
        out.push(o);
    }

    fn fold_simple(&mut self, f: &mut Function, o: OpId, out: &mut Vec<OpId>) {
        match self.evaluate(f.op(o)) {
            Folded::Keep => out.push(o),
            Folded::Value(v) => {
                self.subst.insert(f.op(o).results[0], v);
            }
            Folded::Literal(s) => self.materialize(f, o, s, out),
        }
    }

    fn lit(&self, v: ValueId) -> Option<Scalar> {
        self.known.get(&v).copied()
    }

    fn evaluate(&mut self, op: &Op) -> Folded {
        let lits: Option<Vec<Scalar>> = op.operands.iter().map(|&v| self.lit(v)).collect();
        let folded = match (&op.kind, lits.as_deref()) {
            (OpKind::Const(s), _) => {
                self.known.insert(op.results[0], *s);
                return Folded::Keep;
            }
            (OpKind::Splat { .. }, Some([s])) => {
                self.known.insert(op.results[0], *s);
                return Folded::Keep;
            }
            (OpKind::Broadcast { .. } | OpKind::ExpandDims { .. } | OpKind::Trans, Some([s])) => {
                Some(*s)
            }
            (OpKind::Unary(u), Some([x])) => const_eval::unary(*u, *x),
            (OpKind::Binary(b), Some([x, y])) => const_eval::binary(*b, *x, *y),
            (OpKind::Cmp(p), Some([x, y])) => const_eval::cmp(*p, *x, *y),
            (OpKind::Cast(t), Some([x])) => const_eval::cast(*x, *t),
            (OpKind::Select, _) => {
                let (c, a, b) = (op.operands[0], op.operands[1], op.operands[2]);
                return match self.lit(c) {
                    Some(Scalar::Bool(true)) => Folded::Value(a),
                    Some(Scalar::Bool(false)) => Folded::Value(b),
                    _ if a == b => Folded::Value(a),
                    _ => Folded::Keep,
                };
            }
            _ => None,
        };
        folded.map_or(Folded::Keep, Folded::Literal)
    }

    /// Turns op `o` into `const s` (scalar result) or `splat(const s)` (tile result), reusing
    /// its result value so names and types survive.
    fn materialize(&mut self, f: &mut Function, o: OpId, s: Scalar, out: &mut Vec<OpId>) {
        let r = f.op(o).results[0];
        let ty = f.ty(r).clone();
        self.known.insert(r, s);
        if ty.is_scalar() {
            let op = f.op_mut(o);
            op.kind = OpKind::Const(s);
            op.operands.clear();
            out.push(o);
            return;
        }
        let loc = f.op(o).loc;
        let c = f.new_value(Type::scalar(s.ty()), None);
        self.known.insert(c, s);
        let cop = f.push_op(Op {
            kind: OpKind::Const(s),
            operands: vec![],
            results: vec![c],
            regions: vec![],
            loc,
        });
        out.push(cop);
        let op = f.op_mut(o);
        op.kind = OpKind::Splat {
            shape: ty.shape.clone(),
        };
        op.operands = vec![c];
        out.push(o);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::printer::print_function;
    use crate::ir::verify::verify;
    use crate::ir::{BinaryOp, Builder, CmpPred, ParamKind, ScalarType};

    fn count(f: &Function, pred: impl Fn(&OpKind) -> bool) -> usize {
        let mut n = 0;
        f.walk(&mut |_, op| n += pred(&op.kind) as usize);
        n
    }

    fn kernel(build: impl FnOnce(&mut Builder, ValueId)) -> Function {
        let mut f = Function::new("k", 4);
        let out = f.add_param(
            "out",
            ParamKind::Ptr {
                elem: ScalarType::I32,
                mutable: true,
            },
        );
        let mut b = Builder::new(&mut f);
        build(&mut b, out);
        b.finish();
        verify(&f).expect("valid input");
        f
    }

    #[test]
    fn folds_scalar_chain_and_splat_arithmetic() {
        let mut f = kernel(|b, out| {
            let a = b.const_i32(7);
            let c = b.const_i32(-2);
            let d = b.binary(BinaryOp::Div, a, c).unwrap(); // -3
            let e = b.binary(BinaryOp::Mul, d, a).unwrap(); // -21
            let t = b.splat(e, &[8]).unwrap();
            let u = b.binary(BinaryOp::Add, t, a).unwrap(); // splat -14
            let r = b.arange(8).unwrap();
            let p = b.add_ptr(out, r).unwrap();
            b.store(p, u, None).unwrap();
        });
        run(&mut f);
        verify(&f).expect("valid after folding");
        let text = print_function(&f);
        assert_eq!(count(&f, |k| matches!(k, OpKind::Binary(_))), 0, "{text}");
        assert!(text.contains("const -14 : i32"), "{text}");
    }

    #[test]
    fn leaves_division_by_zero_for_the_executor() {
        let mut f = kernel(|b, out| {
            let a = b.const_i32(7);
            let z = b.const_i32(0);
            let d = b.binary(BinaryOp::Div, a, z).unwrap();
            let p = b.add_ptr(out, a).unwrap();
            b.store(p, d, None).unwrap();
        });
        run(&mut f);
        assert_eq!(count(&f, |k| *k == OpKind::Binary(BinaryOp::Div)), 1);
    }

    #[test]
    fn inlines_if_on_constant_condition() {
        let mut f = kernel(|b, out| {
            let a = b.const_i32(1);
            let c = b.cmp(CmpPred::Lt, a, a).unwrap(); // false
            let r = b
                .if_else(
                    c,
                    |b| Ok(vec![b.const_i32(10)]),
                    |b| {
                        let x = b.const_i32(20);
                        Ok(vec![b.binary(BinaryOp::Add, x, a)?])
                    },
                )
                .unwrap();
            let p = b.add_ptr(out, a).unwrap();
            b.store(p, r[0], None).unwrap();
        });
        run(&mut f);
        verify(&f).expect("valid");
        assert_eq!(count(&f, |k| *k == OpKind::If), 0);
        assert!(print_function(&f).contains("const 21 : i32"));
    }

    #[test]
    fn removes_zero_trip_for() {
        let mut f = kernel(|b, out| {
            let lo = b.const_i32(5);
            let hi = b.const_i32(5);
            let init = b.const_i32(3);
            let r = b
                .for_loop(lo, hi, lo, vec![init], |b, iv, it| {
                    Ok(vec![b.binary(BinaryOp::Add, it[0], iv)?])
                })
                .unwrap();
            let p = b.add_ptr(out, lo).unwrap();
            b.store(p, r[0], None).unwrap();
        });
        run(&mut f);
        verify(&f).expect("valid");
        assert_eq!(count(&f, |k| *k == OpKind::For), 0);
        let st = f.body.ops[f.body.ops.len() - 2];
        let stored = f.op(st).operands[1];
        assert!(matches!(
            f.ops
                .iter()
                .find(|o| o.results == vec![stored])
                .map(|o| &o.kind),
            Some(OpKind::Const(Scalar::Int(3, _)))
        ));
    }

    #[test]
    fn select_on_constant_condition_picks_a_side() {
        let mut f = kernel(|b, out| {
            let r = b.arange(8).unwrap();
            let t = b.const_bool(true);
            let z = b.const_i32(0);
            let s = b.select(t, r, z).unwrap();
            let p = b.add_ptr(out, r).unwrap();
            b.store(p, s, None).unwrap();
        });
        run(&mut f);
        assert_eq!(count(&f, |k| *k == OpKind::Select), 0);
        let st = f.body.ops[f.body.ops.len() - 2];
        assert!(matches!(
            f.ops
                .iter()
                .find(|o| o.results.contains(&f.op(st).operands[1]))
                .map(|o| &o.kind),
            Some(OpKind::Arange { .. })
        ));
    }
}
