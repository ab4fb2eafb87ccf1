//! Rematerialization: which tile values an asynchronous copy can recompute at any element.
//!
//! A copy moves 16-byte chunks, one per thread and step, in a distribution of its own; it
//! needs the pointer and mask of every chunk it moves. Instead of converting those tiles into
//! its distribution through shared memory (barriers, registers), it recomputes them: index
//! arithmetic over coordinates and scalars, and loads of read-only index data such as the
//! block table (an L1-cached load per chunk, in the copy's own layout). A prefetch for the
//! next iteration of a loop recomputes values defined in the loop body too, with the
//! induction variable advanced by one step. A reduction over a recomputable tile (the V
//! guard of attention: is any row allowed to see this key?) is recomputed as a loop. The
//! emitter's evaluator
//! (`codegen::remat`) follows exactly these rules.

use crate::ir::{Function, OpId, OpKind, ParamKind, ValueId};

/// Where the recomputed expression is evaluated.
#[derive(Clone, Copy, Debug)]
pub enum RematScope<'a> {
    /// At the load's own position: every scalar defined so far has a name.
    InPlace,
    /// Outside the current iteration of a loop (its prologue or its previous iteration):
    /// values defined in `body` (by `defined_in_body`) must be recomputed, `iv` is given.
    Loop {
        iv: ValueId,
        defined_in_body: &'a [bool],
    },
}

/// The op defining each value (None for block arguments).
pub fn defining_ops(f: &Function) -> Vec<Option<OpId>> {
    let mut defs = vec![None; f.values.len()];
    f.walk(&mut |id, op| {
        for r in &op.results {
            defs[r.0 as usize] = Some(id);
        }
    });
    defs
}

/// Whether every element of `v` can be recomputed from scalars in `scope`.
pub fn can_remat(f: &Function, defs: &[Option<OpId>], v: ValueId, scope: RematScope) -> bool {
    let scalar = f.ty(v).is_scalar();
    if let RematScope::Loop {
        iv,
        defined_in_body,
    } = scope
    {
        if v == iv {
            return true;
        }
        if scalar && !defined_in_body[v.0 as usize] {
            return true;
        }
    } else if scalar {
        return true;
    }
    let Some(op) = defs[v.0 as usize].map(|o| f.op(o)) else {
        // A block argument (a loop-carried value): known only to the iteration that has it.
        return false;
    };
    let kind_ok = op.kind.is_coordinate_op()
        || matches!(op.kind, OpKind::Const(_) | OpKind::Reduce { .. })
        || (matches!(op.kind, OpKind::Load { .. }) && reads_read_only(f, defs, op.operands[0]));
    kind_ok && op.operands.iter().all(|&x| can_remat(f, defs, x, scope))
}

/// Whether pointer `p` derives from a `*const` kernel parameter: the kernel never writes that
/// memory, so reading it again anywhere gives the same value.
pub fn reads_read_only(f: &Function, defs: &[Option<OpId>], p: ValueId) -> bool {
    if let Some(param) = f.params.iter().find(|q| q.value == p) {
        return matches!(param.kind, ParamKind::Ptr { mutable: false, .. });
    }
    let Some(op) = defs[p.0 as usize].map(|o| f.op(o)) else {
        return false;
    };
    match op.kind {
        OpKind::AddPtr
        | OpKind::Splat { .. }
        | OpKind::Broadcast { .. }
        | OpKind::ExpandDims { .. } => reads_read_only(f, defs, op.operands[0]),
        OpKind::Select => {
            reads_read_only(f, defs, op.operands[1]) && reads_read_only(f, defs, op.operands[2])
        }
        _ => false,
    }
}

/// Marks every value defined inside `b` (block arguments and results, nested regions too).
pub fn defined_in(f: &Function, b: &crate::ir::Block) -> Vec<bool> {
    fn mark(f: &Function, b: &crate::ir::Block, out: &mut [bool]) {
        for a in &b.args {
            out[a.0 as usize] = true;
        }
        for &o in &b.ops {
            let op = f.op(o);
            for r in &op.results {
                out[r.0 as usize] = true;
            }
            for r in &op.regions {
                mark(f, r, out);
            }
        }
    }
    let mut out = vec![false; f.values.len()];
    mark(f, b, &mut out);
    out
}
