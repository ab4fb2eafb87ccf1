//! Verifier: valid programs pass; hand-corrupted ones fail with a specific message.

#[path = "ir_fixtures.rs"]
mod fixtures;

use attn_dsl::ir::verify::verify;
use attn_dsl::ir::*;

type Body = fn(&mut Builder, &[ValueId]) -> IrResult<()>;

/// Discards a built value: these programs only need the op to exist.
fn done<T>(_: T) -> IrResult<()> {
    Ok(())
}

/// A kernel `(p: mut ptr<f32>, n: i32, flag: bool)` whose body is `body`.
fn program(body: Body) -> Function {
    let mut f = Function::new("k", 4);
    let p = f.add_param(
        "p",
        ParamKind::Ptr {
            elem: ScalarType::F32,
            mutable: true,
        },
    );
    let n = f.add_param("n", ParamKind::Scalar(ScalarType::I32));
    let flag = f.add_param("flag", ParamKind::Scalar(ScalarType::Bool));
    let mut b = Builder::new(&mut f);
    body(&mut b, &[p, n, flag]).expect("builds");
    b.finish();
    f
}

fn tile_f32(b: &mut Builder, n: usize) -> IrResult<ValueId> {
    let r = b.arange(n)?;
    b.cast(r, ScalarType::F32)
}

#[test]
fn one_valid_program_per_op() {
    let bodies: Vec<(&str, Body)> = vec![
        ("const", |b, _| done(b.const_i32(7))),
        ("program_id", |b, _| done(b.program_id(1)?)),
        ("num_programs", |b, _| done(b.num_programs(2)?)),
        ("arange", |b, _| done(b.arange(64)?)),
        ("splat", |b, a| done(b.splat(a[1], &[4, 8])?)),
        ("broadcast", |b, _| {
            let r = b.arange(8)?;
            let e = b.expand_dims(r, 0)?;
            done(b.broadcast(e, &[4, 8])?)
        }),
        ("expand_dims", |b, _| {
            let r = b.arange(8)?;
            done(b.expand_dims(r, 1)?)
        }),
        ("trans", |b, a| {
            let s = b.splat(a[1], &[4, 8])?;
            done(b.trans(s)?)
        }),
        ("unary", |b, _| {
            let t = tile_f32(b, 16)?;
            done(b.unary(UnaryOp::Exp2, t)?)
        }),
        ("binary", |b, a| {
            done(b.binary(BinaryOp::Shl, a[1], a[1])?)
        }),
        ("cmp", |b, a| {
            let t = tile_f32(b, 16)?;
            let c = b.cast(a[1], ScalarType::F32)?;
            done(b.cmp(CmpPred::Ge, t, c)?)
        }),
        ("select", |b, a| {
            let t = tile_f32(b, 16)?;
            let z = b.const_f32(0.0);
            done(b.select(a[2], t, z)?)
        }),
        ("cast", |b, a| done(b.cast(a[2], ScalarType::Bf16)?)),
        ("add_ptr", |b, a| {
            let r = b.arange(16)?;
            done(b.add_ptr(a[0], r)?)
        }),
        ("load", |b, a| {
            let r = b.arange(16)?;
            let p = b.add_ptr(a[0], r)?;
            let m = b.cmp(CmpPred::Lt, r, a[1])?;
            let o = b.const_f32(1.0);
            done(b.load(p, Some(m), Some(o))?)
        }),
        ("store", |b, a| {
            let r = b.arange(16)?;
            let p = b.add_ptr(a[0], r)?;
            let v = b.cast(r, ScalarType::F32)?;
            b.store(p, v, None)
        }),
        ("dot", |b, a| {
            let z = b.constant(Scalar::Float(1.0, ScalarType::F16));
            let x = b.splat(z, &[16, 32])?;
            let y = b.splat(z, &[32, 8])?;
            let _ = a;
            done(b.dot(x, y, None)?)
        }),
        ("reduce", |b, _| {
            let t = tile_f32(b, 16)?;
            done(b.reduce(ReduceKind::Min, t, 0)?)
        }),
        ("for", |b, a| {
            let (z, one) = (b.const_i32(0), b.const_i32(1));
            let r = b.for_loop(z, a[1], one, vec![z], |b, iv, it| {
                Ok(vec![b.binary(BinaryOp::Add, it[0], iv)?])
            })?;
            done(r)
        }),
        ("if", |b, a| {
            let r = b.if_else(
                a[2],
                |b| Ok(vec![b.const_i32(1)]),
                |b| Ok(vec![b.const_i32(2)]),
            )?;
            done(r)
        }),
        ("while", |b, a| {
            let z = b.const_i32(0);
            let r = b.while_loop(
                vec![z],
                |b, v| b.cmp(CmpPred::Lt, v[0], a[1]),
                |b, v| {
                    let one = b.const_i32(1);
                    Ok(vec![b.binary(BinaryOp::Add, v[0], one)?])
                },
            )?;
            done(r)
        }),
    ];
    for (name, body) in bodies {
        let f = program(body);
        if let Err(e) = verify(&f) {
            panic!(
                "valid `{name}` program rejected: {e}\n{}",
                printer::print_function(&f)
            );
        }
    }
    verify(&fixtures::kitchen_sink()).expect("kitchen sink verifies");
    verify(&fixtures::softmax_kernel()).expect("softmax verifies");
}

