//! Lowering of whole kernels (softmax, matmul, flash attention, device calls, control
//! flow), checked structurally on the produced IR.

use attn_dsl::frontend::parse_module_str;
use attn_dsl::ir::{Elem, Function, Op, OpKind, ParamKind, ReduceKind, Scalar, ScalarType, Type};
use attn_dsl::{specialize, Binding, ConstValue, Specialized};

fn spec(src: &str, kernel: &str, binds: &[(&str, ConstValue)]) -> Specialized {
    let module = parse_module_str(src).unwrap_or_else(|e| panic!("parse: {}", e.message));
    let b: Vec<Binding> = binds
        .iter()
        .map(|(n, v)| Binding::new(*n, v.clone()))
        .collect();
    specialize(&module, kernel, &b).unwrap_or_else(|e| panic!("specialize: {}", e.message))
}

fn int(v: i64) -> ConstValue {
    ConstValue::Int(v)
}
fn dtype(s: ScalarType) -> ConstValue {
    ConstValue::Dtype(s)
}

/// Ops of the whole function (all regions) matching `pred`.
fn ops(f: &Function, pred: impl Fn(&Op) -> bool) -> Vec<&Op> {
    let mut ids = vec![];
    f.walk(&mut |id, op| {
        if pred(op) {
            ids.push(id);
        }
    });
    ids.into_iter().map(|id| f.op(id)).collect()
}

fn count(f: &Function, pred: impl Fn(&OpKind) -> bool) -> usize {
    ops(f, |o| pred(&o.kind)).len()
}

/// Ops directly in `block` (not nested) matching `pred`.
fn count_in(f: &Function, block: &attn_dsl::ir::Block, pred: impl Fn(&OpKind) -> bool) -> usize {
    block.ops.iter().filter(|&&o| pred(&f.op(o).kind)).count()
}

/// The type of the value a `let` named `name` (the last one if several).
fn named_ty(f: &Function, name: &str) -> Type {
    f.values
        .iter()
        .rev()
        .find(|v| v.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("no value named {name}"))
        .ty
        .clone()
}

fn tile(s: ScalarType, shape: &[usize]) -> Type {
    Type::tile(Elem::Scalar(s), shape.to_vec())
}

fn consts(f: &Function) -> Vec<Scalar> {
    ops(f, |o| matches!(o.kind, OpKind::Const(_)))
        .into_iter()
        .map(|o| match o.kind {
            OpKind::Const(s) => s,
            _ => unreachable!(),
        })
        .collect()
}

const SOFTMAX: &str = include_str!("kernels/softmax.rs.txt");
const MATMUL: &str = include_str!("kernels/matmul.rs.txt");
const FLASH: &str = include_str!("kernels/flash_attention.rs.txt");

