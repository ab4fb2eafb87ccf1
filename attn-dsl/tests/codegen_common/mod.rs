//! IR programs built with `ir::Builder` for the codegen tests: together they use every
//! `OpKind` (and every unary/binary/compare/reduce variant) on every dtype that allows it.
#![allow(dead_code)]

pub mod cpu_sim;
pub mod overlap_cases;
pub mod owned;
pub mod sim_check;

use attn_dsl::ir::{
    BinaryOp as B, Builder, CmpPred, Function, IrResult, Loc, ParamKind, ReduceKind, Scalar,
    ScalarType, ScalarType::*, UnaryOp as U, ValueId,
};

pub fn ptr(elem: ScalarType) -> ParamKind {
    ParamKind::Ptr {
        elem,
        mutable: false,
    }
}
pub fn out_ptr(elem: ScalarType) -> ParamKind {
    ParamKind::Ptr {
        elem,
        mutable: true,
    }
}

pub(crate) fn at(b: &mut Builder, line: u32) {
    b.loc = Loc { line, col: 5 };
}

/// `out[i] = x[i] + y[i]` for `i < n`, `block` elements per program.
pub fn vec_add(block: usize, warps: u32) -> Function {
    let mut f = Function::new(format!("vec_add_{block}"), warps);
    let x = f.add_param("x", ptr(F32));
    let y = f.add_param("y", ptr(F32));
    let out = f.add_param("out", out_ptr(F32));
    let n = f.add_param("n", ParamKind::Scalar(I32));
    build(&mut f, |b| {
        at(b, 2);
        let pid = b.program_id(0)?;
        let bs = b.const_i32(block as i64);
        let start = b.binary(B::Mul, pid, bs)?;
        at(b, 3);
        let ar = b.arange(block)?;
        let offs = b.binary(B::Add, start, ar)?;
        b.set_name(offs, "offs");
        at(b, 4);
        let mask = b.cmp(CmpPred::Lt, offs, n)?;
        b.set_name(mask, "mask");
        at(b, 5);
        let px = b.add_ptr(x, offs)?;
        let vx = b.load(px, Some(mask), None)?;
        let py = b.add_ptr(y, offs)?;
        let vy = b.load(py, Some(mask), None)?;
        at(b, 6);
        let s = b.binary(B::Add, vx, vy)?;
        let po = b.add_ptr(out, offs)?;
        b.store(po, s, Some(mask))
    })
}

pub(crate) fn build(f: &mut Function, body: impl FnOnce(&mut Builder) -> IrResult<()>) -> Function {
    let mut b = Builder::new(f);
    body(&mut b).expect("test program must type-check");
    b.finish();
    f.clone()
}

/// Every float unary/binary/compare op and every cast on a float dtype `t`, over a tail-masked
/// block of `n` elements (`n` not a multiple of the block), results stored as f32.
pub fn float_zoo(t: ScalarType, block: usize, warps: u32) -> Function {
    let mut f = Function::new(format!("float_zoo_{t}"), warps);
    let x = f.add_param("x", ptr(t));
    let y = f.add_param("y", ptr(t));
    let out = f.add_param("out", out_ptr(F32));
    let n = f.add_param("n", ParamKind::Scalar(I32));
    build(&mut f, |b| {
        at(b, 10);
        let offs = b.arange(block)?;
        let mask = b.cmp(CmpPred::Lt, offs, n)?;
        let one = b.constant(Scalar::Float(1.5, t));
        let px = b.add_ptr(x, offs)?;
        let vx = b.load(px, Some(mask), Some(one))?;
        let py = b.add_ptr(y, offs)?;
        let vy = b.load(py, Some(mask), None)?;
        let mut results = vec![];
        at(b, 11);
        for u in [
            U::Neg,
            U::Exp,
            U::Exp2,
            U::Log,
            U::Log2,
            U::Sqrt,
            U::Tanh,
            U::Abs,
        ] {
            results.push(b.unary(u, vx)?);
        }
        at(b, 12);
        for op in [B::Add, B::Sub, B::Mul, B::Div, B::Min, B::Max] {
            results.push(b.binary(op, vx, vy)?);
        }
        at(b, 13);
        for p in [
            CmpPred::Eq,
            CmpPred::Ne,
            CmpPred::Lt,
            CmpPred::Le,
            CmpPred::Gt,
            CmpPred::Ge,
        ] {
            let c = b.cmp(p, vx, vy)?;
            results.push(b.select(c, vx, vy)?);
        }
        at(b, 14);
        for to in [Bf16, F16, F32, I32, I64, Bool] {
            let c = b.cast(vx, to)?;
            results.push(b.cast(c, t)?);
        }
        let inf = b.constant(Scalar::Float(f64::NEG_INFINITY, t));
        results.push(b.binary(B::Max, vx, inf)?);
        at(b, 15);
        let mut acc = b.cast(results[0], F32)?;
        for (i, &r) in results.iter().enumerate().skip(1) {
            let r = b.cast(r, F32)?;
            let w = b.const_f32(1.0 / (i as f64 + 1.0));
            let r = b.binary(B::Mul, r, w)?;
            acc = b.binary(B::Add, acc, r)?;
        }
        at(b, 16);
        let po = b.add_ptr(out, offs)?;
        b.store(po, acc, Some(mask))
    })
}

