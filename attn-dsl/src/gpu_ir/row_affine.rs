//! Row-affine analysis: along one axis of a pointer tile, runs of rows whose addresses are
//! one fixed stride apart. A TMA box is a run of such rows: a paged K/V tile is affine in
//! each page (`block_table[k / PAGE] · stride_block + (k % PAGE) · stride_slot + …`: the
//! block is constant over the page's rows, the slot steps by one), so its rows arrive as
//! one box per page and 64-column block instead of a `cp.async` per 16 bytes.
//!
//! Facts are only needed *where the copy's mask holds*: a load inside the address (the
//! block-table read) may be masked by a conjunct of the copy's mask (`k < seq_len`), and
//! where that mask is false the address is never used. What makes the run's first row a
//! safe base for the others is that such masks are *prefix-closed* along the axis
//! (`x < bound` with `x` increasing): if the first row of a run fails, every row does, the
//! run is entirely masked and its box is never read unzeroed.
//!
//! `x / K` and `x % K` are grouped only for `x` provably non-negative (C division rounds
//! toward zero, so negative runs do not split at multiples of `K`).

use crate::ir::{BinaryOp, CmpPred, Function, OpId, OpKind, ScalarType, ValueId};
use crate::passes::axis_info::AxisAnalysis;
use std::collections::{BTreeMap, BTreeSet};

/// The run length of a value constant along the whole axis.
pub const UNBOUNDED: u64 = 1 << 30;

/// `konst + Σ coeff · value` over scalar values: a stride, or a uniform value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lin {
    pub konst: i64,
    pub terms: BTreeMap<ValueId, i64>,
}

impl Lin {
    fn konst(k: i64) -> Lin {
        Lin {
            konst: k,
            terms: BTreeMap::new(),
        }
    }
    fn term(v: ValueId) -> Lin {
        Lin {
            konst: 0,
            terms: BTreeMap::from([(v, 1)]),
        }
    }
    pub fn is_zero(&self) -> bool {
        self.konst == 0 && self.terms.is_empty()
    }
    /// The constant, when there are no terms.
    pub fn as_konst(&self) -> Option<i64> {
        self.terms.is_empty().then_some(self.konst)
    }
    fn add(&self, o: &Lin, sign: i64) -> Option<Lin> {
        let mut out = self.clone();
        out.konst = out.konst.checked_add(o.konst.checked_mul(sign)?)?;
        for (v, c) in &o.terms {
            let e = out.terms.entry(*v).or_insert(0);
            *e = e.checked_add(c.checked_mul(sign)?)?;
        }
        out.terms.retain(|_, c| *c != 0);
        Some(out)
    }
    /// The product, when one side is a constant (no products of runtime values).
    fn mul(&self, o: &Lin) -> Option<Lin> {
        let (k, x) = match (self.as_konst(), o.as_konst()) {
            (Some(k), _) => (k, o),
            (_, Some(k)) => (k, self),
            _ => return None,
        };
        let mut out = Lin::konst(x.konst.checked_mul(k)?);
        for (v, c) in &x.terms {
            out.terms.insert(*v, c.checked_mul(k)?);
        }
        out.terms.retain(|_, c| *c != 0);
        Some(out)
    }
}

/// Along the axis, aligned runs of `run` elements in which each element is the previous
/// plus `stride` (in elements, for pointers).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowAffine {
    pub run: u64,
    pub stride: Lin,
}

impl RowAffine {
    fn constant(run: u64) -> Self {
        RowAffine {
            run,
            stride: Lin::default(),
        }
    }
}

/// The analysis of one copy: the function, and the conjuncts of the copy's mask (each with
/// the axis of its own shape the copy's row axis maps to, `None` when it does not vary
/// along it).
pub struct RowAffineCtx<'a> {
    f: &'a Function,
    defs: &'a [Option<OpId>],
    axis: &'a AxisAnalysis,
    mask_conjuncts: BTreeSet<(ValueId, Option<usize>)>,
    params: BTreeSet<ValueId>,
    /// Values the copy's emission binds to others (a copy one iteration behind moves its
    /// own iteration's tile: `iv − step` is `iv` there), for their bounds.
    rebound: BTreeMap<ValueId, ValueId>,
}

impl<'a> RowAffineCtx<'a> {
    /// For a copy whose mask is `mask` (if any) and whose rows run along `row_axis`.
    pub fn new(
        f: &'a Function,
        defs: &'a [Option<OpId>],
        axis: &'a AxisAnalysis,
        mask: Option<ValueId>,
        row_axis: usize,
    ) -> Self {
        let mut ctx = RowAffineCtx {
            f,
            defs,
            axis,
            mask_conjuncts: BTreeSet::new(),
            params: f.params.iter().map(|p| p.value).collect(),
            rebound: BTreeMap::new(),
        };
        if let Some(m) = mask {
            ctx.collect_conjuncts(m, Some(row_axis));
        }
        ctx
    }