#[test]
fn softmax_lowers_to_one_masked_load_two_reductions_and_a_store() {
    let s = spec(
        SOFTMAX,
        "softmax",
        &[("T", dtype(ScalarType::Bf16)), ("BLOCK", int(128))],
    );
    let f = &s.ir;
    assert_eq!(f.num_warps, 4);
    let kinds: Vec<ParamKind> = f.params.iter().map(|p| p.kind).collect();
    assert_eq!(
        kinds,
        vec![
            ParamKind::Ptr {
                elem: ScalarType::Bf16,
                mutable: false
            },
            ParamKind::Ptr {
                elem: ScalarType::Bf16,
                mutable: true
            },
            ParamKind::Scalar(ScalarType::I32),
            ParamKind::Scalar(ScalarType::I32),
        ]
    );
    let names: Vec<&str> = f.params.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["x", "out", "n_cols", "row_stride"]);
    assert_eq!(count(f, |k| matches!(k, OpKind::Arange { n: 128 })), 1);
    assert_eq!(count(f, |k| matches!(k, OpKind::ProgramId(0))), 1);
    assert_eq!(
        count(f, |k| matches!(
            k,
            OpKind::Reduce {
                kind: ReduceKind::Max,
                axis: 0
            }
        )),
        1
    );
    assert_eq!(
        count(f, |k| matches!(
            k,
            OpKind::Reduce {
                kind: ReduceKind::Sum,
                axis: 0
            }
        )),
        1
    );
    assert_eq!(
        count(f, |k| matches!(
            k,
            OpKind::Load {
                has_mask: true,
                has_other: true
            }
        )),
        1
    );
    assert_eq!(
        count(f, |k| matches!(k, OpKind::Store { has_mask: true })),
        1
    );
    assert_eq!(
        count(f, |k| matches!(
            k,
            OpKind::Unary(attn_dsl::ir::UnaryOp::Exp)
        )),
        1
    );
    assert_eq!(named_ty(f, "v"), tile(ScalarType::F32, &[128]));
    assert_eq!(named_ty(f, "m"), Type::scalar(ScalarType::F32));
    assert_eq!(named_ty(f, "mask"), tile(ScalarType::Bool, &[128]));
    // The `other` of the load is -inf rounded to the pointee dtype.
    assert!(consts(f).contains(&Scalar::Float(f64::NEG_INFINITY, ScalarType::Bf16)));
    assert_eq!(
        f.body.ops.last().map(|&o| &f.op(o).kind),
        Some(&OpKind::Return)
    );
}

#[test]
fn ir_name_hashes_the_key_and_bindings_follow_declaration_order() {
    let s = spec(
        SOFTMAX,
        "softmax",
        &[("BLOCK", int(64)), ("T", dtype(ScalarType::F32))],
    );
    assert_eq!(s.key(), "softmax<T=f32,BLOCK=64>");
    let hex = blake3::hash(s.key().as_bytes()).to_hex();
    assert_eq!(s.ir.name, format!("softmax_{}", &hex.as_str()[..8]));
    let other = spec(
        SOFTMAX,
        "softmax",
        &[("BLOCK", int(128)), ("T", dtype(ScalarType::F32))],
    );
    assert_ne!(s.ir.name, other.ir.name);
}

#[test]
fn every_op_carries_its_dsl_line() {
    let s = spec(FLASH, "flash_fwd", &flash_binds(true));
    let bad = ops(&s.ir, |o| o.loc.line == 0);
    assert!(
        bad.is_empty(),
        "ops without a line: {:?}",
        bad.iter().map(|o| &o.kind).collect::<Vec<_>>()
    );
    let dot_line = FLASH
        .lines()
        .position(|l| l.contains("let mut s = dot("))
        .map(|i| i as u32 + 1);
    let first_dot = ops(&s.ir, |o| o.kind == OpKind::Dot)[0];
    assert_eq!(Some(first_dot.loc.line), dot_line);
}

#[test]
fn matmul_carries_the_accumulator_through_a_runtime_loop() {
    let s = spec(
        MATMUL,
        "matmul",
        &[
            ("T", dtype(ScalarType::F16)),
            ("BLOCK_M", int(64)),
            ("BLOCK_N", int(32)),
            ("BLOCK_K", int(16)),
        ],
    );
    let f = &s.ir;
    assert_eq!(f.num_warps, 8);
    let fors = ops(f, |o| o.kind == OpKind::For);
    assert_eq!(fors.len(), 1);
    let fo = fors[0];
    assert_eq!(fo.results.len(), 1, "only acc is carried");
    assert_eq!(f.ty(fo.results[0]), &tile(ScalarType::F32, &[64, 32]));
    // lo, hi, step, acc init.
    assert_eq!(fo.operands.len(), 4);
    let body = &fo.regions[0];
    assert_eq!(body.args.len(), 2, "induction variable + acc");
    assert_eq!(f.ty(body.args[0]), &Type::scalar(ScalarType::I32));
    assert_eq!(count_in(f, body, |k| *k == OpKind::Dot), 1);
    assert_eq!(
        count_in(f, body, |k| matches!(
            k,
            OpKind::Load {
                has_mask: true,
                has_other: true
            }
        )),
        2
    );
    assert_eq!(
        count_in(f, &f.body, |k| matches!(
            k,
            OpKind::Store { has_mask: true }
        )),
        1
    );
    assert_eq!(named_ty(f, "a_tile"), tile(ScalarType::F16, &[64, 16]));
    assert_eq!(named_ty(f, "b_tile"), tile(ScalarType::F16, &[16, 32]));
    // The step is the constexpr BLOCK_K materialized as i32.
    assert_eq!(f.ty(fo.operands[2]), &Type::scalar(ScalarType::I32));
}

