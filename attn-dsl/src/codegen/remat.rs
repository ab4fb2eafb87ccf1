//! The evaluator of rematerialized values (see `gpu_ir::remat` for which values qualify):
//! the C++ expression of one element of a value at any coordinates, recomputed from scalars,
//! coordinates and read-only loads, optionally for another iteration of a loop.

use super::c_types::literal;
use super::elem_index::ElemIndex;
use super::elementwise::zero;
use super::emitter::Emitter;
use super::recompute::check_broadcast;
use super::remat_region::Batch;
use super::CodegenError;
use crate::ir::{BinaryOp, Op, OpKind, ReduceKind, ScalarType, ValueId};

type Res<T> = Result<T, CodegenError>;

/// Where an expression is evaluated: in place (every scalar defined so far has its name), or
/// for an iteration of a loop other than the current one (the loop body's values are
/// recomputed and the induction variable is `iv_expr`).
pub(crate) enum Scope<'a> {
    InPlace,
    Loop {
        iv: ValueId,
        iv_expr: String,
        defined_in_body: &'a [bool],
    },
}

impl<'f> Emitter<'f> {
    /// Element `at` of `v`, recomputed.
    pub(crate) fn remat_expr(&self, v: ValueId, at: &ElemIndex, scope: &Scope) -> Res<String> {
        if let Some(zero) = self.zeroed_term(v, at, scope)? {
            return Ok(zero);
        }
        if let Some(e) = self.remat_local(v, at) {
            return Ok(e);
        }
        let scalar = self.f.ty(v).is_scalar();
        match scope {
            Scope::Loop { iv, iv_expr, .. } if *iv == v => return Ok(iv_expr.clone()),
            Scope::Loop {
                defined_in_body, ..
            } if scalar && !defined_in_body[v.0 as usize] => return Ok(self.name(v)?.to_string()),
            Scope::InPlace if scalar => return Ok(self.name(v)?.to_string()),
            _ => {}
        }
        let op = self.def_op(v).ok_or_else(|| {
            CodegenError::Malformed(format!("%{} cannot be recomputed (no defining op)", v.0))
        })?;
        self.remat_op(v, op, at, scope)
    }

    /// Element `at` of result `v` of `op`, recomputed from `op`'s operands.
    pub(crate) fn remat_op(
        &self,
        v: ValueId,
        op: &Op,
        at: &ElemIndex,
        scope: &Scope,
    ) -> Res<String> {
        let recurse = |x: ValueId, i: &ElemIndex| self.remat_expr(x, i, scope);
        if op.kind == OpKind::AddPtr {
            if let Some(split) = self.page_pointer(op, at, scope)? {
                return Ok(split);
            }
        }
        if let OpKind::Cmp(_) = op.kind {
            if let Some(test) = self.mask_bound(op, at, scope)? {
                return Ok(test);
            }
        }
        match &op.kind {
            OpKind::Const(s) => Ok(literal(*s)),
            OpKind::Broadcast { .. } => {
                let x = Self::operand(op, 0)?;
                if self.f.ty(x).is_scalar() {
                    return recurse(x, at);
                }
                check_broadcast(self.shape(x), self.shape(v))?;
                recurse(x, &at.broadcast_source(self.shape(x), self.shape(v)))
            }
            OpKind::Load {
                has_mask,
                has_other,
            } => {
                let ptr = recurse(Self::operand(op, 0)?, at)?;
                let load = format!("attn_ld({ptr})");
                if !has_mask {
                    return Ok(load);
                }
                let mask = recurse(Self::operand(op, 1)?, at)?;
                let other = if *has_other {
                    recurse(Self::operand(op, 2)?, at)?
                } else {
                    zero(self.elem(v)).to_string()
                };
                Ok(format!("(({mask}) ? {load} : {other})"))
            }
            OpKind::Reduce { .. } if self.hoisted_at(v, at).is_some() => {
                Ok(self.hoisted_at(v, at).unwrap_or_default())
            }
            OpKind::Reduce { .. } => self.remat_reduce(v, at, scope),
            OpKind::For | OpKind::If => self.remat_structured_at(v, op, at, scope),
            k if k.is_coordinate_op() => self.element_expr(op, at, &recurse),
            k => Err(CodegenError::Malformed(format!(
                "%{} ({k:?}) cannot be recomputed",
                v.0
            ))),
        }
    }

    /// One element of a reduction, as a loop over the reduced axis of its recomputed
    /// operand in ascending order (the executor's order: sums from zero in f32 and rounded
    /// at the end, max/min from the first element).
    fn remat_reduce(&self, v: ValueId, at: &ElemIndex, scope: &Scope) -> Res<String> {
        let kept = if self.f.ty(v).is_scalar() {
            "0".to_string()
        } else {
            at.coords(self.shape(v)).0
        };
        let fold = self.remat_reduce_strided(v, &kept, "0", 1, scope)?;
        Ok(fold.finish(&fold.partial))
    }

