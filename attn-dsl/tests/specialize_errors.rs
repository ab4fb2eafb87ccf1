//! One failing specialization per error class, asserting the exact message (and, where the
//! span matters to the user, the line it points at).

use attn_dsl::frontend::parse_module_str;
use attn_dsl::{specialize, Binding, ConstValue, DslError};
use proc_macro2::{Span, TokenStream};

fn bind(n: &str, v: ConstValue) -> Binding {
    Binding::new(n, v)
}

fn fail(src: &str, kernel: &str, binds: &[Binding]) -> DslError {
    let module = parse_module_str(src).unwrap_or_else(|e| panic!("parse: {}", e.message));
    match specialize(&module, kernel, binds) {
        Ok(s) => panic!("specialized unexpectedly: {}", s.key()),
        Err(e) => e,
    }
}

/// The line (1-based) of the first occurrence of `needle` in `src`.
fn line_of(src: &str, needle: &str) -> usize {
    src.lines()
        .position(|l| l.contains(needle))
        .map(|i| i + 1)
        .unwrap_or_else(|| panic!("{needle} not found"))
}

/// Spans on distinct lines, standing in for the bindings of an `instantiate!` call.
fn binding_spans(n: usize) -> Vec<Span> {
    let text: Vec<String> = (0..n).map(|i| format!("b{i}")).collect();
    let ts: TokenStream = text.join("\n").parse().expect("lex");
    ts.into_iter().map(|t| t.span()).collect()
}

const FLAGS: &str = r#"
#[kernel(
    require(!USE_R_SWA || SLIDING_WINDOW == 0, "R-SWA carries its own window; set SLIDING_WINDOW = 0"),
    require(BLOCK >= 16, "BLOCK must be at least 16"),
)]
fn k<const SLIDING_WINDOW: i32, const USE_R_SWA: bool, const BLOCK: i32 = 32>(out: *mut i32) {
    store(out, SLIDING_WINDOW);
}
"#;

#[test]
fn unknown_binding_lists_declared_constexprs() {
    let e = fail(
        FLAGS,
        "k",
        &[
            bind("SLIDING_WINDOW", ConstValue::Int(0)),
            bind("WINDOW", ConstValue::Int(1)),
        ],
    );
    assert_eq!(
        e.message,
        "unknown constexpr `WINDOW` for kernel `k`; declared constexprs: SLIDING_WINDOW, USE_R_SWA, BLOCK"
    );
}

#[test]
fn missing_bindings_are_listed_and_defaults_fill_in() {
    let e = fail(FLAGS, "k", &[]);
    assert_eq!(
        e.message,
        "missing constexpr binding(s) for kernel `k`: SLIDING_WINDOW, USE_R_SWA"
    );
}

#[test]
fn binding_of_the_wrong_kind_points_at_the_binding() {
    let spans = binding_spans(2);
    let binds = [
        Binding {
            name: "SLIDING_WINDOW".into(),
            value: ConstValue::Int(0),
            span: spans[0],
        },
        Binding {
            name: "USE_R_SWA".into(),
            value: ConstValue::Int(1),
            span: spans[1],
        },
    ];
    let e = fail(FLAGS, "k", &binds);
    assert_eq!(e.message, "constexpr `USE_R_SWA` is declared `bool` but bound to `1` (an integer); expected `true` or `false`");
    assert_eq!(e.span.start().line, 2);
}

#[test]
fn out_of_range_integer_binding() {
    let binds = [
        bind("SLIDING_WINDOW", ConstValue::Int(1 << 40)),
        bind("USE_R_SWA", ConstValue::Bool(false)),
    ];
    let e = fail(FLAGS, "k", &binds);
    assert_eq!(
        e.message,
        "constexpr `SLIDING_WINDOW` = 1099511627776 does not fit in i32"
    );
}

