//! Axis analysis: per value and per axis, how its elements are structured, so layouts and the
//! emitter can vectorize memory accesses without looking at the index arithmetic themselves.
//!
//! For a value `x` and an axis `a` (scalars count as one-element rank-1 tiles):
//! - `contiguity[a] = c`: along `a`, `x` splits into runs of `c` elements (starting at
//!   multiples of `c`) in which each element is the previous one plus 1 (for pointers: plus
//!   one element);
//! - `divisibility[a] = d`: the first element of every such run is a multiple of `d` (for
//!   pointers: the address, in bytes, is);
//! - `constancy[a] = k`: along `a`, `x` splits into runs of `k` equal elements.
//!
//! All three are powers of two, so "gcd" below is a minimum. Facts come from `arange`
//! (one run from 0), literals, `+`/`-`/`*` with constants, `expand_dims`, `broadcast`,
//! `splat`, pointer offsets, and comparisons of a run against an aligned bound (masks);
//! anything else is conservatively (1, 1, 1). Pointer parameters are assumed
//! [`ASSUMED_PTR_ALIGN_BYTES`]-aligned: the runtime checks that contract before a launch.

use crate::ir::{
    BinaryOp, Block, CmpPred, Elem, Function, Op, OpKind, Scalar, ScalarType, Type, ValueId,
};

/// Alignment of every pointer argument that the runtime validates at launch.
pub const ASSUMED_PTR_ALIGN_BYTES: u64 = 16;
/// Cap for divisibility (the divisibility of 0).
pub const MAX_DIVISIBILITY: u64 = 1 << 30;
/// Widest vector memory access (`ld.global.v4.b32` and friends).
pub const MAX_VECTOR_BYTES: u64 = 16;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AxisInfo {
    pub contiguity: Vec<u64>,
    pub divisibility: Vec<u64>,
    pub constancy: Vec<u64>,
}

impl AxisInfo {
    /// Nothing known about a value of type `t`.
    pub fn unknown(t: &Type) -> Self {
        let r = t.rank().max(1);
        AxisInfo {
            contiguity: vec![1; r],
            divisibility: vec![1; r],
            constancy: vec![1; r],
        }
    }

    fn uniform(rank: usize, div: u64, constancy: Vec<u64>) -> Self {
        let r = rank.max(1);
        AxisInfo {
            contiguity: vec![1; r],
            divisibility: vec![div; r],
            constancy,
        }
    }

    /// Facts true of both `self` and `other` (for values merged at loop heads and branches).
    fn meet(&self, other: &AxisInfo) -> AxisInfo {
        let g = |a: &[u64], b: &[u64]| a.iter().zip(b).map(|(&x, &y)| gcd(x, y)).collect();
        AxisInfo {
            contiguity: g(&self.contiguity, &other.contiguity),
            divisibility: g(&self.divisibility, &other.divisibility),
            constancy: g(&self.constancy, &other.constancy),
        }
    }

    /// Divisibility of the elements at positions that are multiples of `c` along `axis`:
    /// run starts when runs are no longer than `c`, else `gcd(d, c)` (positions inside a run
    /// differ from its start by a multiple of `c`).
    fn div_at(&self, axis: usize, c: u64) -> u64 {
        if self.contiguity[axis] <= c {
            self.divisibility[axis]
        } else {
            gcd(self.divisibility[axis], c)
        }
    }
}

/// Greatest common divisor (both are powers of two here, but stay exact in general).
pub fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// `select(c, a, b)`: runs of both sides, cut where the condition may change, so each run
/// comes from one side (a uniform choice between two aligned bases stays aligned: the exchange
/// part a merge reads from one buffer or the other); a run's start is then divisible as both
/// sides are at that position.
fn select(c: &AxisInfo, a: &AxisInfo, b: &AxisInfo) -> AxisInfo {
    let axes = 0..a.contiguity.len();
    let run = |k: usize| gcd(gcd(a.contiguity[k], b.contiguity[k]), c.constancy[k]);
    AxisInfo {
        contiguity: axes.clone().map(run).collect(),
        divisibility: axes
            .clone()
            .map(|k| gcd(a.div_at(k, run(k)), b.div_at(k, run(k))))
            .collect(),
        constancy: axes
            .map(|k| gcd(gcd(a.constancy[k], b.constancy[k]), c.constancy[k]))
            .collect(),
    }
}

