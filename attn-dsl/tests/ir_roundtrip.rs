//! Printer/parser round trip: parse(print(f)) rebuilds f exactly (arena order included).

#[path = "ir_fixtures.rs"]
mod fixtures;

use attn_dsl::ir::parser::parse_function;
use attn_dsl::ir::printer::print_function;
use attn_dsl::ir::verify::verify;
use attn_dsl::ir::Function;

/// Structural equality that treats NaN literals as equal to themselves (Debug prints every
/// field, so equal Debug text means equal functions up to NaN payloads).
fn same(a: &Function, b: &Function) -> bool {
    format!("{a:?}") == format!("{b:?}")
}

fn round_trip(f: &Function) {
    verify(f).expect("fixture verifies");
    let text = print_function(f);
    let g = parse_function(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert!(
        same(f, &g),
        "round trip changed the function:\n{text}\n---\n{}",
        print_function(&g)
    );
    assert_eq!(print_function(&g), text);
}

#[test]
fn kitchen_sink_round_trips() {
    round_trip(&fixtures::kitchen_sink());
}

#[test]
fn softmax_round_trips() {
    round_trip(&fixtures::softmax_kernel());
}

#[test]
fn kitchen_sink_prints_every_op() {
    let text = print_function(&fixtures::kitchen_sink());
    for m in [
        "= const ",
        "program_id 0",
        "num_programs 2",
        "arange 16",
        "splat ",
        "broadcast ",
        "expand_dims ",
        "trans ",
        "= exp ",
        "exp2 ",
        "= log ",
        "log2 ",
        "sqrt ",
        "tanh ",
        "abs ",
        "neg ",
        "not ",
        "= add ",
        "sub ",
        "= mul ",
        "div ",
        "rem ",
        "min ",
        "max ",
        "and ",
        "= or ",
        "xor ",
        "shl ",
        "shr ",
        "cmp eq",
        "cmp ne",
        "cmp lt",
        "cmp le",
        "cmp gt",
        "cmp ge",
        "select ",
        "cast ",
        "add_ptr ",
        "load ",
        " mask ",
        " other ",
        "store ",
        "dot ",
        "reduce sum",
        "reduce max",
        "reduce min",
        "= for ",
        " iter(",
        "= if ",
        "} else {",
        "= while (",
        "} do (",
        "condition ",
        "yield ",
        "return",
        "-inf",
        "NaN",
        "-0.0",
        "1e-7",
        "true",
        "false",
        "%\"a b\"",
        "%\"7\"",
        "%m.1",
        ": i64",
        ": f16",
        ": bf16",
        "mut ptr<f32>",
        "loc(40:3)",
    ] {
        assert!(text.contains(m), "missing `{m}` in\n{text}");
    }
}

#[test]
fn layouts_round_trip() {
    use attn_dsl::ir::{BlockedLayout, Layout};
    let mut f = fixtures::softmax_kernel();
    let blocked = Layout::Blocked(BlockedLayout {
        size_per_thread: vec![8],
        threads_per_warp: vec![32],
        warps_per_cta: vec![4],
        order: vec![0],
    });
    let layouts = [
        blocked.clone(),
        Layout::Slice {
            dim: 1,
            parent: Box::new(Layout::Mma {
                warps_per_cta: [4, 1],
            }),
        },
        Layout::DotOperand {
            op_idx: 1,
            parent: Box::new(Layout::Mma {
                warps_per_cta: [2, 2],
            }),
        },
        Layout::Shared {
            vec: 8,
            per_phase: 1,
            max_phase: 8,
            stages: 3,
        },
        Layout::Owned {
            warpgroup: 1,
            inner: Box::new(Layout::Mma {
                warps_per_cta: [4, 1],
            }),
        },
    ];
    let mut k = 0;
    for v in f.values.iter_mut().filter(|v| !v.ty.is_scalar()) {
        v.ty.layout = layouts[k % layouts.len()].clone();
        k += 1;
    }
    assert!(k >= 5);
    let text = print_function(&f);
    for s in [
        "#owned<wg=1, inner=#mma<wpc=[4, 1]>>",
        "#blocked<spt=[8], tpw=[32], wpc=[4], order=[0]>",
        "#slice<dim=1, parent=#mma<wpc=[4, 1]>>",
        "#dot_op<idx=1",
        "#shared<vec=8",
    ] {
        assert!(text.contains(s), "missing {s} in\n{text}");
    }
    let g = parse_function(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert!(same(&f, &g));
}

#[test]
fn param_alias_and_unnamed_values_round_trip() {
    let mut f = fixtures::softmax_kernel();
    f.values[f.params[2].value.0 as usize].name = None;
    f.values[f.params[0].value.0 as usize].name = Some("input".into());
    for v in f.values.iter_mut().skip(5).step_by(2) {
        v.name = None;
    }
    let text = print_function(&f);
    assert!(text.contains("%input as x: ptr<bf16>"), "{text}");
    assert!(text.contains("%2 as n: i32"), "{text}");
    let g = parse_function(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert!(same(&f, &g));
}

#[test]
fn golden_softmax_snapshot() {
    let text = print_function(&fixtures::softmax_kernel());
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/ir_golden_softmax.txt");
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(path, &text).expect("write golden");
    }
    let golden = std::fs::read_to_string(path).expect("golden file");
    assert_eq!(
        text, golden,
        "printed IR changed; if intended, update tests/ir_golden_softmax.txt:\n{text}"
    );
}

fn parse_err(text: &str) -> String {
    match parse_function(text) {
        Ok(f) => panic!("parsed invalid IR:\n{}", print_function(&f)),
        Err(e) => e.to_string(),
    }
}

#[test]
fn parse_errors_name_line_and_expectation() {
    let e = parse_err("kernel @k() warps(4) {\n  %0 = add %1, %1 : i32\n  return\n}\n");
    assert!(
        e.contains("line 2") && e.contains("undefined value `%1`"),
        "{e}"
    );
    let e = parse_err(
        "kernel @k() warps(4) {\n  %0 = const 1 : i32\n  %0 = const 2 : i32\n  return\n}\n",
    );
    assert!(e.contains("line 3") && e.contains("defined twice"), "{e}");
    let e = parse_err("kernel @k() warps(4) {\n  %0 = frobnicate : i32\n  return\n}\n");
    assert!(
        e.contains("line 2") && e.contains("unknown op `frobnicate`"),
        "{e}"
    );
    let e = parse_err("kernel @k(%a: i32) warps(4) {\n  %0 = const x : i32\n}\n");
    assert!(e.contains("line 2") && e.contains("integer literal"), "{e}");
    let e =
        parse_err("kernel @k(%a: i32) warps(4) {\n  %0 = arange 16 : tile<i32, 16> #fancy<>\n}\n");
    assert!(
        e.contains("line 2") && e.contains("unknown layout `#fancy`"),
        "{e}"
    );
    let e = parse_err("kernel @k(%a: i32) warps(4) {\n  return\n");
    assert!(e.contains("`}` closing the block"), "{e}");
    let e = parse_err("kernel @k(%a: i32) warps(4) {\n  %x, %y = const 1 : i32\n}\n");
    assert!(
        e.contains("2 result(s) but lists 1 type(s)") || e.contains("expected"),
        "{e}"
    );
}

#[test]
fn parser_accepts_comments_and_free_spacing() {
    let text = "// a comment\nkernel @k(%a: i32) warps(2) {   // trailing\n %b = add %a,%a : i32 loc(3:4)\n return\n}\n";
    let f = parse_function(text).expect("parses");
    verify(&f).expect("verifies");
    assert_eq!(f.num_warps, 2);
    assert_eq!(f.ops[0].loc.line, 3);
}
