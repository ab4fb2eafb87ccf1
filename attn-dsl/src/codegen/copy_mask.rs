//! A copy's mask, made cheap to evaluate per chunk: the uniform scalars it reads from loops
//! and branches computed once per copy, and its row reductions (the V guard's `any` over a
//! key's allowed rows) once per row, shuffled across the row's lanes, under the uniform
//! guard that decides whether the mask reads them.

use super::c_types::scalar_reg_type;
use super::elem_index::ElemIndex;
use super::emitter::Emitter;
use super::remat::Scope;
use super::CodegenError;
use crate::gpu_ir::AsyncCopy;
use crate::ir::{BinaryOp, Op, OpKind, ValueId};

type Res<T> = Result<T, CodegenError>;

/// The uniform tile (a splat of a scalar) that decides whether a mask reads a reduction, and
/// the value of it under which it does.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Guard {
    value: ValueId,
    read_when: bool,
}

impl Emitter<'_> {
    /// Computes once per copy, before its passes, each uniform scalar of the copies' masks
    /// that is the result of a loop or a branch (a full-tile predicate over the block's image
    /// ranges), and makes the masks read it from that local. Inline it is a lambda that runs
    /// again in every pass and chunk, loads included, since the memory clobber of each
    /// `cp.async` keeps the compiler from merging the runs.
    pub(crate) fn hoist_uniform_regions(
        &mut self,
        cs: &[&AsyncCopy],
        scope: &Scope,
        bound: &mut Vec<u32>,
    ) -> Res<()> {
        let (mut found, mut seen) = (Vec::new(), Vec::new());
        for c in cs {
            let load = self.f.op(c.load);
            if let OpKind::Load { has_mask: true, .. } = load.kind {
                self.collect_uniform_regions(load.operands[1], &mut found, &mut seen);
            }
        }
        // Only values of the loop body are recomputed; the others are named already.
        let Scope::Loop {
            defined_in_body, ..
        } = scope
        else {
            return Ok(());
        };
        found.retain(|v| defined_in_body[v.0 as usize]);
        // A scalar's value is the same at every element: any coordinates will do.
        let anywhere = ElemIndex::Flat("0".into());
        for v in found {
            let ty = scalar_reg_type(self.scalar(v)?);
            let expr = self.remat_expr(v, &anywhere, scope)?;
            let name = format!("attn_u{}", v.0);
            self.w.line(format!("const {ty} {name} = {expr};"));
            self.bind_local(v, name, None, bound);
        }
        Ok(())
    }

    /// The scalar results of loops and branches that `v`'s recomputation reads (outermost
    /// first, no duplicates; `seen` holds the values already walked).
    pub(crate) fn collect_uniform_regions(
        &self,
        v: ValueId,
        out: &mut Vec<ValueId>,
        seen: &mut Vec<ValueId>,
    ) {
        if seen.contains(&v) {
            return;
        }
        seen.push(v);
        let Some(op) = self.def_op(v) else { return };
        if self.f.ty(v).is_scalar() && matches!(op.kind, OpKind::For | OpKind::If) {
            out.push(v);
            return;
        }
        for &x in &op.operands {
            self.collect_uniform_regions(x, out, seen);
        }
    }

    /// Computes each reduction in a copy's mask once per row before the chunk loop, the row's `lanes` threads each folding every lanes-th element
    /// and combining with xor shuffles (all threads of a warp take part: the lane groups
    /// tile the warp), and returns the mask with those reductions read from variables.
    pub(crate) fn hoist_row_reductions(
        &mut self,
        load: &Op,
        at: &ElemIndex,
        scope: &Scope,
        lanes: usize,
    ) -> Res<String> {
        let mask_v = load.operands[1];
        let mut reduces = Vec::new();
        self.collect_reduces(mask_v, None, &mut reduces);
        for (r, guard) in reduces {
            let name = format!("attn_red{}", r.0);
            let (row, lane) = ("attn_row", "attn_lane_in_row");
            // Under `uniform || x` (or `uniform && x`) the mask never reads `x` when the
            // uniform scalar decides it, so neither does the hoisted loop.
            let read = self.read_condition(guard, at, scope)?;
            // The guard is a uniform scalar, so the whole warp takes the same side: the
            // shuffles go inside it too, and a tile the guard decides (a full tile's V
            // guard) pays no reduction at all (`ATTN_CODEGEN_DISABLE=guarded_shuffles`
            // shuffles after it).
            let shuffles_inside = crate::features::on("guarded_shuffles");
            let batched = self.remat_reduce_batched(r, row, lane, lanes, scope);
            // Not split evenly over the lanes: the lane folds its strided elements whole.
            let (stmts, fold) = match batched {
                Ok(Some((stmts, fold))) => (stmts, fold),
                Ok(None) => match self.remat_reduce_strided(r, row, lane, lanes, scope) {
                    Ok(fold) => (Vec::new(), fold),
                    Err(_) => continue,
                },
                Err(_) => continue,
            };
            self.w.line(format!("{} {name} = ({})0;", fold.rt, fold.rt));
            match &read {
                Some(c) => self.w.open(format!("if ({c})")),
                None => self.w.open(""),
            }
            for l in stmts {
                self.w.line(l);
            }
            self.w.line(format!("{name} = {};", fold.partial));
            if !shuffles_inside {
                self.w.close("");
            }
            let mut m = 1;
            while m < lanes {
                let other = format!("attn_shfl_xor({name}, {m})");
                self.w.line(format!(
                    "{name} = {};",
                    fold.combine.replace("ITEM", &other).replace("ACC", &name)
                ));
                m *= 2;
            }
            let finished = fold.finish(&name);
            if finished != name {
                self.w.line(format!("{name} = {finished};"));
            }
            if shuffles_inside {
                self.w.close("");
            }
            self.hoisted.insert(r.0, (name, "attn_row".to_string()));
        }
        let mask = self.in_copy_mask(|| self.remat_expr(mask_v, at, scope));
        self.hoisted.clear();
        mask
    }

    /// The condition under which a mask reads a reduction its `guard` decides (`None`: always).
    pub(crate) fn read_condition(
        &self,
        guard: Option<Guard>,
        at: &ElemIndex,
        scope: &Scope,
    ) -> Res<Option<String>> {
        Ok(match guard {
            Some(Guard { value, read_when }) => {
                let g = self.remat_expr(value, at, scope)?;
                Some(format!("{}({g})", if read_when { "" } else { "!" }))
            }
            None => None,
        })
    }

    /// The reductions a recomputed tile evaluates (outermost first, no duplicates), each
    /// with the uniform scalar that decides whether the expression reads it: in `u | x`
    /// the reduction in `x` is read only when `u` is false, in `u & x` only when `u` is true.
    pub(crate) fn collect_reduces(
        &self,
        v: ValueId,
        guard: Option<Guard>,
        out: &mut Vec<(ValueId, Option<Guard>)>,
    ) {
        if self.f.ty(v).is_scalar() || out.iter().any(|(r, _)| *r == v) {
            return;
        }
        let Some(op) = self.def_op(v) else { return };
        if matches!(op.kind, OpKind::Reduce { .. }) {
            out.push((v, guard));
            return;
        }
        if let (OpKind::Binary(b @ (BinaryOp::Or | BinaryOp::And)), None) = (&op.kind, guard) {
            let read_when = *b == BinaryOp::And;
            let uniform = |x: ValueId| self.uniform_scalar(x).is_some();
            let (l, r) = (op.operands[0], op.operands[1]);
            let split = match (uniform(l), uniform(r)) {
                (true, false) => Some((l, r)),
                (false, true) => Some((r, l)),
                _ => None,
            };
            if let Some((value, rest)) = split {
                let g = Guard { value, read_when };
                return self.collect_reduces(rest, Some(g), out);
            }
        }
        for &x in &op.operands {
            self.collect_reduces(x, guard, out);
        }
    }
}