fn pow2_divisor(v: i64) -> u64 {
    if v == 0 {
        MAX_DIVISIBILITY
    } else {
        (1u64 << v.unsigned_abs().trailing_zeros()).min(MAX_DIVISIBILITY)
    }
}

/// The result of [`analyze`]: axis facts for every value of a function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AxisAnalysis {
    info: Vec<AxisInfo>,
}

impl AxisAnalysis {
    pub fn get(&self, v: ValueId) -> &AxisInfo {
        &self.info[v.0 as usize]
    }

    /// Elements per vector access through pointer tile `ptr` along `axis`: limited by the
    /// contiguous run, by 16 bytes, and by the alignment of the run starts. 1 when `ptr` is not a
    /// pointer or `axis` is out of range.
    pub fn vector_width(&self, f: &Function, ptr: ValueId, axis: usize) -> u64 {
        let (Some(elem), Some(info)) = (f.ty(ptr).elem.pointee(), self.info.get(ptr.0 as usize))
        else {
            return 1;
        };
        if axis >= info.contiguity.len() {
            return 1;
        }
        let bytes = elem.size_bytes() as u64;
        let by_align = (info.divisibility[axis] / bytes).max(1);
        let by_run = info.contiguity[axis];
        prev_pow2(by_run.min(MAX_VECTOR_BYTES / bytes).min(by_align))
    }

    /// The emitter's question: is `ptr` contiguous along `axis` in runs of at least
    /// `min_run` elements whose first addresses are `align_bytes`-aligned?
    pub fn is_contiguous(&self, ptr: ValueId, axis: usize, min_run: u64, align_bytes: u64) -> bool {
        let i = &self.info[ptr.0 as usize];
        axis < i.contiguity.len()
            && i.contiguity[axis] >= min_run
            && i.divisibility[axis].is_multiple_of(align_bytes.max(1))
    }

    /// The axis along which `ptr` has its longest contiguous runs (ties: the last axis, which is
    /// row-major's fastest).
    pub fn contiguous_axis(&self, ptr: ValueId) -> usize {
        let c = &self.info[ptr.0 as usize].contiguity;
        (0..c.len()).rev().max_by_key(|&a| (c[a], a)).unwrap_or(0)
    }
}

fn prev_pow2(x: u64) -> u64 {
    if x == 0 {
        1
    } else {
        1 << (63 - x.leading_zeros())
    }
}

/// Runs the analysis over `f` (loops iterate to a fixpoint of their carried values).
pub fn analyze(f: &Function) -> AxisAnalysis {
    let mut a = Analyzer {
        f,
        info: f.values.iter().map(|v| AxisInfo::unknown(&v.ty)).collect(),
    };
    for p in &f.params {
        if p.value.0 as usize >= a.info.len() {
            continue;
        }
        if let crate::ir::ParamKind::Ptr { .. } = p.kind {
            a.info[p.value.0 as usize].divisibility = vec![ASSUMED_PTR_ALIGN_BYTES];
        }
        if let Some((_, d)) = f.assumed_divisible.iter().find(|(n, _)| *n == p.name) {
            a.info[p.value.0 as usize].divisibility = vec![(*d).min(MAX_DIVISIBILITY)];
        }
    }
    a.block(&f.body);
    AxisAnalysis { info: a.info }
}

struct Analyzer<'f> {
    f: &'f Function,
    info: Vec<AxisInfo>,
}

/// Upper bound on fixpoint rounds for one loop (facts only shrink, by halving).
const MAX_LOOP_ROUNDS: usize = 64;

