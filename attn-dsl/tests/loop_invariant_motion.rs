//! Loop-invariant code motion (`passes::licm`, part of `optimize`): what reads nothing the
//! loop changes runs once before it, the results stay those of the unoptimized kernel
//! (checked against a reference written here), and a moved load touches no memory when the
//! loop runs zero times.

mod interp_support;

use attn_dsl::interp::{self, Cpu, CpuArg};
use attn_dsl::ir::printer::print_function;
use attn_dsl::ir::{BinaryOp, CmpPred, Function, OpKind, ParamKind, ReduceKind, ScalarType::*};
use attn_dsl::kernel::{Backend, ScalarArg};
use attn_dsl::passes::optimize;
use interp_support::{kernel, ptr_in, ptr_out, Rng};

/// `out[0] = Σ_{j < n} tab[3]·tab[j] + max(0, tab[0..k]) + Σ tab[0..min(k, 4)] + tab[a / b]`:
/// the loop body reads `tab[3]`, runs a loop over `tab[0..k]` and sums a masked row, none of
/// which depends on `j`; `a / b` is invariant too but may divide by zero.
fn row_data_kernel() -> Function {
    let params = [
        ("out", ptr_out(I32)),
        ("tab", ptr_in(I32)),
        ("n", ParamKind::Scalar(I32)),
        ("k", ParamKind::Scalar(I32)),
        ("a", ParamKind::Scalar(I32)),
        ("b", ParamKind::Scalar(I32)),
    ];
    kernel("row_data", &params, |b, p| {
        let (out, tab, n, k) = (p[0], p[1], p[2], p[3]);
        let (zero, one) = (b.const_i32(0), b.const_i32(1));
        let total = b.for_loop(zero, n, one, vec![zero], |b, j, it| {
            let three = b.const_i32(3);
            let at3 = b.add_ptr(tab, three)?;
            let t3 = b.load(at3, None, None)?;
            let z = b.const_i32(0);
            let o = b.const_i32(1);
            let row_max = b.for_loop(z, k, o, vec![z], |b, r, m| {
                let at = b.add_ptr(tab, r)?;
                let v = b.load(at, None, None)?;
                Ok(vec![b.binary(BinaryOp::Max, m[0], v)?])
            })?;
            let cols = b.arange(4)?;
            let in_row = b.cmp(CmpPred::Lt, cols, k)?;
            let row = b.add_ptr(tab, cols)?;
            let row = b.load(row, Some(in_row), None)?;
            let row_sum = b.reduce(ReduceKind::Sum, row, 0)?;
            let q = b.binary(BinaryOp::Div, p[4], p[5])?;
            let at_q = b.add_ptr(tab, q)?;
            let tq = b.load(at_q, None, None)?;
            let at_j = b.add_ptr(tab, j)?;
            let tj = b.load(at_j, None, None)?;
            let mut x = b.binary(BinaryOp::Mul, t3, tj)?;
            for term in [row_max[0], row_sum, tq] {
                x = b.binary(BinaryOp::Add, x, term)?;
            }
            Ok(vec![b.binary(BinaryOp::Add, it[0], x)?])
        })?;
        b.store(out, total[0], None)
    })
}

/// Runs `f` on one program with a one-element `out` first and `rest` after it; `out[0]`.
fn first_output(f: &Function, rest: Vec<CpuArg<'_>>) -> Result<i32, String> {
    let mut out = [i32::MIN; 1];
    let mut args = vec![Cpu::output(&mut out[..])];
    args.extend(rest);
    interp::run(f, [1, 1, 1], args).map_err(|e| e.to_string())?;
    Ok(out[0])
}

fn run(f: &Function, tab: &[i32], n: i32, k: i32, a: i32, b: i32) -> Result<i32, String> {
    let s = |v| Cpu::scalar(ScalarArg::I32(v));
    first_output(f, vec![Cpu::input(tab), s(n), s(k), s(a), s(b)])
}

fn reference(tab: &[i32], n: i32, k: i32, a: i32, b: i32) -> i32 {
    let row_max = tab[..k as usize].iter().fold(0, |m, &v| m.max(v));
    let row_sum: i32 = tab[..k.min(4) as usize].iter().sum();
    (0..n as usize)
        .map(|j| tab[3] * tab[j] + row_max + row_sum + tab[(a / b) as usize])
        .sum()
}

