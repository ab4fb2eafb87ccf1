//! The GPU IR's memory ops as CUDA: alloc pointers into dynamic shared memory, `cp.async`
//! copies (16-byte chunks, zero-filled where masked), commit/wait groups and barriers, and
//! the stage counters of pipelined loops.

use super::elem_index::ElemIndex;
use super::emitter::Emitter;
use super::remat::Scope;
use super::CodegenError;
use crate::gpu_ir::remat::defined_in;
use crate::gpu_ir::{AllocId, AsyncCopy, CopyAt, GpuOp, Stage};
use crate::ir::{Op, OpId, OpKind};

type Res<T> = Result<T, CodegenError>;

/// The C++ name of an alloc's base pointer.
pub(crate) fn buf_name(a: AllocId) -> String {
    format!("attn_buf{}", a.0)
}

impl<'f> Emitter<'f> {
    /// Declares the scratch pointer (after the allocs) and one pointer per alloc.
    pub(crate) fn emit_alloc_pointers(&mut self) {
        self.w.line(format!(
            "unsigned char* const attn_scratch = attn_smem + {};",
            self.prog.alloc_bytes
        ));
        for (i, a) in self.prog.allocs.iter().enumerate() {
            self.w.line(format!(
                "unsigned short* const {} = reinterpret_cast<unsigned short*>(attn_smem + {}); // {}: {}x{} (+{}) x {}",
                buf_name(AllocId(i as u32)),
                a.offset,
                a.name,
                a.rows,
                a.cols,
                a.pad,
                a.stages
            ));
        }
    }

    /// Emits a memory op of the GPU IR (tile ops and control flow are handled by the walker).
    pub(crate) fn emit_gpu_op(&mut self, g: &'f GpuOp) -> Res<()> {
        match g {
            GpuOp::AsyncCopy(c) => self.emit_async_copy(c),
            GpuOp::Commit => {
                self.w.line("attn_cp_commit();");
                Ok(())
            }
            GpuOp::Wait { pending } => {
                self.w.line(format!("attn_cp_wait<{pending}>();"));
                Ok(())
            }
            GpuOp::Barrier { reason } => {
                self.w.line(format!("__syncthreads(); // {reason:?}"));
                Ok(())
            }
            GpuOp::Mma { dot, a, b } => {
                let op = self.f.op(*dot);
                self.op_comment(op);
                let r = self.emit_mma_shared(op, a, b);
                self.converted.clear();
                r
            }
            other => Err(CodegenError::Malformed(format!(
                "{other:?} is not a memory op"
            ))),
        }
    }

    /// The stage counter of pipelined loop `op`, declared (as 0) on first use.
    pub(crate) fn stage_var(&mut self, id: OpId) -> Res<String> {
        if let Some(v) = self.loop_stage.get(&id.0) {
            return Ok(v.clone());
        }
        let v = self.fresh_name("attn_stage");
        self.w.line(format!("int {v} = 0;"));
        self.loop_stage.insert(id.0, v.clone());
        Ok(v)
    }

    /// Pointer to the first element of `stage` of alloc `a` (innermost pipelined loop's
    /// counter for Current/Next).
    pub(crate) fn stage_base(
        &self,
        a: AllocId,
        stage: Stage,
        counter: Option<&str>,
    ) -> Res<String> {
        let al = self.prog.alloc(a);
        let elems = al.stage_bytes() / al.elem.size_bytes();
        let base = buf_name(a);
        let counter = || {
            counter
                .map(str::to_string)
                .or_else(|| self.stage_vars.last().cloned())
                .ok_or_else(|| {
                    CodegenError::Malformed(format!("{stage:?} stage outside a pipelined loop"))
                })
        };
        Ok(match stage {
            Stage::Only => base,
            Stage::Current => format!("({base} + {} * {elems})", counter()?),
            Stage::Next => format!("({base} + ({} ^ 1) * {elems})", counter()?),
        })
    }

