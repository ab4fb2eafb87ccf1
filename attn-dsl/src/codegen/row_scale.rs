//! `x * broadcast(row)` on a tile in `Mma` fragments, with a warp-uniform skip: when every
//! row factor the warp holds is exactly 1 the product is `x` itself (`x * 1.0 == x` for every
//! float, NaN and infinities included), so the warp keeps `x` and issues no multiplies.
//!
//! This is the online softmax's accumulator rescale `acc * alpha` with
//! `alpha = exp(m_old - m_new)`: once a row's maximum has settled, a new key tile rarely
//! raises it, `alpha` is exactly 1, and the 128 multiplies per thread of a 128-wide
//! accumulator are the largest block of floating-point work in the loop after the mma.

use super::emitter::Emitter;
use super::tile_map::TileMap;
use super::CodegenError;
use crate::ir::{BinaryOp, Op, OpKind, ScalarType, ValueId};

type Res<T> = Result<T, CodegenError>;

/// Fewest register slots per thread for which the vote pays for itself.
const MIN_SLOTS: usize = 32;

impl<'f> Emitter<'f> {
    /// The broadcast row operand of `op` when it is an f32 `x * broadcast(row)` (either
    /// order) on a tile in `Mma` fragments big enough to skip.
    pub(crate) fn row_scale_factor(&self, op: &Op) -> Option<ValueId> {
        if op.kind != OpKind::Binary(BinaryOp::Mul) || op.operands.len() != 2 {
            return None;
        }
        let res = *op.results.first()?;
        let TileMap::Mma(m) = self.map(res) else {
            return None;
        };
        if m.is_rows()
            || m.slots() < MIN_SLOTS
            || self.f.ty(res).elem.scalar() != Some(ScalarType::F32)
        {
            return None;
        }
        op.operands.iter().copied().find(|&v| {
            self.def_op(v).is_some_and(|d| {
                matches!(d.kind, OpKind::Broadcast { .. })
                    && d.operands
                        .first()
                        .is_some_and(|&r| matches!(self.shape(r), [_, 1]))
            })
        })
    }

    /// Emits `op` (see [`Self::row_scale_factor`]): the product where some factor of the warp
    /// differs from 1, else a copy of the other operand.
    pub(crate) fn emit_row_scale(&mut self, op: &'f Op, factor: ValueId) -> Res<()> {
        let res = Self::result(op)?;
        let other = op
            .operands
            .iter()
            .copied()
            .find(|&v| v != factor)
            .unwrap_or(factor);
        let m = self.map(res);
        self.convert_operands(op, m)?;
        let slots = m.slots();
        let scaled = self.fresh_name("attn_scaled");
        self.w.line(format!("bool {scaled} = false;"));
        self.w.open_unrolled("s", slots);
        self.w.line(format!(
            "{scaled} |= ({} != 1.0f);",
            self.at_in(factor, m, "s")?
        ));
        self.w.close("");
        let name = self.define_tile(res);
        let product = self.element_expr(op, &m.index("s"), &|v, _| self.at_in(v, m, "s"))?;
        let kept = self.at_in(other, m, "s")?;
        // A wait left for this op goes at the head of both arms: ptxas hoists a wait to the
        // top of its basic block, and the work before the branch is meant to run under it.
        let wait = self.scale_wait.take();
        self.w.open(format!("if (attn_warp_any({scaled}))"));
        if let Some(w) = &wait {
            self.emit_pending_wait(w);
        }
        self.w.open_unrolled("s", slots);
        self.w.line(format!("{name}[s] = {product};"));
        self.w.close("");
        self.w.reopen("} else {");
        if let Some(w) = &wait {
            self.emit_pending_wait(w);
        }
        self.w.open_unrolled("s", slots);
        self.w.line(format!("{name}[s] = {kept};"));
        self.w.close("");
        self.w.close("");
        Ok(())
    }
}
