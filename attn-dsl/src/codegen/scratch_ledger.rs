//! Which bytes of the scratch buffer may have been read since the last barrier over every
//! thread of the program (feature `scratch_ledger`, shipped in session 28): the membar analysis of `gpu_ir::sync`,
//! for the scratch buffer the code generator's own ops share.
//!
//! Every scratch user writes between two barriers: the one before protects the readers of
//! what lay there, the one after makes the writes visible. The first is needed only where
//! some thread may still read those bytes: where a read of them came after the last
//! barrier. The ledger follows the reads of the users that report them (a staged dot
//! operand read by `ldmatrix`), in straight-line code: a block starts with every byte
//! unknown (a loop's body follows its own last iteration, a branch either way), and any
//! op that touches the scratch buffer without reporting its accesses makes every byte
//! unknown again, so only what the ledger can prove is dropped.
//!
//! Owned regions (a warpgroup's code) leave the ledger as they found it: their scratch is
//! the warpgroup's own slice and their barrier the warpgroup's, so what the whole program
//! shares is neither read nor ordered there, and the ledger reads past their text. So a
//! loop emitted once a warpgroup (`warpgroup_loops`, the seesaw), each copy leaving out the
//! other warpgroup's regions, keeps the same barriers in every copy, as it must (one more
//! in one copy would hang the block). Handoffs between all of the program's warpgroups
//! report their buffer to the ledger and move it past the bytes read since the last
//! barrier ([`Emitter::unread_scratch_offset`]): in the seesaw's loop each run of
//! handoffs then needs only the one barrier after its writes.
//!
//! The cross-warp step of a row reduction writes to two slots of its own after the rest of
//! the scratch buffer, alternately (`attn_red_par`): the last reads of a slot are two
//! reductions back, and the reduction in between had its barrier after them, so the step
//! needs only the barrier after its writes. Where the slots would take the kernel past the
//! block's shared memory, it is emitted again without them. In MLA's history (the split
//! schedule) a tile's four barriers become two: the row maximum's exchange, then P staged
//! for PV.

use super::emitter::Emitter;
use std::ops::Range;

/// What may have been read of the scratch buffer since the last barrier over every thread.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum ScratchReads {
    /// Anything.
    #[default]
    Unknown,
    /// These byte ranges (none: a barrier came after the last read).
    Ranges(Vec<Range<usize>>),
}

impl ScratchReads {
    /// What may have been read on either of two paths.
    pub(crate) fn join(&self, other: &ScratchReads) -> ScratchReads {
        match (self, other) {
            (ScratchReads::Ranges(a), ScratchReads::Ranges(b)) => {
                ScratchReads::Ranges(a.iter().chain(b).cloned().collect())
            }
            _ => ScratchReads::Unknown,
        }
    }

    /// Whether every byte `other` may have read, this may have read too.
    pub(crate) fn covers(&self, other: &ScratchReads) -> bool {
        match (self, other) {
            (ScratchReads::Unknown, _) => true,
            (ScratchReads::Ranges(_), ScratchReads::Unknown) => false,
            (ScratchReads::Ranges(a), ScratchReads::Ranges(b)) => b
                .iter()
                .all(|r| (r.start..r.end).all(|byte| a.iter().any(|x| x.contains(&byte)))),
        }
    }

    fn overlaps(&self, bytes: &Range<usize>) -> bool {
        match self {
            ScratchReads::Unknown => true,
            ScratchReads::Ranges(rs) => rs
                .iter()
                .any(|r| r.start < bytes.end && bytes.start < r.end),
        }
    }
}

/// The text every access of the scratch buffer names.
const SCRATCH: &str = "attn_scratch";

/// The alternating slots' parity variable.
const REDUCTION_PARITY: &str = "attn_red_par";

/// The macro giving slot `p`'s address: the reductions' slots follow the rest of the
/// scratch buffer (the ledger need not follow their accesses: no other op touches them).
const REDUCTION_SLOT_AT_MACRO: &str = "ATTN_RED_SLOT_AT";

/// Whether the ledger is on (`ATTN_CODEGEN_DISABLE=scratch_ledger` switches it off).
pub(crate) fn wanted() -> bool {
    crate::features::on("scratch_ledger")
}

