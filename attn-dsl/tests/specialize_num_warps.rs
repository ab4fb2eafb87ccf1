//! `num_warps = <constexpr expression>` (and `num_stages`): evaluated after binding, checked
//! against the supported values, with errors at the binding the value came from.

use attn_dsl::frontend::parse_module_str;
use attn_dsl::{specialize, Binding, ConstValue, DslError, Specialized};
use proc_macro2::{Span, TokenStream};

const ROWS: &str = r#"
#[kernel(num_warps = BLOCK_M / 16, require(BLOCK_M >= 16, "BLOCK_M must be >= 16"))]
fn rows<const BLOCK_M: i32, const EXTRA: i32 = 0>(out: *mut i32) {
    store(out + arange::<BLOCK_M>(), arange::<BLOCK_M>() + EXTRA);
}
"#;

fn try_spec(src: &str, binds: Vec<Binding>) -> Result<Specialized, DslError> {
    let module = parse_module_str(src).unwrap_or_else(|e| panic!("parse: {}", e.message));
    specialize(&module, "rows", &binds)
}

/// Spans on distinct lines (line i + 1), standing in for an `instantiate!` call's bindings.
fn binding_spans(n: usize) -> Vec<Span> {
    let text: Vec<String> = (0..n).map(|i| format!("b{i}")).collect();
    let ts: TokenStream = text.join("\n").parse().expect("lex");
    ts.into_iter().map(|t| t.span()).collect()
}

#[test]
fn warp_count_follows_the_binding() {
    for (block_m, warps) in [(16, 1), (32, 2), (64, 4), (128, 8), (256, 16)] {
        let s = try_spec(
            ROWS,
            vec![Binding::new("BLOCK_M", ConstValue::Int(block_m))],
        )
        .unwrap_or_else(|e| panic!("BLOCK_M = {block_m}: {}", e.message));
        assert_eq!(s.ir.num_warps, warps, "BLOCK_M = {block_m}");
    }
}

#[test]
fn unsupported_value_names_the_value_at_the_binding() {
    let spans = binding_spans(2);
    let binds = vec![
        Binding {
            name: "EXTRA".into(),
            value: ConstValue::Int(1),
            span: spans[0],
        },
        Binding {
            name: "BLOCK_M".into(),
            value: ConstValue::Int(48),
            span: spans[1],
        },
    ];
    let e = try_spec(ROWS, binds).expect_err("48 / 16 = 3 warps");
    assert_eq!(
        e.message,
        "num_warps = BLOCK_M / 16 evaluates to 3, which is not supported; allowed: 1, 2, 4, 8, 16\n  with BLOCK_M = 48"
    );
    assert_eq!(e.span.start().line, 2, "at the BLOCK_M binding");
}

#[test]
fn zero_warps_is_rejected_too() {
    let src = ROWS.replace("require(BLOCK_M >= 16", "require(BLOCK_M >= 8");
    let e = try_spec(&src, vec![Binding::new("BLOCK_M", ConstValue::Int(8))])
        .expect_err("8 / 16 = 0 warps");
    assert!(
        e.message.contains("evaluates to 0, which is not supported"),
        "{}",
        e.message
    );
}

#[test]
fn requires_are_checked_before_the_warp_count() {
    let e = try_spec(ROWS, vec![Binding::new("BLOCK_M", ConstValue::Int(8))])
        .expect_err("require fails");
    assert_eq!(
        e.message,
        "require failed: BLOCK_M must be >= 16\n  with BLOCK_M = 8"
    );
}

#[test]
fn a_default_falls_back_to_the_attribute_span() {
    let src = r#"
#[kernel(num_warps = W * 3)]
fn rows<const W: i32 = 1>(out: *mut i32) { store(out, W); }
"#;
    let e = try_spec(src, vec![]).expect_err("3 warps");
    assert_eq!(
        e.message,
        "num_warps = W * 3 evaluates to 3, which is not supported; allowed: 1, 2, 4, 8, 16\n  with W = 1"
    );
    assert_eq!(e.span.start().line, 2, "at the attribute");
}

#[test]
fn non_integer_value_is_an_error() {
    let src = r#"
#[kernel(num_warps = FLAG)]
fn rows<const FLAG: bool>(out: *mut i32) { store(out, 1); }
"#;
    let e =
        try_spec(src, vec![Binding::new("FLAG", ConstValue::Bool(true))]).expect_err("bool warps");
    assert_eq!(
        e.message,
        "num_warps = FLAG must be an integer constexpr, got bool constant true"
    );
}

#[test]
fn constant_expression_without_constexprs() {
    let src = "#[kernel(num_warps = 2 * 4)] fn rows(out: *mut i32) { store(out, 1); }";
    let s = try_spec(src, vec![]).unwrap_or_else(|e| panic!("{}", e.message));
    assert_eq!(s.ir.num_warps, 8);
}