/// The kernel's own loop (the last top-level `for`: a moved one runs before it): the ops
/// before it and those inside.
fn loop_and_prefix(f: &Function) -> (Vec<&OpKind>, Vec<&OpKind>) {
    let at = f
        .body
        .ops
        .iter()
        .rposition(|&o| f.op(o).kind == OpKind::For)
        .expect("the kernel keeps its loop");
    let before = f.body.ops[..at].iter().map(|&o| &f.op(o).kind).collect();
    let inside = f.op(f.body.ops[at]).regions[0]
        .ops
        .iter()
        .map(|&o| &f.op(o).kind)
        .collect();
    (before, inside)
}

fn loads(kinds: &[&OpKind]) -> usize {
    kinds
        .iter()
        .filter(|k| matches!(k, OpKind::Load { .. }))
        .count()
}

#[test]
fn row_data_moves_before_the_loop() {
    let mut f = row_data_kernel();
    optimize(&mut f);
    let text = print_function(&f);
    let (before, inside) = loop_and_prefix(&f);
    // tab[3] and the masked row before the loop, with the loop over tab[0..k] ...
    assert_eq!(loads(&before), 2, "{text}");
    assert!(before.iter().any(|k| **k == OpKind::For), "{text}");
    // ... and tab[j] and tab[a / b] (its division may trap) left inside.
    assert_eq!(loads(&inside), 2, "{text}");
    assert!(!inside.iter().any(|k| **k == OpKind::For), "{text}");
    assert!(
        inside.iter().any(|k| **k == OpKind::Binary(BinaryOp::Div)),
        "{text}"
    );
}

#[test]
fn moved_code_computes_what_the_loop_did() {
    let plain = row_data_kernel();
    let mut moved = row_data_kernel();
    optimize(&mut moved);
    let mut rng = Rng::new(0x11c3);
    for case in 0..200 {
        let tab: Vec<i32> = (0..16)
            .map(|_| (rng.next_u64() % 201) as i32 - 100)
            .collect();
        let n = (rng.next_u64() % 8) as i32;
        let k = (rng.next_u64() % 9) as i32;
        let b = (rng.next_u64() % 4) as i32 + 1;
        let a = (rng.next_u64() % 16) as i32 * b;
        let want = reference(&tab, n, k, a, b);
        assert_eq!(
            run(&plain, &tab, n, k, a, b),
            Ok(want),
            "case {case}: unoptimized"
        );
        assert_eq!(
            run(&moved, &tab, n, k, a, b),
            Ok(want),
            "case {case}: optimized"
        );
    }
}

/// A loop that does not run reads nothing: the moved loads carry its trip test in their
/// masks (here every one of them would be out of bounds of an empty table), and the
/// division by zero stays where it never runs.
#[test]
fn a_loop_that_runs_zero_times_reads_nothing() {
    let mut f = row_data_kernel();
    optimize(&mut f);
    assert_eq!(run(&f, &[], 0, 8, 1, 0), Ok(0));
    assert_eq!(run(&f, &[], -3, 8, 1, 0), Ok(0));
}

/// `for j < n { out[0] = out[0] + tab[j] }`: the load of `out[0]` reads nothing the loop
/// defines but memory the loop writes, so it stays (no alias analysis: a loop that stores
/// keeps every load).
fn accumulate_in_memory_kernel() -> Function {
    let params = [
        ("out", ptr_out(I32)),
        ("tab", ptr_in(I32)),
        ("n", ParamKind::Scalar(I32)),
    ];
    kernel("accumulate", &params, |b, p| {
        let (out, tab, n) = (p[0], p[1], p[2]);
        let (zero, one) = (b.const_i32(0), b.const_i32(1));
        b.store(out, zero, None)?;
        b.for_loop(zero, n, one, vec![], |b, j, _| {
            let sum = b.load(out, None, None)?;
            let at_j = b.add_ptr(tab, j)?;
            let tj = b.load(at_j, None, None)?;
            let next = b.binary(BinaryOp::Add, sum, tj)?;
            b.store(out, next, None)?;
            Ok(vec![])
        })?;
        Ok(())
    })
}

#[test]
fn a_loop_that_stores_keeps_its_loads() {
    let mut f = accumulate_in_memory_kernel();
    optimize(&mut f);
    let (_, inside) = loop_and_prefix(&f);
    assert_eq!(loads(&inside), 2, "{}", print_function(&f));
    let tab = [3, -7, 11, 5];
    let args = vec![Cpu::input(&tab[..]), Cpu::scalar(ScalarArg::I32(4))];
    assert_eq!(first_output(&f, args), Ok(12));
}
