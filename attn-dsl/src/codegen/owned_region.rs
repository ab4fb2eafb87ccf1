//! Ops on tiles one warpgroup owns ([`Layout::Owned`]): a run of consecutive such ops is
//! emitted once, under `if (warpgroup == w)`, so each warpgroup runs its own chain while
//! the others run theirs (the seesaw schedule's scores, a tile a warpgroup).
//!
//! Inside the region the code is the code of a 128-thread program: `tid` and `attn_warp`
//! count from the owner's first thread, barriers are the owner's named barrier
//! ([`OWNED_BARRIER_BASE`]` + w` over 128 threads) and the scratch buffer is the owner's
//! slice of it, so two warpgroups' conversions and reductions never meet. Results that ops
//! after the run read are declared before the region and copied out at its end (register
//! moves the compiler removes); the other warpgroups' copies of them are never written.

use super::emitter::Emitter;
use super::CodegenError;
use crate::gpu_ir::GpuOp;
use crate::ir::{Op, OpKind, ValueId};

type Res<T> = Result<T, CodegenError>;

/// Threads of a warpgroup.
pub(crate) const WARPGROUP_THREADS: usize = 128;

/// The first named barrier of the owned regions (warpgroup `w` syncs on `5 + w`): 0 is
/// `__syncthreads`, 1-3 the warpgroup turns', 4 the warp-specialized consumers'.
pub(crate) const OWNED_BARRIER_BASE: usize = 5;

/// The C++ macro giving the bytes of scratch each warpgroup's regions use (defined before
/// the kernel, once its body is known).
pub(crate) const OWNED_SCRATCH_MACRO: &str = "ATTN_OWNED_SCRATCH";

/// The C++ macro giving where the warpgroups' slices start: after what the ops of the
/// whole program use, which a warpgroup leaving such an op's reads behind must not
/// overwrite from its region while the other still reads (its barrier is its own).
pub(crate) const OWNED_BASE_MACRO: &str = "ATTN_OWNED_BASE";

impl<'f> Emitter<'f> {
    /// The warpgroup owning `op`'s tiles (the IR verifier makes them agree); none for a
    /// handoff, which runs on both sides.
    pub(crate) fn op_owner(&self, op: &Op) -> Option<u32> {
        if op.kind == OpKind::Handoff {
            return None;
        }
        op.operands
            .iter()
            .chain(&op.results)
            .find_map(|&v| self.f.ty(v).layout.owner())
    }

    /// The warpgroup a GPU op runs on: its tile op's, or its dot's for the MMA steps.
    pub(crate) fn gpu_op_owner(&self, g: &GpuOp) -> Option<u32> {
        match g {
            GpuOp::Tile(o) => {
                let op = self.f.op(*o);
                if op.kind.is_terminator() {
                    return None;
                }
                self.op_owner(op)
            }
            GpuOp::Mma { dot, .. }
            | GpuOp::PackA { dot, .. }
            | GpuOp::HoldA { dot, .. }
            | GpuOp::MmaWait { dot, .. }
            | GpuOp::MmaWaitCarried { dot, .. } => {
                self.f.ty(self.f.op(*dot).results[0]).layout.owner()
            }
            // A stage wait of one warpgroup (the seesaw's halves, `gpu_ir::seesaw_ring`).
            GpuOp::Stage(crate::gpu_ir::StageSync::Wait { by, .. }) => *by,
            _ => None,
        }
    }

    /// How many of `ops[start..]` form the run of ops owned by `w` that starts there.
    pub(crate) fn owned_run_len(&self, ops: &[GpuOp], start: usize, w: u32) -> usize {
        ops[start..]
            .iter()
            .take_while(|g| self.gpu_op_owner(g) == Some(w))
            .count()
    }

