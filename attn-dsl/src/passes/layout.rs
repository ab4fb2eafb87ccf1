//! Layout assignment (DESIGN §3.5): every tile value gets a [`Layout`]; scalars stay
//! `Unassigned`.
//!
//! Values that must share a layout are grouped (union-find): the operands and results of an
//! elementwise op, `broadcast` and its operand, a `dot`'s accumulator and result, and all the
//! incarnations of a loop-carried or branch-merged value (init, block argument, yield,
//! result). Each rank-2 group gets a `Blocked` layout for `num_warps · 32` threads; a group
//! holding pointer tiles puts `size_per_thread` along the axis the axis analysis finds
//! contiguous, vectorized up to 16 bytes and to the proven alignment. A rank-1 group that is
//! the result of reducing a rank-2 group (or the operand of an `expand_dims` into one) gets
//! `Slice { dim, parent }` of that group's layout, so row statistics line up with the rows
//! they summarize; other rank-1 groups get a rank-1 `Blocked` layout.
//!
//! A rank-2 group holding the result of a bf16/f16 `dot` with at least one 16-row slab per
//! warp gets `Mma { warps_per_cta: [num_warps, 1] }` instead: the accumulator stays in `mma.sync` fragments, and everything
//! elementwise-connected to it (loop-carried accumulators, scores, probabilities, masks)
//! computes in place; its row reductions become `Slice(1, Mma)` row vectors.
//!
//! A group whose tensor-core dots all have fewer 16-row slabs than warps gets a warp grid
//! `Mma { warps_per_cta: [R, C] }` instead: `R` is the largest divisor of `num_warps` not
//! above the slab count and the `C = num_warps / R` warps of a grid row split the columns, so
//! none idles and each holds `1/C` of the accumulator (`[1, num_warps]` for one-slab decode
//! tiles; `[2, 2]` for MLA's 32 heads on 4 warps). Every dot of the group must get the same
//! grid with `N` a multiple of `8 · C`; any other makes the whole group fall back to `Blocked`.
//!
//! When one rank-1 group has several slice constraints that disagree, the first in program
//! order wins, and the back end converts at the other `reduce`/`expand_dims` sites, as it does
//! for elementwise operands whose groups differ. This pass produces `Blocked`, `Mma` and
//! `Slice`; later back-end passes may introduce `DotOperand` (register operands of `dot`)
//! and `Shared` (staged, swizzled buffers).

use super::axis_info::{analyze, AxisAnalysis};
use crate::ir::{Block, BlockedLayout, Function, Layout, Op, OpKind, ScalarType, ValueId};

/// Assigns a layout to every tile value reachable from the body of `f`.
pub fn run(f: &mut Function) {
    let axes = analyze(f);
    let mut g = Groups::new(f.values.len());
    g.block(f, &f.body);
    let layouts = g.resolve(f, &axes);
    for (i, l) in layouts.into_iter().enumerate() {
        if let Some(l) = l {
            f.values[i].ty.layout = l;
        }
    }
}

/// A `Blocked` layout for a tile of `shape` whose fastest axis is `fast`, giving each thread
/// `vec` consecutive elements along it; threads fill the fast axis first, warps the slow one.
pub fn blocked(shape: &[usize], fast: usize, vec: u64, num_warps: u32) -> BlockedLayout {
    let warps = num_warps.max(1);
    if shape.len() == 1 {
        let spt = prev_pow2(vec.min(shape[0].max(1) as u64)) as u32;
        return BlockedLayout {
            size_per_thread: vec![spt],
            threads_per_warp: vec![32],
            warps_per_cta: vec![warps],
            order: vec![0],
        };
    }
    let fast = fast.min(1);
    let slow = 1 - fast;
    let spt_fast = prev_pow2(vec.min(shape[fast].max(1) as u64)) as u32;
    let tpw_fast = prev_pow2((shape[fast] as u64 / spt_fast as u64).clamp(1, 32)) as u32;
    let tpw_slow = 32 / tpw_fast;
    let wpc_slow = if warps.is_power_of_two() {
        prev_pow2((shape[slow] as u64 / tpw_slow as u64).clamp(1, warps as u64)) as u32
    } else {
        warps
    };
    let wpc_fast = warps / wpc_slow;
    let mut spt = vec![1; 2];
    let mut tpw = vec![0; 2];
    let mut wpc = vec![0; 2];
    spt[fast] = spt_fast;
    tpw[fast] = tpw_fast;
    tpw[slow] = tpw_slow;
    wpc[fast] = wpc_fast;
    wpc[slow] = wpc_slow;
    BlockedLayout {
        size_per_thread: spt,
        threads_per_warp: tpw,
        warps_per_cta: wpc,
        order: vec![fast as u32, slow as u32],
    }
}

