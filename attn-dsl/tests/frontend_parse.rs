//! Front end: module forms, attribute grammar, and every check that does not depend on
//! constexpr values, with the message and the line it points at.

use attn_dsl::ast::ItemKind;
use attn_dsl::frontend::{parse_kernel_attr, parse_module, parse_module_str};
use attn_dsl::DslError;
use proc_macro2::TokenStream;

fn parse_err(src: &str) -> DslError {
    match parse_module_str(src) {
        Ok(m) => panic!("parsed unexpectedly ({} items)", m.items.len()),
        Err(e) => e,
    }
}

fn line_of(src: &str, needle: &str) -> usize {
    src.lines()
        .position(|l| l.contains(needle))
        .map(|i| i + 1)
        .unwrap_or_else(|| panic!("{needle} not found"))
}

/// Asserts that `body` inside a kernel fails with `message`, at the line containing `at`.
fn body_err(body: &str, message: &str, at: &str) {
    let src = format!("#[kernel]\nfn k<const N: i32>(x: *const f32, n: i32) {{\n{body}\n}}\n");
    let e = parse_err(&src);
    assert_eq!(e.message, message);
    assert_eq!(e.span.start().line, line_of(&src, at), "span of: {message}");
}

#[test]
fn module_with_kernels_and_devices() {
    let src = r#"
/// Softmax and a helper.
mod m {
    /// A device helper.
    #[device]
    fn helper<const K: i32>(x: i32) -> i32 { x * K }

    #[kernel(num_warps = 8, require(N % 16 == 0, "N must be a multiple of 16"), require(!FLAG || N > 0, "needs N"))]
    pub fn k<T, const N: i32, const FLAG: bool, const SCALE: f32, const MASK: Device>(x: *const T, out: *mut f32, n: i32, s: T) {
        store(out, 1.0);
    }
}
"#;
    let m = parse_module_str(src).unwrap_or_else(|e| panic!("{}", e.message));
    assert_eq!(m.items.len(), 2);
    let d = m.item("helper").expect("helper");
    assert_eq!(d.kind, ItemKind::Device);
    let k = m.item("k").expect("k");
    assert_eq!(k.kind, ItemKind::Kernel);
    assert_eq!(k.num_warps.fixed(), Some(8));
    let msgs: Vec<&str> = k.requires.iter().map(|r| r.message.as_str()).collect();
    assert_eq!(msgs, ["N must be a multiple of 16", "needs N"]);
    assert_eq!(k.requires[0].span.start().line, line_of(src, "#[kernel("));
    assert!(
        k.func.attrs.iter().all(|a| a.path().is_ident("doc")),
        "DSL attributes are stripped"
    );
}

#[test]
fn bare_functions_and_defaults() {
    let m = parse_module_str("#[kernel] fn a(o: *mut i32) {} #[device] fn b() {}")
        .unwrap_or_else(|e| panic!("{}", e.message));
    assert_eq!(
        m.items.iter().map(|i| i.name()).collect::<Vec<_>>(),
        ["a", "b"]
    );
    assert_eq!(m.items[0].num_warps.fixed(), Some(4));
    let one = parse_module_str("#[attn_dsl::kernel(num_warps = 1)] fn a(o: *mut i32) {}")
        .unwrap_or_else(|e| panic!("{}", e.message));
    assert_eq!(one.items[0].num_warps.fixed(), Some(1));
}

#[test]
fn parse_kernel_attr_takes_the_arguments_separately() {
    let attr: TokenStream = "num_warps = 2, require(N > 0, \"positive\")"
        .parse()
        .expect("lex");
    let func: syn::ItemFn =
        syn::parse_str("fn k<const N: i32>(o: *mut i32) { store(o, N); }").expect("fn");
    let item =
        parse_kernel_attr(ItemKind::Kernel, attr, func).unwrap_or_else(|e| panic!("{}", e.message));
    assert_eq!((item.num_warps.fixed(), item.requires.len()), (Some(2), 1));
    let attr: TokenStream = "num_warps = 2".parse().expect("lex");
    let func: syn::ItemFn = syn::parse_str("fn d(x: i32) -> i32 { x }").expect("fn");
    let e = parse_kernel_attr(ItemKind::Device, attr, func)
        .err()
        .expect("device args");
    assert_eq!(
        e.message,
        "#[device] takes only `require(COND, \"message\")` rules (no num_warps: device functions are inlined)"
    );
}

#[test]
fn tokens_and_text_agree() {
    let src = "#[kernel] fn k(o: *mut i32) { match 1 { _ => {} } }";
    let a = parse_err(src);
    let b = parse_module(src.parse().expect("lex"))
        .err()
        .expect("error");
    assert_eq!(a.message, b.message);
}

