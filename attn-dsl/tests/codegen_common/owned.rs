//! Test programs moved onto warpgroups (`Layout::Owned`): a 4-warp program's tiles owned
//! by one warpgroup of an 8-warp program, or each of two chains by its own warpgroup.

use attn_dsl::ir::{Function, Layout};

/// `f` (laid out for 4 warps) on warpgroup `w` of a program of `warps` warps: every tile
/// owned by it.
pub fn on_warpgroup(mut f: Function, w: u32, warps: u32) -> Function {
    own(&mut f, |_| Some(w));
    f.num_warps = warps;
    f
}

/// Lays `f` out (for its own warps) and gives each tile value the owner `owner(index)`.
pub fn own(f: &mut Function, owner: impl Fn(usize) -> Option<u32>) {
    attn_dsl::passes::layout::run(f);
    for (i, v) in f.values.iter_mut().enumerate() {
        if v.ty.is_scalar() {
            continue;
        }
        if let Some(w) = owner(i) {
            let inner = Box::new(std::mem::take(&mut v.ty.layout));
            v.ty.layout = Layout::Owned {
                warpgroup: w,
                inner,
            };
        }
    }
}

/// Two softmax slabs a program: rows `[0, 16)` of each program's block on warpgroup 0,
/// rows `[16, 32)` on warpgroup 1 (every tile the second slab's ops define owned by it).
pub fn two_softmaxes() -> Function {
    let mut f = super::softmax_slabs(16, 128, 4, 2);
    let slab = defining_lines(&f);
    own(&mut f, |i| slab[i].map(|line| line / 100));
    f.num_warps = 8;
    f
}

/// The source line of the op defining each value (`None` for block arguments).
pub fn defining_lines(f: &Function) -> Vec<Option<u32>> {
    let mut lines = vec![None; f.values.len()];
    for op in &f.ops {
        for r in &op.results {
            lines[r.0 as usize] = Some(op.loc.line);
        }
    }
    lines
}

/// Running row statistics (max and sum of `exp(x - max)`, online) of a `rows x cols` f32
/// matrix, `bm` rows a program, over column tiles of `bn` taken two at a time, the way the
/// seesaw takes key tiles: warpgroup 0 folds in the first tile of each pair, hands its max
/// and sum to warpgroup 1, which folds in the second and hands them back for the next pair
/// (the loop carries them on warpgroup 1). Outputs: the row maxima stored by warpgroup 1,
/// the row sums handed to every warp and stored by all. Source lines: 2xx on warpgroup 0,
/// 3xx on warpgroup 1, 4xx on every warp.
pub fn alternating_row_stats(bm: usize, bn: usize) -> Function {
    use super::{at, build, out_ptr, ptr, tile_ptrs};
    use attn_dsl::ir::{
        BinaryOp as B, CmpPred, ParamKind, ReduceKind, Scalar, ScalarType::*, UnaryOp as U,
    };
    let mut f = Function::new("alternating_row_stats", 4);
    let x = f.add_param("x", ptr(F32));
    let out_m = f.add_param("out_m", out_ptr(F32));
    let out_l = f.add_param("out_l", out_ptr(F32));
    let rows = f.add_param("rows", ParamKind::Scalar(I32));
    let cols = f.add_param("cols", ParamKind::Scalar(I32));
    build(&mut f, |b| {
        at(b, 100);
        let pid = b.program_id(0)?;
        let bmv = b.const_i32(bm as i64);
        let row0 = b.binary(B::Mul, pid, bmv)?;
        let ninf = b.constant(Scalar::Float(f64::NEG_INFINITY, F32));
        let zero = b.const_f32(0.0);
        let (lo, step) = (b.const_i32(0), b.const_i32(2 * bn as i64));
        let bnv = b.const_i32(bn as i64);
        // Folds the tile of columns [c0, c0 + bn) into (m, l), all at source line `line`.
        let fold = |b: &mut attn_dsl::ir::Builder,
                    line: u32,
                    c0,
                    m,
                    l|
         -> attn_dsl::ir::IrResult<(_, _)> {
            at(b, line);
            let (px, r2, c2) = tile_ptrs(b, x, row0, bm, bn, cols)?;
            let c2 = b.binary(B::Add, c2, c0)?;
            let px = b.add_ptr(px, c0)?;
            let rm = b.cmp(CmpPred::Lt, r2, rows)?;
            let cm = b.cmp(CmpPred::Lt, c2, cols)?;
            let mask = b.binary(B::And, rm, cm)?;
            let t = b.load(px, Some(mask), Some(ninf))?;
            let m_new = b.reduce(ReduceKind::Max, t, 1)?;
            let m_new = b.binary(B::Max, m, m_new)?;
            // Rows with nothing yet (max still -inf) add nothing.
            let finite = b.cmp(CmpPred::Gt, m_new, ninf)?;
            let safe = b.select(finite, m_new, zero)?;
            let alpha = b.binary(B::Sub, m, safe)?;
            let alpha = b.unary(U::Exp, alpha)?;
            let mcol = b.expand_dims(safe, 1)?;
            let p = b.binary(B::Sub, t, mcol)?;
            let p = b.unary(U::Exp, p)?;
            let s = b.reduce(ReduceKind::Sum, p, 1)?;
            let l = b.binary(B::Mul, l, alpha)?;
            Ok((m_new, b.binary(B::Add, l, s)?))
        };
        at(b, 300);
        let (m0, l0) = (b.splat(ninf, &[bm])?, b.splat(zero, &[bm])?);
        let fin = b.for_loop(lo, cols, step, vec![m0, l0], |b, c0, it| {
            at(b, 200);
            let (m, l) = (b.handoff(it[0])?, b.handoff(it[1])?);
            let (m, l) = fold(b, 201, c0, m, l)?;
            at(b, 300);
            let (m, l) = (b.handoff(m)?, b.handoff(l)?);
            let c1 = b.binary(B::Add, c0, bnv)?;
            let (m, l) = fold(b, 301, c1, m, l)?;
            Ok(vec![m, l])
        })?;
        at(b, 302);
        let r = b.arange(bm)?;
        let r = b.binary(B::Add, r, row0)?;
        let in_rows = b.cmp(CmpPred::Lt, r, rows)?;
        let pm = b.add_ptr(out_m, r)?;
        b.store(pm, fin[0], Some(in_rows))?;
        at(b, 400);
        let l = b.handoff(fin[1])?;
        let r = b.arange(bm)?;
        let r = b.binary(B::Add, r, row0)?;
        let in_rows = b.cmp(CmpPred::Lt, r, rows)?;
        let pl = b.add_ptr(out_l, r)?;
        b.store(pl, l, Some(in_rows))
    });
    // Warpgroup by source line; the loop's block arguments are carried on warpgroup 1.
    let lines = defining_lines(&f);
    own(&mut f, |i| match lines[i] {
        Some(l) if l >= 400 => None,
        Some(l) => Some(u32::from(l >= 300)),
        None => Some(1),
    });
    f.num_warps = 8;
    f
}
