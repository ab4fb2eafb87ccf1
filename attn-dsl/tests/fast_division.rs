//! Under `fast_math`, a tile divided by a value every element shares (a per-program scalar)
//! is a multiply by its reciprocal (`attn_mul_rcp`), where an IEEE division an element costs
//! a MUFU op, its refinement and a slow-path check (Gemma-2's softcap, `tanh(s / softcap)`,
//! divided every score). A division by a tile, or any division without `fast_math`, stays
//! IEEE. Simulated against the executor's exact division.

mod codegen_common;

use attn_dsl::codegen::emit_cuda;
use attn_dsl::interp::HostBuffer;
use attn_dsl::ir::{Function, ScalarType};
use attn_dsl::kernel::ScalarArg;
use codegen_common::cpu_sim::SimArg;
use codegen_common::sim_check::{check, i32s, output, random};

const SRC: &str = r#"
mod capped {
    #[kernel(num_warps = 1, fast_math = FAST)]
    pub fn capped<const BLOCK: i32>(
        a: *const f32, b: *const f32, out: *mut f32, ratio: *mut f32, cap: f32, scale: f32, n: i32
    ) {
        let i = arange::<BLOCK>();
        let ok = i < n;
        let x = load(a + i, ok, 0.0);
        let y = load(b + i, ok, 1.0);
        store(out + i, cap * tanh(x * (scale / cap)) + x / cap, ok);
        store(ratio + i, x / y, ok);
    }
}
"#;

fn capped(fast: bool) -> Function {
    // `fast_math` takes a literal: the source is written both ways.
    let src = SRC.replace("FAST", if fast { "true" } else { "false" });
    let module = attn_dsl::frontend::parse_module_str(&src).expect("parse");
    let binds = [attn_dsl::Binding::new(
        "BLOCK",
        attn_dsl::ConstValue::Int(128),
    )];
    attn_dsl::driver::optimize(&module, "capped", &binds)
        .expect("compile")
        .ir
}

#[test]
fn a_shared_divisor_is_a_reciprocal_under_fast_math_only() {
    let fast = emit_cuda(&capped(true)).expect("emit").source;
    // `x / cap`: one reciprocal times the element; `x / y`: an element's own divisor.
    assert_eq!(fast.matches("attn_mul_rcp(").count(), 1, "{fast}");
    // `scale / cap` (scalars, once a program) and `x / y` keep the IEEE quotient.
    assert_eq!(fast.matches("__fdiv_rn(").count(), 2, "{fast}");
    let exact = emit_cuda(&capped(false)).expect("emit").source;
    assert!(!exact.contains("attn_mul_rcp("), "{exact}");
    assert_eq!(exact.matches("__fdiv_rn(").count(), 3, "{exact}");
}

/// Both forms against the executor's exact division: within an ulp or two of the quotient
/// (`tanh` exact in the simulator). Divisors of both signs and a range of magnitudes.
#[test]
fn the_reciprocal_form_matches_the_executor() {
    let n = 120;
    let f32s = |v: Vec<f64>| SimArg::Buf(HostBuffer::F32(v.iter().map(|&x| x as f32).collect()));
    let y: Vec<f64> = random(n, 7, 0.25, 4.0)
        .iter()
        .enumerate()
        .map(|(i, v)| if i % 2 == 0 { *v } else { -v })
        .collect();
    for (k, cap) in [50.0f32, -3.0, 0.37, 1e-3].into_iter().enumerate() {
        let args = vec![
            f32s(random(n, 11 + k as u64, -60.0, 60.0)),
            f32s(y.clone()),
            output(ScalarType::F32, n),
            output(ScalarType::F32, n),
            SimArg::Scalar(ScalarArg::F32(cap)),
            SimArg::Scalar(ScalarArg::F32(0.088)),
            i32s(n as i32),
        ];
        for fast in [true, false] {
            let label = format!("cap {cap}, fast_math {fast}");
            check(&label, &capped(fast), [1, 1, 1], args.clone(), 1e-6);
        }
    }
}
