//! Dead code elimination: removes pure ops whose results are never used, `for`/`if` ops with
//! no used result and no side effect inside, and unused loop-carried values.
//!
//! Liveness is computed to a fixpoint, so a carried value that only feeds itself
//! (`m = m + 1` with `m` never read elsewhere) is dead even though an op inside uses it:
//! a `for` iter arg stays only if its result or its region argument is live, and a `yield`
//! operand is live only if the result or next-iteration argument it feeds is.
//! `while` loops are kept whole (they may not terminate; removing one changes behaviour).

use crate::ir::{Block, Function, OpId, OpKind, ValueId};

/// Runs DCE over the whole function.
pub fn run(f: &mut Function) {
    let live = liveness(f);
    let body = f.body.ops.clone();
    f.body.ops = sweep(f, &live, &body);
}

/// Where a block sits: decides what its terminator's operands feed.
#[derive(Clone, Copy)]
enum Parent {
    Kernel,
    For(OpId),
    If(OpId),
    While,
}

struct Live {
    values: Vec<bool>,
    changed: bool,
}

impl Live {
    fn is(&self, v: ValueId) -> bool {
        self.values.get(v.0 as usize).copied().unwrap_or(false)
    }
    fn mark(&mut self, v: ValueId) {
        if let Some(slot) = self.values.get_mut(v.0 as usize) {
            if !*slot {
                *slot = true;
                self.changed = true;
            }
        }
    }
}

fn liveness(f: &Function) -> Vec<bool> {
    let mut live = Live {
        values: vec![false; f.values.len()],
        changed: true,
    };
    while live.changed {
        live.changed = false;
        mark_block(f, &f.body, Parent::Kernel, &mut live);
    }
    live.values
}

/// True if the block (or a nested one) stores or runs a `while`.
fn has_effect(f: &Function, b: &Block) -> bool {
    b.ops.iter().any(|&o| {
        let op = f.op(o);
        matches!(op.kind, OpKind::Store { .. } | OpKind::While)
            || op.regions.iter().any(|r| has_effect(f, r))
    })
}

fn op_is_live(f: &Function, o: OpId, live: &Live) -> bool {
    let op = f.op(o);
    match op.kind {
        OpKind::Store { .. }
        | OpKind::While
        | OpKind::Return
        | OpKind::Condition
        | OpKind::Yield => true,
        OpKind::For | OpKind::If => {
            op.results.iter().any(|&r| live.is(r)) || op.regions.iter().any(|r| has_effect(f, r))
        }
        _ => op.results.iter().any(|&r| live.is(r)),
    }
}

/// Iter `i` of a `for` is needed when its result or its region argument is live.
fn for_iter_live(f: &Function, o: OpId, i: usize, live: &Live) -> bool {
    let op = f.op(o);
    live.is(op.results[i]) || op.regions[0].args.get(i + 1).is_some_and(|&a| live.is(a))
}

fn mark_block(f: &Function, b: &Block, parent: Parent, live: &mut Live) {
    for &o in b.ops.iter().rev() {
        if !op_is_live(f, o, live) {
            continue;
        }
        let op = f.op(o);
        match (&op.kind, parent) {
            (OpKind::Yield, Parent::For(p)) => {
                for (i, &v) in op.operands.iter().enumerate() {
                    if for_iter_live(f, p, i, live) {
                        live.mark(v);
                    }
                }
            }
            (OpKind::Yield, Parent::If(p)) => {
                for (i, &v) in op.operands.iter().enumerate() {
                    if f.op(p).results.get(i).is_some_and(|&r| live.is(r)) {
                        live.mark(v);
                    }
                }
            }
            (OpKind::For, _) => {
                for &v in &op.operands[..3] {
                    live.mark(v);
                }
                for i in 0..op.results.len() {
                    if for_iter_live(f, o, i, live) {
                        live.mark(op.operands[3 + i]);
                    }
                }
                mark_block(f, &op.regions[0], Parent::For(o), live);
            }
            (OpKind::If, _) => {
                live.mark(op.operands[0]);
                for r in &op.regions {
                    mark_block(f, r, Parent::If(o), live);
                }
            }
            (OpKind::While, _) => {
                for &v in &op.operands {
                    live.mark(v);
                }
                for r in &op.regions {
                    mark_block(f, r, Parent::While, live);
                }
            }
            _ => {
                for &v in &op.operands {
                    live.mark(v);
                }
            }
        }
    }
}

fn sweep(f: &mut Function, live: &[bool], ops: &[OpId]) -> Vec<OpId> {
    let lv = Live {
        values: live.to_vec(),
        changed: false,
    };
    sweep_block(f, &lv, ops)
}

fn sweep_block(f: &mut Function, live: &Live, ops: &[OpId]) -> Vec<OpId> {
    let mut out = vec![];
    for &o in ops {
        if !op_is_live(f, o, live) {
            continue;
        }
        match f.op(o).kind {
            OpKind::For => prune_for(f, o, live),
            OpKind::If => prune_if(f, o, live),
            _ => {}
        }
        for i in 0..f.op(o).regions.len() {
            let inner = f.op(o).regions[i].ops.clone();
            let new = sweep_block(f, live, &inner);
            f.op_mut(o).regions[i].ops = new;
        }
        out.push(o);
    }
    out
}

