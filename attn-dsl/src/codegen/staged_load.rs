//! Loads fused into the operand staging of the `dot` that consumes them.
//!
//! A tile loaded only to become an operand of a tensor-core `dot` in the same block (the K
//! and V tiles of attention, the A and B tiles of a matmul) need not live in registers: the
//! dot's staging loop reads each element from global memory and writes it straight into the
//! scratch buffer. That keeps the 16-bit operand tiles out of the register file, which is
//! what the attention inner loop runs out of first. The load keeps its own distribution (so
//! its global accesses stay coalesced) and is only moved down to the dot when no store,
//! loop or branch lies in between, so it reads the same memory it would have read in place.

use super::emitter::Emitter;
use super::CodegenError;
use crate::ir::{Block, Function, OpKind, ScalarType, ValueId};

type Res<T> = Result<T, CodegenError>;

/// Marks the results of loads that may be fused into the staging of their only user, a
/// bf16/f16 `dot` later in the same block with nothing in between that writes memory.
pub(crate) fn find_stageable_loads(f: &Function) -> Vec<bool> {
    let mut uses = vec![0u32; f.values.len()];
    f.walk(&mut |_, op| {
        for v in &op.operands {
            uses[v.0 as usize] += 1;
        }
    });
    let mut out = vec![false; f.values.len()];
    mark_block(f, &f.body, &uses, &mut out);
    f.walk(&mut |_, op| {
        for r in &op.regions {
            mark_block(f, r, &uses, &mut out);
        }
    });
    out
}

fn mark_block(f: &Function, b: &Block, uses: &[u32], out: &mut [bool]) {
    for (i, &o) in b.ops.iter().enumerate() {
        let op = f.op(o);
        let (OpKind::Load { .. }, Some(&res)) = (&op.kind, op.results.first()) else {
            continue;
        };
        if f.ty(res).is_scalar() || uses[res.0 as usize] != 1 {
            continue;
        }
        for &later in &b.ops[i + 1..] {
            let user = f.op(later);
            if user.kind == OpKind::Dot {
                let operand = user.operands.iter().take(2).any(|&v| v == res);
                let tensor_core = matches!(
                    f.ty(res).elem.scalar(),
                    Some(ScalarType::Bf16 | ScalarType::F16)
                );
                out[res.0 as usize] = operand && tensor_core;
            }
            let writes = matches!(
                user.kind,
                OpKind::Store { .. } | OpKind::For | OpKind::If | OpKind::While
            );
            if user.operands.contains(&res) || writes {
                break;
            }
        }
    }
}

impl<'f> Emitter<'f> {
    /// The value of slot `slot` of the fused load `v`, read from global memory (or its
    /// `other`/zero where the slot is unowned or masked off).
    pub(crate) fn staged_load_expr(&self, v: ValueId, slot: &str) -> Res<String> {
        let op = self
            .def_op(v)
            .ok_or_else(|| CodegenError::Malformed(format!("fused load %{} has no op", v.0)))?;
        self.load_element(op, slot)
    }
}