/// Every integer and bool op on int dtype `t`, plus `num_programs` and 3D program ids.
pub fn int_zoo(t: ScalarType, block: usize, warps: u32) -> Function {
    let mut f = Function::new(format!("int_zoo_{t}"), warps);
    let x = f.add_param("x", ptr(t));
    let y = f.add_param("y", ptr(t));
    let out = f.add_param("out", out_ptr(t));
    let flags = f.add_param("flags", out_ptr(Bool));
    build(&mut f, |b| {
        at(b, 20);
        let offs = b.arange(block)?;
        let p1 = b.program_id(1)?;
        let p2 = b.program_id(2)?;
        let n0 = b.num_programs(0)?;
        let n1 = b.num_programs(1)?;
        let n2 = b.num_programs(2)?;
        let g = b.binary(B::Mul, p1, n2)?;
        let g = b.binary(B::Add, g, p2)?;
        let g = b.binary(B::Mul, g, n0)?;
        let g = b.binary(B::Add, g, n1)?;
        let bs = b_const(b, block as i64, I32);
        let base = b.binary(B::Mul, g, bs)?;
        let offs = b.binary(B::Add, offs, base)?;
        let px = b.add_ptr(x, offs)?;
        let vx = b.load(px, None, None)?;
        let py = b.add_ptr(y, offs)?;
        let vy = b.load(py, None, None)?;
        at(b, 21);
        let mut acc = b.unary(U::Neg, vx)?;
        for u in [U::Not, U::Abs] {
            let r = b.unary(u, vx)?;
            acc = b.binary(B::Xor, acc, r)?;
        }
        at(b, 22);
        for op in [
            B::Add,
            B::Sub,
            B::Mul,
            B::Div,
            B::Rem,
            B::Min,
            B::Max,
            B::And,
            B::Or,
            B::Xor,
            B::Shl,
            B::Shr,
        ] {
            let r = b.binary(op, vx, vy)?;
            acc = b.binary(B::Add, acc, r)?;
        }
        at(b, 23);
        let zero = b_const(b, 0, t);
        let pos = b.cmp(CmpPred::Gt, vx, zero)?;
        let neg = b.cmp(CmpPred::Lt, vy, zero)?;
        let both = b.binary(B::And, pos, neg)?;
        let either = b.binary(B::Or, pos, neg)?;
        let one = b.binary(B::Xor, pos, neg)?;
        let none = b.unary(U::Not, either)?;
        let flag = b.select(both, one, none)?;
        at(b, 24);
        let po = b.add_ptr(out, offs)?;
        b.store(po, acc, None)?;
        let pf = b.add_ptr(flags, offs)?;
        b.store(pf, flag, None)
    })
}

fn b_const(b: &mut Builder, v: i64, t: ScalarType) -> ValueId {
    b.constant(Scalar::Int(v, t))
}

/// Pointers `base + rows[:, None] * stride + cols[None, :]` for an `[m, n]` tile.
pub(crate) fn tile_ptrs(
    b: &mut Builder,
    base: ValueId,
    row0: ValueId,
    m: usize,
    n: usize,
    stride: ValueId,
) -> IrResult<(ValueId, ValueId, ValueId)> {
    let r = b.arange(m)?;
    let r = b.binary(B::Add, r, row0)?;
    let c = b.arange(n)?;
    let r2 = b.expand_dims(r, 1)?;
    let c2 = b.expand_dims(c, 0)?;
    let ro = b.binary(B::Mul, r2, stride)?;
    let off = b.binary(B::Add, ro, c2)?;
    Ok((b.add_ptr(base, off)?, r2, c2))
}

/// Row softmax of a `rows x cols` bf16 matrix, `[bm, bn]` tiles, one row block per program.
pub fn softmax(bm: usize, bn: usize, warps: u32) -> Function {
    softmax_slabs(bm, bn, warps, 1)
}

