//! CPU executor: GPU-faithful numerics (bf16/f16 rounding, dot accumulation, reductions,
//! select, casts, integer division).

mod interp_support;

use attn_dsl::interp::{self, Cpu, ExecError};
use attn_dsl::ir::{BinaryOp, CmpPred, ReduceKind, ScalarType, ScalarType::*, UnaryOp};
use attn_dsl::kernel::Backend;
use half::{bf16, f16};
use interp_support::{at, kernel, offsets_2d, ptr_in, ptr_out, Rng};

/// Independent f32 → bf16 round-to-nearest-even on the bit pattern (finite inputs).
fn bf16_rne(x: f32) -> f32 {
    let b = x.to_bits();
    let r = b.wrapping_add(0x7fff + ((b >> 16) & 1));
    f32::from_bits(r & 0xffff_0000)
}

/// `out[i] = cast::<to>(x[i])` over 8 lanes.
fn cast_kernel(from: ScalarType, to: ScalarType) -> attn_dsl::ir::Function {
    kernel(
        "cast",
        &[("x", ptr_in(from)), ("out", ptr_out(to))],
        |b, p| {
            let ar = b.arange(8)?;
            let px = b.add_ptr(p[0], ar)?;
            let x = b.load(px, None, None)?;
            let y = b.cast(x, to)?;
            let po = b.add_ptr(p[1], ar)?;
            b.store(po, y, None)
        },
    )
}

#[test]
fn cast_to_bf16_rounds_to_nearest_even() {
    let u = 2f32.powi(-8); // half an ulp of bf16 at 1.0
    let x = [
        1.0 + u,
        1.0 + 3.0 * u,
        1.0 + u + u / 16.0,
        -(1.0 + u),
        std::f32::consts::PI,
        1.0e-3,
        65504.5,
        1.0 - u / 2.0,
    ];
    let mut out = [bf16::from_f32(-999.0); 8];
    interp::run(
        &cast_kernel(F32, Bf16),
        [1, 1, 1],
        vec![Cpu::input(&x[..]), Cpu::output(&mut out[..])],
    )
    .unwrap();
    // Ties go to the even mantissa: 1+2^-8 → 1, 1+3·2^-8 → 1+2^-6; just above a tie rounds up.
    assert_eq!(out[0].to_f32(), 1.0);
    assert_eq!(out[1].to_f32(), 1.0 + 4.0 * u);
    assert_eq!(out[2].to_f32(), 1.0 + 2.0 * u);
    assert_eq!(out[3].to_f32(), -1.0);
    for i in 0..8 {
        assert_eq!(out[i].to_f32(), bf16_rne(x[i]), "lane {i}: {}", x[i]);
    }
}

#[test]
fn cast_to_f16_rounds_to_nearest_even() {
    let u = 2f32.powi(-11); // half an ulp of f16 at 1.0
    let x = [
        1.0 + u,
        1.0 + 3.0 * u,
        1.0 + u + u / 8.0,
        2049.0,
        2051.0,
        -0.1,
        0.5,
        70000.0,
    ];
    let mut out = [f16::from_f32(-999.0); 8];
    interp::run(
        &cast_kernel(F32, F16),
        [1, 1, 1],
        vec![Cpu::input(&x[..]), Cpu::output(&mut out[..])],
    )
    .unwrap();
    let got: Vec<f32> = out.iter().map(|h| h.to_f32()).collect();
    assert_eq!(
        &got[..5],
        &[1.0, 1.0 + 4.0 * u, 1.0 + 2.0 * u, 2048.0, 2052.0]
    );
    assert_eq!(got[7], f32::INFINITY, "overflow rounds to infinity");
}