    /// The analysis of a copy whose emission binds `from` to `to` (see [`AsyncCopy::behind`]
    /// in the GPU IR): `from`'s bounds are `to`'s.
    ///
    /// [`AsyncCopy::behind`]: super::program::AsyncCopy::behind
    pub fn rebinding(mut self, from: ValueId, to: ValueId) -> Self {
        self.rebound.insert(from, to);
        self
    }

    fn def(&self, v: ValueId) -> Option<&'a crate::ir::Op> {
        self.defs
            .get(v.0 as usize)
            .copied()
            .flatten()
            .map(|o| self.f.op(o))
    }

    /// The leaves of the mask's `&` tree, through unsqueezes and broadcasts.
    fn collect_conjuncts(&mut self, v: ValueId, axis: Option<usize>) {
        self.mask_conjuncts.insert((v, axis));
        let Some(op) = self.def(v) else { return };
        match &op.kind {
            OpKind::Binary(BinaryOp::And) => {
                for &x in &op.operands {
                    self.collect_conjuncts(x, axis);
                }
            }
            OpKind::ExpandDims { axis: e } => {
                let inner = axis.and_then(|a| match a.cmp(e) {
                    std::cmp::Ordering::Less => Some(a),
                    std::cmp::Ordering::Equal => None,
                    std::cmp::Ordering::Greater => Some(a - 1),
                });
                self.collect_conjuncts(op.operands[0], inner);
            }
            OpKind::Broadcast { .. } => {
                let src = op.operands[0];
                let inner = axis.filter(|&a| self.f.ty(src).shape.get(a) != Some(&1));
                self.collect_conjuncts(src, inner);
            }
            _ => {}
        }
    }

    /// Whether `v` is the same at every element (a scalar, or a splat or broadcast of one).
    fn uniform(&self, v: ValueId) -> bool {
        if self.f.ty(v).is_scalar() {
            return true;
        }
        match self.def(v).map(|o| &o.kind) {
            Some(OpKind::Splat { .. }) => true,
            Some(OpKind::Broadcast { .. } | OpKind::ExpandDims { .. }) => {
                self.uniform(self.def(v).unwrap().operands[0])
            }
            _ => false,
        }
    }

    /// A uniform value as a linear form over scalar parameters, when it is one.
    fn uniform_lin(&self, v: ValueId) -> Option<Lin> {
        if self.params.contains(&v) {
            return Some(Lin::term(v));
        }
        let op = self.def(v)?;
        match &op.kind {
            OpKind::Const(crate::ir::Scalar::Int(k, _)) => Some(Lin::konst(*k)),
            OpKind::Splat { .. } | OpKind::Broadcast { .. } | OpKind::ExpandDims { .. } => {
                self.uniform_lin(op.operands[0])
            }
            OpKind::Cast(t) if self.int_widening(op.operands[0], *t) => {
                self.uniform_lin(op.operands[0])
            }
            OpKind::Binary(b @ (BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul)) => {
                let (x, y) = (
                    self.uniform_lin(op.operands[0])?,
                    self.uniform_lin(op.operands[1])?,
                );
                match b {
                    BinaryOp::Add => x.add(&y, 1),
                    BinaryOp::Sub => x.add(&y, -1),
                    _ => x.mul(&y),
                }
            }
            _ => None,
        }
    }

    fn int_widening(&self, from: ValueId, to: ScalarType) -> bool {
        let src = self.f.ty(from).elem.scalar();
        matches!(
            (src, to),
            (Some(ScalarType::I32), ScalarType::I32 | ScalarType::I64)
                | (Some(ScalarType::I64), ScalarType::I64)
        )
    }

    /// Runs and stride of `v` along `axis` of its shape, where the copy's mask holds.
    pub fn affine(&self, v: ValueId, axis: usize) -> Option<RowAffine> {
        if self.f.ty(v).is_scalar() {
            return Some(RowAffine::constant(UNBOUNDED));
        }
        let Some(op) = self.def(v) else {
            return self.by_axis_info(v, axis);
        };
        let rule = match &op.kind {
            OpKind::Splat { .. } | OpKind::Const(_) => Some(RowAffine::constant(UNBOUNDED)),
            OpKind::Arange { n } => Some(RowAffine {
                run: *n as u64,
                stride: Lin::konst(1),
            }),
            OpKind::Broadcast { .. } => {
                let src = op.operands[0];
                if self.f.ty(src).shape.get(axis) == Some(&1) {
                    Some(RowAffine::constant(UNBOUNDED))
                } else {
                    self.affine(src, axis)
                }
            }
            OpKind::ExpandDims { axis: e } => match axis.cmp(e) {
                std::cmp::Ordering::Equal => Some(RowAffine::constant(UNBOUNDED)),
                std::cmp::Ordering::Less => self.affine(op.operands[0], axis),
                std::cmp::Ordering::Greater => self.affine(op.operands[0], axis - 1),
            },
            OpKind::Cast(t) if self.int_widening(op.operands[0], *t) => {
                self.affine(op.operands[0], axis)
            }
            OpKind::AddPtr => self.sum(op.operands[0], op.operands[1], axis, 1),
            OpKind::Binary(BinaryOp::Add) => self.sum(op.operands[0], op.operands[1], axis, 1),
            OpKind::Binary(BinaryOp::Sub) => self.sum(op.operands[0], op.operands[1], axis, -1),
            OpKind::Binary(BinaryOp::Mul) => self.product(op.operands[0], op.operands[1], axis),
            OpKind::Binary(b @ (BinaryOp::Div | BinaryOp::Rem)) => {
                self.grouped(*b, op.operands[0], op.operands[1], axis)
            }
            OpKind::Load { has_mask, .. } => self.load(op, *has_mask, axis),
            _ => None,
        };
        rule.or_else(|| self.by_axis_info(v, axis))
    }

    /// What axis analysis knows: constant runs, or (integers) runs stepping by one.
    fn by_axis_info(&self, v: ValueId, axis: usize) -> Option<RowAffine> {
        let info = self.axis.get(v);
        let (k, c) = (*info.constancy.get(axis)?, *info.contiguity.get(axis)?);
        if k > 1 {
            return Some(RowAffine::constant(k));
        }
        let int = matches!(
            self.f.ty(v).elem.scalar(),
            Some(ScalarType::I32 | ScalarType::I64)
        );
        (c > 1 && int).then(|| RowAffine {
            run: c,
            stride: Lin::konst(1),
        })
    }

    fn sum(&self, a: ValueId, b: ValueId, axis: usize, sign: i64) -> Option<RowAffine> {
        let (x, y) = (self.affine(a, axis)?, self.affine(b, axis)?);
        Some(RowAffine {
            run: x.run.min(y.run),
            stride: x.stride.add(&y.stride, sign)?,
        })
    }

    fn product(&self, a: ValueId, b: ValueId, axis: usize) -> Option<RowAffine> {
        let (x, y) = (self.affine(a, axis)?, self.affine(b, axis)?);
        let run = x.run.min(y.run);
        let stride = match (x.stride.is_zero(), y.stride.is_zero()) {
            (true, true) => Lin::default(),
            // A factor constant only within runs would scale each run's stride differently.
            (true, false) if self.uniform(a) => self.uniform_lin(a)?.mul(&y.stride)?,
            (false, true) if self.uniform(b) => self.uniform_lin(b)?.mul(&x.stride)?,
            _ => return None,
        };
        Some(RowAffine { run, stride })
    }

    /// `x / K` (constant in runs of K) and `x % K` (stepping by one in runs of K) for a
    /// non-negative `x` stepping by one over runs that start at multiples of `K`.
    fn grouped(&self, b: BinaryOp, x: ValueId, k: ValueId, axis: usize) -> Option<RowAffine> {
        let kk = self.uniform_lin(k)?.as_konst().filter(|&k| k > 0)? as u64;
        let ax = self.affine(x, axis)?;
        if ax.stride.is_zero() {
            return Some(RowAffine::constant(ax.run));
        }
        let start_div = *self.axis.get(x).divisibility.get(axis)?;
        let aligned = ax.stride.as_konst() == Some(1)
            && ax.run.is_multiple_of(kk)
            && start_div.is_multiple_of(kk)
            && self.nonneg(x, 0);
        if !aligned {
            return None;
        }
        Some(match b {
            BinaryOp::Div => RowAffine::constant(kk),
            _ => RowAffine {
                run: kk,
                stride: Lin::konst(1),
            },
        })
    }

    /// A load of one address per run is constant over the run where its mask holds; its
    /// mask must be uniform or a prefix-closed conjunct of the copy's mask (module note).
    fn load(&self, op: &crate::ir::Op, has_mask: bool, axis: usize) -> Option<RowAffine> {
        let p = self.affine(op.operands[0], axis)?;
        if !p.stride.is_zero() {
            return None;
        }
        if has_mask {
            let m = op.operands[1];
            if !self.uniform(m) && !self.masks_like_the_copy(m, axis) {
                return None;
            }
        }
        Some(RowAffine::constant(p.run))
    }

    /// Every conjunct of `m` uniform, or a prefix-closed comparison the copy's mask holds.
    fn masks_like_the_copy(&self, m: ValueId, axis: usize) -> bool {
        if self.uniform(m) {
            return true;
        }
        let Some(op) = self.def(m) else { return false };
        if let OpKind::Binary(BinaryOp::And) = op.kind {
            return op
                .operands
                .iter()
                .all(|&x| self.masks_like_the_copy(x, axis));
        }
        self.mask_conjuncts.contains(&(m, Some(axis))) && self.prefix_closed(op, axis)
    }

    /// `x < u`, `x <= u`, `u > x` or `u >= x` with `x` increasing along the axis.
    fn prefix_closed(&self, op: &crate::ir::Op, axis: usize) -> bool {
        let OpKind::Cmp(pred) = op.kind else {
            return false;
        };
        let (a, b) = (op.operands[0], op.operands[1]);
        let (x, u) = match pred {
            CmpPred::Lt | CmpPred::Le => (a, b),
            CmpPred::Gt | CmpPred::Ge => (b, a),
            _ => return false,
        };
        self.uniform(u)
            && self
                .affine(x, axis)
                .and_then(|r| r.stride.as_konst())
                .is_some_and(|s| s > 0)
    }

    /// Whether `v` is provably non-negative.
    fn nonneg(&self, v: ValueId, depth: usize) -> bool {
        self.lower_bound(v, depth).is_some_and(|lb| lb >= 0)
    }

    /// A lower bound of every element of `v`, when one follows from its definition
    /// (`depth` bounds the walk). `cdiv(x, k) = (x + k - 1) / k` of a non-negative `x` is
    /// non-negative; a loaded length is not, unless the kernel clamps it (`max(n, 0)`).
    fn lower_bound(&self, v: ValueId, depth: usize) -> Option<i64> {
        if depth > 32 {
            return None;
        }
        if let Some(&to) = self.rebound.get(&v) {
            return self.lower_bound(to, depth + 1);
        }
        let Some(op) = self.def(v) else {
            return self.loop_var_lower_bound(v, depth);
        };
        let lb = |x: ValueId| self.lower_bound(x, depth + 1);
        let konst = |x: ValueId| self.uniform_lin(x).and_then(|l| l.as_konst());
        let (a, b) = (op.operands.first().copied(), op.operands.get(1).copied());
        match &op.kind {
            OpKind::Const(crate::ir::Scalar::Int(k, _)) => Some(*k),
            OpKind::Arange { .. } | OpKind::ProgramId(_) | OpKind::NumPrograms(_) => Some(0),
            OpKind::Splat { .. } | OpKind::Broadcast { .. } | OpKind::ExpandDims { .. } => lb(a?),
            OpKind::Cast(t) if self.int_widening(a?, *t) => lb(a?),
            OpKind::Binary(BinaryOp::Add) => lb(a?)?.checked_add(lb(b?)?),
            OpKind::Binary(BinaryOp::Sub) => lb(a?)?.checked_sub(konst(b?)?),
            OpKind::Binary(BinaryOp::Mul) => {
                let (x, y) = (lb(a?)?, lb(b?)?);
                (x >= 0 && y >= 0).then(|| x.saturating_mul(y))
            }
            OpKind::Binary(BinaryOp::Max) => match (lb(a?), lb(b?)) {
                (Some(x), Some(y)) => Some(x.max(y)),
                (x, y) => x.or(y),
            },
            OpKind::Binary(BinaryOp::Min) => Some(lb(a?)?.min(lb(b?)?)),
            OpKind::Binary(BinaryOp::Div | BinaryOp::Rem | BinaryOp::Shr) => {
                (lb(a?)? >= 0 && lb(b?)? > 0).then_some(0)
            }
            _ => None,
        }
    }

    /// A `for` loop's induction variable is at least its start (its step is positive by
    /// the loop's semantics).
    fn loop_var_lower_bound(&self, v: ValueId, depth: usize) -> Option<i64> {
        let mut lo = None;
        self.f.walk(&mut |_, op| {
            if op.kind == OpKind::For && op.regions[0].args.first() == Some(&v) {
                lo = Some(op.operands[0]);
            }
        });
        self.lower_bound(lo?, depth + 1)
    }
}

/// Runs and stride of copy `c`'s source rows along its row axis, where its mask holds (the
/// analysis of the copy's own mask, a copy one iteration behind bound to its iteration).
pub fn of_copy(
    f: &Function,
    defs: &[Option<OpId>],
    axis: &AxisAnalysis,
    c: &super::program::AsyncCopy,
) -> Option<RowAffine> {
    let load = f.op(c.load);
    let mask = matches!(load.kind, OpKind::Load { has_mask: true, .. }).then(|| load.operands[1]);
    let row_axis = 1 - c.map.contiguous_axis;
    let mut ctx = RowAffineCtx::new(f, defs, axis, mask, row_axis);
    if let (Some(b), Some(l)) = (c.behind, c.loop_op) {
        ctx = ctx.rebinding(b.prev, f.op(l).regions[0].args[0]);
    }
    ctx.affine(load.operands[0], row_axis)
}