impl<'f> Emitter<'f> {
    /// Whether this code's barriers are over every thread touching the whole program's
    /// scratch buffer: not in a warpgroup's region, whose scratch is its own slice and whose
    /// barrier is its own. In a loop emitted once a warpgroup (`warpgroup_loops`) the ledger
    /// follows the code every copy runs alike: each copy leaves out the other warpgroups'
    /// regions, so the regions leave the ledger as they found it ([`Self::owned_region_done`])
    /// and the copies keep the same barriers, which must match one for one.
    fn ledger_applies(&self) -> bool {
        wanted() && self.owner.is_none()
    }

    /// Forgets what was read: every byte may have been.
    pub(crate) fn forget_scratch_reads(&mut self) {
        self.scratch_reads = ScratchReads::Unknown;
    }

    /// A barrier over every thread was just emitted: nothing has been read since.
    pub(crate) fn scratch_barrier_emitted(&mut self) {
        self.scratch_reads = if self.owner.is_none() {
            ScratchReads::Ranges(Vec::new())
        } else {
            ScratchReads::Unknown
        };
    }

    /// The barrier `sync` (over every thread) before writing `bytes` of the scratch buffer,
    /// unless no thread may still read them. Marks the op as reporting its accesses.
    pub(crate) fn barrier_before_scratch_write(&mut self, bytes: Range<usize>, sync: &str) {
        self.scratch_reported = true;
        if self.ledger_applies() && !self.scratch_reads.overlaps(&bytes) {
            self.w.line(format!(
                "// (no barrier: bytes {}..{} of the scratch are unread since the last one)",
                bytes.start, bytes.end
            ));
            return;
        }
        self.w.line(sync);
        self.scratch_barrier_emitted();
    }

    /// A scratch user's writes between its two barriers (`sync`, over every thread): the one
    /// before only where `bytes` (the ledger's account of them; `None`: bytes it does not
    /// follow) may still be read, the one after always, after which nothing is read. The
    /// caller notes its reads.
    pub(crate) fn write_between_barriers(
        &mut self,
        bytes: Option<Range<usize>>,
        sync: &str,
        write: impl FnOnce(&mut Self) -> Result<(), super::CodegenError>,
    ) -> Result<(), super::CodegenError> {
        match bytes.clone() {
            Some(b) => self.barrier_before_scratch_write(b, sync),
            None => self.w.line(sync),
        }
        write(self)?;
        self.w.line(sync);
        if bytes.is_some() {
            self.scratch_barrier_emitted();
        }
        Ok(())
    }

    /// Where `size` bytes of the scratch buffer can be written with no barrier before: the
    /// first 16-byte aligned offset past what was read since the last one (0 where the
    /// ledger does not apply, knows nothing, or may not grow the buffer). Moving a handoff
    /// off the bytes its predecessor's readers read spares it its leading barrier.
    pub(crate) fn unread_scratch_offset(&self, size: usize) -> usize {
        let ScratchReads::Ranges(rs) = &self.scratch_reads else {
            return 0;
        };
        if !self.unread_offsets_apply() {
            return 0;
        }
        let candidates = std::iter::once(0).chain(rs.iter().map(|r| r.end.next_multiple_of(16)));
        let free = |at: &usize| !self.scratch_reads.overlaps(&(*at..*at + size));
        candidates.filter(free).min().unwrap_or(0)
    }

    /// Whether [`Self::unread_scratch_offset`] may move a write past the bytes just read
    /// (the ledger applies here, and the scratch buffer may grow).
    pub(crate) fn unread_offsets_apply(&self) -> bool {
        self.ledger_applies() && self.reduction_slots_allowed
    }

    /// Whether the text since `mark` touched the scratch buffer (owned regions' slices
    /// aside).
    pub(crate) fn scratch_named_since(&self, mark: usize) -> bool {
        self.w
            .mentions_since_outside(mark, SCRATCH, &self.owned_spans)
    }

    /// Around a warpgroup's region, which the ledger reads past: what it found before
    /// the region (the region's accesses are to the warpgroup's slice, its barriers the
    /// warpgroup's), and where its text starts.
    pub(crate) fn owned_region_start(&self) -> (ScratchReads, usize) {
        (self.scratch_reads.clone(), self.w.len())
    }