fn flash_binds(causal: bool) -> Vec<(&'static str, ConstValue)> {
    vec![
        ("T", dtype(ScalarType::Bf16)),
        ("BLOCK_M", int(16)),
        ("BLOCK_N", int(32)),
        ("HEAD_DIM", int(64)),
        ("CAUSAL", ConstValue::Bool(causal)),
    ]
}

#[test]
fn flash_attention_carries_online_softmax_state() {
    let s = spec(FLASH, "flash_fwd", &flash_binds(true));
    let f = &s.ir;
    let fors = ops(f, |o| o.kind == OpKind::For);
    assert_eq!(fors.len(), 1);
    let fo = fors[0];
    let tys: Vec<&Type> = fo.results.iter().map(|&r| f.ty(r)).collect();
    // Carried in declaration order: m_i, l_i, acc.
    assert_eq!(
        tys,
        vec![
            &tile(ScalarType::F32, &[16]),
            &tile(ScalarType::F32, &[16]),
            &tile(ScalarType::F32, &[16, 64])
        ]
    );
    let names: Vec<Option<&str>> = fo
        .results
        .iter()
        .map(|&r| f.value(r).name.as_deref())
        .collect();
    assert_eq!(names, vec![Some("m_i"), Some("l_i"), Some("acc")]);
    let body = &fo.regions[0];
    assert_eq!(count_in(f, body, |k| *k == OpKind::Dot), 2);
    // Causal: the device predicate's comparison and two selects in the loop.
    assert_eq!(count_in(f, body, |k| *k == OpKind::Select), 2);
    assert_eq!(named_ty(f, "p"), tile(ScalarType::F32, &[16, 32]));
    assert_eq!(named_ty(f, "q_tile"), tile(ScalarType::Bf16, &[16, 64]));
    assert_eq!(named_ty(f, "k_tile"), tile(ScalarType::Bf16, &[64, 32]));
    // `hi` is min((pid_m + 1) * BLOCK_M, seq_len) only when causal.
    assert_eq!(
        count_in(f, &f.body, |k| *k
            == OpKind::Binary(attn_dsl::ir::BinaryOp::Min)),
        1
    );
    assert_eq!(count(f, |k| matches!(k, OpKind::Store { .. })), 1);
}

#[test]
fn flash_attention_without_causal_folds_the_mask_away() {
    let s = spec(FLASH, "flash_fwd", &flash_binds(false));
    let f = &s.ir;
    let fo = ops(f, |o| o.kind == OpKind::For)[0];
    assert_eq!(count_in(f, &fo.regions[0], |k| *k == OpKind::Select), 1);
    assert_eq!(
        count(f, |k| *k == OpKind::Binary(attn_dsl::ir::BinaryOp::Min)),
        0
    );
    // The loop's upper bound is the seq_len parameter itself.
    assert_eq!(fo.operands[1], f.params[4].value);
}