#[test]
fn bf16_arithmetic_rounds_each_result() {
    // a + b and a * b on bf16 inputs, stored as bf16: each result is rounded to bf16.
    let params = [
        ("a", ptr_in(Bf16)),
        ("b", ptr_in(Bf16)),
        ("sum", ptr_out(Bf16)),
        ("prod", ptr_out(Bf16)),
    ];
    let f = kernel("bf16_arith", &params, |b, p| {
        let ar = b.arange(4)?;
        let pa = b.add_ptr(p[0], ar)?;
        let pb = b.add_ptr(p[1], ar)?;
        let (x, y) = (b.load(pa, None, None)?, b.load(pb, None, None)?);
        let s = b.binary(BinaryOp::Add, x, y)?;
        let m = b.binary(BinaryOp::Mul, x, y)?;
        let ps = b.add_ptr(p[2], ar)?;
        b.store(ps, s, None)?;
        let pm = b.add_ptr(p[3], ar)?;
        b.store(pm, m, None)
    });
    let u = 2f32.powi(-8);
    let a: Vec<bf16> = [1.0, 1.0, 1.0 + 2.0 * u, 3.0]
        .iter()
        .map(|&v| bf16::from_f32(v))
        .collect();
    let bv: Vec<bf16> = [u, u + u / 16.0, 1.0 + 2.0 * u, 5.0]
        .iter()
        .map(|&v| bf16::from_f32(v))
        .collect();
    let mut sum = [bf16::ZERO; 4];
    let mut prod = [bf16::ZERO; 4];
    let args = vec![
        Cpu::input(&a[..]),
        Cpu::input(&bv[..]),
        Cpu::output(&mut sum[..]),
        Cpu::output(&mut prod[..]),
    ];
    interp::run(&f, [1, 1, 1], args).unwrap();
    assert_eq!(sum[0].to_f32(), 1.0, "1 + 2^-8 is a tie: rounds to even");
    assert_eq!(
        sum[1].to_f32(),
        1.0 + 2.0 * u,
        "just above the tie rounds up"
    );
    assert_eq!(
        prod[2].to_f32(),
        1.0 + 4.0 * u,
        "(1+2^-7)^2 = 1+2^-6+2^-14 rounds to 1+2^-6"
    );
    assert_eq!((sum[3].to_f32(), prod[3].to_f32()), (8.0, 15.0));
}

#[test]
fn dot_on_random_bf16_matches_f64_reference() {
    const M: usize = 16;
    const K: usize = 32;
    const N: usize = 64;
    let params = [
        ("a", ptr_in(Bf16)),
        ("b", ptr_in(Bf16)),
        ("c", ptr_in(F32)),
        ("out", ptr_out(F32)),
    ];
    let f = kernel("dot", &params, |b, p| {
        let oa = offsets_2d(b, M, K, K as i64)?;
        let ob = offsets_2d(b, K, N, N as i64)?;
        let oc = offsets_2d(b, M, N, N as i64)?;
        let pa = b.add_ptr(p[0], oa)?;
        let pb = b.add_ptr(p[1], ob)?;
        let pc = b.add_ptr(p[2], oc)?;
        let (x, y, c) = (
            b.load(pa, None, None)?,
            b.load(pb, None, None)?,
            b.load(pc, None, None)?,
        );
        let d = b.dot(x, y, Some(c))?;
        let po = b.add_ptr(p[3], oc)?;
        b.store(po, d, None)
    });
    let mut rng = Rng::new(7);
    let a: Vec<bf16> = rng
        .vec(M * K, -2.0, 2.0)
        .into_iter()
        .map(bf16::from_f64)
        .collect();
    let bm: Vec<bf16> = rng
        .vec(K * N, -2.0, 2.0)
        .into_iter()
        .map(bf16::from_f64)
        .collect();
    let c: Vec<f32> = rng
        .vec(M * N, -1.0, 1.0)
        .into_iter()
        .map(|v| v as f32)
        .collect();
    let mut out = vec![f32::NAN; M * N];
    let args = vec![
        Cpu::input(&a[..]),
        Cpu::input(&bm[..]),
        Cpu::input(&c[..]),
        Cpu::output(&mut out[..]),
    ];
    interp::run(&f, [1, 1, 1], args).unwrap();
    for i in 0..M {
        for j in 0..N {
            let terms = (0..K).map(|k| a[i * K + k].to_f64() * bm[k * N + j].to_f64());
            let exact = c[i * N + j] as f64 + terms.clone().sum::<f64>();
            let magnitude = (c[i * N + j] as f64).abs() + terms.map(f64::abs).sum::<f64>();
            // Products of bf16 values are exact; K sequential f32 roundings of the running
            // sum each err by at most 2^-24 of a partial sum bounded by `magnitude`.
            let tol = K as f64 * 2f64.powi(-24) * magnitude;
            let got = out[i * N + j] as f64;
            assert!(
                (got - exact).abs() <= tol,
                "({i},{j}): got {got}, want {exact} ± {tol}"
            );
            // The documented order: a chain of f32 FMAs from acc, k ascending.
            let chain = (0..K).fold(c[i * N + j], |s, k| {
                a[i * K + k].to_f32().mul_add(bm[k * N + j].to_f32(), s)
            });
            assert_eq!(out[i * N + j], chain, "({i},{j}) accumulation order");
        }
    }
}

