//! CPU executor: structured control flow, grid iteration, and a flash-attention-shaped
//! kernel end to end.

mod interp_support;

use attn_dsl::interp::{self, Cpu, ExecError, ExecOptions};
use attn_dsl::ir::{
    BinaryOp, CmpPred, Function, OpKind, ParamKind, ReduceKind, ScalarType::*, UnaryOp,
};
use attn_dsl::kernel::{Backend, ScalarArg};
use half::bf16;
use interp_support::{at, kernel, offsets_2d, ptr_in, ptr_out, Rng};

fn i32_arg(v: i32) -> attn_dsl::interp::CpuArg<'static> {
    Cpu::scalar(ScalarArg::I32(v))
}

/// out[0] = Σ_{i in lo..hi step} (i even ? i : -i), via `for` with an `if` inside.
fn for_if_kernel() -> Function {
    let params = [
        ("out", ptr_out(I32)),
        ("lo", ParamKind::Scalar(I32)),
        ("hi", ParamKind::Scalar(I32)),
        ("step", ParamKind::Scalar(I32)),
    ];
    kernel("for_if", &params, |b, p| {
        let zero = b.const_i32(0);
        at(b, 40);
        let r = b.for_loop(p[1], p[2], p[3], vec![zero], |b, iv, it| {
            let two = b.const_i32(2);
            let m = b.binary(BinaryOp::Rem, iv, two)?;
            let z = b.const_i32(0);
            let even = b.cmp(CmpPred::Eq, m, z)?;
            let term = b.if_else(
                even,
                |_| Ok(vec![iv]),
                |b| Ok(vec![b.unary(UnaryOp::Neg, iv)?]),
            )?;
            Ok(vec![b.binary(BinaryOp::Add, it[0], term[0])?])
        })?;
        b.store(p[0], r[0], None)
    })
}

#[test]
fn for_loop_with_if_carries_values() {
    let f = for_if_kernel();
    for (lo, hi, step) in [(2, 50, 3), (-5, 7, 1), (10, 10, 1), (10, 3, 2)] {
        let mut out = [i32::MIN; 1];
        interp::run(
            &f,
            [1, 1, 1],
            vec![
                Cpu::output(&mut out[..]),
                i32_arg(lo),
                i32_arg(hi),
                i32_arg(step),
            ],
        )
        .unwrap();
        let want: i32 = (lo..hi)
            .step_by(step as usize)
            .map(|i| if i % 2 == 0 { i } else { -i })
            .sum();
        assert_eq!(out[0], want, "lo={lo} hi={hi} step={step}");
    }
}

#[test]
fn for_loop_with_non_positive_step_is_an_error() {
    let f = for_if_kernel();
    for step in [0, -1] {
        let mut out = [0; 1];
        let err = interp::run(
            &f,
            [1, 1, 1],
            vec![
                Cpu::output(&mut out[..]),
                i32_arg(0),
                i32_arg(10),
                i32_arg(step),
            ],
        )
        .unwrap_err();
        assert!(
            matches!(err, ExecError::NonPositiveStep { line: 40, step: s, .. } if s == step as i64),
            "{err:?}"
        );
    }
}

/// Collatz: out[0] = steps to reach 1 from x, out[1] = the final value (1).
fn collatz_kernel(forever: bool) -> Function {
    let params = [("out", ptr_out(I32)), ("x", ParamKind::Scalar(I32))];
    kernel("collatz", &params, |b, p| {
        let zero = b.const_i32(0);
        at(b, 50);
        let r = b.while_loop(
            vec![p[1], zero],
            |b, v| {
                if forever {
                    return Ok(b.const_bool(true));
                }
                let one = b.const_i32(1);
                b.cmp(CmpPred::Ne, v[0], one)
            },
            |b, v| {
                let two = b.const_i32(2);
                let m = b.binary(BinaryOp::Rem, v[0], two)?;
                let z = b.const_i32(0);
                let even = b.cmp(CmpPred::Eq, m, z)?;
                let half = b.binary(BinaryOp::Div, v[0], two)?;
                let three = b.const_i32(3);
                let one = b.const_i32(1);
                let t = b.binary(BinaryOp::Mul, v[0], three)?;
                let t = b.binary(BinaryOp::Add, t, one)?;
                let next = b.select(even, half, t)?;
                Ok(vec![next, b.binary(BinaryOp::Add, v[1], one)?])
            },
        )?;
        let one = b.const_i32(1);
        let p1 = b.add_ptr(p[0], one)?;
        b.store(p[0], r[1], None)?;
        b.store(p1, r[0], None)
    })
}

#[test]
fn while_loop_runs_until_condition_is_false() {
    let f = collatz_kernel(false);
    for (x, steps) in [(27, 111), (1, 0), (6, 8)] {
        let mut out = vec![-1; 2];
        interp::run(&f, [1, 1, 1], vec![Cpu::output(&mut out[..]), i32_arg(x)]).unwrap();
        assert_eq!(out, vec![steps, 1], "x = {x}");
    }
}

