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

impl Emitter<'_> {
    /// `a * b` as `attn_mul_wide` when both 64-bit operands are known `int`s (off unless
    /// enabled); `None` to emit the product as written.
    pub(crate) fn wide_mul(
        &self,
        op: &Op,
        at: &ElemIndex,
        operand: &dyn Fn(ValueId, &ElemIndex) -> Res<String>,
    ) -> Res<Option<String>> {
        if op.kind != OpKind::Binary(BinaryOp::Mul) || !crate::features::enabled("wide_mul") {
            return Ok(None);
        }
        let (Some(&a), Some(&b)) = (op.operands.first(), op.operands.get(1)) else {
            return Ok(None);
        };
        if self.scalar(a)? != ScalarType::I64 {
            return Ok(None);
        }
        let (Some(a), Some(b)) = (
            self.int_source(a, at, operand)?,
            self.int_source(b, at, operand)?,
        ) else {
            return Ok(None);
        };
        Ok(Some(format!("attn_mul_wide({a}, {b})")))
    }

    /// The `int` a 64-bit value `v` is known to hold at `at`: a cast from `i32`, or (through
    /// splats) an `i64` parameter promised in `int`'s range.
    fn int_source(
        &self,
        v: ValueId,
        at: &ElemIndex,
        operand: &dyn Fn(ValueId, &ElemIndex) -> Res<String>,
    ) -> Res<Option<String>> {
        if let Some(name) = self.promised_i32(v) {
            return Ok(Some(format!("(int){name}")));
        }
        let Some(def) = self.def_op(v) else {
            return Ok(None);
        };
        match def.kind {
            OpKind::Cast(ScalarType::I64) => {
                let x = Self::operand(def, 0)?;
                if self.scalar(x)? != ScalarType::I32 {
                    return Ok(None);
                }
                Ok(Some(operand(x, at)?))
            }
            OpKind::Splat { .. } => {
                let x = Self::operand(def, 0)?;
                Ok(self.promised_i32(x).map(|name| format!("(int){name}")))
            }
            _ => Ok(None),
        }
    }

    /// The name of the parameter `v` is, when the caller promised it in `int`'s range.
    pub(crate) fn promised_i32(&self, v: ValueId) -> Option<&str> {
        let i = self.f.body.args.iter().position(|&a| a == v)?;
        let p = self.f.params.get(i)?;
        self.f
            .assumed_i32
            .contains(&p.name)
            .then_some(p.name.as_str())
    }
}
