//! The GPU IR's memory ops as CUDA: alloc pointers into dynamic shared memory, `cp.async`
//! copies (16-byte chunks, zero-filled where masked), commit/wait groups and barriers, and
//! the stage counters of pipelined loops.

use super::c_types::scalar_reg_type;
use super::elem_index::ElemIndex;
use super::emitter::{Emitter, Role};
use super::page_pointer::RunStart;
use super::remat::Scope;
use super::writer::Scope as TextScope;
use super::CodegenError;
use crate::gpu_ir::remat::defined_in;
use crate::gpu_ir::{AllocId, AsyncCopy, CopyAt, CopyEngine, GpuOp, Stage};
use crate::ir::{BinaryOp, Op, OpId, OpKind, ValueId};

type Res<T> = Result<T, CodegenError>;

/// The uniform tile (a splat of a scalar) that decides whether a mask reads a reduction, and
/// the value of it under which it does.
#[derive(Clone, Copy, Debug)]
struct Guard {
    value: ValueId,
    read_when: bool,
}

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
        !crate::features::disabled("copy_fusion")
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
        let (lanes, chunk) = (c.map.lanes, c.map.chunk);
        let (row, cc) = ("attn_row", "attn_col");
        let keep = self.declare_shared_rows(cs, &al, lanes);
        match &guard {
            Some(g) => self.w.open(format!("if ({g})")),
            None => self.w.open(""),
        }
        let sfx = |i: usize| {
            if i == 0 {
                String::new()
            } else {
                format!("_{i}")
            }
        };
        // Where a pass steps a whole swizzle period, each copy's first pass's row pointer
        // once, the others at a constant from it, instead of three instructions a row on
        // the shared address (`ATTN_CODEGEN_DISABLE=row_step` addresses each row). Not in a
        // split ring's producer: P0's loop went 413 → 350 SASS instructions and P0 1.937 →
        // 1.966 ms, where P1 (one ring) went 0.285 → 0.282 (H200, one call, three rounds);
        // `ATTN_CODEGEN_ENABLE=split_row_step` takes it there too, to time it again beside
        // the producer's other cuts.
        let rows_per_pass = self.threads / lanes;
        let steps_on = !crate::features::disabled("row_step")
            && (!self.in_split_ring() || crate::features::enabled("split_row_step"));
        let mut pass_steps = Vec::with_capacity(cs.len());
        for (i, c) in cs.iter().enumerate() {
            let dst = self.stage_base(c.dst, c.stage, counter)?;
            let op = self.f.op(c.load);
            if i > 0 {
                self.op_comment(op);
            }
            self.w
                .line(format!("unsigned short* const attn_dst{} = {dst};", sfx(i)));
            let alloc = self.prog.alloc(c.dst);
            let step = alloc.row_step(rows_per_pass).filter(|_| steps_on && !tma);
            if step.is_some() {
                let (first, _) = alloc.copy_row(
                    &format!("tid / {lanes}"),
                    &format!("tid % {lanes}"),
                    lanes,
                    chunk,
                );
                self.w.line(format!(
                    "unsigned short* const attn_dst_first{} = attn_dst{} + {first};",
                    sfx(i),
                    sfx(i)
                ));
            }
            pass_steps.push(step);
        }
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
        let mut masks = Vec::with_capacity(cs.len());
        for c in cs {
            let load = self.f.op(c.load);
            let at = Self::chunk_coords(c, cc);
            masks.push(match load.kind {
                OpKind::Load { has_mask: true, .. } => {
                    self.hoist_row_reductions(load, &at, scope, lanes)?
                }
                _ => "true".into(),
            });
        }
        if tma {
            let calls: Vec<String> = cs
                .iter()
                .zip(&masks)
                .map(|(c, m)| self.tma_zero_bit(c, m))
                .collect();
            for (c, call) in cs.iter().zip(&calls) {
                let cols = self.prog.alloc(c.dst).cols;
                self.chunk_loop(true, cols, lanes, chunk, std::slice::from_ref(call));
            }
            self.w.close("");
            self.w.close("");
            self.w.close("");
            self.unbind_locals(&bound);
            return Ok(());
        }
        // A row's address once per pass (the memory clobber of each `cp.async` would make
        // the compiler reload the block table per chunk otherwise), at this lane's first
        // chunk; each chunk then adds a constant stride, an immediate offset of the copy.
        let stride = lanes * chunk;
        // (copy index, base pointer, row-start expression) of the row-contiguous sources.
        let mut srcs: Vec<(usize, String, String)> = Vec::new();
        let mut at_chunk = Vec::with_capacity(cs.len());
        for (i, c) in cs.iter().enumerate() {
            let load = self.f.op(c.load);
            if !c.map.row_contiguous {
                at_chunk.push((
                    self.remat_expr(load.operands[0], &Self::chunk_coords(c, cc), scope)?,
                    format!("attn_dst{} + {}", sfx(i), al.offset(row, cc)),
                ));
                continue;
            }
            // Rows in page runs: the run's first row's address plus this thread's offset in
            // the run times the row stride (see `run_rows`), else every row's own address.
            let start = match self.run_rows(c, lanes)? {
                Some(r) => {
                    let at = Self::coords_at(c, &r.start.first, "0");
                    let base = self
                        .at_run_start(r.start, || self.remat_expr(load.operands[0], &at, scope))?;
                    format!("{base} + {}", r.offset)
                }
                None => self.remat_expr(load.operands[0], &Self::chunk_coords(c, "0"), scope)?,
            };
            let src = format!("attn_src{}", sfx(i));
            let base = self.root_pointer(load.operands[0]);
            // The same address but for the base pointer (V beside K: one offset) is computed
            // once, the block-table load included.
            let same_rows = base.as_ref().and_then(|b| {
                srcs.iter()
                    .find(|(_, ob, other)| replace_ident(&start, b, ob) == *other)
            });
            let dims = (rows_per_pass, lanes, chunk);
            let kept = base.as_ref().and_then(|b| {
                self.shared_rows
                    .iter()
                    .find(|r| {
                        r.dims == dims
                            && r.guard == guard
                            && self.w.in_scope(r.scope)
                            && replace_ident(&start, b, &r.base) == r.start
                    })
                    .map(|r| r.var.clone())
            });
            match (same_rows, kept) {
                (Some((j, ob, _)), _) => self.w.line(format!(
                    "const auto {src} = {} + (attn_src{} - {ob});",
                    base.as_deref().unwrap_or_default(),
                    sfx(*j)
                )),
                (None, Some(var)) => {
                    let b = base.as_deref().unwrap_or_default();
                    self.w
                        .line(format!("const auto {src} = {};", offset_rows(b, &var)));
                }
                (None, None) => {
                    self.w.line(format!(
                        "const auto {src} = {start} + attn_lane_in_row * {chunk};"
                    ));
                    if let (Some((var, scope)), Some(b)) = (&keep[i], &base) {
                        self.w.line(format!("{var}[p] = {};", rows_offset(&src, b)));
                        self.shared_rows.push(SharedRows {
                            base: b.clone(),
                            start: start.clone(),
                            guard: guard.clone(),
                            dims,
                            var: var.clone(),
                            scope: *scope,
                        });
                    }
                }
            }
            if let Some(b) = base {
                srcs.push((i, b, start));
            }
            // Swizzled, the lane's chunks `lane + lanes·s` (lanes a multiple of 8) keep their
            // place in the line and step column blocks: still one row pointer plus
            // immediate offsets.
            let (row_start, dst_stride) =
                self.prog
                    .alloc(c.dst)
                    .copy_row(row, "attn_lane_in_row", lanes, chunk);
            let row_ptr = match pass_steps[i] {
                Some(step) => format!("attn_dst_first{} + p * {step}", sfx(i)),
                None => format!("attn_dst{} + {row_start}", sfx(i)),
            };
            self.w.line(format!(
                "unsigned short* const attn_dst_row{} = {row_ptr};",
                sfx(i)
            ));
            at_chunk.push((
                format!("{src} + s * {stride}"),
                format!("attn_dst_row{} + s * {dst_stride}", sfx(i)),
            ));
        }
        // One chunk loop for copies of one width (K and V), one per copy otherwise.
        let widths: Vec<usize> = cs.iter().map(|c| self.prog.alloc(c.dst).cols).collect();
        let calls: Vec<String> = at_chunk
            .iter()
            .zip(&masks)
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
        self.w.close("");
        self.w.close("");
        self.unbind_locals(&bound);
        Ok(())
    }

    /// A split ring's producer copies whose rows a later copy may read again (V's after K's
    /// of the same tile, each issued after its own part's acquire): an array of each pass's
    /// element offset declared before the copies' guard, where the later copy still sees it.
    /// `None` for the others (and without a split ring, where K and V of a tile are one
    /// group and share rows within it). Computing V's rows again cost the split ring its
    /// gain: P0 2.344 ms, 2.113 / 2.117 with V reading K's offsets, 2.139 / 2.134 with one
    /// ring (H200, 2026-12-04, `bench/experiments/split_ring_shared_rows.py`).
    fn declare_shared_rows(
        &mut self,
        cs: &[&AsyncCopy],
        al: &crate::gpu_ir::LocalAlloc,
        lanes: usize,
    ) -> Vec<Option<(String, TextScope)>> {
        let split_ring = self.in_split_ring();
        let passes = al.rows.div_ceil(self.threads / lanes);
        cs.iter()
            .map(|c| {
                let wanted = split_ring
                    && c.map.row_contiguous
                    && self.root_pointer(self.f.op(c.load).operands[0]).is_some();
                wanted.then(|| {
                    let var = format!("attn_rows{}", self.shared_rows_declared);
                    self.shared_rows_declared += 1;
                    self.w.line(format!("long long {var}[{passes}];"));
                    (var, self.w.scope())
                })
            })
            .collect()
    }

    /// Whether this is a split ring's producer (K and V filled on their own acquires).
    fn in_split_ring(&self) -> bool {
        self.role == Role::Producer
            && self
                .prog
                .specialization
                .as_ref()
                .is_some_and(|ws| ws.parts > 1)
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

    /// Computes once per copy, before its passes, each uniform scalar of the copies' masks
    /// that is the result of a loop or a branch (a full-tile predicate over the block's image
    /// ranges), and makes the masks read it from that local. Inline it is a lambda that runs
    /// again in every pass and chunk, loads included, since the memory clobber of each
    /// `cp.async` keeps the compiler from merging the runs.
    fn hoist_uniform_regions(
        &mut self,
        cs: &[&AsyncCopy],
        scope: &Scope,
        bound: &mut Vec<u32>,
    ) -> Res<()> {
        let (mut found, mut seen) = (Vec::new(), Vec::new());
        for c in cs {
            let load = self.f.op(c.load);
            if let OpKind::Load { has_mask: true, .. } = load.kind {
                self.collect_uniform_regions(load.operands[1], &mut found, &mut seen);
            }
        }
        // Only values of the loop body are recomputed; the others are named already.
        let Scope::Loop {
            defined_in_body, ..
        } = scope
        else {
            return Ok(());
        };
        found.retain(|v| defined_in_body[v.0 as usize]);
        // A scalar's value is the same at every element: any coordinates will do.
        let anywhere = ElemIndex::Flat("0".into());
        for v in found {
            let ty = scalar_reg_type(self.scalar(v)?);
            let expr = self.remat_expr(v, &anywhere, scope)?;
            let name = format!("attn_u{}", v.0);
            self.w.line(format!("const {ty} {name} = {expr};"));
            self.bind_local(v, name, None, bound);
        }
        Ok(())
    }

    /// The scalar results of loops and branches that `v`'s recomputation reads (outermost
    /// first, no duplicates; `seen` holds the values already walked).
    fn collect_uniform_regions(&self, v: ValueId, out: &mut Vec<ValueId>, seen: &mut Vec<ValueId>) {
        if seen.contains(&v) {
            return;
        }
        seen.push(v);
        let Some(op) = self.def_op(v) else { return };
        if self.f.ty(v).is_scalar() && matches!(op.kind, OpKind::For | OpKind::If) {
            out.push(v);
            return;
        }
        for &x in &op.operands {
            self.collect_uniform_regions(x, out, seen);
        }
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

    /// Where copy `c`'s source rows come in runs one stride apart (a page of a paged cache,
    /// [`crate::gpu_ir::row_affine`]) and each pass's rows of a thread fall in runs it can
    /// name without dividing by the run (the run a multiple of the rows a pass covers, or
    /// the other way round): the first row of this thread's run in pass `p`, and the offset
    /// to its row (shipped; `ATTN_CODEGEN_DISABLE=run_rows` turns it off). The address of
    /// the run's first row leaves the compiler a multiple of the run to divide (its bits
    /// known), where each row's own address makes it divide and take the remainder of a row
    /// it cannot bound (P0's producer loop, sm_90a SASS: 346 instructions a warp a tile, 297
    /// with it; P0 on the H200 2.11 → 2.05 ms, 1.96 with the split ring).
    fn run_rows(&self, c: &AsyncCopy, lanes: usize) -> Res<Option<RunRows>> {
        // Only the producer's: other copies share the registers with accumulators, and the
        // offset a pass they hold spilled (P3's image-range loop the consumers copy
        // themselves, 12 bytes at 232 registers; MLA's combine, 4 at 128).
        if crate::features::disabled("run_rows") || self.role != Role::Producer {
            return Ok(None);
        }
        let Some(rows) = crate::gpu_ir::row_affine::of_copy(self.f, &self.defs, &self.prog.axis, c)
        else {
            return Ok(None);
        };
        // A run longer than the tile (rows one stride apart end to end) is the whole tile.
        let tile_rows = self.prog.alloc(c.dst).rows;
        let (run, per_pass) = ((rows.run as usize).min(tile_rows), self.threads / lanes);
        // Short runs (the queries' rows of a GQA group: two) save nothing and hold an offset
        // a pass (P3's consumers spilled with them).
        if run < MIN_RUN_ROWS {
            return Ok(None);
        }
        let row_in_pass = format!("tid / {lanes}");
        let (first, in_run) = if run >= per_pass && run.is_multiple_of(per_pass) {
            (
                format!("(p * {per_pass} / {run}) * {run}"),
                format!("p * {per_pass} % {run} + {row_in_pass}"),
            )
        } else if run > 0 && per_pass.is_multiple_of(run) {
            (
                format!("p * {per_pass} + {row_in_pass} / {run} * {run}"),
                format!("{row_in_pass} % {run}"),
            )
        } else {
            return Ok(None);
        };
        let Some(stride) = self.lin_text(&rows.stride)? else {
            return Ok(None);
        };
        Ok(Some(RunRows {
            start: RunStart {
                first,
                run: run as u64,
            },
            offset: format!("(long long)({in_run}) * ({stride})"),
        }))
    }

    /// A row stride as C (`None` when a term is not a kernel parameter, whose name holds
    /// everywhere).
    fn lin_text(&self, l: &crate::gpu_ir::row_affine::Lin) -> Res<Option<String>> {
        let mut parts = vec![format!("{}ll", l.konst)];
        for (&v, &k) in &l.terms {
            if !self.f.params.iter().any(|p| p.value == v) {
                return Ok(None);
            }
            parts.push(format!("{k}ll * (long long){}", self.name(v)?));
        }
        Ok(Some(parts.join(" + ")))
    }

    /// Computes each reduction in a copy's mask once per row before the chunk loop, the row's `lanes` threads each folding every lanes-th element
    /// and combining with xor shuffles (all threads of a warp take part: the lane groups
    /// tile the warp), and returns the mask with those reductions read from variables.
    fn hoist_row_reductions(
        &mut self,
        load: &Op,
        at: &ElemIndex,
        scope: &Scope,
        lanes: usize,
    ) -> Res<String> {
        let mask_v = load.operands[1];
        let mut reduces = Vec::new();
        self.collect_reduces(mask_v, None, &mut reduces);
        for (r, guard) in reduces {
            let name = format!("attn_red{}", r.0);
            let (row, lane) = ("attn_row", "attn_lane_in_row");
            // Under `uniform || x` (or `uniform && x`) the mask never reads `x` when the
            // uniform scalar decides it, so neither does the hoisted loop.
            let read = self.read_condition(guard, at, scope)?;
            // The guard is a uniform scalar, so the whole warp takes the same side: the
            // shuffles go inside it too, and a tile the guard decides (a full tile's V
            // guard) pays no reduction at all (`ATTN_CODEGEN_DISABLE=guarded_shuffles`
            // shuffles after it).
            let shuffles_inside = !crate::features::disabled("guarded_shuffles");
            let batched = self.remat_reduce_batched(r, row, lane, lanes, scope);
            // Not split evenly over the lanes: the lane folds its strided elements whole.
            let (stmts, fold) = match batched {
                Ok(Some((stmts, fold))) => (stmts, fold),
                Ok(None) => match self.remat_reduce_strided(r, row, lane, lanes, scope) {
                    Ok(fold) => (Vec::new(), fold),
                    Err(_) => continue,
                },
                Err(_) => continue,
            };
            self.w.line(format!("{} {name} = ({})0;", fold.rt, fold.rt));
            match &read {
                Some(c) => self.w.open(format!("if ({c})")),
                None => self.w.open(""),
            }
            for l in stmts {
                self.w.line(l);
            }
            self.w.line(format!("{name} = {};", fold.partial));
            if !shuffles_inside {
                self.w.close("");
            }
            let mut m = 1;
            while m < lanes {
                let other = format!("attn_shfl_xor({name}, {m})");
                self.w.line(format!(
                    "{name} = {};",
                    fold.combine.replace("ITEM", &other).replace("ACC", &name)
                ));
                m *= 2;
            }
            let finished = fold.finish(&name);
            if finished != name {
                self.w.line(format!("{name} = {finished};"));
            }
            if shuffles_inside {
                self.w.close("");
            }
            self.hoisted.insert(r.0, (name, "attn_row".to_string()));
        }
        let mask = self.in_copy_mask(|| self.remat_expr(mask_v, at, scope));
        self.hoisted.clear();
        mask
    }

    /// The condition under which a mask reads a reduction its `guard` decides (`None`: always).
    fn read_condition(
        &self,
        guard: Option<Guard>,
        at: &ElemIndex,
        scope: &Scope,
    ) -> Res<Option<String>> {
        Ok(match guard {
            Some(Guard { value, read_when }) => {
                let g = self.remat_expr(value, at, scope)?;
                Some(format!("{}({g})", if read_when { "" } else { "!" }))
            }
            None => None,
        })
    }

    /// The reductions a recomputed tile evaluates (outermost first, no duplicates), each
    /// with the uniform scalar that decides whether the expression reads it: in `u | x`
    /// the reduction in `x` is read only when `u` is false, in `u & x` only when `u` is true.
    fn collect_reduces(
        &self,
        v: ValueId,
        guard: Option<Guard>,
        out: &mut Vec<(ValueId, Option<Guard>)>,
    ) {
        if self.f.ty(v).is_scalar() || out.iter().any(|(r, _)| *r == v) {
            return;
        }
        let Some(op) = self.def_op(v) else { return };
        if matches!(op.kind, OpKind::Reduce { .. }) {
            out.push((v, guard));
            return;
        }
        if let (OpKind::Binary(b @ (BinaryOp::Or | BinaryOp::And)), None) = (&op.kind, guard) {
            let read_when = *b == BinaryOp::And;
            let uniform = |x: ValueId| self.uniform_scalar(x).is_some();
            let (l, r) = (op.operands[0], op.operands[1]);
            let split = match (uniform(l), uniform(r)) {
                (true, false) => Some((l, r)),
                (false, true) => Some((r, l)),
                _ => None,
            };
            if let Some((value, rest)) = split {
                let g = Guard { value, read_when };
                return self.collect_reduces(rest, Some(g), out);
            }
        }
        for &x in &op.operands {
            self.collect_reduces(x, guard, out);
        }
    }

    /// The scalar a tile is a splat (or broadcast of a splat) of.
    pub(crate) fn uniform_scalar(&self, v: ValueId) -> Option<ValueId> {
        if self.f.ty(v).is_scalar() {
            return Some(v);
        }
        let op = self.def_op(v)?;
        match op.kind {
            OpKind::Splat { .. } | OpKind::Broadcast { .. } | OpKind::ExpandDims { .. } => {
                self.uniform_scalar(op.operands[0])
            }
            _ => None,
        }
    }
}

/// `text` with every whole identifier `from` replaced by `to` (so `k_cache` never matches
/// inside `k_cache_scale`).
pub(crate) fn replace_ident(text: &str, from: &str, to: &str) -> String {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(from) {
        let before = rest[..at].chars().last().or_else(|| out.chars().last());
        let after = rest[at + from.len()..].chars().next();
        out.push_str(&rest[..at]);
        if before.is_some_and(is_ident) || after.is_some_and(is_ident) {
            out.push_str(from);
        } else {
            out.push_str(to);
        }
        rest = &rest[at + from.len()..];
    }
    out.push_str(rest);
    out
}

/// A producer copy's per-pass row offsets kept for a later copy of the same rows: valid for
/// a copy with the same guard, the same thread distribution (rows a pass, lanes a row,
/// elements a chunk) and the same row-start expression but for its base pointer, emitted
/// while the array's block is open. The text is the proof: a producer's scalars are named
/// once (its loops carry no values), so equal text means equal rows in that iteration.
pub(crate) struct SharedRows {
    base: String,
    start: String,
    guard: Option<String>,
    dims: (usize, usize, usize),
    var: String,
    scope: TextScope,
}

/// The offset a split ring's producer keeps for a row (`src` from kernel pointer `base`):
/// in bytes with `byte_rows` (opt-in), else in elements. An element offset is a pointer
/// difference, a division by the element size the compiler keeps in the kept value (P0's
/// producer loop: 16 of its 334 SASS instructions shift the eight rows' offsets down,
/// and V's copy shifts them up again); a byte offset is the address arithmetic as it was.
fn rows_offset(src: &str, base: &str) -> String {
    if crate::features::enabled("byte_rows") {
        format!("(const char*)({src}) - (const char*)({base})")
    } else {
        format!("{src} - {base}")
    }
}

/// The row of kernel pointer `base` at the offset kept in `kept[p]` ([`rows_offset`]).
fn offset_rows(base: &str, kept: &str) -> String {
    if crate::features::enabled("byte_rows") {
        format!("reinterpret_cast<decltype(+{base})>((const char*)({base}) + {kept}[p])")
    } else {
        format!("{base} + {kept}[p]")
    }
}

/// The shortest run of rows [`Emitter::run_rows`] addresses from its first (a page of 8
/// keys and up; a 128-byte swizzle atom's rows).
const MIN_RUN_ROWS: usize = 8;

/// A thread's rows of one pass inside a run of rows one stride apart
/// ([`Emitter::run_rows`]): the run's first row (an alloc row index) and length, and the
/// element offset from its address to this thread's row.
struct RunRows {
    start: RunStart,
    offset: String,
}

#[cfg(test)]
mod tests {
    use super::replace_ident;

    #[test]
    fn only_whole_identifiers_are_replaced() {
        assert_eq!(
            replace_ident("(k_cache + k_cache_off) * k_cache", "k_cache", "v_cache"),
            "(v_cache + k_cache_off) * v_cache"
        );
        assert_eq!(replace_ident("xk_cache", "k_cache", "v"), "xk_cache");
    }
}
