//! The GPU IR's memory ops as CUDA: alloc pointers into dynamic shared memory, `cp.async`
//! copies (16-byte chunks, zero-filled where masked), commit/wait groups and barriers, and
//! the stage counters of pipelined loops.

use super::elem_index::ElemIndex;
use super::emitter::Emitter;
use super::page_row::PageRow;
use super::remat::Scope;
use super::shared_rows::{offset_rows, replace_ident, rows_offset, SharedRows};
use super::writer::Scope as TextScope;
use super::CodegenError;
use crate::gpu_ir::remat::defined_in;
use crate::gpu_ir::{AllocId, AsyncCopy, CopyAt, CopyEngine, GpuOp, Stage};
use crate::ir::{OpId, OpKind, ValueId};

type Res<T> = Result<T, CodegenError>;

/// The smallest program (threads) whose adjacent copies share their loops: one warpgroup.
const FUSED_COPY_MIN_THREADS: usize = 128;

/// Chunks per thread a copy's loop unrolls.
const MAX_COPY_UNROLL: usize = 4;

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
            GpuOp::AsyncCopy(c) => self.emit_async_copies(&[c]),
            GpuOp::Commit => {
                self.w.line("attn_cp_commit();");
                Ok(())
            }
            GpuOp::Wait { pending } => {
                self.w.line(format!("attn_cp_wait<{pending}>();"));
                if self.f.warpgroup_mma {
                    // What landed must be visible to the tensor cores' async proxy too.
                    self.w.line("attn_fence_proxy_async();");
                }
                Ok(())
            }
            GpuOp::Barrier { reason } => {
                let sync = self.block_sync();
                self.w.line(format!("{sync} // {reason:?}"));
                self.scratch_barrier_emitted();
                Ok(())
            }
            GpuOp::Mma {
                dot,
                a,
                b,
                inline_wait,
                chained_from,
            } => {
                let op = self.f.op(*dot);
                self.op_comment(op);
                let r = self.emit_mma_shared(op, a, b, *inline_wait, *chained_from);
                self.converted.clear();
                r
            }
            GpuOp::MmaWait { dot, in_scale } => {
                match in_scale {
                    Some(scale) => self.emit_wgmma_wait_in_scale(*dot, *scale),
                    None => self.emit_wgmma_wait(*dot),
                }
                Ok(())
            }
            GpuOp::MmaWaitCarried { dot, value } => self.emit_wgmma_wait_carried(*dot, *value),
            GpuOp::PackA { dot, from } => self.emit_pack_a(*dot, *from),
            GpuOp::HoldA { dot, a, steps } => self.emit_hold_a(*dot, a, *steps),
            GpuOp::Turn(t) => {
                self.emit_turn(*t);
                Ok(())
            }
            GpuOp::TmaLanded { alloc, stage, by } => self.emit_tma_landed(*alloc, *stage, *by),
            GpuOp::Stage(sync) => self.emit_stage_sync(*sync),
            GpuOp::StagedStore(s) => self.emit_staged_store(s),
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

    /// The ring counter a `stage` access reads: `counter`, or the innermost pipelined
    /// loop's.
    pub(crate) fn stage_counter(&self, stage: Stage, counter: Option<&str>) -> Res<String> {
        counter
            .map(str::to_string)
            .or_else(|| self.stage_vars.last().cloned())
            .ok_or_else(|| {
                CodegenError::Malformed(format!("{stage:?} stage outside a pipelined loop"))
            })
    }

    /// The ring index of `stage` in a ring of `stages` buffers, as a C++ expression
    /// (`counter`, or the innermost pipelined loop's, for Current/Next).
    pub(crate) fn stage_index(
        &self,
        stages: usize,
        stage: Stage,
        counter: Option<&str>,
    ) -> Res<String> {
        let counter = || self.stage_counter(stage, counter);
        Ok(match stage {
            Stage::Only => "0".into(),
            // A ring of one buffer (`gpu_ir::seesaw_ring`): every stage is that buffer.
            _ if stages == 1 => "0".into(),
            Stage::Fixed(k) => k.to_string(),
            Stage::Current => counter()?,
            // The buffer the previous iteration read: `counter - 1` around the ring.
            Stage::Next if stages == 2 => format!("({} ^ 1)", counter()?),
            Stage::Next => {
                let c = counter()?;
                format!("({c} == 0 ? {} : {c} - 1)", stages - 1)
            }
            // The same, but the current buffer in the first iteration: a select of the
            // address, not a branch around the MMAs reading it (ptxas serializes warpgroup
            // MMAs under a branch and spilled P0's consumers).
            Stage::Previous => {
                let prev = self.stage_index(stages, Stage::Next, Some(&counter()?))?;
                let first = self.first_iteration(self.split()?.loop_op)?;
                format!("(({first}) ? {} : {prev})", counter()?)
            }
        })
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
        Ok(match stage {
            Stage::Only => base,
            Stage::Fixed(k) => format!("({base} + {})", k * elems),
            _ => format!(
                "({base} + {} * {elems})",
                self.stage_index(al.stages, stage, counter)?
            ),
        })
    }

    /// Whether copy `b` can share the loops of copy `a` (emitted right before it): the same
    /// iteration, the same number of rows, split over the threads alike, both one address
    /// per row. The K and V tiles of one KV tile are: their rows are the keys. So are the
    /// parts of one row at different columns (MLA's 512 latent and 64 rope columns of a key):
    /// the pass then runs one chunk loop per copy, and the row addresses, computed side by
    /// side before any `cp.async`, share their block-table load.
    /// Only programs of a warpgroup or more: their loops are issue-bound, and the shared
    /// address work is what counts (P0 3.31 → 3.14 ms, P1 452 → 447 µs, H200
    /// 2026-12-02T01:40Z). A one-warp decode program streams: fused, its V guard's
    /// reductions ran before the K chunks were issued, and D1 slowed from 0.27 to 0.33 ms.
    pub(crate) fn copies_fuse(&self, a: &AsyncCopy, b: &AsyncCopy) -> bool {
        let (x, y) = (self.prog.alloc(a.dst), self.prog.alloc(b.dst));
        crate::features::on("copy_fusion")
            && self.threads >= FUSED_COPY_MIN_THREADS
            && a.at == b.at
            && a.loop_op == b.loop_op
            && (a.map.lanes, a.map.chunk) == (b.map.lanes, b.map.chunk)
            && a.map.row_contiguous
            && b.map.row_contiguous
            && x.rows == y.rows
    }

    /// Emits copies that share one guard, one loop over the rows and one over each row's
    /// chunks: a single copy, or a run of them [`Self::copies_fuse`] accepts.
    pub(crate) fn emit_async_copies(&mut self, cs: &[&'f AsyncCopy]) -> Res<()> {
        let tma = |c: &&AsyncCopy| matches!(c.engine, CopyEngine::Tma { .. });
        if cs.iter().any(tma) {
            if !cs.iter().all(tma) {
                for c in cs {
                    self.emit_async_copies(std::slice::from_ref(c))?;
                }
                return Ok(());
            }
            // Declared outside the branches: both read the ring's counter.
            if let Some(l) = cs[0].loop_op {
                self.stage_var(l)?;
            }
            self.w.line(super::tma_copy::SM90A);
            self.emit_copies_by(cs, true)?;
            self.w.line("#else");
            self.emit_copies_by(cs, false)?;
            self.w.line("#endif");
            return Ok(());
        }
        self.emit_copies_by(cs, false)
    }

    /// The copies by TMA boxes (`tma`) or by the threads' `cp.async` chunks.
    fn emit_copies_by(&mut self, cs: &[&'f AsyncCopy], tma: bool) -> Res<()> {
        let Some(&c) = cs.first() else {
            return Ok(());
        };
        self.op_comment(self.f.op(c.load));
        let Some(l) = c.loop_op.filter(|_| c.at != CopyAt::InPlace) else {
            return self.copy_chunks(cs, &Scope::InPlace, None, None, tma);
        };
        let lop = self.f.op(l);
        let body = &lop.regions[0];
        let iv = body.args[0];
        let counter = self.stage_var(l)?;
        let (iv_expr, guard) = self.copy_iteration(l, c.at)?;
        let inside = defined_in(self.f, body);
        // A load one iteration behind moves the tile of the copy's own iteration.
        let mut bound = Vec::new();
        for b in cs.iter().filter_map(|c| c.behind) {
            self.bind_local(b.prev, iv_expr.clone(), None, &mut bound);
            self.bind_local(b.first_off, "true".into(), None, &mut bound);
        }
        let scope = Scope::Loop {
            iv,
            iv_expr,
            defined_in_body: &inside,
        };
        let r = self.copy_chunks(cs, &scope, Some(guard), Some(&counter), tma);
        self.unbind_locals(&bound);
        r
    }

    /// The condition that pipelined loop `l` runs its first iteration (nothing is behind
    /// it: see [`Stage::Previous`]).
    pub(crate) fn first_iteration(&self, l: OpId) -> Res<String> {
        let lop = self.f.op(l);
        Ok(format!(
            "{} == {}",
            self.name(lop.regions[0].args[0])?,
            self.name(lop.operands[0])?
        ))
    }

    /// The induction variable of the iteration a copy of pipelined loop `l` moves (`at`:
    /// a prologue's or the one ahead), and the condition that the loop has it.
    pub(crate) fn copy_iteration(&self, l: OpId, at: CopyAt) -> Res<(String, String)> {
        let lop = self.f.op(l);
        let iv = lop.regions[0].args[0];
        let name = |i: usize| self.name(lop.operands[i]).map(str::to_string);
        let (lo, hi, step) = (name(0)?, name(1)?, name(2)?);
        let ahead = |from: &str, k: usize| match k {
            0 => from.to_string(),
            1 => format!("({from} + {step})"),
            k => format!("({from} + {k} * {step})"),
        };
        let iv_expr = match at {
            CopyAt::Prologue(k) => ahead(&lo, k),
            CopyAt::Ahead(k) => ahead(self.name(iv)?, k),
            CopyAt::InPlace => {
                return Err(CodegenError::Malformed(
                    "an in-place copy with a loop stage".into(),
                ))
            }
        };
        let guard = format!("{iv_expr} < {hi}");
        Ok((iv_expr, guard))
    }

    /// The per-thread loops over the copies' rows (passes) and each row's 16-byte chunks:
    /// a `cp.async` each, or (`tma`) the chunk's mask bit, the boxes issued after the loops.
    fn copy_chunks(
        &mut self,
        cs: &[&'f AsyncCopy],
        scope: &Scope,
        guard: Option<String>,
        counter: Option<&str>,
        tma: bool,
    ) -> Res<()> {
        let Some(&c) = cs.first() else {
            return Ok(());
        };
        let al = self.prog.alloc(c.dst).clone();
        let lanes = c.map.lanes;
        let keep = self.declare_shared_rows(cs, &al, lanes);
        match &guard {
            Some(g) => self.w.open(format!("if ({g})")),
            None => self.w.open(""),
        }
        let pass_steps = self.declare_destinations(cs, counter, tma)?;
        // The boxes go first: the tile's bytes start moving before the threads evaluate
        // its mask.
        if tma {
            self.emit_tma_boxes(cs, scope, counter)?;
        }
        let mut bound = Vec::new();
        self.hoist_uniform_regions(cs, scope, &mut bound)?;
        if tma {
            self.tma_clear_bits(cs);
            match self.tma_masks_all_true(cs, scope)? {
                Some(full) => self.w.open(format!("if (!({full}))")),
                None => self.w.open(""),
            }
        }
        self.open_copy_passes(al.rows, lanes);
        let masks = self.copy_masks(cs, scope, lanes)?;
        if tma {
            self.record_tma_zero_bits(cs, &masks);
            self.w.close("");
        } else {
            let rows = PassRows {
                guard: &guard,
                keep: &keep,
                pass_steps: &pass_steps,
            };
            let at_chunk = self.copy_sources(cs, scope, &al, &rows)?;
            self.issue_chunks(cs, &al, &at_chunk, &masks);
        }
        self.w.close("");
        self.w.close("");
        self.unbind_locals(&bound);
        Ok(())
    }

    /// Each copy's stage pointer (`attn_dst`, `attn_dst_1`, ...) and, where a pass steps a
    /// whole swizzle period, its first pass's row pointer (`attn_dst_first`): the later
    /// passes then write at a constant from it, instead of three instructions a row on the
    /// shared address (`ATTN_CODEGEN_DISABLE=row_step` addresses each row). Not in a split
    /// ring's producer: P0's loop went 413 → 350 SASS instructions and P0 1.937 → 1.966 ms,
    /// where P1 (one ring) went 0.285 → 0.282 (H200, one call, three rounds);
    /// `ATTN_CODEGEN_ENABLE=split_row_step` takes it there too, to time it again beside the
    /// producer's other cuts. Returns each copy's pass step in elements, if it has one.
    fn declare_destinations(
        &mut self,
        cs: &[&'f AsyncCopy],
        counter: Option<&str>,
        tma: bool,
    ) -> Res<Vec<Option<usize>>> {
        let steps_on = crate::features::on("row_step")
            && (!self.in_split_ring() || crate::features::on("split_row_step"));
        let mut pass_steps = Vec::with_capacity(cs.len());
        for (i, c) in cs.iter().enumerate() {
            let (lanes, chunk) = (c.map.lanes, c.map.chunk);
            let dst = self.stage_base(c.dst, c.stage, counter)?;
            if i > 0 {
                self.op_comment(self.f.op(c.load));
            }
            let sfx = copy_suffix(i);
            self.w
                .line(format!("unsigned short* const attn_dst{sfx} = {dst};"));
            let alloc = self.prog.alloc(c.dst);
            let step = alloc
                .row_step(self.threads / lanes)
                .filter(|_| steps_on && !tma);
            if step.is_some() {
                let (first, _) = alloc.copy_row(
                    &format!("tid / {lanes}"),
                    &format!("tid % {lanes}"),
                    lanes,
                    chunk,
                );
                self.w.line(format!(
                    "unsigned short* const attn_dst_first{sfx} = attn_dst{sfx} + {first};"
                ));
            }
            pass_steps.push(step);
        }
        Ok(pass_steps)
    }

    /// Each copy's mask at this thread's chunk (`true` for an unmasked load), its row
    /// reductions hoisted ([`Self::hoist_row_reductions`]).
    fn copy_masks(
        &mut self,
        cs: &[&'f AsyncCopy],
        scope: &Scope,
        lanes: usize,
    ) -> Res<Vec<String>> {
        let mut masks = Vec::with_capacity(cs.len());
        for c in cs {
            let load = self.f.op(c.load);
            let at = Self::chunk_coords(c, "attn_col");
            masks.push(match load.kind {
                OpKind::Load { has_mask: true, .. } => {
                    self.hoist_row_reductions(load, &at, scope, lanes)?
                }
                _ => "true".into(),
            });
        }
        Ok(masks)
    }

    /// A TMA fill's chunk loops: each chunk records its mask bit (the boxes move the bytes).
    fn record_tma_zero_bits(&mut self, cs: &[&'f AsyncCopy], masks: &[String]) {
        let calls: Vec<String> = cs
            .iter()
            .zip(masks)
            .map(|(c, m)| self.tma_zero_bit(c, m))
            .collect();
        for (c, call) in cs.iter().zip(&calls) {
            let cols = self.prog.alloc(c.dst).cols;
            self.chunk_loop(
                true,
                cols,
                c.map.lanes,
                c.map.chunk,
                std::slice::from_ref(call),
            );
        }
    }

    /// Each copy's source and destination row pointers in this pass, as the (source, shared
    /// destination) of its chunk `s`. A row's address is computed once per pass (the memory
    /// clobber of each `cp.async` would make the compiler reload the block table per chunk
    /// otherwise), at this lane's first chunk; each chunk then adds a constant stride, an
    /// immediate offset of the copy.
    fn copy_sources(
        &mut self,
        cs: &[&'f AsyncCopy],
        scope: &Scope,
        al: &crate::gpu_ir::LocalAlloc,
        rows: &PassRows<'_>,
    ) -> Res<Vec<(String, String)>> {
        // (copy index, base pointer, row-start expression) of the row-contiguous sources.
        let mut srcs: Vec<(usize, String, String)> = Vec::new();
        let mut at_chunk = Vec::with_capacity(cs.len());
        for (i, c) in cs.iter().enumerate() {
            let load = self.f.op(c.load);
            let sfx = copy_suffix(i);
            if !c.map.row_contiguous {
                at_chunk.push((
                    self.remat_expr(load.operands[0], &Self::chunk_coords(c, "attn_col"), scope)?,
                    format!("attn_dst{sfx} + {}", al.offset("attn_row", "attn_col")),
                ));
                continue;
            }
            let (lanes, chunk) = (c.map.lanes, c.map.chunk);
            // Rows in page runs: the run's first row's address plus this thread's offset in
            // the run times the row stride (see `run_rows`), else every row's own address.
            let ptr = load.operands[0];
            let (start, page_row) = match self.run_rows(c, lanes)? {
                Some(r) => {
                    let at = Self::coords_at(c, &r.start.first, "0");
                    let split =
                        self.at_run_start(r.start.clone(), || self.page_row(ptr, &at, scope))?;
                    match split {
                        // The text other copies match is the rest and the page together.
                        Some(pr) => {
                            let rest = format!("{} + {}", pr.rest, r.offset);
                            (
                                format!("{rest} @ {}", pr.page),
                                Some(PageRow { rest, ..pr }),
                            )
                        }
                        None => {
                            let base =
                                self.at_run_start(r.start, || self.remat_expr(ptr, &at, scope))?;
                            (format!("{base} + {}", r.offset), None)
                        }
                    }
                }
                None => (
                    self.remat_expr(ptr, &Self::chunk_coords(c, "0"), scope)?,
                    None,
                ),
            };
            let src = format!("attn_src{sfx}");
            let base = self.root_pointer(ptr);
            let row = SourceRow {
                src: &src,
                start: &start,
                base: base.as_deref(),
                page_row: page_row.as_ref(),
            };
            self.source_row(i, c, &row, &srcs, rows);
            if let Some(b) = base {
                srcs.push((i, b, start));
            }
            // Swizzled, the lane's chunks `lane + lanes·s` (lanes a multiple of 8) keep their
            // place in the line and step column blocks: still one row pointer plus
            // immediate offsets.
            let (row_start, dst_stride) =
                self.prog
                    .alloc(c.dst)
                    .copy_row("attn_row", "attn_lane_in_row", lanes, chunk);
            let row_ptr = match rows.pass_steps[i] {
                Some(step) => format!("attn_dst_first{sfx} + p * {step}"),
                None => format!("attn_dst{sfx} + {row_start}"),
            };
            self.w.line(format!(
                "unsigned short* const attn_dst_row{sfx} = {row_ptr};"
            ));
            at_chunk.push((
                format!("{src} + s * {}", lanes * chunk),
                format!("attn_dst_row{sfx} + s * {dst_stride}"),
            ));
        }
        Ok(at_chunk)
    }

    /// Defines copy `i`'s row pointer ([`SourceRow`]): from an earlier copy of this group
    /// with the same rows but for its base pointer (V beside K: one offset, the block-table
    /// load included), else from what a split ring's earlier copy kept ([`SharedRows`]),
    /// else computed, and kept where a later copy may read it. A row split at its page
    /// ([`PageRow`]) shares its page, not its offset.
    fn source_row(
        &mut self,
        i: usize,
        c: &AsyncCopy,
        row: &SourceRow<'_>,
        srcs: &[(usize, String, String)],
        rows: &PassRows<'_>,
    ) {
        let (src, start, base) = (row.src, row.start, row.base);
        let dims = (self.threads / c.map.lanes, c.map.lanes, c.map.chunk);
        let same_rows = base.and_then(|b| {
            srcs.iter()
                .find(|(_, ob, other)| replace_ident(start, b, ob) == *other)
        });
        let kept = base.and_then(|b| {
            self.shared_rows
                .iter()
                .find(|r| {
                    r.dims == dims
                        && r.guard == *rows.guard
                        && self.w.in_scope(r.scope)
                        && replace_ident(start, b, &r.base) == r.start
                })
                .map(|r| r.var.clone())
        });
        let b = base.unwrap_or_default();
        let chunk = c.map.chunk;
        let sfx = copy_suffix(i);
        let at_page = |pr: &PageRow, page: &str| {
            format!(
                "const auto {src} = attn_page_row({} + attn_lane_in_row * {chunk}, {page}, (int){});",
                pr.rest, pr.stride
            )
        };
        match (same_rows, kept, row.page_row) {
            (Some((j, _, _)), _, Some(pr)) => {
                let page = format!("attn_pg{}", copy_suffix(*j));
                self.w.line(at_page(pr, &page));
            }
            (Some((j, ob, _)), _, None) => self.w.line(format!(
                "const auto {src} = {b} + (attn_src{} - {ob});",
                copy_suffix(*j)
            )),
            (None, Some(var), Some(pr)) => {
                let page = format!("(int){var}[p]");
                self.w.line(at_page(pr, &page));
            }
            (None, Some(var), None) => {
                self.w
                    .line(format!("const auto {src} = {};", offset_rows(b, &var)));
            }
            (None, None, page_row) => {
                let kept_value = match page_row {
                    Some(pr) => {
                        self.w
                            .line(format!("const int attn_pg{sfx} = {};", pr.page));
                        self.w.line(at_page(pr, &format!("attn_pg{sfx}")));
                        format!("attn_pg{sfx}")
                    }
                    None => {
                        self.w.line(format!(
                            "const auto {src} = {start} + attn_lane_in_row * {chunk};"
                        ));
                        rows_offset(src, b)
                    }
                };
                if let (Some((var, scope)), Some(b)) = (&rows.keep[i], base) {
                    self.w.line(format!("{var}[p] = {kept_value};"));
                    self.shared_rows.push(SharedRows {
                        base: b.to_string(),
                        start: start.to_string(),
                        guard: rows.guard.clone(),
                        dims,
                        var: var.clone(),
                        scope: *scope,
                    });
                }
            }
        }
    }

    /// The `cp.async` of every chunk: one chunk loop for copies of one width (K and V), one
    /// per copy otherwise.
    fn issue_chunks(
        &mut self,
        cs: &[&'f AsyncCopy],
        al: &crate::gpu_ir::LocalAlloc,
        at_chunk: &[(String, String)],
        masks: &[String],
    ) {
        let c = cs[0];
        let (lanes, chunk) = (c.map.lanes, c.map.chunk);
        let widths: Vec<usize> = cs.iter().map(|c| self.prog.alloc(c.dst).cols).collect();
        let calls: Vec<String> = at_chunk
            .iter()
            .zip(masks)
            .map(|((src, dst_at), mask)| format!("attn_cp_async16({dst_at}, {src}, {mask});"))
            .collect();
        if widths.iter().all(|&w| w == al.cols) {
            self.chunk_loop(c.map.row_contiguous, al.cols, lanes, chunk, &calls);
        } else {
            for (call, cols) in calls.iter().zip(widths) {
                self.chunk_loop(
                    c.map.row_contiguous,
                    cols,
                    lanes,
                    chunk,
                    std::slice::from_ref(call),
                );
            }
        }
    }

    /// Opens the unrolled loop (`p`) over the passes of a copy distribution of `lanes`
    /// threads a row over `rows` alloc rows, binding this thread's `attn_row` and
    /// `attn_lane_in_row`.
    pub(crate) fn open_copy_passes(&mut self, rows: usize, lanes: usize) {
        self.w
            .open_unrolled("p", rows.div_ceil(self.threads / lanes));
        self.bind_pass_row(lanes);
    }

    /// Binds this thread's `attn_row` and `attn_lane_in_row` in pass `p` of a copy
    /// distribution of `lanes` threads a row.
    pub(crate) fn bind_pass_row(&mut self, lanes: usize) {
        let rows_per_pass = self.threads / lanes;
        self.w.line(format!(
            "const int attn_row = p * {rows_per_pass} + tid / {lanes}, attn_lane_in_row = tid % {lanes};"
        ));
    }

    /// A row's chunk loop over `cols` columns (`chunk` per `cp.async`, `lanes` per row),
    /// issuing `calls` at chunk column `attn_col`.
    pub(crate) fn chunk_loop(
        &mut self,
        contiguous: bool,
        cols: usize,
        lanes: usize,
        chunk: usize,
        calls: &[String],
    ) {
        let cc = "attn_col";
        let per_row = cols / chunk;
        let slots = per_row.div_ceil(lanes);
        if contiguous {
            self.w.open_unrolled("s", slots);
        } else {
            // Each chunk recomputes its whole address: unrolled by a few only, so the chunks
            // do not all hold their addresses at once.
            self.w
                .open_partly_unrolled("s", slots, slots.min(MAX_COPY_UNROLL));
        }
        self.w.line(format!(
            "const int {cc} = (attn_lane_in_row + s * {lanes}) * {chunk};"
        ));
        if !per_row.is_multiple_of(lanes) {
            self.w.line(format!("if ({cc} >= {cols}) break;"));
        }
        for call in calls {
            self.w.line(call);
        }
        self.w.close("");
    }

    /// The C++ name of the kernel pointer a pointer tile offsets (through `add_ptr`'s base
    /// operand, broadcasts and splats), if it is one.
    pub(crate) fn root_pointer(&self, mut v: ValueId) -> Option<String> {
        while let Some(op) = self.def_op(v) {
            match op.kind {
                OpKind::AddPtr
                | OpKind::Broadcast { .. }
                | OpKind::ExpandDims { .. }
                | OpKind::Splat { .. } => v = *op.operands.first()?,
                _ => return None,
            }
        }
        self.name(v).ok().map(str::to_string)
    }

    /// Tile coordinates of a chunk of alloc row `attn_row` starting at alloc column `col`.
    pub(crate) fn chunk_coords(c: &AsyncCopy, col: &str) -> ElemIndex {
        Self::coords_at(c, "attn_row", col)
    }

    /// The element at alloc row `row`, column `col` of copy `c`'s tile.
    fn coords_at(c: &AsyncCopy, row: &str, col: &str) -> ElemIndex {
        if c.map.contiguous_axis == 1 {
            ElemIndex::Coords {
                row: row.into(),
                col: col.into(),
            }
        } else {
            ElemIndex::Coords {
                row: col.into(),
                col: row.into(),
            }
        }
    }
}

/// What a copy group's rows share within its passes: the group's guard, the arrays a split
/// ring's earlier copies kept (per copy, [`Emitter::declare_shared_rows`]) and each copy's
/// pass step ([`Emitter::declare_destinations`]).
struct PassRows<'a> {
    guard: &'a Option<String>,
    keep: &'a [Option<(String, TextScope)>],
    pass_steps: &'a [Option<usize>],
}

/// One copy's row as [`Emitter::source_row`] defines it: the name it defines, the row's
/// start (the text other copies' rows are matched by), the kernel pointer it offsets, and
/// its split at the page where it has one.
struct SourceRow<'a> {
    src: &'a str,
    start: &'a str,
    base: Option<&'a str>,
    page_row: Option<&'a PageRow>,
}

/// The suffix of copy `i`'s names in a group (`attn_src`, `attn_src_1`, ...).
fn copy_suffix(i: usize) -> String {
    if i == 0 {
        String::new()
    } else {
        format!("_{i}")
    }
}