#[test]
fn row_reductions_max_and_sum() {
    const R: usize = 8;
    const C: usize = 16;
    let params = [
        ("x", ptr_in(F32)),
        ("row_max", ptr_out(F32)),
        ("row_sum", ptr_out(F32)),
        ("col_sum", ptr_out(F32)),
    ];
    let f = kernel("reduce", &params, |b, p| {
        let o = offsets_2d(b, R, C, C as i64)?;
        let px = b.add_ptr(p[0], o)?;
        let x = b.load(px, None, None)?;
        let mx = b.reduce(ReduceKind::Max, x, 1)?;
        let sm = b.reduce(ReduceKind::Sum, x, 1)?;
        let cs = b.reduce(ReduceKind::Sum, x, 0)?;
        let rows = b.arange(R)?;
        let cols = b.arange(C)?;
        let p1 = b.add_ptr(p[1], rows)?;
        b.store(p1, mx, None)?;
        let p2 = b.add_ptr(p[2], rows)?;
        b.store(p2, sm, None)?;
        let p3 = b.add_ptr(p[3], cols)?;
        b.store(p3, cs, None)
    });
    let mut rng = Rng::new(11);
    let x: Vec<f32> = rng
        .vec(R * C, -100.0, 100.0)
        .into_iter()
        .map(|v| v as f32)
        .collect();
    let (mut mx, mut sm, mut cs) = (vec![f32::NAN; R], vec![f32::NAN; R], vec![f32::NAN; C]);
    let args = vec![
        Cpu::input(&x[..]),
        Cpu::output(&mut mx[..]),
        Cpu::output(&mut sm[..]),
        Cpu::output(&mut cs[..]),
    ];
    interp::run(&f, [1, 1, 1], args).unwrap();
    let close = |got: f32, want: f64, mag: f64, n: usize| {
        (got as f64 - want).abs() <= n as f64 * 2f64.powi(-24) * mag
    };
    for r in 0..R {
        let row = &x[r * C..(r + 1) * C];
        assert_eq!(
            mx[r],
            row.iter().copied().fold(f32::MIN, f32::max),
            "row {r} max"
        );
        let want: f64 = row.iter().map(|&v| v as f64).sum();
        let mag: f64 = row.iter().map(|&v| (v as f64).abs()).sum();
        assert!(
            close(sm[r], want, mag, C),
            "row {r} sum {} vs {want}",
            sm[r]
        );
    }
    for c in 0..C {
        let col: Vec<f64> = (0..R).map(|r| x[r * C + c] as f64).collect();
        let mag: f64 = col.iter().map(|v| v.abs()).sum();
        assert!(
            close(cs[c], col.iter().sum(), mag, R),
            "col {c} sum {}",
            cs[c]
        );
    }
}

#[test]
fn select_picks_per_lane_and_broadcasts_scalars() {
    let params = [
        ("a", ptr_in(F32)),
        ("b", ptr_in(F32)),
        ("max", ptr_out(F32)),
        ("relu", ptr_out(F32)),
    ];
    let f = kernel("select", &params, |b, p| {
        let ar = b.arange(64)?;
        let pa = b.add_ptr(p[0], ar)?;
        let pb = b.add_ptr(p[1], ar)?;
        let (x, y) = (b.load(pa, None, None)?, b.load(pb, None, None)?);
        let gt = b.cmp(CmpPred::Gt, x, y)?;
        let m = b.select(gt, x, y)?;
        let zero = b.const_f32(0.0);
        let pos = b.cmp(CmpPred::Gt, x, zero)?;
        let r = b.select(pos, x, zero)?;
        let p2 = b.add_ptr(p[2], ar)?;
        b.store(p2, m, None)?;
        let p3 = b.add_ptr(p[3], ar)?;
        b.store(p3, r, None)
    });
    let mut rng = Rng::new(3);
    let a: Vec<f32> = rng
        .vec(64, -1.0, 1.0)
        .into_iter()
        .map(|v| v as f32)
        .collect();
    let bv: Vec<f32> = rng
        .vec(64, -1.0, 1.0)
        .into_iter()
        .map(|v| v as f32)
        .collect();
    let (mut mx, mut relu) = (vec![f32::NAN; 64], vec![f32::NAN; 64]);
    let args = vec![
        Cpu::input(&a[..]),
        Cpu::input(&bv[..]),
        Cpu::output(&mut mx[..]),
        Cpu::output(&mut relu[..]),
    ];
    interp::run(&f, [1, 1, 1], args).unwrap();
    for i in 0..64 {
        assert_eq!(mx[i], if a[i] > bv[i] { a[i] } else { bv[i] }, "lane {i}");
        assert_eq!(relu[i], if a[i] > 0.0 { a[i] } else { 0.0 }, "lane {i}");
    }
}

