//! The evaluator of rematerialized values (see `gpu_ir::remat` for which values qualify):
//! the C++ expression of one element of a value at any coordinates, recomputed from scalars,
//! coordinates and read-only loads, optionally for another iteration of a loop.

use super::c_types::literal;
use super::elem_index::ElemIndex;
use super::elementwise::zero;
use super::emitter::Emitter;
use super::recompute::check_broadcast;
use super::CodegenError;
use crate::ir::{BinaryOp, OpKind, ReduceKind, ScalarType, ValueId};

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
        let recurse = |x: ValueId, i: &ElemIndex| self.remat_expr(x, i, scope);
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
        let op = self
            .def_op(v)
            .ok_or_else(|| CodegenError::Malformed("reduce without op".into()))?;
        let OpKind::Reduce { kind, axis } = op.kind else {
            return Err(CodegenError::Malformed("not a reduction".into()));
        };
        let x = Self::operand(op, 0)?;
        let shape = self.shape(x).to_vec();
        let k = format!("attn_k{}", v.0);
        let count = match (shape.as_slice(), axis) {
            ([n], 0) | ([n, _], 0) | ([_, n], 1) => *n,
            (s, a) => {
                return Err(CodegenError::Malformed(format!(
                    "reduce axis {a} of shape {s:?}"
                )))
            }
        };
        if count % stride != 0 {
            return Err(CodegenError::Unsupported(format!(
                "{count} reduced elements over {stride} lanes"
            )));
        }
        let item_at = |i: &str| match (shape.len(), axis) {
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
        };
        let item = self.remat_expr(x, &item_at(&k), scope)?;
        let t = self.scalar(x)?;
        let rt = super::c_types::reg_type(self.elem(x));
        // Sums start from zero (f32 for floats, rounded once at the end); max/min ignore NaN
        // and start from the fold's first element.
        let (init, combine, from, round) = match kind {
            ReduceKind::Sum if t.is_float() => (
                "0.0f".to_string(),
                super::elementwise::binary(BinaryOp::Add, ScalarType::F32, "ACC", "ITEM")?,
                start.to_string(),
                Some(t),
            ),
            ReduceKind::Sum => (
                zero(self.elem(x)).to_string(),
                super::elementwise::binary(BinaryOp::Add, t, "ACC", "ITEM")?,
                start.to_string(),
                None,
            ),
            ReduceKind::Max | ReduceKind::Min => {
                let b = if kind == ReduceKind::Max {
                    BinaryOp::Max
                } else {
                    BinaryOp::Min
                };
                (
                    self.remat_expr(x, &item_at(start), scope)?,
                    super::elementwise::binary(b, t, "ACC", "ITEM")?,
                    format!("{start} + {stride}"),
                    None,
                )
            }
        };
        let partial = format!(
            "([&]() {{ {rt} acc = {init}; for (int {k} = {from}; {k} < {count}; {k} += {stride}) {{ const {rt} item = {item}; acc = {}; }} return acc; }}())",
            combine.replace("ACC", "acc").replace("ITEM", "item")
        );
        Ok(StridedFold {
            partial,
            combine,
            round,
            rt: rt.to_string(),
        })
    }
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