/// [`softmax`] over `slabs` slabs of `bm` rows a program, each slab's ops built apart (no
/// tile shared between slabs) at source lines `100 k + 30 ..= 100 k + 35`.
pub fn softmax_slabs(bm: usize, bn: usize, warps: u32, slabs: usize) -> Function {
    let name = match slabs {
        1 => format!("softmax_{bm}x{bn}"),
        _ => format!("softmax_{bm}x{bn}x{slabs}"),
    };
    let mut f = Function::new(name, warps);
    let x = f.add_param("x", ptr(Bf16));
    let out = f.add_param("out", out_ptr(Bf16));
    let rows = f.add_param("rows", ParamKind::Scalar(I32));
    let cols = f.add_param("cols", ParamKind::Scalar(I32));
    build(&mut f, |b| {
        for k in 0..slabs {
            let line = 100 * k as u32;
            at(b, line + 30);
            let pid = b.program_id(0)?;
            let per = b.const_i32((bm * slabs) as i64);
            let first = b.binary(B::Mul, pid, per)?;
            let off = b.const_i32((bm * k) as i64);
            let row0 = b.binary(B::Add, first, off)?;
            at(b, line + 31);
            let (px, r2, c2) = tile_ptrs(b, x, row0, bm, bn, cols)?;
            let rm = b.cmp(CmpPred::Lt, r2, rows)?;
            let cm = b.cmp(CmpPred::Lt, c2, cols)?;
            let mask = b.binary(B::And, rm, cm)?;
            at(b, line + 32);
            let ninf = b.constant(Scalar::Float(f64::NEG_INFINITY, Bf16));
            let v = b.load(px, Some(mask), Some(ninf))?;
            let v = b.cast(v, F32)?;
            at(b, line + 33);
            let mx = b.reduce(ReduceKind::Max, v, 1)?;
            b.set_name(mx, "row_max");
            let mx2 = b.expand_dims(mx, 1)?;
            let d = b.binary(B::Sub, v, mx2)?;
            let e = b.unary(U::Exp, d)?;
            at(b, line + 34);
            let s = b.reduce(ReduceKind::Sum, e, 1)?;
            let s2 = b.expand_dims(s, 1)?;
            let p = b.binary(B::Div, e, s2)?;
            let p = b.cast(p, Bf16)?;
            at(b, line + 35);
            let (po, _, _) = tile_ptrs(b, out, row0, bm, bn, cols)?;
            b.store(po, p, Some(mask))?;
        }
        Ok(())
    })
}

/// `out[n] = min over m of trans(x)[n, m]` plus a broadcast of a column vector and a
/// scalar reduction: exercises trans, reduce(min, axis 0), broadcast [m,1] -> [m,n].
pub fn reduce_trans(m: usize, n: usize, warps: u32) -> Function {
    let mut f = Function::new(format!("reduce_trans_{m}x{n}"), warps);
    let x = f.add_param("x", ptr(F32));
    let out = f.add_param("out", out_ptr(F32));
    let total = f.add_param("total", out_ptr(F32));
    build(&mut f, |b| {
        at(b, 40);
        let zero = b.const_i32(0);
        let nv = b.const_i32(n as i64);
        let (px, _, _) = tile_ptrs(b, x, zero, m, n, nv)?;
        let v = b.load(px, None, None)?;
        at(b, 41);
        let t = b.trans(v)?; // [n, m]
        let mn = b.reduce(ReduceKind::Min, t, 1)?; // [n]
        let col = b.reduce(ReduceKind::Max, v, 1)?; // [m]
        let col = b.expand_dims(col, 1)?; // [m, 1]
        let colb = b.broadcast(col, &[m, n])?;
        let d = b.binary(B::Sub, v, colb)?;
        let rs = b.reduce(ReduceKind::Sum, d, 0)?; // [n]
        let mn = b.binary(B::Add, mn, rs)?;
        at(b, 42);
        let all = b.reduce(ReduceKind::Sum, mn, 0)?; // scalar
        let ar = b.arange(n)?;
        let po = b.add_ptr(out, ar)?;
        b.store(po, mn, None)?;
        b.store(total, all, None)
    })
}

/// `for`, `if` and `while` with loop-carried tiles, a swap of two carried values and an
/// `if` yielding a tile.
pub fn control_flow(block: usize, warps: u32) -> Function {
    let mut f = Function::new("control_flow", warps);
    let out = f.add_param("out", out_ptr(I32));
    let iters = f.add_param("iters", ParamKind::Scalar(I32));
    build(&mut f, |b| {
        at(b, 50);
        let a0 = b.arange(block)?;
        let one = b.const_i32(1);
        let b0 = b.splat(one, &[block])?;
        let lo = b.const_i32(0);
        let step = b.const_i32(1);
        at(b, 51);
        let res = b.for_loop(lo, iters, step, vec![a0, b0], |b, iv, it| {
            at(b, 52);
            let s = b.binary(B::Add, it[0], iv)?;
            let two = b.const_i32(2);
            let r = b.binary(B::Rem, iv, two)?;
            let z = b.const_i32(0);
            let even = b.cmp(CmpPred::Eq, r, z)?;
            at(b, 53);
            let y = b.if_else(
                even,
                |b| Ok(vec![b.binary(B::Mul, s, two)?]),
                |_| Ok(vec![s]),
            )?;
            // Swap: (a, b) <- (b, y).
            Ok(vec![it[1], y[0]])
        })?;
        at(b, 54);
        let c0 = b.const_i32(0);
        let w = b.while_loop(
            vec![c0, res[1]],
            |b, v| {
                let lim = b.const_i32(3);
                b.cmp(CmpPred::Lt, v[0], lim)
            },
            |b, v| {
                let one = b.const_i32(1);
                let c = b.binary(B::Add, v[0], one)?;
                let t = b.binary(B::Add, v[1], res[0])?;
                Ok(vec![c, t])
            },
        )?;
        at(b, 55);
        let ar = b.arange(block)?;
        let po = b.add_ptr(out, ar)?;
        b.store(po, w[1], None)
    })
}

