//! A loop whose body runs owned regions of several warpgroups (the seesaw: each half's
//! scores and softmax on its warpgroup) emitted once per warpgroup, each copy under
//! `if (warpgroup == w)` with only its own regions and the code every warp runs:
//!
//! ```text
//! if (wg == 0) { for (...) { wg 0's regions, shared code } }
//! if (wg == 1) { for (...) { wg 1's regions, shared code } }
//! ```
//!
//! In one loop the compiler sees every thread run both warpgroups' regions: a value one
//! warpgroup keeps from one of its regions to the next is live across the other's regions
//! too, so the registers a thread needs are both warpgroups' tiles together (MLA's
//! history: the two tiles' scores, P and the 128-register accumulator half spilled 4 KB a
//! thread at 232 registers). Copied, each loop holds its own warpgroup's tiles only. The
//! copies run the same shared code, so every barrier over both warpgroups (a handoff's,
//! the program's) is reached as often by each; values of the other warpgroup that shared
//! code names (a carried value it owns) are declared and never written. The scratch ledger
//! enters the body from its back edge: the first copy is emitted once as a probe (its text
//! dropped) for what the body's end leaves read, and each copy is checked against that
//! entry (else all are emitted again from nothing known).

use super::emitter::Emitter;
use super::scratch_ledger::ScratchReads;
use super::CodegenError;
use crate::gpu_ir::GpuBlock;
use crate::ir::OpId;
use std::collections::{BTreeMap, BTreeSet};

type Res<T> = Result<T, CodegenError>;

/// A loop emitted once a warpgroup: what `emit_loop` takes, the bookkeeping every copy
/// starts from, and where the copies' text starts.
struct CopiedLoop<'c, 'f> {
    id: OpId,
    gbody: &'f GpuBlock,
    carried: &'c [String],
    pipelined: bool,
    start: BodyState,
    mark: usize,
}

/// What emitting one copy of a loop body changes in the emitter's bookkeeping, restored
/// before the next copy so each starts where the first did.
struct BodyState {
    predeclared: BTreeSet<u32>,
    partial_rows: BTreeSet<u32>,
    pending_mma: Vec<(u32, String, usize)>,
    packed_a: BTreeMap<u32, String>,
    held_shared_a: BTreeMap<u32, (String, usize)>,
    stage_vars: Vec<String>,
}

impl<'f> Emitter<'f> {
    /// The warpgroups whose owned regions `gbody` (a loop body, at its top level) runs,
    /// when there are two or more, none of them is being emitted alone already, and the
    /// seesaw asks for it (`ATTN_CODEGEN_DISABLE=warpgroup_loops` keeps one loop).
    pub(crate) fn loop_warpgroups(&self, gbody: &GpuBlock) -> Option<u32> {
        if self.only_warpgroup.is_some() || self.owner.is_some() {
            return None;
        }
        if !crate::features::on("warpgroup_loops") {
            return None;
        }
        let owners: BTreeSet<u32> = gbody
            .ops
            .iter()
            .filter_map(|g| self.gpu_op_owner(g))
            .collect();
        (owners.len() >= 2).then(|| owners.last().map_or(0, |w| w + 1))
    }

    /// The loop `id` emitted once for each of `groups` warpgroups (see the module note).
    pub(crate) fn emit_loop_per_warpgroup(
        &mut self,
        id: OpId,
        gbody: &'f GpuBlock,
        carried: &[String],
        pipelined: bool,
        groups: u32,
    ) -> Res<()> {
        let l = CopiedLoop {
            id,
            gbody,
            carried,
            pipelined,
            start: self.body_state(),
            mark: self.w.len(),
        };
        // The ledger at the body's entry: what was read before the loop or by the body's
        // own end (its back edge), the latter from a probe emission of the first copy
        // whose text is dropped. Where a copy's end reads more than that entry assumed,
        // the copies are emitted again from nothing known (no barrier dropped on a guess).
        let before = self.scratch_reads.clone();
        if super::scratch_ledger::wanted() && before != ScratchReads::Unknown {
            self.emit_copy(&l, 0, before.clone())?;
            let entry = before.join(&self.block_end_reads);
            if self.emit_copies(&l, groups, entry)? {
                return Ok(());
            }
        }
        self.emit_copies(&l, groups, ScratchReads::Unknown)?;
        Ok(())
    }

    /// Every warpgroup's copy of `l` (what was emitted after its mark dropped), the body's
    /// ledger entering at `entry`; whether every copy's end stayed within that entry.
    fn emit_copies(
        &mut self,
        l: &CopiedLoop<'_, 'f>,
        groups: u32,
        entry: ScratchReads,
    ) -> Res<bool> {
        self.w.truncate(l.mark);
        self.owned_spans.retain(|s| s.end <= l.mark);
        let mut sound = true;
        for w in 0..groups {
            self.emit_copy(l, w, entry.clone())?;
            sound &= entry.covers(&self.block_end_reads);
        }
        Ok(sound)
    }

    /// Loop `l` emitted for warpgroup `w` alone, the body's ledger entering at `entry`.
    fn emit_copy(&mut self, l: &CopiedLoop<'_, 'f>, w: u32, entry: ScratchReads) -> Res<()> {
        self.restore_body_state(&l.start);
        self.w.line(format!("// the loop, warpgroup {w}'s copy"));
        self.w
            .open(format!("if (attn_warp_uniform(tid >> 7) == {w})"));
        self.only_warpgroup = Some(w);
        self.block_entry_reads = Some(entry);
        let r = self.emit_loop(l.id, l.gbody, l.carried, l.pipelined);
        self.block_entry_reads = None;
        self.only_warpgroup = None;
        r?;
        self.w.close("");
        Ok(())
    }

    fn body_state(&self) -> BodyState {
        BodyState {
            predeclared: self.predeclared.clone(),
            partial_rows: self.partial_rows.clone(),
            pending_mma: self.pending_mma.clone(),
            packed_a: self.packed_a.clone(),
            held_shared_a: self.held_shared_a.clone(),
            stage_vars: self.stage_vars.clone(),
        }
    }

    fn restore_body_state(&mut self, s: &BodyState) {
        self.predeclared = s.predeclared.clone();
        self.partial_rows = s.partial_rows.clone();
        self.pending_mma = s.pending_mma.clone();
        self.packed_a = s.packed_a.clone();
        self.held_shared_a = s.held_shared_a.clone();
        self.stage_vars = s.stage_vars.clone();
    }
}