    /// Emits `run` (ops owned by warpgroup `w`) on that warpgroup alone.
    pub(crate) fn emit_owned_run(&mut self, w: u32, run: &'f [GpuOp]) -> Res<()> {
        let escaping = self.escaping(run);
        let outer: Vec<(ValueId, String)> = escaping
            .iter()
            .map(|&v| {
                let name = self.bind_new(v);
                self.declare(v, &name);
                self.predeclared.insert(v.0);
                (v, name)
            })
            .collect();
        for g in run {
            if let GpuOp::HoldA { dot, steps, .. } = g {
                self.predeclare_held_a(*dot, *steps)?;
            }
        }
        // What stays inside is out of scope after the region: an op that would read such a
        // value through another's definition (a fused `exp(a·c − y)`) reads the other.
        for op in self.run_ops(run) {
            let local = op.results.iter().filter(|v| !escaping.contains(v));
            self.region_locals.extend(local.map(|v| v.0));
        }
        if self.skips_warpgroup(w) {
            // Declared for the shared code after the run, never written on this warpgroup.
            for (v, _) in &outer {
                self.predeclared.remove(&v.0);
            }
            return Ok(());
        }
        self.on_warpgroup(w, |e| {
            e.emit_run_ops(run)?;
            // Tiles filled in place (accumulators, possibly still in flight) are done;
            // index tiles are recomputed where used (in their owner's regions); the rest
            // move to the variables declared outside.
            let stored: Vec<&(ValueId, String)> = outer
                .iter()
                .filter(|(v, _)| e.predeclared.remove(&v.0) && !e.is_deferred(*v))
                .collect();
            for (v, name) in stored {
                if e.pending_mma.iter().any(|(d, _, _)| *d == v.0) {
                    return Err(CodegenError::Unsupported(format!(
                        "%{} leaves warpgroup {w}'s region with its MMAs in flight",
                        v.0
                    )));
                }
                let inner = e.name(*v)?.to_string();
                e.copy_var(*v, name, &inner);
                e.alias(*v, name);
            }
            Ok(())
        })
    }

    /// Emits `body` on the warpgroup owning `v`, if one does and no region is open: code a
    /// loop emits around its body for an owned value (its held fragments, its row sums).
    pub(crate) fn on_owner_of(
        &mut self,
        v: ValueId,
        body: impl FnOnce(&mut Self) -> Res<()>,
    ) -> Res<()> {
        match (self.f.ty(v).layout.owner(), self.owner) {
            (Some(w), None) => self.on_warpgroup(w, body),
            _ => body(self),
        }
    }

    /// Emits `body` on warpgroup `w` alone (see the module docs).
    pub(crate) fn on_warpgroup(
        &mut self,
        w: u32,
        body: impl FnOnce(&mut Self) -> Res<()>,
    ) -> Res<()> {
        if self.owner.is_some() {
            return Err(CodegenError::Malformed("owned regions nest".into()));
        }
        // In a loop copied for one warpgroup (`warpgroup_loops`): the others' regions are not
        // there, its own need no test.
        if self.skips_warpgroup(w) {
            return Ok(());
        }
        let ledger = self.owned_region_start();
        self.open_owned(w, self.only_warpgroup.is_none());
        let all = std::mem::replace(&mut self.threads, WARPGROUP_THREADS);
        self.owner = Some(w);
        let r = body(self);
        self.owner = None;
        self.threads = all;
        self.w.close("");
        self.w.close("");
        self.owned_region_done(ledger);
        r
    }

    fn emit_run_ops(&mut self, run: &'f [GpuOp]) -> Res<()> {
        for g in run {
            self.check_operands_visible(g)?;
            match g {
                GpuOp::Tile(o) => self.emit_op(self.f.op(*o))?,
                other => self.emit_gpu_op(other)?,
            }
        }
        Ok(())
    }

    /// An owned dot reads a tile every warp holds only from shared memory (or fragments its
    /// warpgroup loaded from there): registers of the other warpgroup are out of reach.
    fn check_operands_visible(&self, g: &GpuOp) -> Res<()> {
        let (dot, sources) = match g {
            GpuOp::Mma { dot, a, b, .. } => (*dot, [Some(a), Some(b)]),
            GpuOp::Tile(o) if self.f.op(*o).kind == OpKind::Dot => (*o, [None, None]),
            _ => return Ok(()),
        };
        let op = self.f.op(dot);
        for (i, src) in sources.iter().enumerate() {
            let v = op.operands[i];
            let in_registers = match src {
                Some(crate::gpu_ir::OperandSource::Shared { .. }) => false,
                Some(_) => i > 0 || self.held_a_fragments(v).is_none(),
                None => true,
            };
            if in_registers && self.f.ty(v).layout.owner().is_none() {
                return Err(CodegenError::Unsupported(format!(
                    "warpgroup {}'s dot reads %{} from every warp's registers: an owned dot \
                     reads a shared operand from shared memory only",
                    self.owner.unwrap_or(0),
                    v.0
                )));
            }
        }
        Ok(())
    }

