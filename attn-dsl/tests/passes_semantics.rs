//! The optimization pipeline preserves meaning: a small scalar reference evaluator (written
//! here, independently of the folding code) runs random straight-line i32/f32 programs before
//! and after `optimize`; the stores must be identical, and a program that divides by zero
//! must still do so.

#[path = "ir_fixtures.rs"]
mod fixtures;

use attn_dsl::ir::printer::print_function;
use attn_dsl::ir::*;
use proptest::prelude::*;
use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, PartialEq)]
enum V {
    I(i32),
    F(f32),
    B(bool),
    /// Pointer: parameter index and element offset.
    P(usize, i64),
}

/// Stored values by (pointer parameter, offset); `Err` names the trapping op.
fn eval(f: &Function, a: i32, b: i32, x: f32) -> Result<BTreeMap<(usize, i64), V>, String> {
    let mut env: BTreeMap<ValueId, V> = BTreeMap::new();
    for (i, p) in f.params.iter().enumerate() {
        let v = match p.name.as_str() {
            "a" => V::I(a),
            "b" => V::I(b),
            "x" => V::F(x),
            _ => V::P(i, 0),
        };
        env.insert(p.value, v);
    }
    let mut mem = BTreeMap::new();
    for &o in &f.body.ops {
        let op = f.op(o);
        let arg = |i: usize| env[&op.operands[i]];
        let r = match (&op.kind, op.operands.len()) {
            (OpKind::Const(Scalar::Int(v, _)), _) => V::I(*v as i32),
            (OpKind::Const(Scalar::Float(v, _)), _) => V::F(*v as f32),
            (OpKind::Const(Scalar::Bool(v)), _) => V::B(*v),
            (OpKind::Binary(bop), _) => match (arg(0), arg(1)) {
                (V::I(p), V::I(q)) => V::I(match bop {
                    BinaryOp::Add => p.wrapping_add(q),
                    BinaryOp::Sub => p.wrapping_sub(q),
                    BinaryOp::Mul => p.wrapping_mul(q),
                    BinaryOp::Div | BinaryOp::Rem if q == 0 || (p == i32::MIN && q == -1) => {
                        return Err(format!("integer division trap at {:?}", op.loc))
                    }
                    BinaryOp::Div => p / q,
                    BinaryOp::Rem => p % q,
                    BinaryOp::Min => p.min(q),
                    BinaryOp::Max => p.max(q),
                    BinaryOp::And => p & q,
                    BinaryOp::Or => p | q,
                    BinaryOp::Xor => p ^ q,
                    BinaryOp::Shl | BinaryOp::Shr if !(0..32).contains(&q) => {
                        return Err(format!("shift out of range at {:?}", op.loc))
                    }
                    BinaryOp::Shl => p << q,
                    BinaryOp::Shr => p >> q,
                }),
                (V::F(p), V::F(q)) => V::F(match bop {
                    BinaryOp::Add => p + q,
                    BinaryOp::Sub => p - q,
                    BinaryOp::Mul => p * q,
                    BinaryOp::Div => p / q,
                    BinaryOp::Min => p.min(q),
                    BinaryOp::Max => p.max(q),
                    _ => unreachable!(),
                }),
                other => panic!("bad binary operands {other:?}"),
            },
            (OpKind::Unary(u), _) => match (u, arg(0)) {
                (UnaryOp::Neg, V::I(p)) => V::I(p.wrapping_neg()),
                (UnaryOp::Abs, V::I(p)) => V::I(p.wrapping_abs()),
                (UnaryOp::Not, V::I(p)) => V::I(!p),
                other => panic!("unsupported unary {other:?}"),
            },
            (OpKind::Cmp(pred), _) => {
                let ord = match (arg(0), arg(1)) {
                    (V::I(p), V::I(q)) => p.partial_cmp(&q),
                    (V::F(p), V::F(q)) => p.partial_cmp(&q),
                    other => panic!("bad cmp operands {other:?}"),
                };
                use std::cmp::Ordering::*;
                V::B(match (pred, ord) {
                    (CmpPred::Ne, None) => true,
                    (_, None) => false,
                    (CmpPred::Eq, Some(o)) => o == Equal,
                    (CmpPred::Ne, Some(o)) => o != Equal,
                    (CmpPred::Lt, Some(o)) => o == Less,
                    (CmpPred::Le, Some(o)) => o != Greater,
                    (CmpPred::Gt, Some(o)) => o == Greater,
                    (CmpPred::Ge, Some(o)) => o != Less,
                })
            }
            (OpKind::Select, _) => match arg(0) {
                V::B(true) => arg(1),
                V::B(false) => arg(2),
                other => panic!("bad select condition {other:?}"),
            },
            (OpKind::Cast(ScalarType::F32), _) => match arg(0) {
                V::I(p) => V::F(p as f32),
                other => panic!("bad cast {other:?}"),
            },
            (OpKind::Cast(ScalarType::I32), _) => match arg(0) {
                // Out-of-range conversions are undefined in C; the passes must not fold them,
                // so any fixed choice here is seen identically before and after.
                V::F(p) => V::I(p as i32),
                other => panic!("bad cast {other:?}"),
            },
            (OpKind::AddPtr, _) => match (arg(0), arg(1)) {
                (V::P(base, off), V::I(k)) => V::P(base, off + k as i64),
                other => panic!("bad add_ptr {other:?}"),
            },
            (OpKind::Store { has_mask: false }, _) => {
                let V::P(base, off) = arg(0) else {
                    panic!("store through non-pointer")
                };
                mem.insert((base, off), arg(1));
                continue;
            }
            (OpKind::Return, 0) => break,
            (k, _) => panic!("evaluator does not support {k:?}"),
        };
        env.insert(op.results[0], r);
    }
    Ok(mem)
}

