//! 64-bit products of two `int`s as one widening multiply (opt-in,
//! `ATTN_CODEGEN_ENABLE=wide_mul`). A paged kernel addresses a page as
//! `page.cast::<i64>() * stride_block`: a 64 × 64-bit multiply (a sign extension and three
//! `IMAD`s a page in P0's producer), though the page is an `int` and the stride, promised in
//! `int`'s range by the op (`passes::assume::fits_i32`), is one too. Such a product is
//! `attn_mul_wide`, one `mul.wide.s32`; the product of two `int`s never overflows 64 bits,
//! so it is the wrapped product exactly.

use super::elem_index::ElemIndex;
use super::emitter::Emitter;
use super::CodegenError;
use crate::ir::{BinaryOp, Op, OpKind, ScalarType, ValueId};

type Res<T> = Result<T, CodegenError>;

/// A 64-bit value known to hold an `int`.
pub(crate) enum IntFactor {
    /// An `i32` value cast to `i64`.
    Widened(ValueId),
    /// (A splat of) an `i64` parameter promised in `int`'s range, by name.
    Promised(String),
}

impl Emitter<'_> {
    /// `a * b` as `attn_mul_wide` when both 64-bit operands are known `int`s (off unless
    /// enabled); `None` to emit the product as written.
    pub(crate) fn wide_mul(
        &self,
        op: &Op,
        at: &ElemIndex,
        operand: &dyn Fn(ValueId, &ElemIndex) -> Res<String>,
    ) -> Res<Option<String>> {
        if op.kind != OpKind::Binary(BinaryOp::Mul) || !crate::features::on("wide_mul") {
            return Ok(None);
        }
        let Some((a, b)) = self.int_factors(op) else {
            return Ok(None);
        };
        let text = |x: IntFactor| match x {
            IntFactor::Widened(v) => operand(v, at),
            IntFactor::Promised(name) => Ok(format!("(int){name}")),
        };
        Ok(Some(format!("attn_mul_wide({}, {})", text(a)?, text(b)?)))
    }

    /// Both operands of 64-bit product `op` as known `int`s, if they are.
    pub(crate) fn int_factors(&self, op: &Op) -> Option<(IntFactor, IntFactor)> {
        let [a, b] = op.operands[..] else { return None };
        if self.scalar(a).ok()? != ScalarType::I64 {
            return None;
        }
        Some((self.int_factor(a)?, self.int_factor(b)?))
    }

    /// What 64-bit value `v` is known to hold an `int` as, if it is.
    fn int_factor(&self, v: ValueId) -> Option<IntFactor> {
        if let Some(name) = self.uniform_scalar(v).and_then(|s| self.promised_i32(s)) {
            return Some(IntFactor::Promised(name.to_string()));
        }
        let def = self.def_op(v)?;
        let x = *def.operands.first()?;
        (def.kind == OpKind::Cast(ScalarType::I64) && self.scalar(x).ok()? == ScalarType::I32)
            .then_some(IntFactor::Widened(x))
    }

    /// The name of the parameter `v` is, when the caller promised it in `int`'s range.
    fn promised_i32(&self, v: ValueId) -> Option<&str> {
        let i = self.f.body.args.iter().position(|&a| a == v)?;
        let p = self.f.params.get(i)?;
        self.f
            .assumed_i32
            .contains(&p.name)
            .then_some(p.name.as_str())
    }
}
