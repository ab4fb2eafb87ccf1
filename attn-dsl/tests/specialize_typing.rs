//! The typing rules of `attn_dsl::specialize::typing`: constexpr adoption, folding,
//! materialization, suffixed literals, tuples from device functions.

use attn_dsl::frontend::parse_module_str;
use attn_dsl::ir::{BinaryOp, Elem, Function, Op, OpKind, Scalar, ScalarType, Type};
use attn_dsl::{specialize, Binding, ConstValue, DslError, Specialized};

fn kernel(body: &str) -> String {
    format!(
        "#[device]\nfn pair(x: i32) -> i32 {{ (x + 1, x * 2) }}\n\
         #[kernel]\nfn k<const N: i32, const F: bool, const SCALE: f32>(x: *const f32, out: *mut f32, iout: *mut i32, n: i32, w: i64) {{\n{body}\n}}\n"
    )
}

fn binds() -> Vec<Binding> {
    vec![
        Binding::new("N", ConstValue::Int(16)),
        Binding::new("F", ConstValue::Bool(true)),
        Binding::new("SCALE", ConstValue::Float(0.5)),
    ]
}

fn ok(body: &str) -> Specialized {
    let m = parse_module_str(&kernel(body)).unwrap_or_else(|e| panic!("parse: {}", e.message));
    specialize(&m, "k", &binds()).unwrap_or_else(|e| panic!("specialize: {}", e.message))
}

fn err(body: &str) -> DslError {
    let m = parse_module_str(&kernel(body)).unwrap_or_else(|e| panic!("parse: {}", e.message));
    specialize(&m, "k", &binds()).expect_err("expected an error")
}

fn all_ops(f: &Function) -> Vec<&Op> {
    let mut ids = vec![];
    f.walk(&mut |id, _| ids.push(id));
    ids.into_iter().map(|id| f.op(id)).collect()
}

fn consts(f: &Function) -> Vec<Scalar> {
    all_ops(f)
        .into_iter()
        .filter_map(|o| match o.kind {
            OpKind::Const(s) => Some(s),
            _ => None,
        })
        .collect()
}

fn named(f: &Function, name: &str) -> Type {
    f.values
        .iter()
        .rev()
        .find(|v| v.name.as_deref() == Some(name))
        .expect(name)
        .ty
        .clone()
}

#[test]
fn integer_literal_adopts_a_float_operand() {
    let s = ok("let v = load(x + arange::<16>()) * 3;\nstore(out + arange::<16>(), v);");
    assert_eq!(consts(&s.ir), vec![Scalar::Float(3.0, ScalarType::F32)]);
}

#[test]
fn constexpr_float_adopts_and_folds() {
    // SCALE * 4 folds to 2.0 before it meets the tile.
    let s = ok("let v = load(x + arange::<16>()) * (SCALE * 4);\nstore(out + arange::<16>(), v);");
    assert_eq!(consts(&s.ir), vec![Scalar::Float(2.0, ScalarType::F32)]);
}

#[test]
fn constexpr_expressions_emit_nothing_until_used() {
    let s = ok(
        "let a = N * 2 + 1;\nlet b = cdiv(a, 4);\nlet c = if F { b } else { 0 };\nstore(iout, c);",
    );
    let ops: Vec<&OpKind> = all_ops(&s.ir).into_iter().map(|o| &o.kind).collect();
    assert_eq!(
        ops,
        vec![
            &OpKind::Const(Scalar::Int(9, ScalarType::I32)),
            &OpKind::Store { has_mask: false },
            &OpKind::Return
        ]
    );
}

#[test]
fn a_constexpr_used_alone_materializes_with_its_default_dtype() {
    let s = ok("store(out, SCALE);\nstore(iout, N);");
    assert_eq!(
        consts(&s.ir),
        vec![
            Scalar::Float(0.5, ScalarType::F32),
            Scalar::Int(16, ScalarType::I32)
        ]
    );
}