/// `c[m, n] = a[m, k] · b[k, n]` with a K loop of `bk` steps, `[bm, bn]` output tiles,
/// masked tails on every dimension.
pub fn matmul(t: ScalarType, bm: usize, bn: usize, bk: usize, warps: u32) -> Function {
    let mut f = Function::new(format!("matmul_{t}_{bm}x{bn}x{bk}"), warps);
    let a = f.add_param("a", ptr(t));
    let bp = f.add_param("b", ptr(t));
    let c = f.add_param("c", out_ptr(F32));
    let m = f.add_param("m", ParamKind::Scalar(I32));
    let n = f.add_param("n", ParamKind::Scalar(I32));
    let k = f.add_param("k", ParamKind::Scalar(I32));
    build(&mut f, |b| {
        at(b, 60);
        let pm = b.program_id(0)?;
        let pn = b.program_id(1)?;
        let bmv = b.const_i32(bm as i64);
        let bnv = b.const_i32(bn as i64);
        let row0 = b.binary(B::Mul, pm, bmv)?;
        let col0 = b.binary(B::Mul, pn, bnv)?;
        let rows = b.arange(bm)?;
        let rows = b.binary(B::Add, rows, row0)?;
        let rows = b.expand_dims(rows, 1)?; // [bm, 1]
        let cols = b.arange(bn)?;
        let cols = b.binary(B::Add, cols, col0)?;
        let cols = b.expand_dims(cols, 0)?; // [1, bn]
        let zero = b.const_f32(0.0);
        let acc0 = b.splat(zero, &[bm, bn])?;
        b.set_name(acc0, "acc");
        let lo = b.const_i32(0);
        let step = b.const_i32(bk as i64);
        at(b, 61);
        let acc = b.for_loop(lo, k, step, vec![acc0], |b, k0, it| {
            at(b, 62);
            let ka = b.arange(bk)?;
            let ka = b.binary(B::Add, ka, k0)?;
            let kc = b.expand_dims(ka, 0)?; // [1, bk]
            let kr = b.expand_dims(ka, 1)?; // [bk, 1]
            let ao = b.binary(B::Mul, rows, k)?;
            let ao = b.binary(B::Add, ao, kc)?;
            let am = b.cmp(CmpPred::Lt, rows, m)?;
            let akm = b.cmp(CmpPred::Lt, kc, k)?;
            let amask = b.binary(B::And, am, akm)?;
            let pa = b.add_ptr(a, ao)?;
            let at_ = b.load(pa, Some(amask), None)?;
            at(b, 63);
            let bo = b.binary(B::Mul, kr, n)?;
            let bo = b.binary(B::Add, bo, cols)?;
            let bkm = b.cmp(CmpPred::Lt, kr, k)?;
            let bnm = b.cmp(CmpPred::Lt, cols, n)?;
            let bmask = b.binary(B::And, bkm, bnm)?;
            let pb = b.add_ptr(bp, bo)?;
            let bt = b.load(pb, Some(bmask), None)?;
            at(b, 64);
            Ok(vec![b.dot(at_, bt, Some(it[0]))?])
        })?;
        at(b, 65);
        let co = b.binary(B::Mul, rows, n)?;
        let co = b.binary(B::Add, co, cols)?;
        let cm = b.cmp(CmpPred::Lt, rows, m)?;
        let cn = b.cmp(CmpPred::Lt, cols, n)?;
        let cmask = b.binary(B::And, cm, cn)?;
        let pc = b.add_ptr(c, co)?;
        b.store(pc, acc[0], Some(cmask))
    })
}

/// One dot without an accumulator on odd tile shapes (`[m, k] · [k, n]`, row-major inputs,
/// single program): exercises the zero-padding of the tensor-core path.
pub fn small_dot(t: ScalarType, m: usize, k: usize, n: usize, warps: u32) -> Function {
    let mut f = Function::new(format!("small_dot_{t}_{m}x{k}x{n}"), warps);
    let a = f.add_param("a", ptr(t));
    let bp = f.add_param("b", ptr(t));
    let c = f.add_param("c", out_ptr(F32));
    build(&mut f, |b| {
        at(b, 70);
        let zero = b.const_i32(0);
        let kv = b.const_i32(k as i64);
        let nv = b.const_i32(n as i64);
        let (pa, _, _) = tile_ptrs(b, a, zero, m, k, kv)?;
        let (pb, _, _) = tile_ptrs(b, bp, zero, k, n, nv)?;
        let (pc, _, _) = tile_ptrs(b, c, zero, m, n, nv)?;
        let va = b.load(pa, None, None)?;
        let vb = b.load(pb, None, None)?;
        at(b, 71);
        let d = b.dot(va, vb, None)?;
        b.store(pc, d, None)
    })
}

