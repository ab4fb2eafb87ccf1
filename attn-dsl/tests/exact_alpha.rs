//! A row vector's fast `exp(x − y)` exactly 1 where `x == y` (`ATTN_CODEGEN_ENABLE=
//! exact_alpha`, opt-in): the online softmax's rescale factor when a row's max did not
//! move. The FMA form `ex2(x·log2 e − round(y·log2 e))` leaves the product's rounding error
//! in the exponent, so the factor missed 1 for most maxima and the accumulator's skip (which
//! tests for exactly 1) rarely fired. Simulated against the executor's exact `exp` with no
//! tolerance: equal operands give exactly 1, the others stay the FMA form.

mod codegen_common;

use attn_dsl::codegen::emit_cuda;
use attn_dsl::interp::HostBuffer;
use attn_dsl::ir::{Function, ScalarType};
use codegen_common::cpu_sim::SimArg;
use codegen_common::sim_check::{check, check_each, i32s, output};

const SRC: &str = r#"
mod rows {
    #[kernel(num_warps = 1, fast_math = true)]
    pub fn row_exp<const BLOCK: i32>(a: *const f32, b: *const f32, out: *mut f32, n: i32) {
        let i = arange::<BLOCK>();
        let ok = i < n;
        let x = load(a + i, ok, 0.0);
        let y = load(b + i, ok, 0.0);
        store(out + i, exp(x - y), ok);
    }
}
"#;

fn row_exp() -> Function {
    std::env::set_var("ATTN_CODEGEN_ENABLE", "exact_alpha");
    let module = attn_dsl::frontend::parse_module_str(SRC).expect("parse");
    let binds = [attn_dsl::Binding::new(
        "BLOCK",
        attn_dsl::ConstValue::Int(128),
    )];
    attn_dsl::driver::optimize(&module, "row_exp", &binds)
        .expect("compile")
        .ir
}

/// Maxima from 0.5 to 64 in both signs, as a running max's are.
fn maxima(n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let m = 0.5 * 1.037f32.powi(i as i32);
            if i % 2 == 0 {
                m
            } else {
                -m
            }
        })
        .collect()
}

#[test]
fn a_row_vectors_exp_takes_the_exact_form() {
    let src = emit_cuda(&row_exp()).expect("emit").source;
    assert!(src.contains("attn_fast_exp_sub_exact("), "{src}");
}

/// One test (the simulator builds one binary per source, so two tests of the same kernel
/// would race on it): equal operands against the executor's exact `exp` with no tolerance,
/// then unequal ones within a few ulp (ex2 of an FMA).
#[test]
fn equal_operands_give_exactly_one_and_the_others_the_fma_form() {
    let n = 120;
    let a = maxima(n);
    let args = |b: Vec<f32>| {
        vec![
            SimArg::Buf(HostBuffer::F32(a.clone())),
            SimArg::Buf(HostBuffer::F32(b)),
            output(ScalarType::F32, n),
            i32s(n as i32),
        ]
    };
    check("x == y", &row_exp(), [1, 1, 1], args(a.clone()), 0.0);
    let b = a.iter().map(|x| x + 0.75).collect();
    check_each("x != y", &row_exp(), [1, 1, 1], args(b), |_| 1e-6);
}