const DEVICE_CONSTEXPRS: &str = r#"
#[device]
fn scale_add<const S: i32>(x: i32, y: i32) -> i32 {
    x * S + y
}
#[device]
fn twice_if_big<const K: i32>(x: i32) -> i32 {
    if K > 2 { x * 2 } else { x }
}
#[kernel]
fn k<const S: i32, const N: i32>(out: *mut i32) {
    let i = arange::<N>();
    let a = scale_add(i, 1);
    let b = scale_add::<7>(i, a);
    let c = twice_if_big::<{ S + 1 }>(b);
    store(out + i, c);
}
"#;

#[test]
fn device_functions_take_constexprs_from_turbofish_or_caller() {
    let s = spec(DEVICE_CONSTEXPRS, "k", &[("S", int(3)), ("N", int(16))]);
    let f = &s.ir;
    let c = consts(f);
    assert!(
        c.contains(&Scalar::Int(3, ScalarType::I32)),
        "S from the caller: {c:?}"
    );
    assert!(
        c.contains(&Scalar::Int(7, ScalarType::I32)),
        "S from the turbofish: {c:?}"
    );
    // K = S + 1 = 4 > 2: the doubling branch, folded (no If).
    assert_eq!(count(f, |k| *k == OpKind::If), 0);
    assert!(c.contains(&Scalar::Int(2, ScalarType::I32)));
    assert_eq!(
        count(f, |k| *k == OpKind::Binary(attn_dsl::ir::BinaryOp::Mul)),
        3
    );
    assert_eq!(named_ty(f, "c"), tile(ScalarType::I32, &[16]));

    let s = spec(DEVICE_CONSTEXPRS, "k", &[("S", int(1)), ("N", int(16))]);
    assert_eq!(
        count(&s.ir, |k| *k == OpKind::Binary(attn_dsl::ir::BinaryOp::Mul)),
        2
    );
}

const DEVICE_PARAM: &str = r#"
mod masks {
    #[device]
    fn causal<const OFFSET: i32>(q: i32, k: i32) -> bool { q + OFFSET >= k }
    #[device]
    fn everything(q: i32, k: i32) -> bool { true }
    #[kernel]
    pub fn masked<const MASK: Device, const OFFSET: i32, const B: i32>(x: *const f32, out: *mut f32) {
        let r = arange::<B>();
        let ptrs = x + r.unsqueeze(1) * B + r.unsqueeze(0);
        let v = load(ptrs);
        let keep = MASK(r.unsqueeze(1), r.unsqueeze(0));
        store(out + r.unsqueeze(1) * B + r.unsqueeze(0), select(keep, v, 0.0));
    }
}
"#;

#[test]
fn a_device_constexpr_selects_the_inlined_function() {
    let binds = |m: &str| {
        vec![
            ("MASK", ConstValue::Device(m.into())),
            ("OFFSET", int(2)),
            ("B", int(8)),
        ]
    };
    let s = spec(DEVICE_PARAM, "masked", &binds("causal"));
    assert_eq!(
        count(&s.ir, |k| matches!(
            k,
            OpKind::Cmp(attn_dsl::ir::CmpPred::Ge)
        )),
        1
    );
    assert_eq!(count(&s.ir, |k| *k == OpKind::Select), 1);
    // `everything` returns a constexpr true: the select folds to `v`.
    let s = spec(DEVICE_PARAM, "masked", &binds("everything"));
    assert_eq!(count(&s.ir, |k| matches!(k, OpKind::Cmp(_))), 0);
    assert_eq!(count(&s.ir, |k| *k == OpKind::Select), 0);
}

const EARLY_RETURN: &str = r#"
#[device]
fn clamp_low(x: i32) -> i32 {
    if x < 0 {
        return 0;
    }
    x
}
#[kernel]
fn early<const B: i32>(out: *mut i32, n: i32) {
    let pid = program_id(0);
    if pid >= n {
        return;
    }
    let v = clamp_low(pid - 3);
    store(out + pid, v);
}
"#;

