//! 64-bit products of two `int`s as one widening multiply (`ATTN_CODEGEN_ENABLE=wide_mul`,
//! opt-in): a sign-extended `int` times an `i64` parameter promised in `int`'s range
//! (`passes::assume::fits_i32`) is `attn_mul_wide`. The emitted CUDA matches the CPU
//! executor on products far past 32 bits, both signs, and the rule stays off a parameter
//! nobody promised.

mod codegen_common;

use attn_dsl::codegen::emit_cuda;
use attn_dsl::interp::HostBuffer;
use attn_dsl::ir::{Function, ScalarType};
use attn_dsl::kernel::ScalarArg;
use codegen_common::cpu_sim::SimArg;
use codegen_common::sim_check::{check, i32s, output};

const SRC: &str = r#"
mod wide {
    #[kernel(num_warps = 1)]
    pub fn products<const BLOCK: i32>(x: *const i32, out: *mut i64, stride: i64, n: i32) {
        let i = program_id(0) * BLOCK + arange::<BLOCK>();
        let ok = i < n;
        let v = load(x + i, ok, 0);
        store(out + i, v.cast::<i64>() * stride + i.cast::<i64>() * stride, ok);
    }
}
"#;

/// The kernel at 64 elements a program, `promised` parameters in `int`'s range.
fn products(promised: &[&str]) -> Function {
    std::env::set_var("ATTN_CODEGEN_ENABLE", "wide_mul");
    let module = attn_dsl::frontend::parse_module_str(SRC).expect("parse");
    let binds = [attn_dsl::Binding::new(
        "BLOCK",
        attn_dsl::ConstValue::Int(64),
    )];
    let mut f = attn_dsl::driver::optimize(&module, "products", &binds)
        .expect("compile")
        .ir;
    attn_dsl::passes::assume::fits_i32(&mut f, promised).expect("promise");
    f
}

#[test]
fn a_promised_stride_multiplies_as_an_int() {
    let src = emit_cuda(&products(&["stride"])).expect("emit").source;
    assert_eq!(
        src.matches("attn_mul_wide(").count() - src.matches("long long attn_mul_wide(").count(),
        2,
        "both products widened: {src}"
    );
    assert!(src.contains(", (int)stride)"), "{src}");
    let plain = emit_cuda(&products(&[])).expect("emit").source;
    assert!(
        !plain.contains("attn_mul_wide(x") && !plain.contains("(int)stride"),
        "no promise, no widening: {plain}"
    );
}

#[test]
fn only_i64_parameters_can_be_promised() {
    let mut f = products(&[]);
    let e = attn_dsl::passes::assume::fits_i32(&mut f, &["n"]).expect_err("n is an i32");
    assert!(e.contains("`n` is not an i64 parameter"), "{e}");
    let e = attn_dsl::passes::assume::fits_i32(&mut f, &["nope"]).expect_err("unknown");
    assert!(e.contains("`nope`"), "{e}");
}

/// Products of both signs up to 2^52, past 32 bits and still exact as the f64s the check
/// compares, at strides at both ends of `int`'s range.
#[test]
fn widened_products_match_the_executor() {
    let f = products(&["stride"]);
    let n = 150;
    let x: Vec<i32> = (0..n)
        .map(|i| {
            let v = (i as i32).wrapping_mul(0x9E37_79B9u32 as i32) >> 10;
            if i % 3 == 0 {
                v
            } else {
                -v / 7
            }
        })
        .collect();
    for stride in [i64::from(i32::MAX), i64::from(i32::MIN), 12_345, -7] {
        let args = vec![
            SimArg::Buf(HostBuffer::I32(x.clone())),
            output(ScalarType::I64, n),
            SimArg::Scalar(ScalarArg::I64(stride)),
            i32s(n as i32),
        ];
        check(&format!("stride {stride}"), &f, [3, 1, 1], args, 0.0);
    }
}