#[test]
fn i64_suffix_makes_a_typed_constant() {
    let s = ok("let v = w + 1i64;\nstore(iout, v.cast::<i32>());");
    assert_eq!(consts(&s.ir), vec![Scalar::Int(1, ScalarType::I64)]);
    assert_eq!(named(&s.ir, "v"), Type::scalar(ScalarType::I64));
    assert_eq!(
        err("let v = n + 1i64;").message,
        "dtype mismatch in `+`: i32 vs i64 (insert `.cast::<i64>()`)"
    );
    assert_eq!(
        err("let v = 1.0f64;").message,
        "unsupported literal suffix `f64` in `1.0f64`: float literals are f32; write it without a suffix"
    );
}

#[test]
fn an_integer_constant_must_fit_its_dtype() {
    assert_eq!(
        err("let v = n + 5000000000;").message,
        "constant 5000000000 does not fit in i32 (in `+`)"
    );
}

#[test]
fn bool_operators_are_elementwise_on_tiles_and_fold_on_constexprs() {
    let s =
        ok("let a = arange::<16>();\nlet m = (a < n) && (a > 2) || !F;\nstore(out + a, 1.0, m);");
    let f = &s.ir;
    assert_eq!(
        named(f, "m"),
        Type::tile(Elem::Scalar(ScalarType::Bool), vec![16])
    );
    let ands = all_ops(f)
        .into_iter()
        .filter(|o| o.kind == OpKind::Binary(BinaryOp::And))
        .count();
    let ors = all_ops(f)
        .into_iter()
        .filter(|o| o.kind == OpKind::Binary(BinaryOp::Or))
        .count();
    // `|| !F` with F = true is `|| false`: folded away.
    assert_eq!((ands, ors), (1, 0));
    assert_eq!(
        err("let m = n && F;").message,
        "`&&` needs bool operands, got i32"
    );
}

#[test]
fn runtime_cdiv_is_add_sub_div() {
    let s = ok("let t = cdiv(n, N);\nstore(iout, t);");
    let kinds: Vec<OpKind> = all_ops(&s.ir)
        .into_iter()
        .filter(|o| matches!(o.kind, OpKind::Binary(_)))
        .map(|o| o.kind.clone())
        .collect();
    assert_eq!(
        kinds,
        vec![
            OpKind::Binary(BinaryOp::Add),
            OpKind::Binary(BinaryOp::Sub),
            OpKind::Binary(BinaryOp::Div)
        ]
    );
}

#[test]
fn device_functions_return_tuples() {
    let s = ok("let (a, b) = pair(arange::<16>());\nstore(iout + a, b);");
    assert_eq!(
        named(&s.ir, "a"),
        Type::tile(Elem::Scalar(ScalarType::I32), vec![16])
    );
    assert_eq!(
        named(&s.ir, "b"),
        Type::tile(Elem::Scalar(ScalarType::I32), vec![16])
    );
    assert_eq!(
        err("let (a, b, c) = pair(n);").message,
        "pattern `(a , b , c)` expects a tuple of 3, got a tuple"
    );
}

#[test]
fn runtime_else_if_chains_join_values() {
    let s = ok("let v = if n > 4 { 1.0 } else if n > 2 { load(x) } else { 3 };\nstore(out, v);");
    let ifs: Vec<&Op> = all_ops(&s.ir)
        .into_iter()
        .filter(|o| o.kind == OpKind::If)
        .collect();
    assert_eq!(ifs.len(), 2);
    for i in ifs {
        assert_eq!(s.ir.ty(i.results[0]), &Type::scalar(ScalarType::F32));
    }
}

#[test]
fn pointer_arithmetic_takes_integer_offsets() {
    let s =
        ok("let p = x + 4;\nlet q = arange::<16>() + p;\nstore(out + arange::<16>(), load(q));");
    assert_eq!(
        named(&s.ir, "q"),
        Type::tile(Elem::Ptr(ScalarType::F32), vec![16])
    );
    assert_eq!(
        err("let p = x + load(x);").message,
        "`pointer offset`: offset must be i32 or i64, got f32"
    );
}