#[test]
fn undeclared_name_is_a_front_end_error() {
    let src = "#[kernel(num_warps = ROWS / 16)] fn rows<const BLOCK_M: i32>(out: *mut i32) {}";
    let e = parse_module_str(src).err().expect("unknown name");
    assert_eq!(
        e.message,
        "unknown constexpr `ROWS` in `num_warps`; declared constexprs: BLOCK_M"
    );
}

const STAGED: &str = r#"
#[kernel(num_stages = EXTRA + 1)]
fn rows<const EXTRA: i32>(out: *mut i32) {
    store(out + arange::<16>(), arange::<16>());
}
"#;

#[test]
fn stage_count_follows_the_binding_and_defaults_to_two() {
    for (extra, stages) in [(2, 3), (1, 2), (0, 1)] {
        let s = try_spec(STAGED, vec![Binding::new("EXTRA", ConstValue::Int(extra))])
            .unwrap_or_else(|e| panic!("EXTRA = {extra}: {}", e.message));
        assert_eq!(s.ir.num_stages, stages, "EXTRA = {extra}");
    }
    let plain = "#[kernel] fn rows(out: *mut i32) { store(out, 1); }";
    assert_eq!(try_spec(plain, vec![]).expect("spec").ir.num_stages, 2);
    let e =
        try_spec(STAGED, vec![Binding::new("EXTRA", ConstValue::Int(7))]).expect_err("8 stages");
    assert_eq!(
        e.message,
        "num_stages = EXTRA + 1 evaluates to 8, which is not supported; allowed: 1, 2, 3, 4\n  with EXTRA = 7"
    );
}

const BOXED: &str = r#"
#[kernel(tma = LONG && ROWS >= 16)]
fn rows<const ROWS: i32, const LONG: bool = false>(out: *mut i32) {
    store(out + arange::<16>(), arange::<16>());
}
"#;

/// `tma = <constexpr expression>` is the specialization's copy engine: evaluated once the
/// constexprs are bound (defaults included), off unless the kernel asks.
#[test]
fn tma_follows_the_binding_and_defaults_to_off() {
    let spec = |bindings: Vec<Binding>| try_spec(BOXED, bindings);
    let rows = |r| Binding::new("ROWS", ConstValue::Int(r));
    let long = |b| Binding::new("LONG", ConstValue::Bool(b));
    assert!(
        spec(vec![rows(16), long(true)])
            .expect("spec")
            .ir
            .tma_copies
    );
    assert!(!spec(vec![rows(8), long(true)]).expect("spec").ir.tma_copies);
    assert!(
        !spec(vec![rows(16)]).expect("spec").ir.tma_copies,
        "LONG defaults to false"
    );
    let plain = "#[kernel] fn rows(out: *mut i32) { store(out, 1); }";
    assert!(!try_spec(plain, vec![]).expect("spec").ir.tma_copies);
    let counted = "#[kernel(tma = N + 1)] fn rows<const N: i32>(out: *mut i32) { store(out, 1); }";
    let e = try_spec(counted, vec![Binding::new("N", ConstValue::Int(2))]).expect_err("int");
    assert_eq!(
        e.message,
        "tma = N + 1 must be a boolean constexpr, got integer constant 3\n  with N = 2"
    );
}

const SCHEDULED: &str = r#"
#[kernel(warp_specialize = SPLIT, pingpong = ROWS >= 32)]
fn rows<const ROWS: i32, const SPLIT: bool = true>(out: *mut i32) {
    store(out + arange::<16>(), arange::<16>());
}
"#;

/// `warp_specialize` and `pingpong` settle the warp schedule per specialization: absent,
/// the compiler's choice; `true`, required; `false`, off.
#[test]
fn schedule_flags_follow_the_binding_and_default_to_the_compilers_choice() {
    use attn_dsl::ir::ScheduleChoice::{Auto, Off, Required};
    let spec = |bindings: Vec<Binding>| try_spec(SCHEDULED, bindings).expect("spec").ir;
    let rows = |r| Binding::new("ROWS", ConstValue::Int(r));
    let split = |b| Binding::new("SPLIT", ConstValue::Bool(b));
    let f = spec(vec![rows(32)]);
    assert_eq!((f.warp_specialize, f.pingpong), (Required, Required));
    let f = spec(vec![rows(16), split(false)]);
    assert_eq!((f.warp_specialize, f.pingpong), (Off, Off));
    let plain = try_spec(
        "#[kernel] fn rows(out: *mut i32) { store(out, 1); }",
        vec![],
    )
    .expect("spec")
    .ir;
    assert_eq!((plain.warp_specialize, plain.pingpong), (Auto, Auto));
    let counted =
        "#[kernel(pingpong = N * 2)] fn rows<const N: i32>(out: *mut i32) { store(out, 1); }";
    let e = try_spec(counted, vec![Binding::new("N", ConstValue::Int(4))]).expect_err("int");
    assert_eq!(
        e.message,
        "pingpong = N * 2 must be a boolean constexpr, got integer constant 8\n  with N = 4"
    );
}