    /// The tile ops (and dots) of `run`.
    fn run_ops(&self, run: &[GpuOp]) -> Vec<&'f Op> {
        run.iter()
            .filter_map(|g| match g {
                GpuOp::Tile(o) | GpuOp::Mma { dot: o, .. } => Some(self.f.op(*o)),
                _ => None,
            })
            .collect()
    }

    /// Results of `run` that an op after it reads.
    fn escaping(&self, run: &[GpuOp]) -> Vec<ValueId> {
        let ops = self.run_ops(run);
        let mut inside = std::collections::BTreeMap::<u32, u32>::new();
        for op in &ops {
            for v in &op.operands {
                *inside.entry(v.0).or_default() += 1;
            }
        }
        ops.iter()
            .flat_map(|op| op.results.iter().copied())
            .filter(|v| self.use_count(*v) > inside.get(&v.0).copied().unwrap_or(0))
            .collect()
    }

    /// Whether warpgroup `w`'s regions are left out here: a loop copied for another one.
    fn skips_warpgroup(&self, w: u32) -> bool {
        self.only_warpgroup.is_some_and(|only| only != w)
    }

    /// `if (warpgroup == w) {` (a plain scope inside a loop copied for `w`), then a scope
    /// where the thread coordinates, the barrier and the scratch buffer are the warpgroup's
    /// (two blocks, closed by the caller).
    fn open_owned(&mut self, w: u32, guarded: bool) {
        let first = w as usize * WARPGROUP_THREADS;
        self.w.line(format!("// warpgroup {w} alone"));
        match guarded {
            true => self
                .w
                .open(format!("if (attn_warp_uniform(tid >> 7) == {w})")),
            false => self.w.open(""),
        }
        self.w
            .line(format!("const int attn_owned_tid = tid - {first};"));
        let mma = self.uses_mma();
        if mma {
            self.w.line(format!(
                "const int attn_owned_warp = attn_warp - {};",
                w * 4
            ));
        }
        self.w.line(format!(
            "unsigned char* const attn_owned_scratch = attn_scratch + {OWNED_BASE_MACRO} + {w} * {OWNED_SCRATCH_MACRO};"
        ));
        self.w.open("");
        self.w.line("const int tid = attn_owned_tid;");
        self.w.line(format!(
            "__builtin_assume(tid >= 0 && tid < {WARPGROUP_THREADS});"
        ));
        if mma {
            self.w.line("const int attn_warp = attn_owned_warp;");
        }
        self.w
            .line("unsigned char* const attn_scratch = attn_owned_scratch;");
    }

    /// The barrier over the threads running the code being emitted, inside an owned region.
    pub(crate) fn owned_sync(&self) -> Option<String> {
        self.owner.map(|w| {
            format!(
                "attn_bar_sync({}, {WARPGROUP_THREADS});",
                OWNED_BARRIER_BASE + w as usize
            )
        })
    }

    /// The `#define`s placing the scratch buffer's parts, each 16-byte aligned: what the
    /// whole program's ops use, then the warpgroups' slices ([`OWNED_BASE_MACRO`],
    /// [`OWNED_SCRATCH_MACRO`] each), then the handoff buffers; folds them into the
    /// kernel's scratch need. `None` without owned tiles.
    pub(crate) fn owned_scratch_define(&mut self) -> Option<String> {
        let warpgroups = self.owned_warpgroups()?;
        let base = self.scratch_bytes.next_multiple_of(16);
        let slice = self.owned_scratch_bytes.next_multiple_of(16);
        let handoffs = base + slice * warpgroups;
        self.need_scratch(handoffs + self.handoff_bytes);
        Some(format!(
            "#define {OWNED_BASE_MACRO} {base}\n#define {OWNED_SCRATCH_MACRO} {slice}\n#define {} {handoffs}",
            super::handoff::HANDOFF_BASE_MACRO,
        ))
    }

    /// How many warpgroups' scratch slices the program needs (one past the highest owner).
    fn owned_warpgroups(&self) -> Option<usize> {
        self.f
            .values
            .iter()
            .filter_map(|v| v.ty.layout.owner())
            .max()
            .map(|w| w as usize + 1)
    }
}