/// Flash-attention forward for one head: `q[seq, d]`, `k[seq, d]`, `v[seq, d]` (bf16),
/// `[bm, d]` query tiles, `bn`-key steps, online softmax, masked tails, bf16 output.
pub fn attention(bm: usize, bn: usize, d: usize, warps: u32) -> Function {
    let mut f = Function::new(format!("attention_{bm}x{bn}x{d}"), warps);
    let q = f.add_param("q", ptr(Bf16));
    let k = f.add_param("k", ptr(Bf16));
    let v = f.add_param("v", ptr(Bf16));
    let o = f.add_param("o", out_ptr(Bf16));
    let seq = f.add_param("seq_len", ParamKind::Scalar(I32));
    let scale = f.add_param("softmax_scale", ParamKind::Scalar(F32));
    build(&mut f, |b| {
        at(b, 80);
        let pid = b.program_id(0)?;
        let bmv = b.const_i32(bm as i64);
        let row0 = b.binary(B::Mul, pid, bmv)?;
        let dv = b.const_i32(d as i64);
        let (pq, r2, _) = tile_ptrs(b, q, row0, bm, d, dv)?;
        let qmask = b.cmp(CmpPred::Lt, r2, seq)?;
        let qt = b.load(pq, Some(qmask), None)?;
        b.set_name(qt, "q_tile");
        at(b, 81);
        let ninf = b.constant(Scalar::Float(f64::NEG_INFINITY, F32));
        let m0 = b.splat(ninf, &[bm])?;
        b.set_name(m0, "m_i");
        let zero = b.const_f32(0.0);
        let l0 = b.splat(zero, &[bm])?;
        b.set_name(l0, "l_i");
        let acc0 = b.splat(zero, &[bm, d])?;
        b.set_name(acc0, "acc");
        let lo = b.const_i32(0);
        let step = b.const_i32(bn as i64);
        at(b, 82);
        let fin = b.for_loop(lo, seq, step, vec![m0, l0, acc0], |b, start, it| {
            at(b, 83);
            let (pk, kr, _) = tile_ptrs(b, k, start, bn, d, dv)?;
            let kmask = b.cmp(CmpPred::Lt, kr, seq)?;
            let kt = b.load(pk, Some(kmask), None)?;
            let (pv, _, _) = tile_ptrs(b, v, start, bn, d, dv)?;
            let vt = b.load(pv, Some(kmask), None)?;
            at(b, 84);
            let ktt = b.trans(kt)?;
            let s = b.dot(qt, ktt, None)?;
            let s = b.binary(B::Mul, s, scale)?;
            at(b, 85);
            let cols = b.arange(bn)?;
            let cols = b.binary(B::Add, cols, start)?;
            let cols = b.expand_dims(cols, 0)?;
            let valid = b.cmp(CmpPred::Lt, cols, seq)?;
            let s = b.select(valid, s, ninf)?;
            at(b, 86);
            let mx = b.reduce(ReduceKind::Max, s, 1)?;
            let m_new = b.binary(B::Max, it[0], mx)?;
            let alpha = b.binary(B::Sub, it[0], m_new)?;
            let alpha = b.unary(U::Exp, alpha)?;
            let mcol = b.expand_dims(m_new, 1)?;
            let p = b.binary(B::Sub, s, mcol)?;
            let p = b.unary(U::Exp, p)?;
            at(b, 87);
            let ls = b.reduce(ReduceKind::Sum, p, 1)?;
            let l = b.binary(B::Mul, it[1], alpha)?;
            let l = b.binary(B::Add, l, ls)?;
            let acol = b.expand_dims(alpha, 1)?;
            let acc = b.binary(B::Mul, it[2], acol)?;
            let pb = b.cast(p, Bf16)?;
            let acc = b.dot(pb, vt, Some(acc))?;
            Ok(vec![m_new, l, acc])
        })?;
        at(b, 88);
        let lcol = b.expand_dims(fin[1], 1)?;
        let out = b.binary(B::Div, fin[2], lcol)?;
        let out = b.cast(out, Bf16)?;
        let (po, _, _) = tile_ptrs(b, o, row0, bm, d, dv)?;
        b.store(po, out, Some(qmask))
    })
}

