//! Calls by name (`F(Args { a: x, .. })`): parameters bind to fields of the same name in any
//! order, a callee names only what it uses, declared types and the declared return type are
//! checked at the callee's tokens, and the result runs like a positional call.

use attn_dsl::frontend::parse_module_str;
use attn_dsl::interp::{run, HostBuffer};
use attn_dsl::{specialize, Binding, ConstValue};

/// A kernel that offers `x` (an i32 tile), `flag` (bool) and `n` (i32) to `F` by name.
fn module(callee: &str) -> String {
    format!(
        r#"
#[kernel]
pub fn k<const F: Device>(out: *mut i32, n: i32) {{
    let x = arange::<16>();
    let flag = n > 3;
    let y = F(Args {{ x, flag, n }});
    store(out + x, y);
}}
{callee}
"#
    )
}

fn specialize_with(callee: &str) -> Result<attn_dsl::Specialized, attn_dsl::DslError> {
    let m = parse_module_str(&module(callee)).expect("parses");
    specialize(
        &m,
        "k",
        &[Binding::new("F", ConstValue::Device("f".into()))],
    )
}

#[test]
fn parameters_bind_by_name_in_any_order_and_unused_ones_are_dropped() {
    let spec = specialize_with("#[device] fn f(n: i32, x: Tile<i32>) -> Tile<i32> { x * n }")
        .expect("specializes");
    let mut out = HostBuffer::I32(vec![-1; 16]);
    run(
        &spec.ir,
        [1, 1, 1],
        vec![
            out.arg_out(),
            attn_dsl::interp::CpuArg::Scalar(attn_dsl::kernel::ScalarArg::I32(5)),
        ],
    )
    .expect("runs");
    let got: Vec<i64> = out.to_f64s().iter().map(|&v| v as i64).collect();
    assert_eq!(got, (0..16).map(|i| i * 5).collect::<Vec<_>>());
}

#[test]
fn an_argument_the_caller_does_not_offer_is_an_error_naming_what_it_offers() {
    let e = specialize_with("#[device] fn f(x: Tile, m: i32) -> Tile<i32> { x * m }")
        .expect_err("m is not offered");
    assert!(
        e.message
            .contains("parameter `m` is not an argument of `Args`"),
        "{}",
        e.message
    );
    assert!(e.message.contains("flag: bool"), "{}", e.message);
}

#[test]
fn a_bool_declared_as_i32_is_an_error_with_the_right_declaration() {
    let e = specialize_with("#[device] fn f(x: Tile, flag: i32) -> Tile<i32> { x * flag }")
        .expect_err("flag is a bool");
    assert!(
        e.message
            .contains("declares `flag: i32` but `Args` gives `flag: bool`"),
        "{}",
        e.message
    );
}

#[test]
fn a_body_that_contradicts_the_declared_return_type_is_an_error() {
    let e = specialize_with("#[device] fn f(x: Tile) -> Tile<bool> { x + 1 }")
        .expect_err("returns an i32 tile");
    assert!(
        e.message
            .contains("declares `-> Tile<bool>` but its body returns `Tile<i32> [16]`"),
        "{}",
        e.message
    );
}