#[test]
fn violated_require_names_the_values_at_the_first_binding() {
    let spans = binding_spans(2);
    // Bound in the order USE_R_SWA, SLIDING_WINDOW: the rule names USE_R_SWA first.
    let binds = [
        Binding {
            name: "SLIDING_WINDOW".into(),
            value: ConstValue::Int(1024),
            span: spans[0],
        },
        Binding {
            name: "USE_R_SWA".into(),
            value: ConstValue::Bool(true),
            span: spans[1],
        },
    ];
    let e = fail(FLAGS, "k", &binds);
    assert_eq!(
        e.message,
        "require failed: R-SWA carries its own window; set SLIDING_WINDOW = 0\n  with USE_R_SWA = true, SLIDING_WINDOW = 1024"
    );
    assert_eq!(e.span.start().line, 2, "at the USE_R_SWA binding");
}

#[test]
fn require_on_a_default_falls_back_to_the_rule() {
    let binds = [
        bind("SLIDING_WINDOW", ConstValue::Int(0)),
        bind("USE_R_SWA", ConstValue::Bool(false)),
        bind("BLOCK", ConstValue::Int(8)),
    ];
    let e = fail(FLAGS, "k", &binds);
    assert_eq!(
        e.message,
        "require failed: BLOCK must be at least 16\n  with BLOCK = 8"
    );
}

#[test]
fn unknown_kernel_and_device_as_kernel() {
    let src = "#[device] fn d(x: i32) -> i32 { x } #[kernel] fn k(o: *mut i32) { store(o, d(1)); }";
    assert_eq!(
        fail(src, "nope", &[]).message,
        "no kernel `nope` in the module; kernels: k"
    );
    assert_eq!(
        fail(src, "d", &[]).message,
        "`d` is a #[device] function, not a kernel; kernels: k"
    );
}

#[test]
fn device_binding_must_name_a_device_function() {
    let src = "#[device] fn m(q: i32) -> bool { q > 0 } #[kernel] fn k<const MASK: Device>(o: *mut i32) { store(o, 1, MASK(program_id(0))); }";
    let e = fail(src, "k", &[bind("MASK", ConstValue::Device("nope".into()))]);
    assert_eq!(
        e.message,
        "constexpr `MASK` is bound to `nope`, which is not a #[device] function of the module (device functions: m); \
         only the kernel's own module is searched: write your function as a `#[device]` fn of a `#[variant]` module \
         and pass that to the op as a `Variant` (docs/writing-a-variant.md)"
    );
}

/// A kernel whose body is `body`, with constexprs `N: i32`, `FLAG: bool` and a few params.
fn body_kernel(body: &str) -> String {
    format!(
        "#[kernel]\nfn k<const N: i32, const FLAG: bool>(x: *const f32, out: *mut f32, n: i32, s: f32) {{\n{body}\n}}\n"
    )
}

fn body_fail(body: &str) -> DslError {
    let src = body_kernel(body);
    fail(
        &src,
        "k",
        &[
            bind("N", ConstValue::Int(16)),
            bind("FLAG", ConstValue::Bool(true)),
        ],
    )
}

#[test]
fn dtype_mismatch_suggests_a_cast() {
    let e = body_fail(
        "let a = load(x + arange::<16>()); let i = arange::<16>(); store(out, (a + i).sum(0));",
    );
    assert_eq!(
        e.message,
        "dtype mismatch in `+`: f32 vs i32 (insert `.cast::<f32>()`)"
    );
}

#[test]
fn float_literal_with_integer_operand_is_a_mismatch() {
    let e = body_fail("let i = arange::<16>() * 0.5;");
    assert_eq!(e.message, "dtype mismatch in `*`: float constant 0.5 vs i32 (insert `.cast::<f32>()` on the i32 operand)");
}

#[test]
fn shape_mismatch_names_both_shapes_at_the_expression() {
    let body = "let a = arange::<16>();\nlet b = arange::<32>();\nlet c = a + b;";
    let e = body_fail(body);
    assert_eq!(e.message, "shape mismatch in `+`: [16] vs [32]");
    assert_eq!(e.span.start().line, line_of(&body_kernel(body), "let c"));
}