#[test]
fn runaway_while_loop_hits_the_iteration_limit() {
    let f = collatz_kernel(true);
    let mut out = vec![-1; 2];
    let opts = ExecOptions {
        max_while_iterations: 1000,
    };
    let err = interp::run_with(
        &f,
        [1, 1, 1],
        vec![Cpu::output(&mut out[..]), i32_arg(27)],
        &opts,
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            ExecError::WhileLimit {
                line: 50,
                limit: 1000,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(out, vec![-1, -1]);
}

#[test]
fn early_return_inside_if_ends_only_that_program() {
    // Programs with an odd id return before their store.
    let params = [("out", ptr_out(I32))];
    let f = kernel("early", &params, |b, p| {
        let pid = b.program_id(0)?;
        let two = b.const_i32(2);
        let m = b.binary(BinaryOp::Rem, pid, two)?;
        let one = b.const_i32(1);
        let odd = b.cmp(CmpPred::Eq, m, one)?;
        b.if_else(
            odd,
            |b| {
                b.emit(OpKind::Return, vec![], vec![], vec![]);
                Ok(vec![])
            },
            |_| Ok(vec![]),
        )?;
        let po = b.add_ptr(p[0], pid)?;
        b.store(po, pid, None)
    });
    let mut out = vec![-1; 6];
    interp::run(&f, [6, 1, 1], vec![Cpu::output(&mut out[..])]).unwrap();
    assert_eq!(out, vec![0, -1, 2, -1, 4, -1]);
}

#[test]
fn grid_iterates_three_axes_x_fastest() {
    // Each program records its ids, the grid size, and the order it ran in (a counter it
    // reads and bumps), at its linear index pid0 + g0 * (pid1 + g1 * pid2).
    let params = [
        ("ids", ptr_out(I32)),
        ("order", ptr_out(I32)),
        ("counter", ptr_out(I32)),
    ];
    let f = kernel("grid", &params, |b, p| {
        let pid: Vec<_> = (0..3).map(|a| b.program_id(a)).collect::<Result<_, _>>()?;
        let np: Vec<_> = (0..3)
            .map(|a| b.num_programs(a))
            .collect::<Result<_, _>>()?;
        let lin = b.binary(BinaryOp::Mul, np[1], pid[2])?;
        let lin = b.binary(BinaryOp::Add, pid[1], lin)?;
        let lin = b.binary(BinaryOp::Mul, np[0], lin)?;
        let lin = b.binary(BinaryOp::Add, pid[0], lin)?;
        let six = b.const_i32(6);
        let base = b.binary(BinaryOp::Mul, lin, six)?;
        for (slot, v) in pid.iter().chain(&np).enumerate() {
            let k = b.const_i32(slot as i64);
            let o = b.binary(BinaryOp::Add, base, k)?;
            let po = b.add_ptr(p[0], o)?;
            b.store(po, *v, None)?;
        }
        let c = b.load(p[2], None, None)?;
        let po = b.add_ptr(p[1], lin)?;
        b.store(po, c, None)?;
        let one = b.const_i32(1);
        let c1 = b.binary(BinaryOp::Add, c, one)?;
        b.store(p[2], c1, None)
    });
    let (g0, g1, g2) = (3usize, 2usize, 4usize);
    let n = g0 * g1 * g2;
    let mut ids = vec![-1; n * 6];
    let mut order = vec![-1; n];
    let mut counter = [0; 1];
    let args = vec![
        Cpu::output(&mut ids[..]),
        Cpu::output(&mut order[..]),
        Cpu::output(&mut counter[..]),
    ];
    let stats = interp::run(&f, [g0 as u32, g1 as u32, g2 as u32], args).unwrap();
    assert_eq!(stats.programs, n as u64);
    assert_eq!(counter[0], n as i32);
    for z in 0..g2 {
        for y in 0..g1 {
            for x in 0..g0 {
                let lin = x + g0 * (y + g1 * z);
                let want = [x, y, z, g0, g1, g2].map(|v| v as i32);
                assert_eq!(&ids[lin * 6..lin * 6 + 6], &want, "program ({x},{y},{z})");
                assert_eq!(
                    order[lin], lin as i32,
                    "x must vary fastest, then y, then z"
                );
            }
        }
    }
}

/// One query block of flash attention: q [16×64] against `n_keys` keys in 32-key tiles,
/// online softmax, bf16 P·V, masked key tail.
fn attention_kernel() -> Function {
    const BM: usize = 16;
    const D: usize = 64;
    const BN: usize = 32;
    let params = [
        ("q", ptr_in(Bf16)),
        ("k", ptr_in(Bf16)),
        ("v", ptr_in(Bf16)),
        ("out", ptr_out(F32)),
        ("n_keys", ParamKind::Scalar(I32)),
    ];
    kernel("attention", &params, |b, p| {
        let oq = offsets_2d(b, BM, D, D as i64)?;
        let pq = b.add_ptr(p[0], oq)?;
        let q = b.load(pq, None, None)?;
        let ninf = b.const_f32(f64::NEG_INFINITY);
        let m0 = b.splat(ninf, &[BM])?;
        let z = b.const_f32(0.0);
        let l0 = b.splat(z, &[BM])?;
        let acc0 = b.splat(z, &[BM, D])?;
        let lo = b.const_i32(0);
        let step = b.const_i32(BN as i64);
        let fin = b.for_loop(lo, p[4], step, vec![m0, l0, acc0], |b, start, it| {
            let (m, l, acc) = (it[0], it[1], it[2]);
            let keys = b.arange(BN)?;
            let keys = b.binary(BinaryOp::Add, keys, start)?;
            let valid = b.cmp(CmpPred::Lt, keys, p[4])?;
            let rows = b.expand_dims(keys, 1)?;
            let dd = b.const_i32(D as i64);
            let rows = b.binary(BinaryOp::Mul, rows, dd)?;
            let cols = b.arange(D)?;
            let cols = b.expand_dims(cols, 0)?;
            let okv = b.binary(BinaryOp::Add, rows, cols)?;
            let kmask = b.expand_dims(valid, 1)?;
            let pk = b.add_ptr(p[1], okv)?;
            let kt = b.load(pk, Some(kmask), None)?;
            let ktt = b.trans(kt)?;
            let s = b.dot(q, ktt, None)?;
            let scale = b.const_f32(0.125);
            let s = b.binary(BinaryOp::Mul, s, scale)?;
            let smask = b.expand_dims(valid, 0)?;
            let s = b.select(smask, s, ninf)?;
            let rmax = b.reduce(ReduceKind::Max, s, 1)?;
            let m_new = b.binary(BinaryOp::Max, m, rmax)?;
            let mcol = b.expand_dims(m_new, 1)?;
            let sc = b.binary(BinaryOp::Sub, s, mcol)?;
            let pr = b.unary(UnaryOp::Exp, sc)?;
            let dm = b.binary(BinaryOp::Sub, m, m_new)?;
            let alpha = b.unary(UnaryOp::Exp, dm)?;
            let la = b.binary(BinaryOp::Mul, l, alpha)?;
            let ps = b.reduce(ReduceKind::Sum, pr, 1)?;
            let l_new = b.binary(BinaryOp::Add, la, ps)?;
            let pv = b.add_ptr(p[2], okv)?;
            let vt = b.load(pv, Some(kmask), None)?;
            let acol = b.expand_dims(alpha, 1)?;
            let acc_s = b.binary(BinaryOp::Mul, acc, acol)?;
            let pb = b.cast(pr, Bf16)?;
            let acc_new = b.dot(pb, vt, Some(acc_s))?;
            Ok(vec![m_new, l_new, acc_new])
        })?;
        let lcol = b.expand_dims(fin[1], 1)?;
        let o = b.binary(BinaryOp::Div, fin[2], lcol)?;
        let po = b.add_ptr(p[3], oq)?;
        b.store(po, o, None)
    })
}

#[test]
fn attention_tile_loop_matches_f64_softmax_reference() {
    const BM: usize = 16;
    const D: usize = 64;
    let n_keys = 2000usize; // 62.5 tiles of 32: the last tile is half masked
    let mut rng = Rng::new(2024);
    let q: Vec<bf16> = rng
        .vec(BM * D, -1.0, 1.0)
        .into_iter()
        .map(bf16::from_f64)
        .collect();
    let k: Vec<bf16> = rng
        .vec(n_keys * D, -1.0, 1.0)
        .into_iter()
        .map(bf16::from_f64)
        .collect();
    let v: Vec<bf16> = rng
        .vec(n_keys * D, -1.0, 1.0)
        .into_iter()
        .map(bf16::from_f64)
        .collect();
    let mut out = vec![f32::NAN; BM * D];
    let f = attention_kernel();
    let t = std::time::Instant::now();
    let args = vec![
        Cpu::input(&q[..]),
        Cpu::input(&k[..]),
        Cpu::input(&v[..]),
        Cpu::output(&mut out[..]),
        i32_arg(n_keys as i32),
    ];
    let stats = interp::run(&f, [1, 1, 1], args).unwrap();
    eprintln!(
        "attention 16x64, {n_keys} keys: {:?}, {stats:?}",
        t.elapsed()
    );
    for i in 0..BM {
        let s: Vec<f64> = (0..n_keys)
            .map(|j| {
                0.125
                    * (0..D)
                        .map(|d| q[i * D + d].to_f64() * k[j * D + d].to_f64())
                        .sum::<f64>()
            })
            .collect();
        let mx = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let w: Vec<f64> = s.iter().map(|x| (x - mx).exp()).collect();
        let l: f64 = w.iter().sum();
        for d in 0..D {
            let want = (0..n_keys)
                .map(|j| w[j] * v[j * D + d].to_f64())
                .sum::<f64>()
                / l;
            let got = out[i * D + d] as f64;
            // P is rounded to bf16 before P·V (relative error ≤ 2^-9 per weight, |v| ≤ 1),
            // so |got - want| ≤ 2^-9 plus f32 accumulation noise.
            assert!(
                (got - want).abs() <= 2.5e-3,
                "({i},{d}): got {got}, want {want}"
            );
        }
    }
}