/// All programs the NVRTC test compiles, with a label each.
pub fn all_programs() -> Vec<(String, Function)> {
    let mut v = vec![
        ("vec_add 1024/4w".to_string(), vec_add(1024, 4)),
        ("vec_add 100-tail/1w".to_string(), vec_add(64, 1)),
        ("control_flow".into(), control_flow(64, 2)),
        ("softmax 16x128".into(), softmax(16, 128, 4)),
        ("softmax 4x32 tail".into(), softmax(4, 32, 8)),
        ("reduce_trans 16x32".into(), reduce_trans(16, 32, 4)),
        ("reduce_trans 8x4 tail".into(), reduce_trans(8, 4, 2)),
        ("attention 16x32x64".into(), attention(16, 32, 64, 4)),
        ("attention 64x64x128".into(), attention(64, 64, 128, 4)),
        (
            "attention 64x32x64 on warpgroup 1".into(),
            owned::on_warpgroup(attention(64, 32, 64, 4), 1, 8),
        ),
        (
            "softmax slabs on warpgroups 0, 1".into(),
            owned::two_softmaxes(),
        ),
    ];
    for t in [Bf16, F16, F32] {
        v.push((format!("float_zoo {t}"), float_zoo(t, 128, 4)));
        v.push((format!("matmul {t} 64x64x32"), matmul(t, 64, 64, 32, 4)));
        v.push((format!("small_dot {t} 8x4x2"), small_dot(t, 8, 4, 2, 1)));
        v.push((
            format!("small_dot {t} 32x16x64"),
            small_dot(t, 32, 16, 64, 2),
        ));
    }
    for t in [I32, I64] {
        v.push((format!("int_zoo {t}"), int_zoo(t, 32, 1)));
    }
    v
}