fn prev_pow2(x: u64) -> u64 {
    if x == 0 {
        1
    } else {
        1 << (63 - x.leading_zeros())
    }
}

/// `child` (rank 1) is the `dim`-slice of `parent` (rank 2).
struct SliceConstraint {
    child: ValueId,
    dim: u8,
    parent: ValueId,
}

/// The warp grid `[R, C]` of a tensor-core dot result with `slabs` 16-row slabs (fewer than
/// `warps`) and `cols` columns: `R` the largest divisor of `warps` not above `slabs`, and the
/// columns in 8-column tiles over the `C = warps / R` grid columns (`None` if they do not
/// split evenly).
fn warp_grid(slabs: usize, cols: usize, warps: usize) -> Option<[u32; 2]> {
    let rows = (1..=slabs).rev().find(|r| warps.is_multiple_of(*r))?;
    let col_warps = warps / rows;
    (cols > 0 && cols.is_multiple_of(8 * col_warps)).then_some([rows as u32, col_warps as u32])
}

/// Union-find over values plus the slice constraints between groups.
struct Groups {
    parent: Vec<u32>,
    seen: Vec<bool>,
    slices: Vec<SliceConstraint>,
    /// Pointer tiles that loads and stores access memory through.
    accessed: Vec<bool>,
    /// Results of tensor-core `dot`s (bf16/f16 operands): their groups get `Mma`.
    mma_results: Vec<bool>,
    /// Results of tensor-core `dot`s (of any row count), and the warp grid of those with
    /// fewer slabs than warps whose columns split over the grid's columns.
    tc_results: Vec<bool>,
    grid_results: Vec<Option<[u32; 2]>>,
    /// Index tiles: pure functions of element coordinates and scalars (`arange`, splats and
    /// elementwise ops, broadcasts and unsqueezes of index tiles), like the CUDA emitter's
    /// recomputed tiles.
    index: Vec<bool>,
}

impl Groups {
    fn new(n: usize) -> Self {
        Groups {
            parent: (0..n as u32).collect(),
            seen: vec![false; n],
            slices: vec![],
            accessed: vec![false; n],
            mma_results: vec![false; n],
            tc_results: vec![false; n],
            grid_results: vec![None; n],
            index: vec![false; n],
        }
    }

    /// Whether `v` is a scalar or an index tile (see [`Groups::index`]).
    fn is_index(&self, f: &Function, v: ValueId) -> bool {
        f.ty(v).is_scalar() || self.index[v.0 as usize]
    }

    fn find(&mut self, v: u32) -> u32 {
        let mut r = v;
        while self.parent[r as usize] != r {
            r = self.parent[r as usize];
        }
        let mut c = v;
        while self.parent[c as usize] != r {
            let next = self.parent[c as usize];
            self.parent[c as usize] = r;
            c = next;
        }
        r
    }