impl Analyzer<'_> {
    fn get(&self, v: ValueId) -> AxisInfo {
        self.info[v.0 as usize].clone()
    }

    fn set(&mut self, v: ValueId, i: AxisInfo) {
        self.info[v.0 as usize] = i;
    }

    fn block(&mut self, b: &Block) {
        for &o in &b.ops {
            let op = self.f.op(o);
            match op.kind {
                OpKind::For => self.for_op(op),
                OpKind::If => self.if_op(op),
                OpKind::While => self.while_op(op),
                _ => {
                    if let Some(&r) = op.results.first() {
                        let i = self.simple(op);
                        self.set(r, i);
                    }
                }
            }
        }
    }

    fn terminator_operands(&self, b: &Block) -> Vec<ValueId> {
        b.ops
            .last()
            .map(|&o| self.f.op(o).operands.clone())
            .unwrap_or_default()
    }

    /// Sets `args` from `seed`, analyzes `b`, and repeats with `seed ⊓ yielded` until stable.
    fn fixpoint(
        &mut self,
        b: &Block,
        args: &[ValueId],
        seed: Vec<AxisInfo>,
        yielded_from: usize,
    ) -> Vec<AxisInfo> {
        let mut cur = seed;
        for _ in 0..MAX_LOOP_ROUNDS {
            for (&a, i) in args.iter().zip(&cur) {
                self.set(a, i.clone());
            }
            self.block(b);
            let y = self.terminator_operands(b);
            let next: Vec<AxisInfo> = cur
                .iter()
                .zip(y.iter().skip(yielded_from))
                .map(|(c, &v)| c.meet(&self.info[v.0 as usize]))
                .collect();
            if next == cur {
                return cur;
            }
            cur = next;
        }
        args.iter()
            .map(|&a| AxisInfo::unknown(self.f.ty(a)))
            .collect()
    }

    fn for_op(&mut self, op: &Op) {
        let body = &op.regions[0];
        let (lo, step) = (self.get(op.operands[0]), self.get(op.operands[2]));
        let iv = AxisInfo::uniform(0, gcd(lo.divisibility[0], step.divisibility[0]), vec![1]);
        self.set(body.args[0], iv);
        let seed: Vec<AxisInfo> = op.operands[3..].iter().map(|&v| self.get(v)).collect();
        let fixed = self.fixpoint(body, &body.args[1..], seed, 0);
        for (&r, i) in op.results.iter().zip(fixed) {
            self.set(r, i);
        }
    }

    fn if_op(&mut self, op: &Op) {
        self.block(&op.regions[0]);
        self.block(&op.regions[1]);
        let (t, e) = (
            self.terminator_operands(&op.regions[0]),
            self.terminator_operands(&op.regions[1]),
        );
        for (i, &r) in op.results.iter().enumerate() {
            let m = self.get(t[i]).meet(&self.get(e[i]));
            self.set(r, m);
        }
    }

    fn while_op(&mut self, op: &Op) {
        let (before, body) = (&op.regions[0], &op.regions[1]);
        let mut cur: Vec<AxisInfo> = op.operands.iter().map(|&v| self.get(v)).collect();
        for _ in 0..MAX_LOOP_ROUNDS {
            for (&a, i) in before.args.iter().zip(&cur) {
                self.set(a, i.clone());
            }
            self.block(before);
            let cond = self.terminator_operands(before);
            for (&a, &v) in body.args.iter().zip(cond.iter().skip(1)) {
                let i = self.get(v);
                self.set(a, i);
            }
            self.block(body);
            let y = self.terminator_operands(body);
            let next: Vec<AxisInfo> = cur
                .iter()
                .zip(&y)
                .map(|(c, &v)| c.meet(&self.info[v.0 as usize]))
                .collect();
            if next == cur {
                break;
            }
            cur = next;
        }
        let cond = self.terminator_operands(before);
        for (&r, &v) in op.results.iter().zip(cond.iter().skip(1)) {
            let i = self.get(v);
            self.set(r, i);
        }
    }

    /// Facts for the result of a region-free op.
    fn simple(&self, op: &Op) -> AxisInfo {
        let f = self.f;
        let rt = f.ty(op.results[0]);
        let opnd = |i: usize| self.get(op.operands[i]);
        let elementwise_constancy = || {
            let mut acc = AxisInfo::unknown(rt);
            for (k, &v) in op.operands.iter().enumerate() {
                let i = self.get(v);
                acc.constancy = if k == 0 {
                    i.constancy
                } else {
                    acc.constancy
                        .iter()
                        .zip(&i.constancy)
                        .map(|(&a, &b)| gcd(a, b))
                        .collect()
                };
            }
            acc
        };
        match &op.kind {
            OpKind::Const(Scalar::Int(v, _)) => AxisInfo::uniform(0, pow2_divisor(*v), vec![1]),
            OpKind::Arange { n } => AxisInfo {
                contiguity: vec![*n as u64],
                divisibility: vec![MAX_DIVISIBILITY],
                constancy: vec![1],
            },
            OpKind::Splat { shape } => {
                let x = opnd(0);
                AxisInfo::uniform(
                    shape.len(),
                    x.divisibility[0],
                    shape.iter().map(|&d| d as u64).collect(),
                )
            }
            OpKind::Broadcast { shape } => {
                let mut x = opnd(0);
                let from = &f.ty(op.operands[0]).shape;
                for a in 0..shape.len() {
                    if from[a] == 1 && shape[a] != 1 {
                        x.contiguity[a] = 1;
                        x.constancy[a] = shape[a] as u64;
                    }
                }
                x
            }
            OpKind::ExpandDims { axis } => {
                let mut x = opnd(0);
                if f.ty(op.operands[0]).is_scalar() {
                    return AxisInfo::uniform(1, x.divisibility[0], vec![1]);
                }
                // Along the new size-1 axis every element is its own run.
                let every = x.div_at(0, 1);
                x.contiguity.insert(*axis, 1);
                x.divisibility.insert(*axis, every);
                x.constancy.insert(*axis, 1);
                x
            }
            OpKind::Handoff => opnd(0),
            OpKind::Trans => {
                let mut x = opnd(0);
                x.contiguity.reverse();
                x.divisibility.reverse();
                x.constancy.reverse();
                x
            }
            OpKind::Binary(b) => binary(*b, &opnd(0), &opnd(1), 1),
            OpKind::AddPtr => {
                let bytes = f
                    .ty(op.operands[0])
                    .elem
                    .pointee()
                    .map_or(1, |s| s.size_bytes() as u64);
                binary(BinaryOp::Add, &opnd(0), &opnd(1), bytes)
            }
            OpKind::Cmp(p) => cmp(*p, &opnd(0), &opnd(1)),
            OpKind::Cast(to) => {
                let from = f.ty(op.operands[0]).elem;
                let int_to_int = matches!(from, Elem::Scalar(s) if s.is_int()) && to.is_int();
                if int_to_int && !(from == Elem::Scalar(ScalarType::I64) && *to == ScalarType::I32)
                {
                    opnd(0)
                } else {
                    elementwise_constancy()
                }
            }
            OpKind::Select => select(&opnd(0), &opnd(1), &opnd(2)),
            OpKind::Unary(_) | OpKind::Load { .. } => elementwise_constancy(),
            OpKind::Reduce { axis, .. } => {
                let mut x = opnd(0);
                if rt.is_scalar() {
                    return AxisInfo::unknown(rt);
                }
                x.constancy.remove(*axis);
                AxisInfo {
                    contiguity: vec![1; rt.rank()],
                    divisibility: vec![1; rt.rank()],
                    constancy: x.constancy,
                }
            }
            _ => AxisInfo::unknown(rt),
        }
    }
}