#[test]
fn attribute_errors() {
    let cases = [
        (
            "#[kernel(num_warps = 3)] fn k(o: *mut i32) {}",
            "num_warps = 3 is not supported; allowed: 1, 2, 4, 8, 16",
        ),
        (
            "#[kernel(warps = 4)] fn k(o: *mut i32) {}",
            "unknown kernel attribute `warps`; allowed: `num_warps = N`, `num_stages = N` (literals or constexpr expressions), `fast_math = true`, `tma = B`, `warp_specialize = B`, `pingpong = B` (literals or boolean constexpr expressions), `require(COND, \"message\")`",
        ),
        (
            "#[kernel(num_stages = 5)] fn k(o: *mut i32) {}",
            "num_stages = 5 is not supported; allowed: 1, 2, 3, 4",
        ),
        (
            "#[kernel(num_stages = 2, num_stages = 3)] fn k(o: *mut i32) {}",
            "`num_stages` is given twice",
        ),
        (
            "#[kernel(require(true))] fn k(o: *mut i32) {}",
            "`require` takes a condition and a message: require(COND, \"message\")",
        ),
        (
            "#[kernel(num_warps = 4, num_warps = 8)] fn k(o: *mut i32) {}",
            "`num_warps` is given twice",
        ),
        (
            "#[kernel(tma = 1)] fn k(o: *mut i32) {}",
            "`tma` takes `true`, `false` or a boolean constexpr expression",
        ),
        (
            "#[kernel(tma = true, tma = false)] fn k(o: *mut i32) {}",
            "`tma` is given twice",
        ),
        (
            "#[kernel(tma = LONG)] fn k<const N: i32>(o: *mut i32) {}",
            "unknown constexpr `LONG` in `tma`; declared constexprs: N",
        ),
        (
            "mod m { #[device(tma = true)] fn d(x: i32) -> i32 { x } }",
            "#[device] takes only `require(COND, \"message\")` rules (tma is a kernel attribute)",
        ),
        (
            "#[kernel(warp_specialize = 2)] fn k(o: *mut i32) {}",
            "`warp_specialize` takes `true`, `false` or a boolean constexpr expression",
        ),
        (
            "#[kernel(pingpong = \"yes\")] fn k(o: *mut i32) {}",
            "`pingpong` takes `true`, `false` or a boolean constexpr expression",
        ),
        (
            "#[kernel(pingpong = true, tma = true, pingpong = false)] fn k(o: *mut i32) {}",
            "`pingpong` is given twice",
        ),
        (
            "#[kernel(warp_specialize = SPLIT)] fn k<const N: i32>(o: *mut i32) {}",
            "unknown constexpr `SPLIT` in `warp_specialize`; declared constexprs: N",
        ),
        (
            "mod m { #[device(warp_specialize = false)] fn d(x: i32) -> i32 { x } }",
            "#[device] takes only `require(COND, \"message\")` rules (warp_specialize is a kernel attribute)",
        ),
    ];
    for (src, message) in cases {
        assert_eq!(parse_err(src).message, message, "{src}");
    }
}

#[test]
fn require_naming_an_unknown_constexpr_points_at_it() {
    let src = "#[kernel(\n  require(N > 0 &&\n    WINDOW > 0, \"w\"))]\nfn k<const N: i32>(o: *mut i32) {}";
    let e = parse_err(src);
    assert_eq!(
        e.message,
        "unknown constexpr `WINDOW` in `require`; declared constexprs: N"
    );
    let start = e.span.start();
    assert_eq!((start.line, start.column), (3, 4));
}

#[test]
fn module_item_errors() {
    let src = "mod m {\n  #[kernel] fn k(o: *mut i32) {}\n  struct S;\n}";
    let e = parse_err(src);
    assert_eq!(
        e.message,
        "only `#[kernel]` and `#[device]` functions are allowed in a DSL module"
    );
    assert_eq!(e.span.start().line, 3);
    assert_eq!(
        parse_err("fn k() {}").message,
        "`k` needs `#[kernel]` or `#[device]`"
    );
    assert_eq!(
        parse_err("#[inline] #[device] fn k() {}").message,
        "unsupported attribute `#[inline]` on a DSL function"
    );
    assert_eq!(
        parse_err("#[device] fn k() {} #[device] fn k() {}").message,
        "`k` is defined twice in the module"
    );
    assert_eq!(
        parse_err("#[kernel] #[device] fn k() {}").message,
        "a function takes one DSL attribute; `#[device]` is extra"
    );
}