    /// The variable holding reduction `v` at element `at`, if a copy hoisted it for that row.
    fn hoisted_at(&self, v: ValueId, at: &ElemIndex) -> Option<String> {
        let (name, row) = self.hoisted.get(&v.0)?;
        (at.coords(self.shape(v)).0 == *row).then(|| name.clone())
    }

    /// A fold of reduction `v` at kept index `kept` over elements `start + stride·i` of the
    /// reduced axis, ascending: the whole reduction with `start = 0, stride = 1`, or one lane's
    /// share of it (the lanes then combine their partials with [`StridedFold::combine`]).
    pub(crate) fn remat_reduce_strided(
        &self,
        v: ValueId,
        kept: &str,
        start: &str,
        stride: usize,
        scope: &Scope,
    ) -> Res<StridedFold> {
        let r = self.reduce_geometry(v, stride)?;
        let k = format!("attn_k{}", v.0);
        let item = self.remat_expr(r.x, &r.item_at(kept, &k), scope)?;
        let parts = self.fold_parts(r.kind, r.x)?;
        let rt = &parts.rt;
        let (init, from) = match &parts.init {
            Some(init) => (init.clone(), start.to_string()),
            None => (
                self.remat_expr(r.x, &r.item_at(kept, start), scope)?,
                format!("{start} + {stride}"),
            ),
        };
        let partial = format!(
            "([&]() {{ {rt} acc = {init}; for (int {k} = {from}; {k} < {}; {k} += {stride}) {{ const {rt} item = {item}; acc = {}; }} return acc; }}())",
            r.count,
            parts.combine.replace("ACC", "acc").replace("ITEM", "item")
        );
        Ok(StridedFold {
            partial,
            combine: parts.combine,
            round: parts.round,
            rt: parts.rt,
        })
    }

    /// [`Self::remat_reduce_strided`] as statements, when the reduced tile reads the results
    /// of loops or branches elementwise (a mask OR-ed over a runtime list of ranges): those
    /// run once for all of the fold's elements (their scalar work once, not per element),
    /// then the fold reads them from registers. Returns the statements and the fold (its
    /// `partial` names the variable the statements leave the partial in), or `None` when the
    /// reduced tile reads no such result.
    pub(crate) fn remat_reduce_batched(
        &self,
        v: ValueId,
        kept: &str,
        start: &str,
        stride: usize,
        scope: &Scope,
    ) -> Res<Option<(Vec<String>, StridedFold)>> {
        let r = self.reduce_geometry(v, stride)?;
        let mut structured = Vec::new();
        self.collect_structured(r.x, self.shape(r.x), &mut structured);
        if structured.is_empty() {
            return Ok(None);
        }
        let (t, k) = (format!("attn_t{}", v.0), format!("attn_k{}", v.0));
        let batch = Batch {
            n: r.count / stride,
            t: t.clone(),
            decl: format!("const int {k} = {start} + {t} * {stride};"),
            at: r.item_at(kept, &k),
        };
        let mut lines = Vec::new();
        let mut bound = Vec::new();
        let item = (|| {
            for &o in &structured {
                let op = self.f.op(o);
                let exprs = self.structured_stmts(op, &batch, scope, &mut lines)?;
                for (&res, e) in op.results.iter().zip(exprs) {
                    self.bind_local(res, e, Some(batch.at.clone()), &mut bound);
                }
            }
            self.remat_expr(r.x, &batch.at, scope)
        })();
        self.unbind_locals(&bound);
        let item = item?;
        let parts = self.fold_parts(r.kind, r.x)?;
        let (rt, acc) = (&parts.rt, format!("attn_acc{}", v.0));
        let combine = parts
            .combine
            .replace("ACC", &acc)
            .replace("ITEM", "attn_item");
        let step = match &parts.init {
            Some(init) => {
                lines.push(format!("{rt} {acc} = {init};"));
                format!("{acc} = {combine};")
            }
            None => {
                lines.push(format!("{rt} {acc};"));
                format!("{acc} = {t} == 0 ? attn_item : {combine};")
            }
        };
        batch.for_items(
            &format!("const {rt} attn_item = {item}; {step}"),
            &mut lines,
        );
        Ok(Some((
            lines,
            StridedFold {
                partial: acc,
                combine: parts.combine,
                round: parts.round,
                rt: parts.rt,
            },
        )))
    }