    fn emit_async_copy(&mut self, c: &'f AsyncCopy) -> Res<()> {
        let load = self.f.op(c.load);
        self.op_comment(load);
        let Some(l) = c.loop_op.filter(|_| c.at != CopyAt::InPlace) else {
            return self.copy_chunks(c, load, &Scope::InPlace, None, None);
        };
        let lop = self.f.op(l);
        let body = &lop.regions[0];
        let iv = body.args[0];
        let name = |e: &Self, i: usize| e.name(lop.operands[i]).map(str::to_string);
        let (lo, hi, step) = (name(self, 0)?, name(self, 1)?, name(self, 2)?);
        let counter = self.stage_var(l)?;
        let (iv_expr, guard) = if c.at == CopyAt::FirstIteration {
            (lo.clone(), format!("{lo} < {hi}"))
        } else {
            let ivn = self.name(iv)?.to_string();
            (
                format!("({ivn} + {step})"),
                format!("{ivn} + {step} < {hi}"),
            )
        };
        let inside = defined_in(self.f, body);
        let scope = Scope::Loop {
            iv,
            iv_expr,
            defined_in_body: &inside,
        };
        self.copy_chunks(c, load, &scope, Some(guard), Some(&counter))
    }

    /// The per-thread loop over the copy's 16-byte chunks.
    fn copy_chunks(
        &mut self,
        c: &AsyncCopy,
        load: &Op,
        scope: &Scope,
        guard: Option<String>,
        counter: Option<&str>,
    ) -> Res<()> {
        let al = self.prog.alloc(c.dst).clone();
        let (per_row, total) = (al.cols / c.map.chunk, al.rows * al.cols / c.map.chunk);
        // Chunk walk: consecutive threads take consecutive chunks of a row (coalesced), or,
        // row per thread, thread t takes row t % rows and every (threads / rows)-th chunk.
        let (slots, index) = if c.map.row_per_thread {
            let lanes = self.threads / al.rows;
            (
                per_row.div_ceil(lanes),
                format!(
                    "const int attn_row = tid % {rows}, attn_col = (tid / {rows} + s * {lanes}) * {ch};",
                    rows = al.rows,
                    ch = c.map.chunk
                ),
            )
        } else {
            (
                total.div_ceil(self.threads),
                format!(
                    "const int attn_i = tid + s * {t}, attn_row = attn_i / {per_row}, attn_col = (attn_i % {per_row}) * {ch};",
                    t = self.threads,
                    ch = c.map.chunk
                ),
            )
        };
        let tail = if c.map.row_per_thread {
            (!per_row.is_multiple_of(self.threads / al.rows))
                .then(|| format!("if (attn_col >= {}) break;", al.cols))
        } else {
            (!total.is_multiple_of(self.threads)).then(|| format!("if (attn_i >= {total}) break;"))
        };
        let dst = self.stage_base(c.dst, c.stage, counter)?;
        let (row, cc) = ("attn_row", "attn_col");
        let at = if c.map.contiguous_axis == 1 {
            ElemIndex::Coords {
                row: row.into(),
                col: cc.into(),
            }
        } else {
            ElemIndex::Coords {
                row: cc.into(),
                col: row.into(),
            }
        };
        let ptr = self.remat_expr(load.operands[0], &at, scope)?;
        let mask = match load.kind {
            OpKind::Load { has_mask: true, .. } => self.remat_expr(load.operands[1], &at, scope)?,
            _ => "true".into(),
        };
        match &guard {
            Some(g) => self.w.open(format!("if ({g})")),
            None => self.w.open(""),
        }
        self.w
            .line(format!("unsigned short* const attn_dst = {dst};"));
        self.w.open_unrolled("s", slots);
        self.w.line(index);
        if let Some(t) = tail {
            self.w.line(t);
        }
        self.w.line(format!(
            "attn_cp_async16(attn_dst + {row} * {} + {cc}, {ptr}, {mask});",
            al.pitch()
        ));
        self.w.close("");
        self.w.close("");
        Ok(())
    }
}