/// Equal stores, with floats compared bit for bit (a NaN must stay the same NaN).
fn same_stores(a: &BTreeMap<(usize, i64), V>, b: &BTreeMap<(usize, i64), V>) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|((ka, va), (kb, vb))| {
            ka == kb
                && match (va, vb) {
                    (V::F(x), V::F(y)) => x.to_bits() == y.to_bits(),
                    _ => va == vb,
                }
        })
}

fn steps() -> impl Strategy<Value = Vec<fixtures::Step>> {
    prop::collection::vec((any::<u8>(), any::<u16>(), any::<u16>(), -40i64..40), 1..40)
}

fn op_count(f: &Function) -> usize {
    let mut n = 0;
    f.walk(&mut |_, _| n += 1);
    n
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn optimize_preserves_stores(s in steps(), a in -50i32..50, b in -50i32..50, x in -8.0f32..8.0) {
        let f = fixtures::random_program(&s, false);
        let mut g = f.clone();
        attn_dsl::passes::optimize(&mut g);
        prop_assert!(op_count(&g) <= op_count(&f));
        let (before, after) = (eval(&f, a, b, x), eval(&g, a, b, x));
        match (&before, &after) {
            (Ok(p), Ok(q)) => prop_assert!(same_stores(p, q), "{:?}\nvs\n{:?}\n{}", p, q, print_function(&g)),
            (Err(_), Err(_)) => {}
            _ => prop_assert!(false, "trap behaviour changed: {:?} vs {:?}\n{}", before, after, print_function(&g)),
        }
    }
}

#[test]
fn folding_removes_literal_arithmetic_and_duplicates() {
    // a*0+... style chain with literal operands only: everything but stores folds away.
    let steps: Vec<fixtures::Step> = vec![
        (0, 0, 0, 6),
        (0, 0, 0, 7),
        (2, 2, 3, 2),
        (2, 4, 4, 0),
        (2, 2, 3, 2),
    ];
    let f = fixtures::random_program(&steps, false);
    let mut g = f.clone();
    attn_dsl::passes::optimize(&mut g);
    let text = print_function(&g);
    assert!(
        !text.contains(" mul ") && !text.contains("= add "),
        "{text}"
    );
    assert!(op_count(&g) < op_count(&f));
    assert_eq!(eval(&f, 3, 4, 1.0).ok(), eval(&g, 3, 4, 1.0).ok());
}
