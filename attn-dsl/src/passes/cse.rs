//! Common subexpression elimination of pure ops: an op with the same kind, operands and
//! result type as one that dominates it (earlier in the same block or in an enclosing block)
//! is removed and its result replaced by the earlier one.
//!
//! Loads are not merged even though they are pure: a store between two identical loads may
//! change what the second one reads, and this pass does no alias analysis.

use crate::ir::printer::format_type;
use crate::ir::{Function, Op, OpId, OpKind, ValueId};
use std::collections::BTreeMap;

/// Runs CSE over the whole function.
pub fn run(f: &mut Function) {
    let mut cx = Cse {
        scopes: vec![],
        subst: BTreeMap::new(),
    };
    let body = f.body.ops.clone();
    f.body.ops = cx.block(f, &body);
}

struct Cse {
    /// One table per open block, innermost last: op key → the value it computed.
    scopes: Vec<BTreeMap<String, ValueId>>,
    subst: BTreeMap<ValueId, ValueId>,
}

/// Identity of a pure op: kind (with attributes and literal), operands, result type.
/// `Debug` prints every field, including float literals exactly.
fn key(f: &Function, op: &Op) -> String {
    let tys: Vec<String> = op.results.iter().map(|&r| format_type(f.ty(r))).collect();
    format!("{:?}|{:?}|{}", op.kind, op.operands, tys.join(","))
}

fn mergeable(op: &Op) -> bool {
    op.kind.is_pure()
        && !matches!(op.kind, OpKind::Load { .. })
        && op.results.len() == 1
        && op.regions.is_empty()
}

impl Cse {
    fn block(&mut self, f: &mut Function, ops: &[OpId]) -> Vec<OpId> {
        self.scopes.push(BTreeMap::new());
        let mut out = vec![];
        for &o in ops {
            let operands: Vec<ValueId> = f
                .op(o)
                .operands
                .iter()
                .map(|v| *self.subst.get(v).unwrap_or(v))
                .collect();
            f.op_mut(o).operands = operands;
            for i in 0..f.op(o).regions.len() {
                let inner = f.op(o).regions[i].ops.clone();
                let new = self.block(f, &inner);
                f.op_mut(o).regions[i].ops = new;
            }
            let op = f.op(o);
            if !mergeable(op) {
                out.push(o);
                continue;
            }
            let k = key(f, op);
            match self.scopes.iter().rev().find_map(|s| s.get(&k)) {
                Some(&earlier) => {
                    self.subst.insert(op.results[0], earlier);
                }
                None => {
                    let r = op.results[0];
                    if let Some(s) = self.scopes.last_mut() {
                        s.insert(k, r);
                    }
                    out.push(o);
                }
            }
        }
        self.scopes.pop();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::printer::print_function;
    use crate::ir::verify::verify;
    use crate::ir::{BinaryOp, Builder, ParamKind, ScalarType};

    fn ops_of(f: &Function) -> usize {
        let mut n = 0;
        f.walk(&mut |_, _| n += 1);
        n
    }

    #[test]
    fn merges_duplicates_and_reaches_into_nested_regions() {
        let mut f = Function::new("k", 4);
        let out = f.add_param(
            "out",
            ParamKind::Ptr {
                elem: ScalarType::I32,
                mutable: true,
            },
        );
        let n = f.add_param("n", ParamKind::Scalar(ScalarType::I32));
        let mut b = Builder::new(&mut f);
        let a1 = b.binary(BinaryOp::Mul, n, n).unwrap();
        let a2 = b.binary(BinaryOp::Mul, n, n).unwrap();
        let s = b.binary(BinaryOp::Add, a1, a2).unwrap();
        let z = b.const_i32(0);
        let one = b.const_i32(1);
        let r = b
            .for_loop(z, n, one, vec![s], |b, _iv, it| {
                let again = b.binary(BinaryOp::Mul, n, n)?; // same as a1: merged with the outer op
                let one2 = b.const_i32(1); // same literal: merged
                let x = b.binary(BinaryOp::Add, it[0], again)?;
                Ok(vec![b.binary(BinaryOp::Add, x, one2)?])
            })
            .unwrap();
        // An op in the loop body does not dominate this one: it stays.
        let after = b.binary(BinaryOp::Add, r[0], a1).unwrap();
        let p = b.add_ptr(out, z).unwrap();
        b.store(p, after, None).unwrap();
        b.finish();
        let before = ops_of(&f);
        run(&mut f);
        verify(&f).unwrap_or_else(|e| panic!("{e}\n{}", print_function(&f)));
        assert_eq!(ops_of(&f), before - 3, "{}", print_function(&f));
        let text = print_function(&f);
        assert_eq!(text.matches("mul").count(), 1, "{text}");
        assert!(text.contains("add %2, %2"), "{text}");
    }

    #[test]
    fn keeps_distinct_literals_and_loads() {
        let mut f = Function::new("k", 4);
        let out = f.add_param(
            "out",
            ParamKind::Ptr {
                elem: ScalarType::F32,
                mutable: true,
            },
        );
        let mut b = Builder::new(&mut f);
        let pz = b.const_f32(0.0);
        let nz = b.const_f32(-0.0);
        let l1 = b.load(out, None, None).unwrap();
        b.store(out, pz, None).unwrap();
        let l2 = b.load(out, None, None).unwrap();
        let s = b.binary(BinaryOp::Add, l1, l2).unwrap();
        let s = b.binary(BinaryOp::Add, s, nz).unwrap();
        b.store(out, s, None).unwrap();
        b.finish();
        let before = ops_of(&f);
        run(&mut f);
        assert_eq!(ops_of(&f), before);
    }
}