    /// Joins the groups of the tile values among `vs` (the smaller id becomes the root, so
    /// roots are deterministic).
    fn union_all(&mut self, f: &Function, vs: &[ValueId]) {
        let tiles: Vec<u32> = vs
            .iter()
            .filter(|&&v| !f.ty(v).is_scalar())
            .map(|v| v.0)
            .collect();
        for &v in &tiles {
            self.seen[v as usize] = true;
        }
        for w in tiles.windows(2) {
            let (a, b) = (self.find(w[0]), self.find(w[1]));
            let (lo, hi) = (a.min(b), a.max(b));
            self.parent[hi as usize] = lo;
        }
    }

    fn block(&mut self, f: &Function, b: &Block) {
        for &a in &b.args {
            self.union_all(f, &[a]);
        }
        for &o in &b.ops {
            let op = f.op(o);
            self.op(f, op);
            for r in &op.regions {
                self.block(f, r);
            }
        }
    }

    fn op(&mut self, f: &Function, op: &Op) {
        let term = |b: &Block| {
            b.ops
                .last()
                .map(|&t| f.op(t).operands.clone())
                .unwrap_or_default()
        };
        let all: Vec<ValueId> = op.operands.iter().chain(&op.results).copied().collect();
        for &v in &all {
            self.union_all(f, &[v]);
        }
        let coordinate_op = op.kind.is_coordinate_op();
        if coordinate_op && op.operands.iter().all(|&v| self.is_index(f, v)) {
            for &r in &op.results {
                self.index[r.0 as usize] = true;
            }
        }
        // Index tiles join no group through elementwise ops: they are recomputed per element
        // in whatever layout their consumer uses, so sharing one (say the row mask of a load
        // and of a store) must not tie unrelated data tiles to one layout.
        let data: Vec<ValueId> = all
            .iter()
            .copied()
            .filter(|&v| !self.is_index(f, v))
            .collect();
        match &op.kind {
            OpKind::Unary(_)
            | OpKind::Binary(_)
            | OpKind::Cmp(_)
            | OpKind::Select
            | OpKind::Cast(_)
            | OpKind::AddPtr
            | OpKind::Broadcast { .. } => self.union_all(f, &data),
            OpKind::Load { .. } | OpKind::Store { .. } => {
                // The pointer joins the data it accesses: it decides the vector width.
                self.accessed[op.operands[0].0 as usize] = true;
                let mut vs = data;
                vs.push(op.operands[0]);
                self.union_all(f, &vs)
            }
            OpKind::Dot => {
                let a = f.ty(op.operands[0]).elem.scalar();
                // Every warp must own at least one 16-row slab: with fewer rows the warps
                // would idle and the few that work would hold the whole tile.
                let rows = f.ty(op.results[0]).shape.first().copied().unwrap_or(0);
                let slabs = rows.div_ceil(16).max(1);
                let warps = f.num_warps.max(1) as usize;
                let cols = f.ty(op.results[0]).shape.get(1).copied().unwrap_or(0);
                if matches!(a, Some(ScalarType::Bf16 | ScalarType::F16)) {
                    let r = op.results[0].0 as usize;
                    self.tc_results[r] = true;
                    self.mma_results[r] = slabs >= warps;
                    self.grid_results[r] = (slabs < warps)
                        .then(|| warp_grid(slabs, cols, warps))
                        .flatten();
                }
                self.union_all(f, &[op.operands[2], op.results[0]])
            }
            OpKind::Reduce { axis, .. } if f.ty(op.operands[0]).rank() == 2 => {
                self.slices.push(SliceConstraint {
                    child: op.results[0],
                    dim: *axis as u8,
                    parent: op.operands[0],
                })
            }
            OpKind::ExpandDims { axis } if f.ty(op.operands[0]).rank() == 1 => {
                self.slices.push(SliceConstraint {
                    child: op.operands[0],
                    dim: *axis as u8,
                    parent: op.results[0],
                })
            }
            OpKind::For => {
                let (args, y) = (&op.regions[0].args, term(&op.regions[0]));
                for (i, &r) in op.results.iter().enumerate() {
                    self.union_all(f, &[op.operands[3 + i], args[1 + i], y[i], r]);
                }
            }
            OpKind::If => {
                let (t, e) = (term(&op.regions[0]), term(&op.regions[1]));
                for (i, &r) in op.results.iter().enumerate() {
                    self.union_all(f, &[t[i], e[i], r]);
                }
            }
            OpKind::While => {
                let (c, y) = (term(&op.regions[0]), term(&op.regions[1]));
                for (i, &r) in op.results.iter().enumerate() {
                    let vs = [
                        op.operands[i],
                        op.regions[0].args[i],
                        c[1 + i],
                        op.regions[1].args[i],
                        y[i],
                        r,
                    ];
                    self.union_all(f, &vs);
                }
            }
            _ => {}
        }
    }