#[test]
fn early_return_puts_the_rest_of_the_kernel_in_the_else_branch() {
    let s = spec(EARLY_RETURN, "early", &[("B", int(4))]);
    let f = &s.ir;
    let top: Vec<&OpKind> = f.body.ops.iter().map(|&o| &f.op(o).kind).collect();
    assert!(
        matches!(top.as_slice(), [.., OpKind::If, OpKind::Return]),
        "{top:?}"
    );
    let outer = ops(f, |o| o.kind == OpKind::If)[0];
    assert!(outer.results.is_empty());
    let (then_b, else_b) = (&outer.regions[0], &outer.regions[1]);
    assert_eq!(
        count_in(f, then_b, |k| *k != OpKind::Yield),
        0,
        "the returning branch is empty"
    );
    assert_eq!(
        count_in(f, else_b, |k| matches!(k, OpKind::Store { .. })),
        1
    );
    // The device function's early return yields its result from an If.
    assert_eq!(count_in(f, else_b, |k| *k == OpKind::If), 1);
    let inner = ops(f, |o| o.kind == OpKind::If)[1];
    assert_eq!(inner.results.len(), 1);
    assert_eq!(f.ty(inner.results[0]), &Type::scalar(ScalarType::I32));
}

const WHILE_LOOP: &str = r#"
#[kernel]
fn count_up(out: *mut f32, n: i32) {
    let mut i = 0;
    let mut acc = zeros::<f32>([16]);
    while i < n {
        acc = acc + 1.0;
        i += 1;
    }
    store(out + arange::<16>(), acc);
}
"#;

#[test]
fn while_loop_carries_reassigned_variables() {
    let s = spec(WHILE_LOOP, "count_up", &[]);
    let f = &s.ir;
    let w = ops(f, |o| o.kind == OpKind::While);
    assert_eq!(w.len(), 1);
    let w = w[0];
    let tys: Vec<&Type> = w.results.iter().map(|&r| f.ty(r)).collect();
    assert_eq!(
        tys,
        vec![
            &Type::scalar(ScalarType::I32),
            &tile(ScalarType::F32, &[16])
        ]
    );
    let before = &w.regions[0];
    let last = f.op(*before.ops.last().unwrap());
    assert_eq!(last.kind, OpKind::Condition);
    assert_eq!(last.operands.len(), 3, "condition + both carried values");
    assert_eq!(
        count_in(f, before, |k| matches!(
            k,
            OpKind::Cmp(attn_dsl::ir::CmpPred::Lt)
        )),
        1
    );
    assert_eq!(
        count_in(f, &w.regions[1], |k| *k
            == OpKind::Binary(attn_dsl::ir::BinaryOp::Add)),
        2
    );
    // The stored value is the While result, not the initial zeros.
    let st = ops(f, |o| matches!(o.kind, OpKind::Store { .. }))[0];
    assert_eq!(st.operands[1], w.results[1]);
}

const UNROLL: &str = r#"
#[kernel]
fn unrolled<const N: i32>(out: *mut f32) {
    let mut acc = zeros::<f32>([8]);
    for j in static_range::<N>() {
        acc = acc + j;
    }
    store(out + arange::<8>(), acc);
}
"#;

#[test]
fn static_range_unrolls_with_a_constexpr_index() {
    let s = spec(UNROLL, "unrolled", &[("N", int(4))]);
    let f = &s.ir;
    assert_eq!(count(f, |k| matches!(k, OpKind::For | OpKind::While)), 0);
    assert_eq!(
        count(f, |k| *k == OpKind::Binary(attn_dsl::ir::BinaryOp::Add)),
        4
    );
    let c = consts(f);
    for j in 0..4 {
        assert!(
            c.contains(&Scalar::Float(j as f64, ScalarType::F32)),
            "index {j} adopted as f32: {c:?}"
        );
    }
}

const CONST_IF: &str = r#"
#[kernel]
fn folded<const USE_X: bool>(out: *mut f32) {
    if USE_X {
        store(out, undefined_variable);
    } else {
        store(out, 1.0);
    }
    let v = if const { !USE_X } { 2.0 } else { undefined_too };
    store(out, v);
}
"#;

