//! Hand-built IR programs shared by the IR and pass tests (`#[path]`-included).
#![allow(dead_code)]

use attn_dsl::ir::{
    BinaryOp, Builder, CmpPred, Function, IrResult, Loc, ParamKind, ReduceKind, Scalar, ScalarType, UnaryOp, ValueId,
};

pub fn at(b: &mut Builder, line: u32, col: u32) {
    b.loc = Loc { line, col };
}

/// One program using every op kind, every scalar kind, nested `for`/`if`/`while` with
/// carried values, duplicate and odd value names, and source locations.
pub fn kitchen_sink() -> Function {
    build_kitchen_sink().expect("kitchen sink builds")
}

fn build_kitchen_sink() -> IrResult<Function> {
    use ScalarType::*;
    let mut f = Function::new("sink_1a2b3c4d", 4);
    let x = f.add_param("x", ParamKind::Ptr { elem: Bf16, mutable: false });
    let out = f.add_param("out", ParamKind::Ptr { elem: F32, mutable: true });
    let n = f.add_param("n", ParamKind::Scalar(I32));
    let big = f.add_param("big", ParamKind::Scalar(I64));
    let flag = f.add_param("flag", ParamKind::Scalar(Bool));
    let mut b = Builder::new(&mut f);
    at(&mut b, 3, 5);
    let pid = b.program_id(0)?;
    b.set_name(pid, "pid");
    let np = b.num_programs(2)?;
    let offs = b.arange(16)?;
    b.set_name(offs, "offs");
    let cols = b.arange(32)?;
    at(&mut b, 4, 9);
    let r = b.expand_dims(offs, 1)?;
    let c = b.expand_dims(cols, 0)?;
    let stride = b.const_i32(32);
    let rs = b.binary(BinaryOp::Mul, r, stride)?;
    let idx = b.binary(BinaryOp::Add, rs, c)?;
    b.set_name(idx, "idx");
    let ptrs = b.add_ptr(x, idx)?;
    let mask = b.cmp(CmpPred::Lt, idx, n)?;
    let zero_bf = b.constant(Scalar::Float(0.0, Bf16));
    let tile = b.load(ptrs, Some(mask), Some(zero_bf))?;
    let tile2 = b.load(ptrs, Some(mask), None)?;
    let tile3 = b.load(ptrs, None, None)?;
    let tt = b.trans(tile)?;
    let acc0 = b.dot(tile, tt, None)?;
    let acc = b.dot(tile2, tt, Some(acc0))?;
    b.set_name(acc, "acc");
    at(&mut b, 7, 1);
    // Float constants of every flavour.
    let ninf = b.const_f32(f64::NEG_INFINITY);
    let pinf = b.const_f32(f64::INFINITY);
    let nan = b.const_f32(f64::NAN);
    let nzero = b.const_f32(-0.0);
    let tiny = b.const_f32(1e-7);
    let half = b.constant(Scalar::Float(0.5, F16));
    let i64c = b.constant(Scalar::Int(-(1 << 40), I64));
    let t = b.const_bool(true);
    let fa = b.const_bool(false);
    b.set_name(nan, "a b");
    b.set_name(tiny, "7");
    let _ = (pinf, nzero, half, i64c, t, fa);
    // Every unary op.
    let mut v = acc;
    for u in [UnaryOp::Exp, UnaryOp::Exp2, UnaryOp::Log, UnaryOp::Log2, UnaryOp::Sqrt, UnaryOp::Tanh, UnaryOp::Abs, UnaryOp::Neg] {
        v = b.unary(u, v)?;
    }
    let nb = b.unary(UnaryOp::Not, flag)?;
    let ni = b.unary(UnaryOp::Not, idx)?;
    // Every binary op.
    for op in [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Min, BinaryOp::Max] {
        v = b.binary(op, v, tiny)?;
    }
    let mut w = ni;
    for op in [BinaryOp::Rem, BinaryOp::And, BinaryOp::Or, BinaryOp::Xor, BinaryOp::Shl, BinaryOp::Shr] {
        w = b.binary(op, w, stride)?;
    }
    let bl = b.binary(BinaryOp::And, nb, t)?;
    let bigger = b.binary(BinaryOp::Add, big, i64c)?;
    let _ = bigger;
    // Every comparison, select, cast, reductions, explicit splat/broadcast.
    let mut conds: Vec<ValueId> = vec![];
    for p in [CmpPred::Eq, CmpPred::Ne, CmpPred::Lt, CmpPred::Le, CmpPred::Gt, CmpPred::Ge] {
        conds.push(b.cmp(p, v, ninf)?);
    }
    let sel = b.select(conds[2], v, nan)?;
    let wf = b.cast(w, F32)?;
    let h = b.cast(tile3, F16)?;
    let _ = h;
    let rmax = b.reduce(ReduceKind::Max, sel, 1)?;
    let rsum = b.reduce(ReduceKind::Sum, wf, 0)?;
    let rmin = b.reduce(ReduceKind::Min, rsum, 0)?;
    let sp = b.splat(rmin, &[16])?;
    let col = b.expand_dims(sp, 1)?;
    let bc = b.broadcast(col, &[16, 16])?;
    let _ = (rmax, bl, np);
    // for with carried values, a nested if with results, and a while with a nested for.
    at(&mut b, 20, 5);
    let zero = b.const_i32(0);
    let one = b.const_i32(1);
    let m0 = b.splat(ninf, &[16])?;
    b.set_name(m0, "m");
    let l0 = b.const_f32(0.0);
    b.set_name(l0, "l");
    let res = b.for_loop(zero, n, one, vec![m0, l0], |b, iv, it| {
        let (m, l) = (it[0], it[1]);
        b.set_name(m, "m");
        b.set_name(l, "l");
        at(b, 21, 9);
        let m2 = b.binary(BinaryOp::Max, m, rmax)?;
        b.set_name(m2, "m");
        let even = b.binary(BinaryOp::Rem, iv, stride)?;
        let c = b.cmp(CmpPred::Eq, even, zero)?;
        let l2 = b.if_else(
            c,
            |b| {
                let s = b.reduce(ReduceKind::Sum, m2, 0)?;
                Ok(vec![b.binary(BinaryOp::Add, l, s)?])
            },
            |_| Ok(vec![l]),
        )?;
        b.set_name(l2[0], "l");
        Ok(vec![m2, l2[0]])
    })?;
    b.set_name(res[0], "m");
    b.set_name(res[1], "l");
    at(&mut b, 30, 5);
    let wres = b.while_loop(
        vec![zero, res[1]],
        |b, vars| b.cmp(CmpPred::Lt, vars[0], n),
        |b, vars| {
            let inner = b.for_loop(zero, vars[0], one, vec![vars[1]], |b, _iv, it| Ok(vec![b.binary(BinaryOp::Mul, it[0], tiny)?]))?;
            let i2 = b.binary(BinaryOp::Add, vars[0], one)?;
            Ok(vec![i2, inner[0]])
        },
    )?;
    let _ = b.if_else(flag, |_| Ok(vec![]), |_| Ok(vec![]))?;
    // Stores, masked and unmasked, including a broadcast pointer.
    at(&mut b, 40, 3);
    let optrs = b.add_ptr(out, idx)?;
    let bcv = b.binary(BinaryOp::Add, bc, wres[1])?;
    let cut = b.dot(tile, tt, None)?;
    let sum = b.binary(BinaryOp::Add, bcv, cut)?;
    let _ = sum;
    b.store(optrs, wf, Some(mask))?;
    let pp = b.add_ptr(out, pid)?;
    b.store(pp, res[1], None)?;
    b.finish();
    Ok(f)
}