#[test]
fn signature_errors() {
    let e = parse_err("#[kernel] fn k<const N: u8>(o: *mut i32) {}");
    assert_eq!(
        e.message,
        "constexpr `N` has unsupported type `u8`; allowed: i32, i64, u32, usize, bool, f32, f64, Device (or a type parameter for a dtype)"
    );
    let e = parse_err("#[kernel] fn k(o: Vec<f32>) {}");
    assert_eq!(
        e.message,
        "parameter `o` has unsupported type `Vec < f32 >`; allowed: `*const X`, `*mut X`, i32, i64, f32, bool or a dtype parameter"
    );
    let e = parse_err("#[kernel] fn k(o: *mut u8) {}");
    assert_eq!(e.message, "parameter `o` points to unsupported type `u8`; allowed: bf16, f16, f32, i32, i64, bool or a dtype parameter");
    let e = parse_err("#[kernel] fn k(o: *mut f32) -> f32 { 1.0 }");
    assert_eq!(
        e.message,
        "a kernel returns nothing (it writes through `*mut` parameters); remove `-> f32`"
    );
    assert_eq!(
        parse_err("#[kernel] unsafe fn k() {}").message,
        "`unsafe fn` is not supported in the DSL"
    );
    assert_eq!(
        parse_err("#[kernel] fn k<'a>() {}").message,
        "lifetime parameters are not supported on DSL functions"
    );
    assert_eq!(
        parse_err("#[kernel] fn k((a, b): (i32, i32)) {}").message,
        "parameter pattern `(a , b)` is not supported; use a plain name"
    );
}

#[test]
fn unsupported_syntax_is_reported_at_its_span() {
    body_err(
        "    let v = match n { _ => 1 };",
        "unsupported syntax in a kernel: `match` (use `if`/`select`)",
        "match",
    );
    body_err(
        "    let f = |a| a;",
        "unsupported syntax in a kernel: closure (write a `#[device]` function)",
        "|a|",
    );
    body_err(
        "    loop { }",
        "unsupported syntax in a kernel: `loop` (use `while`)",
        "loop",
    );
    body_err(
        "    let r = &n;",
        "unsupported syntax in a kernel: reference `&` (values are passed by value)",
        "&n",
    );
    body_err(
        "    println!(\"{}\", n);",
        "unsupported syntax in a kernel: macro `println!`",
        "println",
    );
    body_err(
        "    let v = vec![1];",
        "unsupported syntax in a kernel: macro `vec!`",
        "vec!",
    );
    body_err(
        "    let s = S { a: 1 };",
        "unsupported syntax in a kernel: struct literal",
        "S {",
    );
    body_err(
        "    let v = n.pow(2);",
        "unsupported syntax in a kernel: method call `.pow()` (DSL methods: unsqueeze, max, min, sum, cast, trans; `step_by` on a `for` range)",
        "pow",
    );
    body_err(
        "    let v = x[0];",
        "unsupported syntax in a kernel: indexing `a[i]` (use pointer arithmetic and `load`)",
        "x[0]",
    );
    body_err(
        "    let v = unsafe { 1 };",
        "unsupported syntax in a kernel: `unsafe`",
        "unsafe",
    );
    body_err(
        "    let v = n as f32;",
        "unsupported syntax in a kernel: `as` cast (use `.cast::<T>()`)",
        "as f32",
    );
    body_err(
        "    'outer: for i in 0..n { }",
        "unsupported syntax in a kernel: loop label",
        "'outer",
    );
    body_err(
        "    while n > 0 {\n        break;\n    }",
        "unsupported syntax in a kernel: `break` (use a `while` condition)",
        "break",
    );
    body_err(
        "    let v = *x;",
        "unsupported syntax in a kernel: dereference `*p` (use `load(p)`)",
        "*x",
    );
    body_err("    let v = \"text\";", "unsupported syntax in a kernel: literal `\"text\"` (only integer, float and bool literals)", "text");
    body_err(
        "    if let a = n { }",
        "unsupported syntax in a kernel: `let` in a condition (`if let`/`while let`)",
        "if let",
    );
    body_err(
        "    fn inner() {}",
        "unsupported syntax in a kernel: nested item (declare it at module level)",
        "fn inner",
    );
    body_err(
        "    let Some(a) = n else { return; };",
        "unsupported syntax in a kernel: `let ... else`",
        "else",
    );
    body_err(
        "    let v = n.0;",
        "unsupported syntax in a kernel: field access `.field`",
        "n.0",
    );
}

#[test]
fn return_inside_a_loop_is_rejected() {
    body_err(
        "    for i in 0..n {\n        if i > 3 {\n            return;\n        }\n    }",
        "unsupported syntax in a kernel: `return` inside a loop (early exit is only supported outside loops)",
        "return;",
    );
}

#[test]
fn device_functions_say_where_they_are() {
    let e = parse_err("#[device] fn d(x: i32) -> i32 { match x { _ => x } }");
    assert_eq!(
        e.message,
        "unsupported syntax in a device function: `match` (use `if`/`select`)"
    );
}

#[test]
fn if_const_is_the_only_const_block() {
    assert!(parse_module_str(
        "#[kernel] fn k<const F: bool>(o: *mut i32) { if const { F } { store(o, 1); } }"
    )
    .is_ok());
    body_err(
        "    let v = const { 1 };",
        "unsupported syntax in a kernel: `const` block (only `if const { COND }` is supported)",
        "const {",
    );
}
