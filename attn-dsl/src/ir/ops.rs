//! The operation set of the IR. Every op is elementwise over identically shaped operands
//! unless documented otherwise: broadcasting and scalar→tile splats are explicit ops
//! inserted by the front end, so passes and back ends never re-derive shapes.

use super::types::ScalarType;

/// A literal value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    Int(i64, ScalarType),
    Float(f64, ScalarType),
    Bool(bool),
}

impl Scalar {
    pub fn ty(&self) -> ScalarType {
        match self {
            Scalar::Int(_, t) | Scalar::Float(_, t) => *t,
            Scalar::Bool(_) => ScalarType::Bool,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    Neg,
    /// Logical not for bool, bitwise not for integers.
    Not,
    Exp,
    Exp2,
    Log,
    Log2,
    Sqrt,
    Tanh,
    Abs,
}

impl UnaryOp {
    /// Every unary op (printer/parser tables, exhaustive tests).
    pub const ALL: [UnaryOp; 9] = [
        UnaryOp::Neg,
        UnaryOp::Not,
        UnaryOp::Exp,
        UnaryOp::Exp2,
        UnaryOp::Log,
        UnaryOp::Log2,
        UnaryOp::Sqrt,
        UnaryOp::Tanh,
        UnaryOp::Abs,
    ];
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    /// Float division, or integer division truncating toward zero (C semantics).
    Div,
    /// Integer remainder with the sign of the dividend (C semantics).
    Rem,
    Min,
    Max,
    And,
    Or,
    Xor,
    Shl,
    Shr,
}

impl BinaryOp {
    /// Every binary op.
    pub const ALL: [BinaryOp; 12] = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Rem,
        BinaryOp::Min,
        BinaryOp::Max,
        BinaryOp::And,
        BinaryOp::Or,
        BinaryOp::Xor,
        BinaryOp::Shl,
        BinaryOp::Shr,
    ];
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmpPred {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CmpPred {
    /// Every comparison predicate.
    pub const ALL: [CmpPred; 6] = [
        CmpPred::Eq,
        CmpPred::Ne,
        CmpPred::Lt,
        CmpPred::Le,
        CmpPred::Gt,
        CmpPred::Ge,
    ];
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceKind {
    Sum,
    Max,
    Min,
}

/// Operation kinds. Operand and result conventions are listed per variant;
/// `T[s]` means a value of element type T and shape s (scalar when s is empty).
#[derive(Clone, Debug, PartialEq)]
pub enum OpKind {
    /// () -> scalar literal.
    Const(Scalar),
    /// () -> i32: index of this program along `axis` (0..3).
    ProgramId(u8),
    /// () -> i32: grid size along `axis`.
    NumPrograms(u8),
    /// `() -> i32[n]`: 0, 1, ..., n-1. `n` is a power of two.
    Arange { n: usize },
    /// `(scalar x) -> x[shape]`: every element equal to x (`full`, scalar/tile mixing).
    Splat { shape: Vec<usize> },
    /// `(x[s]) -> x[shape]`: dims of size 1 in s repeat to the dims of `shape` (same rank).
    Broadcast { shape: Vec<usize> },
    /// `(x[s]) -> x[s with 1 inserted at axis]`: `x.unsqueeze(axis)`, Triton's `x[:, None]`.
    ExpandDims { axis: usize },
    /// `(x[m, n]) -> x[n, m]`.
    Trans,
    /// (x) -> op x. Float ops on float types only; `Not` on bool or ints.
    Unary(UnaryOp),
    /// (a, b) -> a op b, same type. `And/Or/Xor` on bool or ints; shifts on ints.
    Binary(BinaryOp),
    /// `(a, b) -> bool[s]`.
    Cmp(CmpPred),
    /// `(cond bool[s], a T[s], b T[s]) -> T[s]`.
    Select,
    /// `(x S[s]) -> T[s]`: float→float rounds to nearest even, float→int truncates,
    /// int→float rounds, bool→number gives 0/1, number→bool tests != 0.
    Cast(ScalarType),
    /// `(p ptr<T>[s], off i32|i64[s]) -> ptr<T>[s]`: advance by `off` elements.
    AddPtr,
    /// `(p ptr<T>[s] [, mask bool[s] [, other T[s]]]) -> T[s]`. Masked-off lanes read
    /// `other` (0 when absent) and never touch memory.
    Load { has_mask: bool, has_other: bool },
    /// `(p ptr<T>[s], v T[s] [, mask bool[s]]) -> ()`. Masked-off lanes never touch memory.
    Store { has_mask: bool },
    /// `(a T[m, k], b T[k, n], acc f32[m, n]) -> f32[m, n]`: acc + a·b with products of
    /// the (already rounded) inputs accumulated in f32. T ∈ {bf16, f16, f32}.
    Dot,
    /// `(x T[s]) -> T[s without axis]`.
    Reduce { kind: ReduceKind, axis: usize },
    /// `(x T[s]) -> T[s]`: the same tile, held by other threads: what one warpgroup owns
    /// handed to another, or to every warp, or the other way (the layouts say which; see
    /// `Layout::Owned`). The only op whose operand and result may have different owners.
    Handoff,
    /// (lo, hi, step: i32, inits...) -> finals...: region 0 has args (iv, iters...) and
    /// ends in `Yield(next iters...)`. Runs for iv = lo; iv < hi; iv += step (step > 0).
    For,
    /// (cond bool, ) -> results...: regions 0 (then) and 1 (else) each end in `Yield`.
    If,
    /// (inits...) -> finals...: region 0 (before) has args = loop vars and ends in
    /// `Condition(c, vars...)`; region 1 (body) has args = vars and ends in `Yield`.
    While,
    /// Terminator of a `While`'s before region: (c bool, vars...).
    Condition,
    /// Terminator of `For`/`If`/`While` bodies: passes values to the parent op.
    Yield,
    /// Terminator of the kernel body.
    Return,
}

impl OpKind {
    /// Ops whose only effect is their result: safe to remove when unused and to merge
    /// when identical (CSE).
    pub fn is_pure(&self) -> bool {
        !matches!(
            self,
            OpKind::Store { .. }
                | OpKind::For
                | OpKind::If
                | OpKind::While
                | OpKind::Condition
                | OpKind::Yield
                | OpKind::Return
        )
    }
    /// Ops whose every result element is a function of its operands' elements at the same
    /// coordinates (or of scalars and the coordinates themselves): index, pointer and mask tiles
    /// built only from these can be recomputed wherever an element is needed.
    pub fn is_coordinate_op(&self) -> bool {
        matches!(
            self,
            OpKind::Arange { .. }
                | OpKind::Splat { .. }
                | OpKind::ExpandDims { .. }
                | OpKind::Broadcast { .. }
                | OpKind::Unary(_)
                | OpKind::Binary(_)
                | OpKind::Cmp(_)
                | OpKind::Select
                | OpKind::Cast(_)
                | OpKind::AddPtr
        )
    }
    /// Ops computed in registers from their operands alone: the coordinate ops and
    /// constants (they may move or be recomputed wherever their operands are ready).
    pub fn is_register_only(&self) -> bool {
        self.is_coordinate_op() || matches!(self, OpKind::Const(_))
    }
    pub fn is_terminator(&self) -> bool {
        matches!(self, OpKind::Condition | OpKind::Yield | OpKind::Return)
    }
    pub fn num_regions(&self) -> usize {
        match self {
            OpKind::For => 1,
            OpKind::If | OpKind::While => 2,
            _ => 0,
        }
    }
}