/// `div[i] = a[i] / b[i]`, `rem[i] = a[i] % b[i]` on i32; the division is on line 30.
fn div_rem_kernel() -> attn_dsl::ir::Function {
    let params = [
        ("a", ptr_in(I32)),
        ("b", ptr_in(I32)),
        ("div", ptr_out(I32)),
        ("rem", ptr_out(I32)),
    ];
    kernel("divrem", &params, |b, p| {
        let ar = b.arange(8)?;
        let pa = b.add_ptr(p[0], ar)?;
        let pb = b.add_ptr(p[1], ar)?;
        let (x, y) = (b.load(pa, None, None)?, b.load(pb, None, None)?);
        at(b, 30);
        let d = b.binary(BinaryOp::Div, x, y)?;
        at(b, 31);
        let r = b.binary(BinaryOp::Rem, x, y)?;
        let p2 = b.add_ptr(p[2], ar)?;
        b.store(p2, d, None)?;
        let p3 = b.add_ptr(p[3], ar)?;
        b.store(p3, r, None)
    })
}

#[test]
fn integer_division_truncates_toward_zero_and_remainder_follows_dividend() {
    let a = [-7, 7, -7, 7, i32::MIN, -1, 0, 13];
    let bv = [2, -2, -2, 2, -1, 3, -5, 4];
    let (mut d, mut r) = (vec![99; 8], vec![99; 8]);
    let args = vec![
        Cpu::input(&a[..]),
        Cpu::input(&bv[..]),
        Cpu::output(&mut d[..]),
        Cpu::output(&mut r[..]),
    ];
    interp::run(&div_rem_kernel(), [1, 1, 1], args).unwrap();
    assert_eq!(
        d,
        vec![-3, -3, 3, 3, i32::MIN, 0, 0, 3],
        "i32::MIN / -1 wraps"
    );
    assert_eq!(r, vec![-1, 1, -1, 1, 0, -1, 0, 1]);
}

