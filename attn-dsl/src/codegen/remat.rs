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
            OpKind::Reduce { kind, axis } => self.remat_reduce(v, *kind, *axis, at, scope),
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
    fn remat_reduce(
        &self,
        v: ValueId,
        kind: ReduceKind,
        axis: usize,
        at: &ElemIndex,
        scope: &Scope,
    ) -> Res<String> {
        let op = self
            .def_op(v)
            .ok_or_else(|| CodegenError::Malformed("reduce without op".into()))?;
        let x = Self::operand(op, 0)?;
        let shape = self.shape(x).to_vec();
        let k = format!("attn_k{}", v.0);
        let kept = if self.f.ty(v).is_scalar() {
            "0".to_string()
        } else {
            at.coords(self.shape(v)).0
        };
        let (count, item_at) = match (shape.as_slice(), axis) {
            ([n], 0) => (
                *n,
                ElemIndex::Coords {
                    row: k.clone(),
                    col: "0".into(),
                },
            ),
            ([m, _], 0) => (
                *m,
                ElemIndex::Coords {
                    row: k.clone(),
                    col: kept,
                },
            ),
            ([_, n], 1) => (
                *n,
                ElemIndex::Coords {
                    row: kept,
                    col: k.clone(),
                },
            ),
            (s, a) => {
                return Err(CodegenError::Malformed(format!(
                    "reduce axis {a} of shape {s:?}"
                )))
            }
        };
        let item = self.remat_expr(x, &item_at, scope)?;
        let t = self.scalar(x)?;
        let rt = super::c_types::reg_type(self.elem(x));
        let (init, first, step, finish) = match kind {
            ReduceKind::Sum if t.is_float() => (
                "0.0f".to_string(),
                0,
                super::elementwise::binary(BinaryOp::Add, ScalarType::F32, "acc", "item")?,
                super::c_types::round_to(t, "acc".into()),
            ),
            ReduceKind::Sum => (
                zero(self.elem(x)).to_string(),
                0,
                super::elementwise::binary(BinaryOp::Add, t, "acc", "item")?,
                "acc".into(),
            ),
            ReduceKind::Max | ReduceKind::Min => {
                let b = if kind == ReduceKind::Max {
                    BinaryOp::Max
                } else {
                    BinaryOp::Min
                };
                (
                    "item0".into(),
                    1,
                    super::elementwise::binary(b, t, "acc", "item")?,
                    "acc".into(),
                )
            }
        };
        let first_item = self.remat_expr(
            x,
            &match &item_at {
                ElemIndex::Coords { row, col } if *row == k => ElemIndex::Coords {
                    row: "0".into(),
                    col: col.clone(),
                },
                ElemIndex::Coords { row, .. } => ElemIndex::Coords {
                    row: row.clone(),
                    col: "0".into(),
                },
                other => other.clone(),
            },
            scope,
        )?;
        Ok(format!(
            "([&]() {{ const {rt} item0 = {first_item}; {rt} acc = {init}; \
             for (int {k} = {first}; {k} < {count}; ++{k}) {{ const {rt} item = {item}; acc = {step}; }} \
             return {finish}; }}())"
        ))
    }

    /// The variable holding reduction `v` at element `at`, if a copy hoisted it for that row.
    fn hoisted_at(&self, v: ValueId, at: &ElemIndex) -> Option<String> {
        let (name, row) = self.hoisted.get(&v.0)?;
        (at.coords(self.shape(v)).0 == *row).then(|| name.clone())
    }

    /// This thread's share of reduction `v` at kept index `kept`: elements
    /// `attn_lane_in_row + lanes·i` of the reduced axis, folded in ascending order. Returns the
    /// partial's expression, the combine step (`ACC`, `ITEM` placeholders) and its C type.
    pub(crate) fn remat_reduce_lanes(
        &self,
        v: ValueId,
        kept: &str,
        lanes: usize,
        scope: &Scope,
    ) -> Res<(String, String, String)> {
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
        if count % lanes != 0 {
            return Err(CodegenError::Unsupported(format!(
                "{count} reduced elements over {lanes} lanes"
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
        let (init, step) = match kind {
            ReduceKind::Sum => (
                zero(self.elem(x)).to_string(),
                super::elementwise::binary(BinaryOp::Add, t, "ACC", "ITEM")?,
            ),
            ReduceKind::Max | ReduceKind::Min => {
                let b = if kind == ReduceKind::Max {
                    BinaryOp::Max
                } else {
                    BinaryOp::Min
                };
                // Max/min ignore NaN and start from the lane's first element.
                (
                    "ITEM0".to_string(),
                    super::elementwise::binary(b, t, "ACC", "ITEM")?,
                )
            }
        };
        let first = self.remat_expr(x, &item_at("attn_lane_in_row"), scope)?;
        let init = init.replace("ITEM0", &first);
        let start = if init == first {
            format!("attn_lane_in_row + {lanes}")
        } else {
            "attn_lane_in_row".into()
        };
        let partial = format!(
            "([&]() {{ {rt} acc = {init}; for (int {k} = {start}; {k} < {count}; {k} += {lanes}) {{ const {rt} item = {item}; acc = {}; }} return acc; }}())",
            step.replace("ACC", "acc").replace("ITEM", "item")
        );
        Ok((partial, step, rt))
    }
}