    /// After the region [`Self::owned_region_start`] began: the ledger as it was, the
    /// region's text skipped by [`Self::scratch_check`].
    pub(crate) fn owned_region_done(&mut self, (reads, start): (ScratchReads, usize)) {
        self.scratch_reads = reads;
        self.owned_spans.push(start..self.w.len());
    }

    /// A barrier over the threads running this code, after which nothing has been read.
    pub(crate) fn emit_scratch_barrier(&mut self) {
        let sync = self.block_sync();
        self.w.line(sync);
        self.scratch_barrier_emitted();
    }

    /// `bytes` of the scratch buffer are read (synchronously: loads, `ldmatrix`).
    pub(crate) fn note_scratch_read(&mut self, bytes: Range<usize>) {
        self.scratch_reported = true;
        if let ScratchReads::Ranges(rs) = &mut self.scratch_reads {
            rs.push(bytes);
        }
    }

    /// After a branch emitted from `mark`, the ledger having stood at `before`: in a loop
    /// emitted once a warpgroup (the seesaw's guard at the end of its body), a branch whose
    /// arms never name the scratch buffer leaves it as it was (its arms' barriers only
    /// order more); elsewhere, and where they do, every byte is unknown.
    pub(crate) fn after_branch(&mut self, mark: usize, before: ScratchReads) {
        let named = self.scratch_named_since(mark);
        self.scratch_reads = match self.only_warpgroup.is_some() && !named {
            true => before,
            false => ScratchReads::Unknown,
        };
    }

    /// Before an op: where the text stands, and nothing reported yet.
    pub(crate) fn scratch_mark(&mut self) -> usize {
        self.scratch_reported = false;
        self.w.len()
    }

    /// After an op emitted from `mark`: an op that touched the scratch buffer without
    /// reporting its accesses leaves every byte unknown.
    pub(crate) fn scratch_check(&mut self, mark: usize) {
        if !self.scratch_reported && self.scratch_named_since(mark) {
            self.forget_scratch_reads();
        }
    }

    /// Where the ledger applies (and the slots fit): declares `attn_red` (elements `ct`) at
    /// the next of the two alternating slots, which grow to `bytes`, and moves the parity
    /// on; whether it did.
    pub(crate) fn take_reduction_slot(&mut self, ct: &str, bytes: usize) -> bool {
        if !(self.ledger_applies() && self.reduction_slots_allowed) {
            return false;
        }
        self.reduction_slot_bytes = self.reduction_slot_bytes.max(bytes);
        self.w.line(format!(
            "{ct}* attn_red = reinterpret_cast<{ct}*>({REDUCTION_SLOT_AT_MACRO}({REDUCTION_PARITY}));"
        ));
        self.w.line(format!("{REDUCTION_PARITY} ^= 1u;"));
        true
    }

    /// The `#define`s placing the reductions' two slots after the rest of the scratch
    /// buffer (16-byte aligned), folded into the kernel's scratch need. `None` when no
    /// reduction took them.
    pub(crate) fn reduction_slots_define(&mut self) -> Option<String> {
        if self.reduction_slot_bytes == 0 {
            return None;
        }
        let base = self.scratch_bytes.next_multiple_of(16);
        let slot = self.reduction_slot_bytes.next_multiple_of(16);
        self.scratch_bytes = base + 2 * slot;
        Some(format!(
            "#define {REDUCTION_SLOT_AT_MACRO}(p) ({SCRATCH} + {base} + (p) * {slot})"
        ))
    }

    /// The alternating slots' parity declaration at the top of the kernel, where a
    /// reduction took them.
    pub(crate) fn reduction_parity_declaration(&self) -> Option<String> {
        (self.reduction_slot_bytes > 0).then(|| format!("unsigned {REDUCTION_PARITY} = 0u;"))
    }
}

#[cfg(test)]
mod tests {
    use super::ScratchReads;

    #[test]
    fn only_known_disjoint_reads_spare_a_write_its_barrier() {
        let nothing = ScratchReads::Ranges(Vec::new());
        let p_rows = 0..9216;
        let staged = ScratchReads::Ranges(vec![p_rows]);
        assert!(ScratchReads::Unknown.overlaps(&(9216..9728)));
        assert!(!nothing.overlaps(&(0..9216)));
        assert!(staged.overlaps(&(9000..9300)));
        assert!(staged.overlaps(&(0..1)));
        // Touching ends do not overlap.
        assert!(!staged.overlaps(&(9216..9728)));
    }
}
