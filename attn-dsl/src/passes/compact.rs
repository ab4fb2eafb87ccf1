//! Arena compaction: renumbers values and ops into the order the Builder (and the IR parser)
//! allocate them, dropping everything unreachable from the body.
//!
//! Passes leave dead ops and values in the arenas; compaction makes the optimized function
//! canonical, so `parse(print(f)) == f` holds for it exactly and unnamed values print with
//! small, dense numbers.

use crate::ir::{Block, Function, Op, ValueData, ValueId};

/// Rewrites `f` into canonical arena order (parameters first; within a block, for each op:
/// its regions' arguments and contents, then its results and the op itself).
pub fn run(f: &mut Function) {
    let mut c = Compactor {
        old: f,
        map: vec![None; f.values.len()],
        values: vec![],
        ops: vec![],
    };
    let args: Vec<ValueId> = c.old.body.args.iter().map(|&a| c.value(a)).collect();
    let ops = c.block_ops(&c.old.body.ops.clone());
    let (values, new_ops, map) = (c.values, c.ops, c.map);
    for p in &mut f.params {
        p.value = map
            .get(p.value.0 as usize)
            .copied()
            .flatten()
            .unwrap_or(p.value);
    }
    f.values = values;
    f.ops = new_ops;
    f.body = Block { args, ops };
}

struct Compactor<'a> {
    old: &'a Function,
    map: Vec<Option<ValueId>>,
    values: Vec<ValueData>,
    ops: Vec<Op>,
}

impl Compactor<'_> {
    /// The new id of old value `v`, allocating it on first sight.
    fn value(&mut self, v: ValueId) -> ValueId {
        if let Some(Some(n)) = self.map.get(v.0 as usize) {
            return *n;
        }
        let data = self
            .old
            .values
            .get(v.0 as usize)
            .cloned()
            .unwrap_or(ValueData {
                ty: crate::ir::Type::scalar(crate::ir::ScalarType::I32),
                name: None,
            });
        self.values.push(data);
        let n = ValueId(self.values.len() as u32 - 1);
        if let Some(slot) = self.map.get_mut(v.0 as usize) {
            *slot = Some(n);
        }
        n
    }

    fn block_ops(&mut self, ops: &[crate::ir::OpId]) -> Vec<crate::ir::OpId> {
        ops.iter().map(|&o| self.op(o)).collect()
    }

    fn op(&mut self, o: crate::ir::OpId) -> crate::ir::OpId {
        let old = self.old.op(o).clone();
        let operands = old.operands.iter().map(|&v| self.value(v)).collect();
        let regions = old
            .regions
            .iter()
            .map(|r| {
                let args = r.args.iter().map(|&a| self.value(a)).collect();
                Block {
                    args,
                    ops: self.block_ops(&r.ops),
                }
            })
            .collect();
        let results = old.results.iter().map(|&v| self.value(v)).collect();
        self.ops.push(Op {
            kind: old.kind,
            operands,
            results,
            regions,
            loc: old.loc,
        });
        crate::ir::OpId(self.ops.len() as u32 - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::parser::parse_function;
    use crate::ir::printer::print_function;
    use crate::ir::{BinaryOp, Builder, ParamKind, ScalarType};

    #[test]
    fn drops_detached_ops_and_renumbers_densely() {
        let mut f = Function::new("k", 1);
        let n = f.add_param("n", ParamKind::Scalar(ScalarType::I32));
        let mut b = Builder::new(&mut f);
        let dead = b.const_i32(5);
        let x = b.binary(BinaryOp::Add, n, n).expect("add");
        let _ = (dead, x);
        b.finish();
        // Detach the dead const as DCE would.
        f.body.ops.remove(0);
        let before = print_function(&f);
        run(&mut f);
        assert_eq!(f.ops.len(), 2);
        assert_eq!(f.values.len(), 2);
        // The printed form is unchanged except for the renumbered unnamed value.
        assert_eq!(print_function(&f), before.replace("%2", "%1"));
        let g = parse_function(&print_function(&f)).expect("parses");
        assert_eq!(g, f);
    }
}