/// (kernel name, module source, constexpr bindings).
type DslCase = (
    &'static str,
    &'static str,
    Vec<(&'static str, attn_dsl::ConstValue)>,
);

/// `tests/kernels/range_attention.rs.txt` specialized for bf16, 64 x 32 tiles, D 64 and
/// four ranges (`mix`: the range loop also reads whole rows of the mask it carries;
/// `score_ranges`: the scores see the ranges, not only the V guard; `key_ranges`: the V
/// guard is a loop's key vector, read without a reduction).
pub fn range_attention(mix: bool, score_ranges: bool, key_ranges: bool) -> Function {
    use attn_dsl::{Binding, ConstValue};
    const SRC: &str = include_str!("../kernels/range_attention.rs.txt");
    let module = attn_dsl::frontend::parse_module_str(SRC).expect("parse range_attention");
    let binds = [
        Binding::new("T", ConstValue::Dtype(ScalarType::Bf16)),
        Binding::new("BLOCK_M", ConstValue::Int(64)),
        Binding::new("BLOCK_N", ConstValue::Int(32)),
        Binding::new("HEAD_DIM", ConstValue::Int(64)),
        Binding::new("NUM_RANGES", ConstValue::Int(RANGES.len() as i64 / 2)),
        Binding::new("MIX", ConstValue::Bool(mix)),
        Binding::new("SCORE_RANGES", ConstValue::Bool(score_ranges)),
        Binding::new("KEY_RANGES", ConstValue::Bool(key_ranges)),
    ];
    attn_dsl::driver::compile(&module, "range_fwd", &binds)
        .expect("compile range_fwd")
        .specialized
        .ir
}

/// The ranges [lo, hi] of [`range_attention`] tests (seq 150): one inside the first q-block,
/// one across the first two q-blocks and reaching past their diagonals, one past the end,
/// one empty.
pub const RANGES: [i32; 8] = [10, 40, 50, 130, 140, 200, 90, 80];

/// The DSL kernels of `tests/kernels/*.rs.txt`, compiled through the whole pipeline
/// (`driver::compile`: specialize, passes, verify, emit) for several bindings.
pub fn dsl_kernels() -> Vec<(String, attn_dsl::codegen::CudaKernel)> {
    use attn_dsl::{Binding, ConstValue};
    const SOFTMAX: &str = include_str!("../kernels/softmax.rs.txt");
    const MATMUL: &str = include_str!("../kernels/matmul.rs.txt");
    const FLASH: &str = include_str!("../kernels/flash_attention.rs.txt");
    const RANGE: &str = include_str!("../kernels/range_attention.rs.txt");
    let dt = |s| ConstValue::Dtype(s);
    let i = ConstValue::Int;
    let cases: Vec<DslCase> = vec![
        ("softmax", SOFTMAX, vec![("T", dt(Bf16)), ("BLOCK", i(128))]),
        ("softmax", SOFTMAX, vec![("T", dt(F32)), ("BLOCK", i(1024))]),
        (
            "matmul",
            MATMUL,
            vec![
                ("T", dt(Bf16)),
                ("BLOCK_M", i(64)),
                ("BLOCK_N", i(64)),
                ("BLOCK_K", i(32)),
            ],
        ),
        (
            "matmul",
            MATMUL,
            vec![
                ("T", dt(F16)),
                ("BLOCK_M", i(32)),
                ("BLOCK_N", i(64)),
                ("BLOCK_K", i(16)),
            ],
        ),
        (
            "matmul",
            MATMUL,
            vec![
                ("T", dt(F32)),
                ("BLOCK_M", i(32)),
                ("BLOCK_N", i(32)),
                ("BLOCK_K", i(16)),
            ],
        ),
        (
            "flash_fwd",
            FLASH,
            vec![
                ("T", dt(Bf16)),
                ("BLOCK_M", i(64)),
                ("BLOCK_N", i(64)),
                ("HEAD_DIM", i(128)),
                ("CAUSAL", ConstValue::Bool(true)),
            ],
        ),
        (
            "range_fwd",
            RANGE,
            vec![
                ("T", dt(Bf16)),
                ("BLOCK_M", i(64)),
                ("BLOCK_N", i(32)),
                ("HEAD_DIM", i(64)),
                ("NUM_RANGES", i(4)),
                ("MIX", ConstValue::Bool(false)),
                ("SCORE_RANGES", ConstValue::Bool(true)),
                ("KEY_RANGES", ConstValue::Bool(true)),
            ],
        ),
        (
            "flash_fwd",
            FLASH,
            vec![
                ("T", dt(F16)),
                ("BLOCK_M", i(16)),
                ("BLOCK_N", i(32)),
                ("HEAD_DIM", i(64)),
                ("CAUSAL", ConstValue::Bool(false)),
            ],
        ),
    ];
    cases
        .into_iter()
        .map(|(kernel, src, binds)| {
            let module = attn_dsl::frontend::parse_module_str(src)
                .unwrap_or_else(|e| panic!("parse {kernel}: {}", e.message));
            let b: Vec<Binding> = binds
                .iter()
                .map(|(n, v)| Binding::new(*n, v.clone()))
                .collect();
            let label = format!(
                "{kernel}<{}>",
                binds
                    .iter()
                    .map(|(n, v)| format!("{n}={v:?}"))
                    .collect::<Vec<_>>()
                    .join(",")
            );
            let c = attn_dsl::driver::compile(&module, kernel, &b)
                .unwrap_or_else(|e| panic!("compile {label}: {}", e.message));
            (label, c.cuda)
        })
        .collect()
}

/// Row statistics of a tensor-core product `s = a · b` (`[m, k] · [k, n]`, one program),
/// computed in the `Mma` fragment layout: f32 `max`/`min`/`sum` row reductions (quad
/// shuffles), an i32 tile in the same layout with `sum`/`max` row reductions, a softmax with
/// its row broadcasts, a loaded row vector added in the fragment layout (`bias`), and the same
/// vector added to a plain loaded tile (`x`), whose unsqueeze then needs a layout conversion.
/// Outputs: `s`, `rmax`, `rmin`, `rsum`, `isum`, `imax`, `p`, `y = x + bias[:, None]`.
pub fn mma_rows(t: ScalarType, m: usize, k: usize, n: usize, warps: u32) -> Function {
    let mut f = Function::new(format!("mma_rows_{t}_{m}x{k}x{n}"), warps);
    let a = f.add_param("a", ptr(t));
    let bp = f.add_param("b", ptr(t));
    let bias = f.add_param("bias", ptr(F32));
    let x = f.add_param("x", ptr(F32));
    let outs: Vec<ValueId> = [
        ("s", F32),
        ("rmax", F32),
        ("rmin", F32),
        ("rsum", F32),
        ("isum", I32),
        ("imax", I32),
        ("p", F32),
        ("y", F32),
    ]
    .into_iter()
    .map(|(name, t)| f.add_param(name, out_ptr(t)))
    .collect();
    build(&mut f, |b| {
        at(b, 90);
        let zero = b.const_i32(0);
        let kv = b.const_i32(k as i64);
        let nv = b.const_i32(n as i64);
        let (pa, _, _) = tile_ptrs(b, a, zero, m, k, kv)?;
        let (pb, _, _) = tile_ptrs(b, bp, zero, k, n, nv)?;
        let (pmn, _, _) = tile_ptrs(b, x, zero, m, n, nv)?;
        let va = b.load(pa, None, None)?;
        let vb = b.load(pb, None, None)?;
        let rows = b.arange(m)?;
        let pbias = b.add_ptr(bias, rows)?;
        let vbias = b.load(pbias, None, None)?;
        at(b, 91);
        let s = b.dot(va, vb, None)?;
        let col = b.expand_dims(vbias, 1)?;
        let s = b.binary(B::Add, s, col)?;
        b.set_name(s, "s");
        at(b, 92);
        let mx = b.reduce(ReduceKind::Max, s, 1)?;
        let mn = b.reduce(ReduceKind::Min, s, 1)?;
        let mxc = b.expand_dims(mx, 1)?;
        let e = b.binary(B::Sub, s, mxc)?;
        let e = b.unary(U::Exp, e)?;
        let sum = b.reduce(ReduceKind::Sum, e, 1)?;
        let sumc = b.expand_dims(sum, 1)?;
        let p = b.binary(B::Div, e, sumc)?;
        at(b, 93);
        let eight = b.const_f32(8.0);
        let q = b.binary(B::Mul, s, eight)?;
        let q = b.cast(q, I32)?;
        let isum = b.reduce(ReduceKind::Sum, q, 1)?;
        let imax = b.reduce(ReduceKind::Max, q, 1)?;
        at(b, 94);
        let vx = b.load(pmn, None, None)?;
        let col2 = b.expand_dims(vbias, 1)?;
        let y = b.binary(B::Add, vx, col2)?;
        at(b, 95);
        for (i, v) in [s, mx, mn, sum, isum, imax, p, y].into_iter().enumerate() {
            let ptrs = if b.ty(v).rank() == 2 {
                tile_ptrs(b, outs[i], zero, m, n, nv)?.0
            } else {
                b.add_ptr(outs[i], rows)?
            };
            b.store(ptrs, v, None)?;
        }
        Ok(())
    })
}

/// Kernel `name` of the DSL module `src` specialized for bf16 on `consts`, with the
/// warpgroup-MMA target (what the ops set on an sm_90a device) set or not.
pub fn specialize(
    src: &str,
    name: &str,
    consts: &[(&str, attn_dsl::ConstValue)],
    warpgroups: bool,
) -> Function {
    let module = attn_dsl::frontend::parse_module_str(src).expect("parse");
    let mut binds = vec![attn_dsl::Binding::new(
        "T",
        attn_dsl::ConstValue::Dtype(ScalarType::Bf16),
    )];
    binds.extend(
        consts
            .iter()
            .map(|(n, v)| attn_dsl::Binding::new(*n, v.clone())),
    );
    let c = attn_dsl::driver::compile(&module, name, &binds).expect("compile");
    let mut f = c.specialized.ir;
    f.warpgroup_mma = warpgroups;
    f
}

/// The test module's `flash_fwd` (causal, 64-row blocks) specialized for bf16 at `block_n`
/// keys and head size `d`, with the warpgroup-MMA target set or not.
pub fn flash_fwd(block_n: i64, d: i64, warpgroups: bool) -> Function {
    let consts = [
        ("BLOCK_M", attn_dsl::ConstValue::Int(64)),
        ("BLOCK_N", attn_dsl::ConstValue::Int(block_n)),
        ("HEAD_DIM", attn_dsl::ConstValue::Int(d)),
        ("CAUSAL", attn_dsl::ConstValue::Bool(true)),
    ];
    specialize(
        include_str!("../kernels/flash_attention.rs.txt"),
        "flash_fwd",
        &consts,
        warpgroups,
    )
}

/// The test module's `latent_fwd` (MLA's loop: one key tile read by the scores and,
/// transposed, by PV) specialized for bf16 at 64-row blocks, `block_n` keys and head size
/// `d`, for warpgroup MMAs or not, on two warpgroups (8 warps) with a two-stage ring. Not
/// laid out again for the 8 warps: the seesaw rewrite lays out what it takes.
pub fn latent_fwd_two_warpgroups(block_n: i64, d: i64, warpgroups: bool) -> Function {
    let consts = [
        ("BLOCK_M", attn_dsl::ConstValue::Int(64)),
        ("BLOCK_N", attn_dsl::ConstValue::Int(block_n)),
        ("HEAD_DIM", attn_dsl::ConstValue::Int(d)),
    ];
    let src = include_str!("../kernels/flash_attention.rs.txt");
    let mut f = specialize(src, "latent_fwd", &consts, warpgroups);
    (f.num_warps, f.num_stages) = (8, 2);
    f
}

/// The test module's `paged_fwd` (64-row blocks over a paged cache) specialized for bf16 at
/// `block_n` keys, head size `d` and `page` rows a page, for warpgroup MMAs.
pub fn paged_fwd(block_n: i64, d: i64, page: i64) -> Function {
    let consts = [
        ("BLOCK_M", attn_dsl::ConstValue::Int(64)),
        ("BLOCK_N", attn_dsl::ConstValue::Int(block_n)),
        ("HEAD_DIM", attn_dsl::ConstValue::Int(d)),
        ("PAGE", attn_dsl::ConstValue::Int(page)),
    ];
    specialize(
        include_str!("../kernels/flash_attention.rs.txt"),
        "paged_fwd",
        &consts,
        true,
    )
}

/// `split_scores.rs.txt`'s kernel: the scores as two dots over the head's halves (the
/// second accumulating into the first, MLA's shape), the first's result read again when
/// `reuse`; 64 × 32 tiles at D 128.
pub fn split_scores(reuse: bool, warpgroups: bool) -> Function {
    let consts = [
        ("BLOCK_M", attn_dsl::ConstValue::Int(64)),
        ("BLOCK_N", attn_dsl::ConstValue::Int(32)),
        ("HEAD_DIM", attn_dsl::ConstValue::Int(128)),
        ("HALF", attn_dsl::ConstValue::Int(64)),
        ("REUSE", attn_dsl::ConstValue::Bool(reuse)),
    ];
    specialize(
        include_str!("../kernels/split_scores.rs.txt"),
        "split_fwd",
        &consts,
        warpgroups,
    )
}