/// Applies `corrupt` to the softmax fixture (or the kitchen sink) and expects `msg`.
fn rejects(base: Function, corrupt: impl FnOnce(&mut Function), msg: &str) {
    let mut f = base;
    corrupt(&mut f);
    match verify(&f) {
        Ok(()) => panic!("corruption expecting `{msg}` was accepted"),
        Err(e) => assert!(e.to_string().contains(msg), "expected `{msg}`, got: {e}"),
    }
}

fn find(f: &Function, pred: impl Fn(&Op) -> bool) -> OpId {
    let mut hit = None;
    f.walk(&mut |id, op| {
        if hit.is_none() && pred(op) {
            hit = Some(id);
        }
    });
    hit.expect("op present")
}

fn soft() -> Function {
    fixtures::softmax_kernel()
}

#[test]
fn use_before_definition() {
    rejects(
        soft(),
        |f| f.body.ops.swap(2, 3),
        "is used before it is defined",
    );
}

#[test]
fn use_outside_defining_region() {
    rejects(
        fixtures::kitchen_sink(),
        |f| {
            let fo = find(f, |op| op.kind == OpKind::For);
            let inner = f.op(fo).regions[0].args[1];
            let ret_user = find(f, |op| matches!(op.kind, OpKind::Store { has_mask: false }));
            f.op_mut(ret_user).operands[1] = inner;
        },
        "is defined in a region that does not enclose this use",
    );
}

#[test]
fn value_defined_twice() {
    rejects(
        soft(),
        |f| {
            let first = f.op(f.body.ops[0]).results[0];
            let o = f.body.ops[2];
            f.op_mut(o).results[0] = first;
        },
        "is defined twice",
    );
}

#[test]
fn op_in_two_blocks() {
    rejects(
        soft(),
        |f| f.body.ops.insert(1, f.body.ops[0]),
        "appears in more than one block",
    );
}

#[test]
fn operand_type_mismatch() {
    rejects(
        soft(),
        |f| {
            let sub = find(f, |op| op.kind == OpKind::Binary(BinaryOp::Sub));
            let m = find(f, |op| matches!(op.kind, OpKind::Reduce { .. }));
            let m = f.op(m).results[0];
            f.op_mut(sub).operands[1] = m;
        },
        "operands have types tile<f32, 128> and f32",
    );
}

#[test]
fn wrong_result_type() {
    rejects(
        soft(),
        |f| {
            let e = find(f, |op| op.kind == OpKind::Unary(UnaryOp::Exp));
            let r = f.op(e).results[0];
            f.values[r.0 as usize].ty = Type::scalar(ScalarType::F32);
        },
        "result has type f32, expected tile<f32, 128>",
    );
}

#[test]
fn missing_return() {
    rejects(
        soft(),
        |f| {
            f.body.ops.pop();
        },
        "kernel body ends in `store`",
    );
}