#[test]
fn runtime_value_as_a_shape() {
    assert_eq!(
        body_fail("let t = zeros::<f32>([n, 4]);").message,
        "runtime value `n` used as a shape; shapes must be constexprs"
    );
    assert_eq!(
        body_fail("let t = arange::<n>();").message,
        "runtime value `n` used as a shape; shapes must be constexprs"
    );
    assert_eq!(
        body_fail("let t = arange::<16>().sum(n);").message,
        "runtime value `n` used as an axis; axes must be constexprs"
    );
}

#[test]
fn arange_of_a_non_power_of_two_shows_the_value() {
    let src = "#[kernel] fn k<const BLOCK: i32>(o: *mut i32) { store(o + arange::<BLOCK>(), 0); }";
    let e = fail(src, "k", &[bind("BLOCK", ConstValue::Int(96))]);
    assert_eq!(
        e.message,
        "arange::<BLOCK>() needs a power of two, BLOCK = 96"
    );
}

#[test]
fn constexpr_if_on_a_runtime_value() {
    let e = body_fail("if const { n > 0 } { store(out, 1.0); }");
    assert_eq!(e.message, "constexpr `if` on a runtime value `n > 0`");
}

#[test]
fn runtime_if_on_a_tile_asks_for_select() {
    let e = body_fail("if arange::<16>() > 3 { store(out, 1.0); }");
    assert_eq!(
        e.message,
        "`if` condition must be a bool scalar, got tile<bool, 16> (use `select` for an elementwise choice)"
    );
}

#[test]
fn loop_carried_variable_changing_type() {
    let e = body_fail(
        "let mut acc = zeros::<f32>([16]);\nfor i in 0..n {\n    acc = zeros::<f32>([16, 16]);\n}",
    );
    assert_eq!(
        e.message,
        "variable `acc` changes type in `for` loop: tile<f32, 16> before, tile<f32, 16x16> after"
    );
    let e = body_fail("let mut c = 0;\nwhile c < n {\n    c = s;\n}");
    assert_eq!(
        e.message,
        "variable `c` changes type in `while` loop: i32 before, f32 after"
    );
}

#[test]
fn branch_assigned_variable_changing_type() {
    let e = body_fail("let mut v = zeros::<f32>([16]);\nif n > 0 {\n    v = arange::<16>();\n}");
    assert_eq!(
        e.message,
        "variable `v` changes type in `if`: tile<f32, 16> before, tile<i32, 16> after"
    );
    let e = body_fail("let v = if n > 0 { arange::<16>() } else { arange::<32>() };");
    assert_eq!(
        e.message,
        "the `if` branches have different types: tile<i32, 16> vs tile<i32, 32>"
    );
}

#[test]
fn unknown_names_and_assignments() {
    assert_eq!(body_fail("store(out, y);").message, "unknown variable `y`");
    assert_eq!(
        body_fail("let a = 1; a = 2;").message,
        "cannot assign to `a`: it is not declared `let mut`"
    );
    assert_eq!(
        body_fail("N = 2;").message,
        "cannot assign to constexpr `N`"
    );
    assert!(body_fail("let a = softmax(n);")
        .message
        .starts_with("unknown function `softmax`; DSL functions: program_id,"));
}

#[test]
fn builtin_argument_errors() {
    assert_eq!(
        body_fail("let v = load(x, n > 0, 1.0, 2.0);").message,
        "`load` takes 1 to 3 arguments (ptr, mask, other), got 4"
    );
    assert_eq!(
        body_fail("let v = load(n);").message,
        "`load` needs pointers, got i32"
    );
    assert_eq!(
        body_fail("let a = arange::<16>(); let t = a.trans();").message,
        "`trans`: expects a rank-2 tile, got tile<i32, 16>"
    );
    assert_eq!(
        body_fail("let p = x * 2;").message,
        "`*` is not defined on pointers (only `pointer + offsets`)"
    );
    assert_eq!(
        body_fail("let v = program_id(3);").message,
        "`program_id` axis must be 0, 1 or 2, got 3"
    );
}