/// `a op b` per axis; `b_scale` multiplies `b`'s divisibility (pointer offsets count elements
/// of `b_scale` bytes).
fn binary(op: BinaryOp, a: &AxisInfo, b: &AxisInfo, b_scale: u64) -> AxisInfo {
    let n = a.contiguity.len();
    let mut r = AxisInfo {
        contiguity: vec![1; n],
        divisibility: vec![1; n],
        constancy: vec![1; n],
    };
    for ax in 0..n {
        r.constancy[ax] = gcd(a.constancy[ax], b.constancy[ax]);
        let c = match op {
            // A run plus something constant over the run stays a run (either way round).
            BinaryOp::Add => {
                gcd(a.contiguity[ax], b.constancy[ax]).max(gcd(a.constancy[ax], b.contiguity[ax]))
            }
            BinaryOp::Sub => gcd(a.contiguity[ax], b.constancy[ax]),
            _ => 1,
        };
        r.contiguity[ax] = c;
        r.divisibility[ax] = match op {
            BinaryOp::Add | BinaryOp::Sub => gcd(
                a.div_at(ax, c),
                b.div_at(ax, c)
                    .saturating_mul(b_scale)
                    .min(MAX_DIVISIBILITY),
            ),
            BinaryOp::Mul => a
                .div_at(ax, 1)
                .saturating_mul(b.div_at(ax, 1))
                .min(MAX_DIVISIBILITY),
            _ => 1,
        };
    }
    r
}

