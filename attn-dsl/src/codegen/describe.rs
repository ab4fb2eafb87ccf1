//! One-line summaries of ops for the `// L<line>: ...` comments of the generated code.

use crate::ir::{Function, Op, OpKind, Scalar, ValueId};

fn value(f: &Function, v: ValueId) -> String {
    match &f.value(v).name {
        Some(n) => n.clone(),
        None => format!("%{}", v.0),
    }
}

fn mnemonic(kind: &OpKind) -> String {
    match kind {
        OpKind::Const(s) => match s {
            Scalar::Int(v, _) => format!("const {v}"),
            Scalar::Float(v, _) => format!("const {v:?}"),
            Scalar::Bool(b) => format!("const {b}"),
        },
        OpKind::ProgramId(a) => format!("program_id({a})"),
        OpKind::NumPrograms(a) => format!("num_programs({a})"),
        OpKind::Arange { n } => format!("arange::<{n}>"),
        OpKind::Splat { .. } => "full".into(),
        OpKind::Broadcast { .. } => "broadcast".into(),
        OpKind::ExpandDims { axis } => format!("unsqueeze({axis})"),
        OpKind::Trans => "trans".into(),
        OpKind::Handoff => "handoff".into(),
        OpKind::Unary(u) => format!("{u:?}").to_lowercase(),
        OpKind::Binary(b) => format!("{b:?}").to_lowercase(),
        OpKind::Cmp(c) => format!("{c:?}").to_lowercase(),
        OpKind::Select => "select".into(),
        OpKind::Cast(t) => format!("cast::<{t}>"),
        OpKind::AddPtr => "add_ptr".into(),
        OpKind::Load { .. } => "load".into(),
        OpKind::Store { .. } => "store".into(),
        OpKind::Dot => "dot".into(),
        OpKind::Reduce { kind, axis } => format!("{}({axis})", format!("{kind:?}").to_lowercase()),
        OpKind::For => "for".into(),
        OpKind::If => "if".into(),
        OpKind::While => "while".into(),
        OpKind::Condition => "condition".into(),
        OpKind::Yield => "yield".into(),
        OpKind::Return => "return".into(),
    }
}

/// `results = op(operands) : result types`, with DSL names where the IR has them.
pub(crate) fn describe(f: &Function, op: &Op) -> String {
    let args: Vec<String> = op.operands.iter().map(|&v| value(f, v)).collect();
    let call = if matches!(op.kind, OpKind::Const(_)) {
        mnemonic(&op.kind)
    } else {
        format!("{}({})", mnemonic(&op.kind), args.join(", "))
    };
    if op.results.is_empty() {
        return call;
    }
    let res: Vec<String> = op.results.iter().map(|&v| value(f, v)).collect();
    let tys: Vec<String> = op.results.iter().map(|&v| f.ty(v).to_string()).collect();
    format!("{} = {call} : {}", res.join(", "), tys.join(", "))
}