#[test]
fn integer_division_by_zero_names_the_line() {
    let a = [1; 8];
    let bv = [1, 1, 1, 0, 1, 1, 1, 1];
    let (mut d, mut r) = (vec![0; 8], vec![0; 8]);
    let args = vec![
        Cpu::input(&a[..]),
        Cpu::input(&bv[..]),
        Cpu::output(&mut d[..]),
        Cpu::output(&mut r[..]),
    ];
    let err = interp::run(&div_rem_kernel(), [1, 1, 1], args).unwrap_err();
    assert!(
        matches!(err, ExecError::DivisionByZero { line: 30, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("line 30"), "{err}");
}

#[test]
fn casts_truncate_floats_and_round_integers() {
    let x = [2.7f32, -2.7, -0.5, 1e10, f32::NAN, -1e10, 0.0, 65.9];
    let mut out = vec![7; 8];
    interp::run(
        &cast_kernel(F32, I32),
        [1, 1, 1],
        vec![Cpu::input(&x[..]), Cpu::output(&mut out[..])],
    )
    .unwrap();
    assert_eq!(out, vec![2, -2, 0, i32::MAX, 0, i32::MIN, 0, 65]);

    let xi = [257, 259, -257, 1, 0, 511, 16_777_217, -3];
    let mut outb = [bf16::ZERO; 8];
    interp::run(
        &cast_kernel(I32, Bf16),
        [1, 1, 1],
        vec![Cpu::input(&xi[..]), Cpu::output(&mut outb[..])],
    )
    .unwrap();
    let got: Vec<f32> = outb.iter().map(|v| v.to_f32()).collect();
    assert_eq!(
        got,
        vec![256.0, 260.0, -256.0, 1.0, 0.0, 512.0, 16_777_216.0, -3.0]
    );

    let xb = [true, false, true, true, false, false, true, false];
    let mut outf = vec![f32::NAN; 8];
    interp::run(
        &cast_kernel(Bool, F32),
        [1, 1, 1],
        vec![Cpu::input(&xb[..]), Cpu::output(&mut outf[..])],
    )
    .unwrap();
    assert_eq!(outf, xb.iter().map(|&b| b as u8 as f32).collect::<Vec<_>>());
}

#[test]
fn math_functions_round_to_the_value_dtype() {
    let params = [
        ("x", ptr_in(Bf16)),
        ("exp", ptr_out(Bf16)),
        ("wrap", ptr_out(I32)),
    ];
    let f = kernel("math", &params, |b, p| {
        let ar = b.arange(8)?;
        let px = b.add_ptr(p[0], ar)?;
        let x = b.load(px, None, None)?;
        let e = b.unary(UnaryOp::Exp, x)?;
        let pe = b.add_ptr(p[1], ar)?;
        b.store(pe, e, None)?;
        // i32 arithmetic wraps: (i32::MAX - 3 + lane) + 1.
        let big = b.const_i32(i32::MAX as i64 - 3);
        let one = b.const_i32(1);
        let v = b.binary(BinaryOp::Add, ar, big)?;
        let v = b.binary(BinaryOp::Add, v, one)?;
        let pw = b.add_ptr(p[2], ar)?;
        b.store(pw, v, None)
    });
    let mut rng = Rng::new(5);
    let x: Vec<bf16> = rng
        .vec(8, -4.0, 4.0)
        .into_iter()
        .map(bf16::from_f64)
        .collect();
    let mut e = [bf16::ZERO; 8];
    let mut w = [0; 8];
    interp::run(
        &f,
        [1, 1, 1],
        vec![
            Cpu::input(&x[..]),
            Cpu::output(&mut e[..]),
            Cpu::output(&mut w[..]),
        ],
    )
    .unwrap();
    for i in 0..8 {
        assert_eq!(
            e[i].to_f32(),
            bf16_rne(x[i].to_f64().exp() as f32),
            "lane {i}"
        );
        assert_eq!(w[i], (i32::MAX - 2).wrapping_add(i as i32));
    }
}

#[test]
fn shifts_are_arithmetic_and_range_checked() {
    let params = [
        ("a", ptr_in(I32)),
        ("s", ptr_in(I32)),
        ("shl", ptr_out(I32)),
        ("shr", ptr_out(I32)),
    ];
    let f = kernel("shift", &params, |b, p| {
        let ar = b.arange(4)?;
        let pa = b.add_ptr(p[0], ar)?;
        let ps = b.add_ptr(p[1], ar)?;
        let (x, s) = (b.load(pa, None, None)?, b.load(ps, None, None)?);
        at(b, 60);
        let l = b.binary(BinaryOp::Shl, x, s)?;
        let r = b.binary(BinaryOp::Shr, x, s)?;
        let p2 = b.add_ptr(p[2], ar)?;
        b.store(p2, l, None)?;
        let p3 = b.add_ptr(p[3], ar)?;
        b.store(p3, r, None)
    });
    let a = [-8, 1, 0x4000_0000, 7];
    let (mut l, mut r) = ([0; 4], [0; 4]);
    let run = |s: &[i32], l: &mut [i32], r: &mut [i32]| {
        let args = vec![
            Cpu::input(&a[..]),
            Cpu::input(s),
            Cpu::output(l),
            Cpu::output(r),
        ];
        interp::run(&f, [1, 1, 1], args)
    };
    run(&[1, 31, 1, 0], &mut l, &mut r).unwrap();
    assert_eq!(l, [-16, i32::MIN, i32::MIN, 7], "shl wraps to i32");
    assert_eq!(
        r,
        [-4, 0, 0x2000_0000, 7],
        ">> on signed values is arithmetic"
    );
    let err = run(&[1, 32, 1, 0], &mut l, &mut r).unwrap_err();
    assert!(
        matches!(
            err,
            ExecError::ShiftOutOfRange {
                line: 60,
                amount: 32,
                bits: 32,
                ..
            }
        ),
        "{err:?}"
    );
}
