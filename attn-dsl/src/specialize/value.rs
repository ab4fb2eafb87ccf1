//! What a DSL expression evaluates to during lowering.

use super::ConstValue;
use crate::ir::ValueId;

/// The result of lowering an expression.
///
/// Constexpr values stay [`Val::Const`] (folded at specialization) and become IR constants
/// only where they meet a runtime value, which decides their dtype.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Val {
    /// No value (`store(..)`, loops, assignments).
    Unit,
    /// A number or bool known at specialization (never `Dtype`/`Device`).
    Const(ConstValue),
    /// An SSA value of the function being built.
    Runtime(ValueId),
    /// `(a, b)`: what device functions return.
    Tuple(Vec<Val>),
}

impl Val {
    /// Describes the value's kind for diagnostics.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Val::Unit => "no value",
            Val::Const(_) => "a constexpr",
            Val::Runtime(_) => "a runtime value",
            Val::Tuple(_) => "a tuple",
        }
    }
}

/// `integer constant 3`, `float constant 0.5`, `bool constant true`.
pub(crate) fn describe_const(c: &ConstValue) -> String {
    match c {
        ConstValue::Int(v) => format!("integer constant {v}"),
        ConstValue::Float(v) => format!("float constant {v:?}"),
        ConstValue::Bool(v) => format!("bool constant {v}"),
        ConstValue::Dtype(t) => format!("dtype {t}"),
        ConstValue::Device(n) => format!("device function {n}"),
    }
}
