//! Rematerialization: which tile values an asynchronous copy can recompute at any element.
//!
//! A copy moves 16-byte chunks, one per thread and step, in a distribution of its own; it
//! needs the pointer and mask of every chunk it moves. Instead of converting those tiles into
//! its distribution through shared memory (barriers, registers), it recomputes them: index
//! arithmetic over coordinates and scalars, and loads of read-only index data such as the
//! block table (an L1-cached load per chunk, in the copy's own layout). A prefetch for the
//! next iteration of a loop recomputes values defined in the loop body too, with the
//! induction variable advanced by one step. A reduction over a recomputable tile (the V
//! guard of attention: is any row allowed to see this key?) is recomputed as a loop.
//!
//! The result of a structured `for` or `if` (a mask OR-ed over a runtime list of ranges, the
//! MM prefix mask of attention) is recomputable too when its region is *elementwise*: every
//! op in it is one of the above, its scalars depend only on the region's scalars (the
//! induction variable) and on recomputable values, branches test scalars, and the tiles it
//! carries are only combined element by element (no broadcast, reduction or other element
//! of them is read). Element `(i, j)` of such a result is then the same loop or branch run
//! on element `(i, j)` of its carried tiles; the emitter runs it once for all the elements a
//! copy thread needs, so the region's scalar work (its loads and tests) is done once per
//! thread, not per element. The emitter's evaluator (`codegen::remat`) follows exactly these
//! rules.

use crate::ir::{Block, Function, OpId, OpKind, ParamKind, Scalar, ValueId};
use std::collections::BTreeSet;

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

/// Whether `v` is the literal zero (+0.0 or integer 0), directly or splat / broadcast: what
/// `cp.async` zero-fill produces, and an accumulator a warpgroup MMA need not read.
pub fn is_zero(f: &Function, defs: &[Option<OpId>], v: ValueId) -> bool {
    let Some(op) = defs[v.0 as usize].map(|o| f.op(o)) else {
        return false;
    };
    match op.kind {
        OpKind::Splat { .. } | OpKind::Broadcast { .. } => is_zero(f, defs, op.operands[0]),
        OpKind::Const(Scalar::Float(x, _)) => x == 0.0 && x.is_sign_positive(),
        OpKind::Const(Scalar::Int(x, _)) => x == 0,
        _ => false,
    }
}

/// Whether every element of `v` can be recomputed from scalars in `scope`.
pub fn can_remat(f: &Function, defs: &[Option<OpId>], v: ValueId, scope: RematScope) -> bool {
    Remat { f, defs, scope }.value(v, None)
}

/// Whether an access of `ptr` under `mask` can move in 16-byte chunks of `chunk` elements
/// along axis `ax`, each chunk's pointer and mask recomputed where the access is (an
/// `AsyncCopy` from global memory, a `StagedStore` to it): the pointer's runs along `ax`
/// are whole aligned chunks, the mask is the same over each chunk, both recomputable.
pub fn recomputable_chunks(
    f: &Function,
    defs: &[Option<OpId>],
    axis: &crate::passes::axis_info::AxisAnalysis,
    (ptr, mask): (ValueId, Option<ValueId>),
    ax: usize,
    chunk: usize,
) -> bool {
    let remat = |x: ValueId| can_remat(f, defs, x, RematScope::InPlace);
    let uniform = |m: ValueId| axis.get(m).constancy.get(ax).copied().unwrap_or(1) >= chunk as u64;
    axis.vector_width(f, ptr, ax) == chunk as u64
        && remat(ptr)
        && mask.is_none_or(|m| remat(m) && uniform(m))
}

/// A region (a loop body or branch) being recomputed.
struct Region<'r> {
    /// Values defined anywhere in the outermost recomputed region: recomputed there, never
    /// read by name.
    inside: &'r [bool],
    /// Block arguments of the enclosing regions and results of the branches before this
    /// point: the recomputed region binds them (per element for tiles).
    bound: BTreeSet<ValueId>,
    /// Tiles known only at the element being recomputed: bound tiles and the tiles computed
    /// from them. Only elementwise ops may read them.
    per_element: BTreeSet<ValueId>,
}

struct Remat<'a> {
    f: &'a Function,
    defs: &'a [Option<OpId>],
    scope: RematScope<'a>,
}