    /// The reduced operand, kind, axis and length of reduction `v`, folded over `lanes`.
    fn reduce_geometry(&self, v: ValueId, lanes: usize) -> Res<ReduceGeometry> {
        let op = self
            .def_op(v)
            .ok_or_else(|| CodegenError::Malformed("reduce without op".into()))?;
        let OpKind::Reduce { kind, axis } = op.kind else {
            return Err(CodegenError::Malformed("not a reduction".into()));
        };
        let x = Self::operand(op, 0)?;
        let shape = self.shape(x).to_vec();
        let count = match (shape.as_slice(), axis) {
            ([n], 0) | ([n, _], 0) | ([_, n], 1) => *n,
            (s, a) => {
                return Err(CodegenError::Malformed(format!(
                    "reduce axis {a} of shape {s:?}"
                )))
            }
        };
        if count % lanes != 0 {
            return Err(CodegenError::Unsupported(format!(
                "{count} reduced elements over {lanes} lanes"
            )));
        }
        Ok(ReduceGeometry {
            x,
            kind,
            axis,
            count,
            rank: shape.len(),
        })
    }

    /// How a fold of `kind` over `x` starts, combines and ends.
    fn fold_parts(&self, kind: ReduceKind, x: ValueId) -> Res<FoldParts> {
        let t = self.scalar(x)?;
        let rt = super::c_types::reg_type(self.elem(x));
        // Sums start from zero (f32 for floats, rounded once at the end); max/min ignore NaN
        // and start from the fold's first element.
        Ok(match kind {
            ReduceKind::Sum if t.is_float() => FoldParts {
                init: Some("0.0f".to_string()),
                combine: super::elementwise::binary(BinaryOp::Add, ScalarType::F32, "ACC", "ITEM")?,
                round: Some(t),
                rt,
            },
            ReduceKind::Sum => FoldParts {
                init: Some(zero(self.elem(x)).to_string()),
                combine: super::elementwise::binary(BinaryOp::Add, t, "ACC", "ITEM")?,
                round: None,
                rt,
            },
            ReduceKind::Max | ReduceKind::Min => {
                let b = if kind == ReduceKind::Max {
                    BinaryOp::Max
                } else {
                    BinaryOp::Min
                };
                FoldParts {
                    init: None,
                    combine: super::elementwise::binary(b, t, "ACC", "ITEM")?,
                    round: None,
                    rt,
                }
            }
        })
    }

    /// The loops and branches (distinct ops, first use first) whose results `v` reads at its
    /// own element, through elementwise ops only: those a batch over `v`'s elements can run
    /// once for all of them. `shape` is `v`'s.
    fn collect_structured(&self, v: ValueId, shape: &[usize], out: &mut Vec<crate::ir::OpId>) {
        if self.f.ty(v).is_scalar() || self.shape(v) != shape {
            return;
        }
        let Some(o) = self.def_id(v) else { return };
        let op = self.f.op(o);
        match op.kind {
            OpKind::For | OpKind::If if !out.contains(&o) => out.push(o),
            OpKind::For | OpKind::If => {}
            OpKind::Unary(_)
            | OpKind::Binary(_)
            | OpKind::Cmp(_)
            | OpKind::Select
            | OpKind::Cast(_) => {
                for &x in &op.operands {
                    self.collect_structured(x, shape, out);
                }
            }
            _ => {}
        }
    }
}

/// Where a reduction's elements are.
struct ReduceGeometry {
    x: ValueId,
    kind: ReduceKind,
    axis: usize,
    count: usize,
    rank: usize,
}

impl ReduceGeometry {
    /// Element `i` of the reduced axis at kept index `kept`.
    fn item_at(&self, kept: &str, i: &str) -> ElemIndex {
        match (self.rank, self.axis) {
            (1, _) => ElemIndex::Coords {
                row: i.into(),
                col: "0".into(),
            },
            (_, 0) => ElemIndex::Coords {
                row: i.into(),
                col: kept.into(),
            },
            _ => ElemIndex::Coords {
                row: kept.into(),
                col: i.into(),
            },
        }
    }
}

/// The pieces of a fold: its first value (`None`: the first element), how two partials
/// combine (`ACC`, `ITEM` placeholders), the dtype a float sum rounds to, the C type.
struct FoldParts {
    init: Option<String>,
    combine: String,
    round: Option<ScalarType>,
    rt: String,
}

/// A (partial) reduction as C++: the fold's expression, how two partials combine (`ACC`,
/// `ITEM` placeholders), the dtype a float sum rounds to at the end, the C type.
pub(crate) struct StridedFold {
    pub(crate) partial: String,
    pub(crate) combine: String,
    round: Option<ScalarType>,
    pub(crate) rt: String,
}

impl StridedFold {
    /// The finished reduction from the (combined) fold `acc`.
    pub(crate) fn finish(&self, acc: &str) -> String {
        match self.round {
            Some(t) => super::c_types::round_to(t, acc.to_string()),
            None => acc.to_string(),
        }
    }
}
