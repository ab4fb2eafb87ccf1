//! Hand-built IR programs shared by the IR and pass tests (`#[path]`-included).
#![allow(dead_code)]

use attn_dsl::ir::{
    BinaryOp, Builder, CmpPred, Function, IrResult, Loc, ParamKind, ReduceKind, Scalar, ScalarType,
    UnaryOp, ValueId,
};

pub fn at(b: &mut Builder, line: u32, col: u32) {
    b.loc = Loc { line, col };
}

/// Adds a pointer parameter to `elem` (read-only unless `mutable`).
fn ptr_param(f: &mut Function, name: &str, elem: ScalarType, mutable: bool) -> ValueId {
    f.add_param(name, ParamKind::Ptr { elem, mutable })
}

/// The binary ops defined on floats.
const FLOAT_BINARY_OPS: [BinaryOp; 6] = [
    BinaryOp::Add,
    BinaryOp::Sub,
    BinaryOp::Mul,
    BinaryOp::Div,
    BinaryOp::Min,
    BinaryOp::Max,
];

/// One program using every op kind, every scalar kind, nested `for`/`if`/`while` with
/// carried values, duplicate and odd value names, and source locations.
pub fn kitchen_sink() -> Function {
    build_kitchen_sink().expect("kitchen sink builds")
}

fn build_kitchen_sink() -> IrResult<Function> {
    use ScalarType::*;
    let mut f = Function::new("sink_1a2b3c4d", 4);
    let x = ptr_param(&mut f, "x", Bf16, false);
    let out = ptr_param(&mut f, "out", F32, true);
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
    for u in [
        UnaryOp::Exp,
        UnaryOp::Exp2,
        UnaryOp::Log,
        UnaryOp::Log2,
        UnaryOp::Sqrt,
        UnaryOp::Tanh,
        UnaryOp::Abs,
        UnaryOp::Neg,
    ] {
        v = b.unary(u, v)?;
    }
    let nb = b.unary(UnaryOp::Not, flag)?;
    let ni = b.unary(UnaryOp::Not, idx)?;
    // Every binary op.
    for op in FLOAT_BINARY_OPS {
        v = b.binary(op, v, tiny)?;
    }
    let mut w = ni;
    for op in [
        BinaryOp::Rem,
        BinaryOp::And,
        BinaryOp::Or,
        BinaryOp::Xor,
        BinaryOp::Shl,
        BinaryOp::Shr,
    ] {
        w = b.binary(op, w, stride)?;
    }
    let bl = b.binary(BinaryOp::And, nb, t)?;
    let bigger = b.binary(BinaryOp::Add, big, i64c)?;
    let _ = bigger;
    // Every comparison, select, cast, reductions, explicit splat/broadcast.
    let mut conds: Vec<ValueId> = vec![];
    for p in CmpPred::ALL {
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
            let inner = b.for_loop(zero, vars[0], one, vec![vars[1]], |b, _iv, it| {
                Ok(vec![b.binary(BinaryOp::Mul, it[0], tiny)?])
            })?;
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
    let x = ptr_param(&mut f, "x", Bf16, false);
    let out = ptr_param(&mut f, "out", Bf16, true);
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

/// One step of a random straight-line program: an opcode and three choices.
pub type Step = (u8, u16, u16, i64);

/// Builds a random scalar straight-line kernel `(out_i: mut ptr<i32>, out_f: mut ptr<f32>,
/// a: i32, b: i32, x: f32)` from `steps`, storing every i32 value to `out_i[k]` and every f32
/// value to `out_f[k]` at the end so that every computed value is observable.
pub fn random_program(steps: &[Step], tile: bool) -> Function {
    use ScalarType::*;
    let mut f = Function::new("rand", 4);
    let out_i = ptr_param(&mut f, "out_i", I32, true);
    let out_f = ptr_param(&mut f, "out_f", F32, true);
    let a = f.add_param("a", ParamKind::Scalar(I32));
    let bb = f.add_param("b", ParamKind::Scalar(I32));
    let x = f.add_param("x", ParamKind::Scalar(F32));
    let mut b = Builder::new(&mut f);
    let (mut ints, mut floats, mut bools) = (vec![a, bb], vec![x], vec![]);
    if tile {
        let r = b.arange(8).expect("arange");
        ints.push(r);
    }
    let pick = |v: &Vec<ValueId>, k: u16| v[k as usize % v.len()];
    for (i, &(code, p, q, lit)) in steps.iter().enumerate() {
        b.loc = Loc {
            line: i as u32 + 1,
            col: (code as u32 % 7) + 1,
        };
        let int_ops = BinaryOp::ALL;
        let float_ops = FLOAT_BINARY_OPS;
        let preds = CmpPred::ALL;
        let r: IrResult<()> = (|| {
            match code % 10 {
                0 => ints.push(b.const_i32(lit)),
                1 => floats.push(b.const_f32(lit as f64 / 4.0)),
                2 => ints.push(b.binary(
                    int_ops[lit.unsigned_abs() as usize % 12],
                    pick(&ints, p),
                    pick(&ints, q),
                )?),
                3 => floats.push(b.binary(
                    float_ops[lit.unsigned_abs() as usize % 6],
                    pick(&floats, p),
                    pick(&floats, q),
                )?),
                4 => bools.push(b.cmp(
                    preds[lit.unsigned_abs() as usize % 6],
                    pick(&ints, p),
                    pick(&ints, q),
                )?),
                5 if !bools.is_empty() => {
                    let c = pick(&bools, p);
                    ints.push(b.select(c, pick(&ints, q), pick(&ints, lit as u16))?)
                }
                6 => floats.push(b.cast(pick(&ints, p), F32)?),
                7 => ints.push(b.cast(pick(&floats, p), I32)?),
                8 => {
                    let u =
                        [UnaryOp::Neg, UnaryOp::Abs, UnaryOp::Not][lit.unsigned_abs() as usize % 3];
                    ints.push(b.unary(u, pick(&ints, p))?)
                }
                9 => bools.push(b.cmp(
                    preds[lit.unsigned_abs() as usize % 6],
                    pick(&floats, p),
                    pick(&floats, q),
                )?),
                _ => {}
            }
            Ok(())
        })();
        r.expect("generator only builds valid ops");
        if p % 5 == 0 {
            let last = *ints.last().expect("ints");
            b.set_name(last, ["acc", "m", "l"][q as usize % 3]);
        }
    }
    for (k, &v) in ints.iter().enumerate() {
        let off = b.const_i32(k as i64 * 8);
        let p = b.add_ptr(out_i, off).expect("add_ptr");
        b.store(p, v, None).expect("store");
    }
    for (k, &v) in floats.iter().enumerate() {
        let off = b.const_i32(k as i64);
        let p = b.add_ptr(out_f, off).expect("add_ptr");
        b.store(p, v, None).expect("store");
    }
    b.finish();
    f
}