    /// Chooses one layout per group: rank-2 groups first, then rank-1 groups (slices of the
    /// former where constrained). Returns the layout per value (`None` for scalars and
    /// unreachable values).
    fn resolve(&mut self, f: &Function, axes: &AxisAnalysis) -> Vec<Option<Layout>> {
        let n = f.values.len();
        let roots: Vec<u32> = (0..n as u32).map(|v| self.find(v)).collect();
        let mut group_layout: Vec<Option<Layout>> = vec![None; n];
        for pass_rank in [2usize, 1] {
            for root in 0..n {
                if roots[root] as usize != root || !self.seen[root] || group_layout[root].is_some()
                {
                    continue;
                }
                let members: Vec<usize> = (0..n)
                    .filter(|&v| roots[v] as usize == root && self.seen[v])
                    .collect();
                if f.values[root].ty.rank() != pass_rank {
                    continue;
                }
                group_layout[root] = Some(self.choose(f, axes, &members, &roots, &group_layout));
            }
        }
        (0..n)
            .map(|v| {
                if self.seen[v] {
                    group_layout[roots[v] as usize].clone()
                } else {
                    None
                }
            })
            .collect()
    }

    fn choose(
        &self,
        f: &Function,
        axes: &AxisAnalysis,
        members: &[usize],
        roots: &[u32],
        done: &[Option<Layout>],
    ) -> Layout {
        let rank = f.values[members[0]].ty.rank();
        if rank == 1 {
            let constraint = self.slices.iter().find(|s| {
                roots[s.child.0 as usize] as usize == members[0] && f.ty(s.parent).rank() == 2
            });
            if let Some(s) = constraint {
                if let Some(parent) = &done[roots[s.parent.0 as usize] as usize] {
                    return Layout::Slice {
                        dim: s.dim,
                        parent: Box::new(parent.clone()),
                    };
                }
            }
        }
        // Tensor-core accumulators and everything elementwise-connected to them live in
        // mma fragments; warps own whole 16-row slabs, so row reductions stay in a quad.
        if rank == 2 && members.iter().any(|&v| self.mma_results[v]) {
            return Layout::Mma {
                warps_per_cta: [f.num_warps.max(1), 1],
            };
        }
        // Small-M dots: a warp grid whose columns split the tile, when every dot of the
        // group gets the same one.
        let mut grids = members
            .iter()
            .filter(|&&v| self.tc_results[v])
            .map(|&v| self.grid_results[v]);
        if let (true, Some(Some(first))) = (rank == 2, grids.next()) {
            if grids.all(|g| g == Some(first)) {
                return Layout::Mma {
                    warps_per_cta: first,
                };
            }
        }
        // The largest member decides how threads spread; the pointers that loads and stores
        // access decide the fast axis and the vector width (the narrowest access wins).
        let shape = members
            .iter()
            .map(|&v| f.values[v].ty.shape.clone())
            .max_by_key(|s| s.iter().product::<usize>())
            .unwrap_or_default();
        let ptrs: Vec<ValueId> = members
            .iter()
            .filter(|&&v| self.accessed[v])
            .map(|&v| ValueId(v as u32))
            .collect();
        let fast = ptrs.first().map_or(rank - 1, |&p| axes.contiguous_axis(p));
        let vec = ptrs
            .iter()
            .map(|&p| axes.vector_width(f, p, fast))
            .min()
            .unwrap_or(1);
        Layout::Blocked(blocked(&shape, fast, vec, f.num_warps))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::printer::print_function;
    use crate::ir::verify::verify;
    use crate::ir::{BinaryOp, Builder, ParamKind, ReduceKind, ScalarType, Type};

    fn blocked_of(t: &Type) -> &BlockedLayout {
        match &t.layout {
            Layout::Blocked(b) => b,
            l => panic!("expected blocked, got {l:?}"),
        }
    }

    #[test]
    fn blocked_layouts_use_all_threads_and_warps() {
        for shape in [
            vec![128],
            vec![16, 64],
            vec![64, 16],
            vec![1, 8],
            vec![128, 128],
            vec![2, 2],
        ] {
            for fast in 0..shape.len() {
                for vec in [1, 2, 4, 8] {
                    for warps in [1, 2, 4, 8] {
                        let b = blocked(&shape, fast, vec, warps);
                        assert_eq!(
                            b.threads_per_warp.iter().product::<u32>(),
                            32,
                            "{shape:?} {b:?}"
                        );
                        assert_eq!(
                            b.warps_per_cta.iter().product::<u32>(),
                            warps,
                            "{shape:?} {b:?}"
                        );
                        let mut order = b.order.clone();
                        order.sort();
                        assert_eq!(order, (0..shape.len() as u32).collect::<Vec<_>>());
                        assert_eq!(b.order[0] as usize, if shape.len() == 1 { 0 } else { fast });
                        assert!(b
                            .size_per_thread
                            .iter()
                            .zip(&shape)
                            .all(|(&s, &d)| s as usize <= d.max(1)));
                    }
                }
            }
        }
    }

    /// Loads a `16 x 64` bf16 tile row-major, reduces rows, rescales, stores.
    fn row_softmax_like() -> Function {
        let mut f = Function::new("k", 4);
        let x = f.add_param(
            "x",
            ParamKind::Ptr {
                elem: ScalarType::Bf16,
                mutable: true,
            },
        );
        let mut b = Builder::new(&mut f);
        let rows = b.arange(16).unwrap();
        let cols = b.arange(64).unwrap();
        let r = b.expand_dims(rows, 1).unwrap();
        let s = b.const_i32(64);
        let rs = b.binary(BinaryOp::Mul, r, s).unwrap();
        let c = b.expand_dims(cols, 0).unwrap();
        let off = b.binary(BinaryOp::Add, rs, c).unwrap();
        let p = b.add_ptr(x, off).unwrap();
        let v = b.load(p, None, None).unwrap();
        let vf = b.cast(v, ScalarType::F32).unwrap();
        let m = b.reduce(ReduceKind::Max, vf, 1).unwrap();
        let m2 = b.expand_dims(m, 1).unwrap();
        let d = b.binary(BinaryOp::Sub, vf, m2).unwrap();
        let db = b.cast(d, ScalarType::Bf16).unwrap();
        b.store(p, db, None).unwrap();
        b.finish();
        f
    }

    #[test]
    fn pointer_tiles_vectorize_along_the_contiguous_axis() {
        let mut f = row_softmax_like();
        run(&mut f);
        verify(&f).unwrap_or_else(|e| panic!("{e}\n{}", print_function(&f)));
        let text = print_function(&f);
        let load = f
            .ops
            .iter()
            .find(|o| matches!(o.kind, OpKind::Load { .. }))
            .expect("load");
        let bl = blocked_of(f.ty(load.results[0]));
        assert_eq!(bl.size_per_thread, vec![1, 8], "{text}");
        assert_eq!(bl.threads_per_warp, vec![4, 8], "{text}");
        assert_eq!(bl.warps_per_cta, vec![4, 1], "{text}");
        assert_eq!(bl.order, vec![1, 0], "{text}");
        // The row maximum is a slice of the loaded tile's layout; scalars stay unassigned.
        let red = f
            .ops
            .iter()
            .find(|o| matches!(o.kind, OpKind::Reduce { .. }))
            .expect("reduce");
        assert_eq!(
            f.ty(red.results[0]).layout,
            Layout::Slice {
                dim: 1,
                parent: Box::new(Layout::Blocked(bl.clone()))
            }
        );
        for v in &f.values {
            assert_eq!(
                v.ty.is_scalar(),
                v.ty.layout == Layout::Unassigned,
                "{text}"
            );
        }
        assert!(
            text.contains("#slice<dim=1, parent=#blocked<spt=[1, 8]"),
            "{text}"
        );
    }

    #[test]
    fn transposed_access_vectorizes_along_rows() {
        // K^T-style access: element (d, n) at n * 64 + d, so axis 0 is contiguous.
        let mut f = Function::new("k", 4);
        let x = f.add_param(
            "k",
            ParamKind::Ptr {
                elem: ScalarType::F32,
                mutable: false,
            },
        );
        let mut b = Builder::new(&mut f);
        let d = b.arange(64).unwrap();
        let n = b.arange(32).unwrap();
        let dd = b.expand_dims(d, 1).unwrap();
        let nn = b.expand_dims(n, 0).unwrap();
        let s = b.const_i32(64);
        let ns = b.binary(BinaryOp::Mul, nn, s).unwrap();
        let off = b.binary(BinaryOp::Add, dd, ns).unwrap();
        let p = b.add_ptr(x, off).unwrap();
        let v = b.load(p, None, None).unwrap();
        let _ = v;
        b.finish();
        run(&mut f);
        let bl = blocked_of(f.ty(v)).clone();
        assert_eq!(bl.order, vec![0, 1]);
        assert_eq!(bl.size_per_thread, vec![4, 1]);
    }

    /// `s = dot(a, b)` on bf16 `[m, 32] x [32, 64]`, then a row max and `s - max[:, None]`
    /// stored through a pointer tile that shares its row offsets with the load of `a`.
    fn dot_rows(m: usize, warps: u32) -> (Function, ValueId, ValueId, ValueId, ValueId) {
        let mut f = Function::new("k", warps);
        let x = f.add_param(
            "x",
            ParamKind::Ptr {
                elem: ScalarType::Bf16,
                mutable: false,
            },
        );
        let y = f.add_param(
            "y",
            ParamKind::Ptr {
                elem: ScalarType::F32,
                mutable: true,
            },
        );
        let mut b = Builder::new(&mut f);
        let rows = b.arange(m).unwrap();
        let cols = b.arange(32).unwrap();
        let r = b.expand_dims(rows, 1).unwrap();
        let c = b.expand_dims(cols, 0).unwrap();
        let w = b.const_i32(32);
        let rw = b.binary(BinaryOp::Mul, r, w).unwrap();
        let off = b.binary(BinaryOp::Add, rw, c).unwrap();
        let pa = b.add_ptr(x, off).unwrap();
        let a = b.load(pa, None, None).unwrap();
        let kb = b.arange(32).unwrap();
        let nb = b.arange(64).unwrap();
        let k2 = b.expand_dims(kb, 1).unwrap();
        let n2 = b.expand_dims(nb, 0).unwrap();
        let w64 = b.const_i32(64);
        let kw = b.binary(BinaryOp::Mul, k2, w64).unwrap();
        let offb = b.binary(BinaryOp::Add, kw, n2).unwrap();
        let pb = b.add_ptr(x, offb).unwrap();
        let bt = b.load(pb, None, None).unwrap();
        let s = b.dot(a, bt, None).unwrap();
        let mx = b.reduce(ReduceKind::Max, s, 1).unwrap();
        let mc = b.expand_dims(mx, 1).unwrap();
        let d = b.binary(BinaryOp::Sub, s, mc).unwrap();
        // The store's row offsets are the same value as the load of `a`'s.
        let rw64 = b.binary(BinaryOp::Mul, r, w64).unwrap();
        let offy = b.binary(BinaryOp::Add, rw64, n2).unwrap();
        let py = b.add_ptr(y, offy).unwrap();
        b.store(py, d, None).unwrap();
        b.finish();
        (f, a, s, mx, d)
    }

    /// A `rows` x 64 dot on 4 warps gets warp grid `wpc`, and its row maximum the slice of it.
    fn assert_grid(rows: usize, wpc: [u32; 2]) {
        let (mut f, _, s, mx, _) = dot_rows(rows, 4);
        run(&mut f);
        let grid = Layout::Mma { warps_per_cta: wpc };
        assert_eq!(f.ty(s).layout, grid);
        assert_eq!(
            f.ty(mx).layout,
            Layout::Slice {
                dim: 1,
                parent: Box::new(grid)
            }
        );
    }

    #[test]
    fn dot_results_get_mma_and_their_row_reductions_slices() {
        let (mut f, a, s, mx, d) = dot_rows(64, 4);
        run(&mut f);
        verify(&f).unwrap_or_else(|e| panic!("{e}\n{}", print_function(&f)));
        let mma = Layout::Mma {
            warps_per_cta: [4, 1],
        };
        assert_eq!(f.ty(s).layout, mma);
        assert_eq!(f.ty(d).layout, mma);
        assert_eq!(
            f.ty(mx).layout,
            Layout::Slice {
                dim: 1,
                parent: Box::new(mma.clone())
            }
        );
        // The A tile shares only index tiles with the stored result: it keeps a blocked
        // layout for its own (coalesced) load.
        assert!(
            matches!(f.ty(a).layout, Layout::Blocked(_)),
            "{}",
            print_function(&f)
        );
        // Fewer 16-row slabs than warps, more than one slab: a 2 × 2 warp grid.
        assert_grid(32, [2, 2]);
        assert_eq!(warp_grid(3, 64, 4), Some([2, 2]));
        assert_eq!(warp_grid(2, 64, 8), Some([2, 4]));
        assert_eq!(warp_grid(2, 24, 4), None);
        // One slab, 64 columns over 4 warps (16 each): the warps split the columns.
        assert_grid(16, [1, 4]);
        // 64 columns do not split over 16 warps in 8-column tiles: fall back.
        let (mut f, _, s, _, _) = dot_rows(16, 16);
        run(&mut f);
        assert!(matches!(f.ty(s).layout, Layout::Blocked(_)));
    }

    #[test]
    fn loop_carried_values_share_one_layout() {
        let mut f = fixture_loop();
        run(&mut f);
        verify(&f).unwrap_or_else(|e| panic!("{e}\n{}", print_function(&f)));
    }

    fn fixture_loop() -> Function {
        let mut f = Function::new("k", 8);
        let x = f.add_param(
            "x",
            ParamKind::Ptr {
                elem: ScalarType::F32,
                mutable: true,
            },
        );
        let n = f.add_param("n", ParamKind::Scalar(ScalarType::I32));
        let mut b = Builder::new(&mut f);
        let r = b.arange(256).unwrap();
        let p = b.add_ptr(x, r).unwrap();
        let z = b.const_f32(0.0);
        let acc0 = b.splat(z, &[256]).unwrap();
        let zi = b.const_i32(0);
        let one = b.const_i32(1);
        let res = b
            .for_loop(zi, n, one, vec![acc0], |b, _iv, it| {
                let v = b.load(p, None, None)?;
                Ok(vec![b.binary(BinaryOp::Add, it[0], v)?])
            })
            .unwrap();
        b.store(p, res[0], None).unwrap();
        b.finish();
        f
    }
}
