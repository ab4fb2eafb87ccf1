//! DSL binary operators: their meaning, shared by constexpr folding and IR lowering.

use crate::ir::{BinaryOp, CmpPred};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Operator {
    /// Elementwise arithmetic/bitwise op (`&`, `|`, `^` on bools are logical).
    Arith(BinaryOp),
    Cmp(CmpPred),
    /// `&&`: logical and on bools (elementwise on tiles; no short circuit at run time).
    LogicAnd,
    /// `||`: logical or on bools.
    LogicOr,
}

/// An operator as written: its meaning, its symbol for messages, whether it assigns.
pub(crate) struct OpInfo {
    pub op: Operator,
    pub sym: &'static str,
    pub assign: bool,
}

/// Classifies a `syn` binary operator (`+=` is `+` with `assign`).
pub(crate) fn classify(op: &syn::BinOp) -> Option<OpInfo> {
    use syn::BinOp as B;
    use Operator::{Arith, Cmp};
    let (op, sym, assign) = match op {
        B::Add(_) => (Arith(BinaryOp::Add), "+", false),
        B::Sub(_) => (Arith(BinaryOp::Sub), "-", false),
        B::Mul(_) => (Arith(BinaryOp::Mul), "*", false),
        B::Div(_) => (Arith(BinaryOp::Div), "/", false),
        B::Rem(_) => (Arith(BinaryOp::Rem), "%", false),
        B::BitAnd(_) => (Arith(BinaryOp::And), "&", false),
        B::BitOr(_) => (Arith(BinaryOp::Or), "|", false),
        B::BitXor(_) => (Arith(BinaryOp::Xor), "^", false),
        B::Shl(_) => (Arith(BinaryOp::Shl), "<<", false),
        B::Shr(_) => (Arith(BinaryOp::Shr), ">>", false),
        B::And(_) => (Operator::LogicAnd, "&&", false),
        B::Or(_) => (Operator::LogicOr, "||", false),
        B::Eq(_) => (Cmp(CmpPred::Eq), "==", false),
        B::Ne(_) => (Cmp(CmpPred::Ne), "!=", false),
        B::Lt(_) => (Cmp(CmpPred::Lt), "<", false),
        B::Le(_) => (Cmp(CmpPred::Le), "<=", false),
        B::Gt(_) => (Cmp(CmpPred::Gt), ">", false),
        B::Ge(_) => (Cmp(CmpPred::Ge), ">=", false),
        B::AddAssign(_) => (Arith(BinaryOp::Add), "+", true),
        B::SubAssign(_) => (Arith(BinaryOp::Sub), "-", true),
        B::MulAssign(_) => (Arith(BinaryOp::Mul), "*", true),
        B::DivAssign(_) => (Arith(BinaryOp::Div), "/", true),
        B::RemAssign(_) => (Arith(BinaryOp::Rem), "%", true),
        B::BitAndAssign(_) => (Arith(BinaryOp::And), "&", true),
        B::BitOrAssign(_) => (Arith(BinaryOp::Or), "|", true),
        B::BitXorAssign(_) => (Arith(BinaryOp::Xor), "^", true),
        B::ShlAssign(_) => (Arith(BinaryOp::Shl), "<<", true),
        B::ShrAssign(_) => (Arith(BinaryOp::Shr), ">>", true),
        _ => return None,
    };
    Some(OpInfo { op, sym, assign })
}