#[test]
fn constexpr_arithmetic_errors() {
    assert_eq!(
        body_fail("let z = N / 0;").message,
        "division by zero in constexpr `16 / 0`"
    );
    assert_eq!(
        body_fail("let z = FLAG + 1;").message,
        "`+` is not defined on bool constant true and integer constant 1"
    );
}

#[test]
fn a_kernel_returns_nothing() {
    assert_eq!(
        body_fail("return 1;").message,
        "a kernel returns nothing; write `return;`"
    );
    assert_eq!(
        body_fail("let v = if n > 0 { return; } else { 1 };").message,
        "`return` must be a statement of the function body or of an `if` branch in it, not inside an expression"
    );
}

#[test]
fn device_call_errors() {
    let src = r#"
#[device] fn scale<const K: i32>(x: i32) -> i32 { x * K }
#[kernel] fn k<const N: i32>(o: *mut i32) {
    store(o, scale(N));
}
#[kernel] fn k2<const N: i32>(o: *mut i32) {
    store(o, scale::<N, 3>(N));
}
#[kernel] fn k3<const N: i32>(o: *mut i32) {
    store(o, scale::<N>(N, N));
}
#[kernel] fn k4<const N: i32>(o: *mut i32) {
    store(o, scale::<true>(N));
}
"#;
    let n = [bind("N", ConstValue::Int(4))];
    assert_eq!(
        fail(src, "k", &n).message,
        "device function `scale` needs constexpr `K`: pass it as `scale::<..>(..)` or declare `K` in `k`"
    );
    assert_eq!(
        fail(src, "k2", &n).message,
        "`scale` takes 1 constexpr(s), got 2"
    );
    assert_eq!(
        fail(src, "k3", &n).message,
        "`scale` takes 1 argument(s), got 2"
    );
    assert_eq!(
        fail(src, "k4", &n).message,
        "in a call of `scale`: constexpr `K` is declared `i32` but bound to `true` (a bool); expected an integer"
    );
}

#[test]
fn recursive_device_functions_are_cut_off() {
    let src =
        "#[device] fn f(x: i32) -> i32 { f(x) } #[kernel] fn k(o: *mut i32) { store(o, f(1)); }";
    assert_eq!(
        fail(src, "k", &[]).message,
        "device calls nest deeper than 32 (is `f` recursive?)"
    );
}

#[test]
fn messages_are_identical_from_tokens_and_from_text() {
    let src = "#[kernel] fn k<const BLOCK: i32>(o: *mut i32) { store(o + arange::<BLOCK>(), 0); }";
    let from_text = fail(src, "k", &[bind("BLOCK", ConstValue::Int(48))]);
    let tokens: TokenStream = src.parse().expect("lex");
    let module =
        attn_dsl::frontend::parse_module(tokens).unwrap_or_else(|e| panic!("{}", e.message));
    let from_tokens = specialize(&module, "k", &[bind("BLOCK", ConstValue::Int(48))]).unwrap_err();
    assert_eq!(from_text.message, from_tokens.message);
}

#[test]
fn store_through_const_pointer_is_rejected_at_the_pointer() {
    let src = "#[kernel]\nfn k(x: *const f32, y: *mut f32) {\n    let offs = arange::<16>();\n    let p = x + offs;\n    store(select(true, p, p), load(y + offs));\n}\n";
    let e = fail(src, "k", &[]);
    assert_eq!(
        e.message,
        "`store` through `x`, which is declared `*const`; declare it `*mut` to write to it"
    );
    assert_eq!(e.span.start().line, line_of(src, "store("));
}

#[test]
fn store_through_mut_pointer_is_accepted() {
    let src = "#[kernel]\nfn k(x: *const f32, y: *mut f32) {\n    let offs = arange::<16>();\n    store(y + offs, load(x + offs));\n}\n";
    let module = parse_module_str(src).unwrap_or_else(|e| panic!("parse: {}", e.message));
    assert!(specialize(&module, "k", &[]).is_ok());
}
