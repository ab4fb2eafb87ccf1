//! Constexpr values as they are bound in `instantiate!` or at run time.

use crate::ir::ScalarType;
use proc_macro2::Span;
use std::fmt;

/// The value of one constexpr parameter.
#[derive(Clone, Debug, PartialEq)]
pub enum ConstValue {
    Int(i64),
    Bool(bool),
    Float(f64),
    /// A dtype bound to a type parameter (`T = bf16`).
    Dtype(ScalarType),
    /// A `#[device]` function passed as a constexpr (by name in the module).
    Device(String),
}

impl fmt::Display for ConstValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConstValue::Int(v) => write!(f, "{v}"),
            ConstValue::Bool(v) => write!(f, "{v}"),
            ConstValue::Float(v) => write!(f, "{v:?}"),
            ConstValue::Dtype(t) => write!(f, "{t}"),
            ConstValue::Device(n) => write!(f, "{n}"),
        }
    }
}

/// `NAME = value`, with the span of the binding for diagnostics.
#[derive(Clone, Debug)]
pub struct Binding {
    pub name: String,
    pub value: ConstValue,
    pub span: Span,
}

impl Binding {
    pub fn new(name: impl Into<String>, value: ConstValue) -> Self {
        Binding {
            name: name.into(),
            value,
            span: Span::call_site(),
        }
    }
}