impl Remat<'_> {
    fn value(&self, v: ValueId, region: Option<&Region>) -> bool {
        if let Some(r) = region {
            if r.bound.contains(&v) {
                return true;
            }
            if r.inside[v.0 as usize] {
                return self.defined_by_op(v, region);
            }
        }
        let scalar = self.f.ty(v).is_scalar();
        if let RematScope::Loop {
            iv,
            defined_in_body,
        } = self.scope
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
        self.defined_by_op(v, region)
    }

    fn defined_by_op(&self, v: ValueId, region: Option<&Region>) -> bool {
        let Some(o) = self.defs[v.0 as usize] else {
            // A block argument (a loop-carried value): known only to the iteration that has it.
            return false;
        };
        let op = self.f.op(o);
        match op.kind {
            OpKind::For | OpKind::If => self.structured(o, region),
            _ => {
                simple_kind(self.f, self.defs, o)
                    && op.operands.iter().all(|&x| self.value(x, region))
            }
        }
    }

    /// Whether the results of `for`/`if` op `o` are recomputable (see the module doc).
    fn structured(&self, o: OpId, outer: Option<&Region>) -> bool {
        let f = self.f;
        let op = f.op(o);
        if op.kind == OpKind::If && !f.ty(op.operands[0]).is_scalar() {
            return false;
        }
        // Bounds and initial values, or the condition, are evaluated where the op is.
        if !op.operands.iter().all(|&x| self.value(x, outer)) {
            return false;
        }
        let owned;
        let inside = match outer {
            Some(r) => r.inside,
            None => {
                owned = defined_in_regions(f, op);
                &owned
            }
        };
        let bound = outer.map(|r| r.bound.clone()).unwrap_or_default();
        let per_element = outer.map(|r| r.per_element.clone()).unwrap_or_default();
        op.regions.iter().all(|b| {
            let tiles = b.args.iter().filter(|&&a| !f.ty(a).is_scalar());
            let mut r = Region {
                inside,
                bound: bound.iter().chain(&b.args).copied().collect(),
                per_element: per_element.iter().chain(tiles).copied().collect(),
            };
            self.elementwise_block(b, &mut r)
        })
    }

    fn elementwise_block(&self, b: &Block, r: &mut Region) -> bool {
        let f = self.f;
        for &o in &b.ops {
            let op = f.op(o);
            let ok = match op.kind {
                OpKind::Yield => op.operands.iter().all(|&x| self.value(x, Some(r))),
                OpKind::If => self.structured(o, Some(r)),
                _ => {
                    simple_kind(f, self.defs, o)
                        && op.operands.iter().all(|&x| self.value(x, Some(r)))
                        && op
                            .operands
                            .iter()
                            .all(|&x| !r.per_element.contains(&x) || same_element(f, o, x))
                }
            };
            if !ok {
                return false;
            }
            let derived =
                op.kind == OpKind::If || op.operands.iter().any(|x| r.per_element.contains(x));
            for &res in &op.results {
                if op.kind == OpKind::If {
                    r.bound.insert(res);
                }
                if derived && !f.ty(res).is_scalar() {
                    r.per_element.insert(res);
                }
            }
        }
        true
    }
}

/// Ops recomputable from recomputable operands: index arithmetic, constants, reductions and
/// loads of read-only memory.
fn simple_kind(f: &Function, defs: &[Option<OpId>], o: OpId) -> bool {
    let op = f.op(o);
    op.kind.is_coordinate_op()
        || matches!(op.kind, OpKind::Const(_) | OpKind::Reduce { .. })
        || (matches!(op.kind, OpKind::Load { .. }) && reads_read_only(f, defs, op.operands[0]))
}

/// Whether element `e` of op `o`'s result reads only element `e` of its operand `x`.
fn same_element(f: &Function, o: OpId, x: ValueId) -> bool {
    let op = f.op(o);
    let elementwise = matches!(
        op.kind,
        OpKind::Unary(_) | OpKind::Binary(_) | OpKind::Cmp(_) | OpKind::Select | OpKind::Cast(_)
    );
    elementwise && op.results.iter().all(|&r| f.ty(r).shape == f.ty(x).shape)
}

/// Marks every value defined in the regions of `op` (not its results).
fn defined_in_regions(f: &Function, op: &crate::ir::Op) -> Vec<bool> {
    let mut out = vec![false; f.values.len()];
    for b in &op.regions {
        for (o, d) in out.iter_mut().zip(defined_in(f, b)) {
            *o |= d;
        }
    }
    out
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