/// Drops the carried values of a live `for` that neither its result nor its body needs.
fn prune_for(f: &mut Function, o: OpId, live: &Live) {
    let keep: Vec<bool> = (0..f.op(o).results.len())
        .map(|i| for_iter_live(f, o, i, live))
        .collect();
    let pick = |xs: &[ValueId]| {
        xs.iter()
            .zip(&keep)
            .filter(|(_, &k)| k)
            .map(|(&v, _)| v)
            .collect::<Vec<_>>()
    };
    let op = f.op(o).clone();
    let mut operands = op.operands[..3].to_vec();
    operands.extend(pick(&op.operands[3..]));
    let mut args = vec![op.regions[0].args[0]];
    args.extend(pick(&op.regions[0].args[1..]));
    let results = pick(&op.results);
    if let Some(&y) = op.regions[0].ops.last() {
        let yielded = pick(&f.op(y).operands);
        f.op_mut(y).operands = yielded;
    }
    let m = f.op_mut(o);
    m.operands = operands;
    m.regions[0].args = args;
    m.results = results;
}

/// Drops the results of a live `if` that nothing uses.
fn prune_if(f: &mut Function, o: OpId, live: &Live) {
    let keep: Vec<bool> = f.op(o).results.iter().map(|&r| live.is(r)).collect();
    let pick = |xs: &[ValueId]| {
        xs.iter()
            .zip(&keep)
            .filter(|(_, &k)| k)
            .map(|(&v, _)| v)
            .collect::<Vec<_>>()
    };
    for i in 0..2 {
        if let Some(&y) = f.op(o).regions[i].ops.last() {
            let yielded = pick(&f.op(y).operands);
            f.op_mut(y).operands = yielded;
        }
    }
    let results = pick(&f.op(o).results);
    f.op_mut(o).results = results;
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

    fn kernel(build: impl FnOnce(&mut Builder, ValueId, ValueId)) -> Function {
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
        build(&mut b, out, n);
        b.finish();
        verify(&f).expect("valid input");
        f
    }

    #[test]
    fn removes_unused_pure_chains_keeps_stores() {
        let mut f = kernel(|b, out, n| {
            let a = b.binary(BinaryOp::Mul, n, n).unwrap();
            let _dead = b.binary(BinaryOp::Add, a, n).unwrap();
            let _dead_load = b.load(out, None, None).unwrap();
            b.store(out, n, None).unwrap();
        });
        run(&mut f);
        verify(&f).expect("valid");
        assert_eq!(ops_of(&f), 2, "{}", print_function(&f));
    }

    #[test]
    fn removes_self_feeding_carried_value_but_keeps_used_one() {
        let mut f = kernel(|b, out, n| {
            let z = b.const_i32(0);
            let one = b.const_i32(1);
            let r = b
                .for_loop(z, n, one, vec![z, z], |b, iv, it| {
                    let dead = b.binary(BinaryOp::Add, it[0], one)?; // only feeds itself
                    let used = b.binary(BinaryOp::Add, it[1], iv)?;
                    Ok(vec![dead, used])
                })
                .unwrap();
            b.store(out, r[1], None).unwrap();
        });
        run(&mut f);
        verify(&f).unwrap_or_else(|e| panic!("{e}\n{}", print_function(&f)));
        let fo = f
            .body
            .ops
            .iter()
            .copied()
            .find(|&o| f.op(o).kind == OpKind::For)
            .expect("for stays");
        assert_eq!(f.op(fo).results.len(), 1);
        assert_eq!(f.op(fo).regions[0].args.len(), 2);
        assert_eq!(f.op(fo).regions[0].ops.len(), 2, "{}", print_function(&f));
    }

    #[test]
    fn keeps_carried_value_read_inside_the_loop() {
        let mut f = kernel(|b, out, n| {
            let z = b.const_i32(0);
            let one = b.const_i32(1);
            b.for_loop(z, n, one, vec![z], |b, _iv, it| {
                let p = b.add_ptr(out, it[0])?;
                b.store(p, it[0], None)?;
                Ok(vec![b.binary(BinaryOp::Add, it[0], one)?])
            })
            .unwrap();
        });
        let before = ops_of(&f);
        run(&mut f);
        verify(&f).expect("valid");
        assert_eq!(ops_of(&f), before);
    }

    #[test]
    fn removes_effect_free_loops_and_ifs_without_used_results() {
        let mut f = kernel(|b, out, n| {
            let z = b.const_i32(0);
            let one = b.const_i32(1);
            b.for_loop(z, n, one, vec![z], |b, iv, it| {
                Ok(vec![b.binary(BinaryOp::Add, it[0], iv)?])
            })
            .unwrap();
            let c = b.cmp(crate::ir::CmpPred::Lt, n, one).unwrap();
            let r = b
                .if_else(
                    c,
                    |b| Ok(vec![b.const_i32(1), b.const_i32(2)]),
                    |b| Ok(vec![b.const_i32(3), n]),
                )
                .unwrap();
            b.store(out, r[1], None).unwrap();
        });
        run(&mut f);
        verify(&f).unwrap_or_else(|e| panic!("{e}\n{}", print_function(&f)));
        let text = print_function(&f);
        assert!(!text.contains("for "), "{text}");
        let i = f
            .body
            .ops
            .iter()
            .copied()
            .find(|&o| f.op(o).kind == OpKind::If)
            .expect("if stays");
        assert_eq!(f.op(i).results.len(), 1, "{text}");
        let regions = &f.op(i).regions;
        assert_eq!(
            (regions[0].ops.len(), regions[1].ops.len()),
            (2, 1),
            "{text}"
        );
    }
}