#[test]
fn return_in_the_middle() {
    rejects(
        soft(),
        |f| {
            let r = *f.body.ops.last().expect("return");
            let o = f.push_op(f.op(r).clone());
            f.body.ops.insert(2, o);
        },
        "terminator `return`",
    );
}

#[test]
fn for_yield_with_wrong_types() {
    rejects(
        fixtures::kitchen_sink(),
        |f| {
            let fo = find(f, |op| op.kind == OpKind::For && op.results.len() == 2);
            let y = *f.op(fo).regions[0].ops.last().expect("yield");
            f.op_mut(y).operands.swap(0, 1);
        },
        "body `yield` value 0",
    );
}

#[test]
fn for_result_count_mismatch() {
    rejects(
        fixtures::kitchen_sink(),
        |f| {
            let fo = find(f, |op| op.kind == OpKind::For && op.results.len() == 2);
            f.op_mut(fo).results.pop();
        },
        "init list passes 2 value(s), expected 1",
    );
}

#[test]
fn while_condition_flag_not_bool() {
    rejects(
        fixtures::kitchen_sink(),
        |f| {
            let w = find(f, |op| op.kind == OpKind::While);
            let c = *f.op(w).regions[0].ops.last().expect("condition");
            let var = f.op(c).operands[1];
            f.op_mut(c).operands[0] = var;
        },
        "`condition` flag has type i32",
    );
}

#[test]
fn if_region_missing_yield() {
    rejects(
        fixtures::kitchen_sink(),
        |f| {
            let i = find(f, |op| op.kind == OpKind::If && !op.results.is_empty());
            f.op_mut(i).regions[1].ops.pop();
        },
        "else region does not end in `yield`",
    );
}

#[test]
fn if_condition_not_bool() {
    rejects(
        fixtures::kitchen_sink(),
        |f| {
            let i = find(f, |op| op.kind == OpKind::If && op.results.is_empty());
            f.op_mut(i).operands[0] = f.params[2].value;
        },
        "condition has type i32, expected a bool scalar",
    );
}

#[test]
fn params_do_not_match_entry_args() {
    rejects(
        soft(),
        |f| {
            f.body.args.pop();
        },
        "3 parameter(s) but the entry block has 2 argument(s)",
    );
    rejects(
        soft(),
        |f| f.params[2].kind = ParamKind::Scalar(ScalarType::I64),
        "parameter `n` is declared i64 but its value has type i32",
    );
}

#[test]
fn const_out_of_range() {
    rejects(
        soft(),
        |f| {
            let c = find(f, |op| matches!(op.kind, OpKind::Const(_)));
            let r = f.op(c).results[0];
            f.values[r.0 as usize].ty = Type::scalar(ScalarType::I32);
            f.op_mut(c).kind = OpKind::Const(Scalar::Int(1 << 40, ScalarType::I32));
        },
        "literal 1099511627776 does not fit in i32",
    );
}

#[test]
fn load_other_without_mask_and_bad_arange() {
    rejects(
        soft(),
        |f| {
            let l = find(f, |op| matches!(op.kind, OpKind::Load { .. }));
            f.op_mut(l).kind = OpKind::Load {
                has_mask: false,
                has_other: true,
            };
        },
        "`other` without a mask",
    );
    rejects(
        soft(),
        |f| {
            let a = find(f, |op| matches!(op.kind, OpKind::Arange { .. }));
            f.op_mut(a).kind = OpKind::Arange { n: 100 };
        },
        "length 100 is not a power of two",
    );
}

#[test]
fn wrong_region_count() {
    rejects(
        fixtures::kitchen_sink(),
        |f| {
            let w = find(f, |op| op.kind == OpKind::While);
            f.op_mut(w).regions.pop();
        },
        "has 1 region(s), expected 2",
    );
}

#[test]
fn dangling_value_id() {
    rejects(
        soft(),
        |f| {
            let o = f.body.ops[2];
            f.op_mut(o).operands[0] = ValueId(9999);
        },
        "value %9999 is out of range",
    );
}