#[test]
fn constexpr_if_lowers_only_the_taken_branch() {
    let s = spec(CONST_IF, "folded", &[("USE_X", ConstValue::Bool(false))]);
    assert_eq!(count(&s.ir, |k| *k == OpKind::If), 0);
    assert_eq!(count(&s.ir, |k| matches!(k, OpKind::Store { .. })), 2);
    let module = parse_module_str(CONST_IF).unwrap_or_else(|e| panic!("{}", e.message));
    let err = specialize(
        &module,
        "folded",
        &[Binding::new("USE_X", ConstValue::Bool(true))],
    )
    .unwrap_err();
    assert_eq!(err.message, "unknown variable `undefined_variable`");
}

const RUNTIME_IF: &str = r#"
#[kernel]
fn pick(p: *const f32, out: *mut f32, n: i32) {
    let mut x = 0.0;
    let mut y = full([4], 1.0);
    if n > 0 {
        x = load(p);
    } else {
        y = y * 2;
    }
    let z = if n > 5 { x } else { 3 };
    store(out + arange::<4>(), y + z);
}
"#;

#[test]
fn runtime_if_yields_reassigned_variables_with_adopted_constants() {
    let s = spec(RUNTIME_IF, "pick", &[]);
    let f = &s.ir;
    let ifs = ops(f, |o| o.kind == OpKind::If);
    assert_eq!(ifs.len(), 2);
    let tys: Vec<&Type> = ifs[0].results.iter().map(|&r| f.ty(r)).collect();
    assert_eq!(
        tys,
        vec![&Type::scalar(ScalarType::F32), &tile(ScalarType::F32, &[4])]
    );
    assert_eq!(f.ty(ifs[1].results[0]), &Type::scalar(ScalarType::F32));
    let c = consts(f);
    // x's initial 0.0 and z's 3 adopt f32; `y * 2` multiplies by 2.0f32.
    for v in [0.0, 3.0, 2.0] {
        assert!(c.contains(&Scalar::Float(v, ScalarType::F32)), "{v}: {c:?}");
    }
}

#[test]
fn a_module_of_bare_functions_specializes_too() {
    let src = "#[kernel(num_warps = 2)] fn one(out: *mut i32) { store(out, program_id(0) % 3); }";
    let s = spec(src, "one", &[]);
    assert_eq!(s.ir.num_warps, 2);
    assert_eq!(
        count(&s.ir, |k| *k == OpKind::Binary(attn_dsl::ir::BinaryOp::Rem)),
        1
    );
}

/// A `Device` constexpr may default to a device function; binding it overrides the default.
#[test]
fn device_constexpr_defaults_to_a_named_function() {
    let src = r#"
mod m {
    #[device]
    fn plus_one(x: Tile) -> Tile { x + 1 }
    #[device]
    fn times_two(x: Tile) -> Tile { x * 2 }
    #[kernel]
    pub fn k<const F: Device = plus_one>(out: *mut i32) {
        let offs = arange::<16>();
        store(out + offs, F(offs));
    }
}
"#;
    let by_default = spec(src, "k", &[]);
    assert_eq!(
        by_default.bindings,
        vec![("F".to_string(), ConstValue::Device("plus_one".into()))]
    );
    let bound = spec(src, "k", &[("F", ConstValue::Device("times_two".into()))]);
    let binary = |s: &Specialized, op| count(&s.ir, |k| *k == OpKind::Binary(op));
    assert_eq!(binary(&by_default, attn_dsl::ir::BinaryOp::Add), 1);
    assert_eq!(binary(&bound, attn_dsl::ir::BinaryOp::Mul), 1);
    assert_eq!(binary(&bound, attn_dsl::ir::BinaryOp::Add), 0);
}