/// Masks: `run < bound` (or `>=`) with `bound` constant over the run flips at most once, at
/// `bound`; aligned groups of `gcd(run, start divisibility, bound divisibility)` stay uniform.
fn cmp(p: CmpPred, a: &AxisInfo, b: &AxisInfo) -> AxisInfo {
    let n = a.contiguity.len();
    let mut r = AxisInfo {
        contiguity: vec![1; n],
        divisibility: vec![1; n],
        constancy: vec![1; n],
    };
    for ax in 0..n {
        let base = gcd(a.constancy[ax], b.constancy[ax]);
        let run = a.contiguity[ax];
        let boundary_aligned =
            matches!(p, CmpPred::Lt | CmpPred::Ge) && run > 1 && b.constancy[ax] >= run;
        r.constancy[ax] = if boundary_aligned {
            gcd(gcd(run, a.divisibility[ax]), b.div_at(ax, 1)).max(base)
        } else {
            base
        };
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Builder, ParamKind};

    /// `ptr + rows[:, None] * stride + cols[None, :]` for a `rows x cols` tile.
    fn tile_ptrs(stride: i64, elem: ScalarType) -> (Function, ValueId, ValueId) {
        let mut f = Function::new("k", 4);
        let x = f.add_param(
            "x",
            ParamKind::Ptr {
                elem,
                mutable: false,
            },
        );
        let n = f.add_param("n", ParamKind::Scalar(ScalarType::I32));
        let mut b = Builder::new(&mut f);
        let rows = b.arange(16).unwrap();
        let cols = b.arange(64).unwrap();
        let r = b.expand_dims(rows, 1).unwrap();
        let s = b.const_i32(stride);
        let rs = b.binary(BinaryOp::Mul, r, s).unwrap();
        let c = b.expand_dims(cols, 0).unwrap();
        let off = b.binary(BinaryOp::Add, rs, c).unwrap();
        let p = b.add_ptr(x, off).unwrap();
        let mask = b.cmp(CmpPred::Lt, cols, n).unwrap();
        let _ = mask;
        b.finish();
        (f, p, off)
    }

    #[test]
    fn row_major_tile_is_contiguous_along_columns() {
        let (f, p, off) = tile_ptrs(128, ScalarType::Bf16);
        let a = analyze(&f);
        assert_eq!(a.get(off).contiguity, vec![1, 64]);
        assert_eq!(a.get(off).constancy, vec![1, 1]);
        assert_eq!(a.get(p).contiguity, vec![1, 64]);
        assert_eq!(a.get(p).divisibility[1], 16);
        assert!(a.is_contiguous(p, 1, 8, 16));
        assert!(!a.is_contiguous(p, 0, 2, 1));
        assert_eq!(a.contiguous_axis(p), 1);
        assert_eq!(a.vector_width(&f, p, 1), 8);
    }

    #[test]
    fn odd_stride_limits_alignment_not_contiguity() {
        let (f, p, _) = tile_ptrs(33, ScalarType::Bf16);
        let a = analyze(&f);
        assert_eq!(a.get(p).contiguity[1], 64);
        // Row starts are 33·2·i bytes from a 16-byte base: only 2-byte aligned.
        assert_eq!(a.get(p).divisibility[1], 2);
        assert!(!a.is_contiguous(p, 1, 8, 16));
        assert_eq!(a.vector_width(&f, p, 1), 1);
        let (f, p, _) = tile_ptrs(36, ScalarType::F32);
        let a = analyze(&f);
        assert_eq!(a.vector_width(&f, p, 1), 4);
    }

    #[test]
    fn sum_of_two_runs_is_not_a_run() {
        let mut f = Function::new("k", 4);
        let mut b = Builder::new(&mut f);
        let r = b.arange(32).unwrap();
        let s = b.binary(BinaryOp::Add, r, r).unwrap();
        let t = b.binary(BinaryOp::Mul, r, r).unwrap();
        b.finish();
        let a = analyze(&f);
        assert_eq!(a.get(s).contiguity, vec![1]);
        assert_eq!(a.get(s).divisibility, vec![1]);
        assert_eq!(a.get(t).divisibility, vec![1]);
    }

    #[test]
    fn loop_carried_pointer_keeps_facts_of_aligned_advances() {
        let mut f = Function::new("k", 4);
        let x = f.add_param(
            "x",
            ParamKind::Ptr {
                elem: ScalarType::F32,
                mutable: false,
            },
        );
        let n = f.add_param("n", ParamKind::Scalar(ScalarType::I32));
        let mut b = Builder::new(&mut f);
        let r = b.arange(64).unwrap();
        let p0 = b.add_ptr(x, r).unwrap();
        let z = b.const_i32(0);
        let one = b.const_i32(1);
        let step = b.const_i32(64);
        let bad = b.const_i32(3);
        let res = b
            .for_loop(z, n, one, vec![p0, p0], |b, _iv, it| {
                Ok(vec![b.add_ptr(it[0], step)?, b.add_ptr(it[1], bad)?])
            })
            .unwrap();
        b.finish();
        let a = analyze(&f);
        assert_eq!(a.vector_width(&f, res[0], 0), 4);
        assert_eq!(a.get(res[0]).contiguity, vec![64]);
        assert_eq!(a.get(res[1]).divisibility, vec![4]);
        assert_eq!(a.vector_width(&f, res[1], 0), 1);
    }

    #[test]
    fn bound_mask_is_uniform_over_aligned_groups_only_with_aligned_bound() {
        let mut f = Function::new("k", 4);
        let n = f.add_param("n", ParamKind::Scalar(ScalarType::I32));
        let mut b = Builder::new(&mut f);
        let r = b.arange(64).unwrap();
        let c48 = b.const_i32(48);
        let m1 = b.cmp(CmpPred::Lt, r, c48).unwrap();
        let m2 = b.cmp(CmpPred::Lt, r, n).unwrap();
        b.finish();
        let a = analyze(&f);
        assert_eq!(a.get(m1).constancy, vec![16]);
        assert_eq!(a.get(m2).constancy, vec![1]);
    }

    /// A uniform choice between two aligned bases, then a contiguous offset: the rows stay
    /// 16-byte vectors (the merge's part read from the send or the receive buffer); a choice
    /// per element, or with a misaligned side, does not.
    #[test]
    fn select_of_aligned_bases_keeps_runs_under_a_uniform_condition() {
        let mut f = Function::new("k", 4);
        let ptr = |f: &mut Function, name: &str| {
            let kind = ParamKind::Ptr {
                elem: ScalarType::Bf16,
                mutable: false,
            };
            f.add_param(name, kind)
        };
        let (x, y) = (ptr(&mut f, "x"), ptr(&mut f, "y"));
        let own = f.add_param("own", ParamKind::Scalar(ScalarType::I32));
        let mut b = Builder::new(&mut f);
        let zero = b.const_i32(0);
        let uniform = b.cmp(CmpPred::Eq, own, zero).unwrap();
        let base = b.select(uniform, x, y).unwrap();
        let cols = b.arange(64).unwrap();
        let p = b.add_ptr(base, cols).unwrap();
        let three = b.const_i32(3);
        let y3 = b.add_ptr(y, three).unwrap();
        let odd = b.select(uniform, x, y3).unwrap();
        let q = b.add_ptr(odd, cols).unwrap();
        let per_elem = b.cmp(CmpPred::Lt, cols, own).unwrap();
        let (px, py) = (b.add_ptr(x, cols).unwrap(), b.add_ptr(y, cols).unwrap());
        let mixed = b.select(per_elem, px, py).unwrap();
        b.finish();
        let a = analyze(&f);
        assert_eq!(a.vector_width(&f, p, 0), 8);
        assert_eq!(a.get(p).contiguity, vec![64]);
        assert_eq!(a.vector_width(&f, q, 0), 1);
        assert_eq!(a.get(mixed).contiguity, vec![1]);
    }
}
