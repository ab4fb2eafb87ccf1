//! A page's rows addressed in bytes from the thread's row in the page (opt-in,
//! `ATTN_CODEGEN_ENABLE=page_row`, with `wide_mul`'s promise). With `run_rows` and
//! `wide_mul` a producer's row is `base + (page·stride + rest) + offset` in elements: the
//! 64-bit sum is shifted to bytes and added to the base around the widening multiply, four
//! instructions a pass besides it. Split as `(base + rest + offset)` (loop-invariant but for
//! the page's term, which is zero in it) plus `page · (stride · sizeof(T))` in bytes, the
//! row is one `mad.wide.s32` on the thread's hoisted base (`attn_page_row`). The page is
//! kept in a local (`attn_pg`), where V's row of the same tile finds it: V's row is then the
//! same one instruction on its own base. Needs the stride in bytes to fit an `int`: the ops
//! promise only strides whose 16-fold does (`passes::assume::keeps_i32`).

use super::elem_index::ElemIndex;
use super::emitter::Emitter;
use super::remat::Scope;
use super::wide_mul::IntFactor;
use super::CodegenError;
use crate::ir::{BinaryOp, OpKind, ValueId};

type Res<T> = Result<T, CodegenError>;

/// A row address split at its page's term (see the module note).
#[derive(Clone, Debug)]
pub(crate) struct PageRow {
    /// The row's pointer with the page's term zeroed (at the run start, plus the thread's
    /// offset in the run).
    pub rest: String,
    /// The page (an `int`) at the run start.
    pub page: String,
    /// The promised stride parameter the page multiplies.
    pub stride: String,
}

impl Emitter<'_> {
    /// `ptr`'s row at `at` split at its page's term, when the feature is on and `ptr`'s
    /// offset holds a product of a sign-extended `int` and a stride promised in `int`'s
    /// range; `None` to address it as written.
    pub(crate) fn page_row(
        &self,
        ptr: ValueId,
        at: &ElemIndex,
        scope: &Scope,
    ) -> Res<Option<PageRow>> {
        if !crate::features::on("page_row") {
            return Ok(None);
        }
        let Some((mul, page, stride)) = self.page_term(ptr) else {
            return Ok(None);
        };
        // One recomputation of the pointer gives both: the term reads as zero, and its page
        // is recomputed where the term is met, at the coordinates the term sees.
        let before = self.zeroed.replace(Some((mul, page, None)));
        let rest = self.remat_expr(ptr, at, scope);
        let met = self.zeroed.replace(before);
        let (rest, Some((_, _, Some(page)))) = (rest?, met) else {
            return Ok(None);
        };
        Ok(Some(PageRow { rest, page, stride }))
    }

    /// `0ll` for the page term being split off (recording its page's text at `at`), else
    /// `None`.
    pub(crate) fn zeroed_term(
        &self,
        v: ValueId,
        at: &ElemIndex,
        scope: &Scope,
    ) -> Res<Option<String>> {
        let page = match &*self.zeroed.borrow() {
            Some((mul, page, _)) if *mul == v => *page,
            _ => return Ok(None),
        };
        let text = self.remat_expr(page, at, scope)?;
        if let Some((_, _, met)) = &mut *self.zeroed.borrow_mut() {
            *met = Some(text);
        }
        Ok(Some("0ll".into()))
    }

    /// The product `page.cast::<i64>() * stride` in pointer `ptr`'s offsets (through
    /// pointer adds, sums, splats and broadcasts): the product, the `int` page and the
    /// stride's name.
    fn page_term(&self, v: ValueId) -> Option<(ValueId, ValueId, String)> {
        let op = self.def_op(v)?;
        match &op.kind {
            OpKind::Binary(BinaryOp::Mul) => match self.int_factors(op)? {
                (IntFactor::Widened(page), IntFactor::Promised(stride))
                | (IntFactor::Promised(stride), IntFactor::Widened(page)) => {
                    Some((v, page, stride))
                }
                _ => None,
            },
            OpKind::AddPtr
            | OpKind::Binary(BinaryOp::Add)
            | OpKind::Broadcast { .. }
            | OpKind::ExpandDims { .. } => op.operands.iter().find_map(|&x| self.page_term(x)),
            _ => None,
        }
    }
}