/// A small softmax-like kernel used as the golden snapshot.
pub fn softmax_kernel() -> Function {
    build_softmax().expect("softmax builds")
}

fn build_softmax() -> IrResult<Function> {
    use ScalarType::*;
    let mut f = Function::new("softmax_1a2b3c4d", 4);
    let x = f.add_param("x", ParamKind::Ptr { elem: Bf16, mutable: false });
    let out = f.add_param("out", ParamKind::Ptr { elem: Bf16, mutable: true });
    let n = f.add_param("n", ParamKind::Scalar(I32));
    let mut b = Builder::new(&mut f);
    at(&mut b, 12, 5);
    let row = b.program_id(0)?;
    b.set_name(row, "row");
    at(&mut b, 13, 16);
    let offs = b.arange(128)?;
    b.set_name(offs, "offs");
    at(&mut b, 14, 15);
    let base = b.binary(BinaryOp::Mul, row, n)?;
    let xr = b.add_ptr(x, base)?;
    let ptrs = b.add_ptr(xr, offs)?;
    let mask = b.cmp(CmpPred::Lt, offs, n)?;
    b.set_name(mask, "mask");
    let ninf = b.constant(Scalar::Float(f64::NEG_INFINITY, Bf16));
    at(&mut b, 15, 13);
    let xv = b.load(ptrs, Some(mask), Some(ninf))?;
    let xf = b.cast(xv, F32)?;
    b.set_name(xf, "x");
    at(&mut b, 16, 13);
    let m = b.reduce(ReduceKind::Max, xf, 0)?;
    b.set_name(m, "m");
    let d = b.binary(BinaryOp::Sub, xf, m)?;
    let e = b.unary(UnaryOp::Exp, d)?;
    b.set_name(e, "e");
    let s = b.reduce(ReduceKind::Sum, e, 0)?;
    let y = b.binary(BinaryOp::Div, e, s)?;
    let yb = b.cast(y, Bf16)?;
    at(&mut b, 18, 5);
    let or = b.add_ptr(out, base)?;
    let optr = b.add_ptr(or, offs)?;
    b.store(optr, yb, Some(mask))?;
    b.finish();
    Ok(f)
}
