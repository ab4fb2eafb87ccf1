//! `handoff`: a tile moved from the threads that hold it to others: from one warpgroup to
//! another (`Layout::Owned` on both sides), or between a warpgroup and the whole program.
//!
//! The tile goes through shared memory between two barriers over the threads of both
//! sides: the first keeps the writers from overwriting what the readers of an earlier
//! handoff (or the previous iteration's) have not read yet, the second makes the writes
//! visible to the readers. Each side runs its part on its own threads and coordinates (an
//! owned side in its region), so the warpgroups meet only at those barriers. Where the
//! two sides are all of the program's warpgroups (two: the seesaw), the buffer lies among
//! the program's own scratch bytes and the scratch ledger places it: past the bytes read
//! since the last barrier, so the first barrier goes (`scratch_ledger`); a run of such
//! handoffs (the seesaw gathers them: `passes::seesaw`) writes every buffer, each past the
//! others, and meets behind one barrier; and a tile whose one reader is the next dot (past
//! ops that keep off the scratch buffer), as the A operand that dot would stage in the
//! scratch buffer, is written there in the staged layout and read by the dot as it lies
//! (the seesaw's P: one pass through shared memory, not two). Otherwise a buffer of its
//! own after the warpgroups' slices. Within one owner, or where the layouts agree, a
//! handoff is an ordinary conversion or a new name.

use super::c_types::{from_scratch, scratch_type, to_scratch};
use super::dot::MmaPlan;
use super::emitter::Emitter;
use super::owned_region::{OWNED_BARRIER_BASE, WARPGROUP_THREADS};
use super::CodegenError;
use crate::gpu_ir::GpuOp;
use crate::ir::{Op, OpKind, ValueId};
use std::ops::Range;

type Res<T> = Result<T, CodegenError>;

/// The macro giving the byte offset of the handoff buffers in the scratch buffer.
pub(crate) const HANDOFF_BASE_MACRO: &str = "ATTN_HANDOFF_BASE";

/// A handoff whose writes are out, its readers waiting for the barrier after them.
struct Written {
    res: ValueId,
    to: Option<u32>,
    /// The array the readers fill and the buffer's pointer declaration (`None`: staged for
    /// the next dot, which reads it there).
    read_back: Option<(String, String)>,
    /// The buffer's bytes where the ledger follows them (its barriers every thread's).
    bytes: Option<Range<usize>>,
}

impl<'f> Emitter<'f> {
    /// The run of handoffs at the start of `ops` ([`Self::handoff_run_len`]), emitted;
    /// how many ops it took.
    pub(crate) fn emit_handoffs_from(&mut self, ops: &'f [GpuOp]) -> Res<usize> {
        let n = self.handoff_run_len(ops);
        self.following = &ops[n..];
        let run: Vec<&'f Op> = ops[..n]
            .iter()
            .filter_map(|g| match g {
                GpuOp::Tile(o) => Some(self.f.op(*o)),
                _ => None,
            })
            .collect();
        self.op_comment(run[0]);
        self.emit_handoff_run(&run)?;
        self.converted.clear();
        Ok(n)
    }

    /// How many ops from the start of `ops` (a handoff) meet behind one barrier: a run of
    /// handoffs between every thread of the program, none reading another's result, where
    /// the ledger places each buffer past the others' (else one).
    pub(crate) fn handoff_run_len(&self, ops: &[GpuOp]) -> usize {
        if !self.unread_offsets_apply() {
            return 1;
        }
        let mut results = Vec::new();
        let joins = |g: &GpuOp, results: &[ValueId]| -> bool {
            let GpuOp::Tile(o) = g else { return false };
            let op = self.f.op(*o);
            let (Some(&x), Some(&r)) = (op.operands.first(), op.results.first()) else {
                return false;
            };
            let (from, to) = (self.f.ty(x).layout.owner(), self.f.ty(r).layout.owner());
            op.kind == OpKind::Handoff
                && from != to
                && !results.contains(&x)
                && matches!(self.handoff_sync(from, to), Ok((_, true)))
        };
        let mut n = 0;
        for g in ops {
            if !joins(g, &results) {
                break;
            }
            if let GpuOp::Tile(o) = g {
                results.push(self.f.op(*o).results[0]);
            }
            n += 1;
        }
        n.max(1)
    }

    /// Handoffs `ops` (a run, [`Self::handoff_run_len`]; the first op's comment already
    /// out): every writer's part, one barrier, every reader's part.
    pub(crate) fn emit_handoff_run(&mut self, ops: &[&'f Op]) -> Res<()> {
        let (written, Some(sync)) = self.write_run(ops)? else {
            return Ok(());
        };
        self.w.line(sync);
        if written.iter().any(|w| w.bytes.is_some()) {
            self.scratch_barrier_emitted();
        }
        self.read_run(written)
    }

    /// The writers' parts of a run, and the barrier that publishes them (`None` where every
    /// handoff of it was within one owner).
    fn write_run(&mut self, ops: &[&'f Op]) -> Res<(Vec<Written>, Option<String>)> {
        let mut written: Vec<Written> = Vec::new();
        let mut sync = None;
        for (k, op) in ops.iter().enumerate() {
            if k > 0 {
                self.op_comment(op);
            }
            let (x, res) = (Self::operand(op, 0)?, Self::result(op)?);
            let (from, to) = (self.f.ty(x).layout.owner(), self.f.ty(res).layout.owner());
            if from == to {
                self.handoff_in_place(x, res, to)?;
                continue;
            }
            let (s, every_thread) = self.handoff_sync(from, to)?;
            let w = self.write_handoff_side(x, res, (from, to), &s, every_thread)?;
            // Each buffer of a run lies past the others (the ledger counts them read): one
            // over another would be overwritten before its readers read it.
            let apart = |v: &Written| match (&v.bytes, &w.bytes) {
                (Some(a), Some(b)) => a.end <= b.start || b.end <= a.start,
                _ => false,
            };
            if !written.iter().all(apart) {
                return Err(CodegenError::Malformed(
                    "two handoffs of a run placed on the same scratch bytes".into(),
                ));
            }
            written.push(w);
            sync.get_or_insert(s);
        }
        Ok((written, sync))
    }

    /// The readers' parts of a run after its barrier, and the ledger's account of them.
    fn read_run(&mut self, written: Vec<Written>) -> Res<()> {
        let mut staged = Vec::new();
        for w in written {
            match &w.read_back {
                Some((name, pointer)) => {
                    self.w.open("");
                    self.w.line(pointer);
                    self.on_side(w.to, |e| e.read_handoff(w.res, name))?;
                    self.w.close("");
                }
                None => staged.push(w.res),
            }
            // The ledger's account, outside the sides' regions: a loop copied for one
            // warpgroup leaves the other side out, and both copies must keep the same
            // barriers.
            if let Some(bytes) = w.bytes {
                self.note_scratch_read(bytes);
            }
        }
        // The dot reads what was staged for it from here; nothing may touch the scratch
        // buffer in between (checked there).
        let mark = self.w.len();
        for res in staged {
            if let Some(s) = self.staged_by_handoff.get_mut(&res.0) {
                s.1 = mark;
            }
        }
        Ok(())
    }

    /// The writers' part of the handoff of `x` to `res` between `sides`: the buffer
    /// placed, the barrier before the writes where some thread may still read those bytes
    /// (`sync`), the writes.
    fn write_handoff_side(
        &mut self,
        x: ValueId,
        res: ValueId,
        (from, to): (Option<u32>, Option<u32>),
        sync: &str,
        every_thread: bool,
    ) -> Res<Written> {
        if let Some(p) = self.dot_staging_a_next(res).filter(|_| every_thread) {
            let bytes = self.handoff_staged_for_dot(x, res, from, &p, sync)?;
            return Ok(Written {
                res,
                to,
                read_back: None,
                bytes: Some(bytes),
            });
        }
        let (st, elem_bytes) = scratch_type(self.elem(x));
        let size = (self.map(x).elems() * elem_bytes).next_multiple_of(16);
        let (at, ledger) = self.handoff_buffer(res, size, every_thread);
        let name = self.define_tile(res);
        let pointer =
            format!("{st}* const attn_hb = reinterpret_cast<{st}*>(attn_scratch + {at});");
        self.w.open("");
        self.w.line(&pointer);
        match ledger.clone() {
            Some(bytes) => self.barrier_before_scratch_write(bytes, sync),
            None => self.w.line(sync),
        }
        self.on_side(from, |e| e.write_handoff(x))?;
        self.w.close("");
        // Read after the barrier: the run's later writers keep off these bytes.
        if let Some(bytes) = ledger.clone() {
            self.note_scratch_read(bytes);
        }
        Ok(Written {
            res,
            to,
            read_back: Some((name, pointer)),
            bytes: ledger,
        })
    }

    /// A handoff whose one reader is the next dot, as that dot's A operand staged in the
    /// scratch buffer (`dot_staging_a_next`): the writers stage the tile in the dot's
    /// layout, and the dot reads it there (P of the seesaw's PV: written once by the
    /// warpgroup whose softmax made it, read by both). The bytes it took.
    fn handoff_staged_for_dot(
        &mut self,
        x: ValueId,
        res: ValueId,
        from: Option<u32>,
        p: &MmaPlan,
        sync: &str,
    ) -> Res<Range<usize>> {
        let bytes = p.staged_a_bytes();
        let at = self.unread_scratch_offset(bytes);
        self.need_scratch(at + bytes);
        self.w.open("");
        self.w.line(super::dot_shared::staged_a_pointer(at));
        self.barrier_before_scratch_write(at..at + bytes, sync);
        self.on_side(from, |e| e.stage_a(x, p))?;
        self.w.close("");
        self.note_scratch_read(at..at + bytes);
        self.staged_by_handoff.insert(res.0, (at, self.w.len()));
        Ok(at..at + bytes)
    }

    /// Where in the scratch buffer the handoff to `res` moves its `size` bytes, and the
    /// bytes the ledger follows (its barriers every thread's). Where its barriers are every
    /// thread's, the buffer lies among the bytes of the program's own scratch users: at the
    /// first offset the reads since the last barrier left alone (so it needs no barrier
    /// before its writes, `scratch_ledger`), else from the start, where every scratch user
    /// synchronizes every thread before it writes, after every read of what lay there
    /// (their reads are `ldmatrix` and loads, never a warpgroup MMA's asynchronous ones).
    /// Else a buffer of its own after the warpgroups' slices (a pair barrier leaves the
    /// other warpgroups reading the program's scratch), the same one each time the program
    /// is emitted (split and unsplit).
    fn handoff_buffer(
        &mut self,
        res: ValueId,
        size: usize,
        every_thread: bool,
    ) -> (String, Option<Range<usize>>) {
        if every_thread {
            let at = self.unread_scratch_offset(size);
            self.need_scratch(at + size);
            return (at.to_string(), Some(at..at + size));
        }
        let next = &mut self.handoff_bytes;
        let offset = *self.handoff_at.entry(res.0).or_insert_with(|| {
            *next += size;
            *next - size
        });
        (format!("{HANDOFF_BASE_MACRO} + {offset}"), None)
    }

    /// A handoff between the same threads: the same array, or a conversion.
    fn handoff_in_place(&mut self, x: ValueId, res: ValueId, owner: Option<u32>) -> Res<()> {
        if self.map(x) == self.map(res) && !self.is_deferred(x) {
            self.alias_tile(res, x)?;
            return Ok(());
        }
        let name = self.define_tile(res);
        self.on_side(owner, |e| {
            let converted = e.convert(x, e.map(res))?;
            e.copy_var(res, &name, &converted);
            Ok(())
        })
    }

    /// Runs `body` on `side`'s threads: one warpgroup's region, or every thread.
    fn on_side(&mut self, side: Option<u32>, body: impl FnOnce(&mut Self) -> Res<()>) -> Res<()> {
        match side {
            Some(w) => self.on_warpgroup(w, body),
            None => body(self),
        }
    }

    /// The barrier over both sides' threads: the block's when either side is every thread,
    /// else the named barrier of the pair of warpgroups; and whether it is every thread's.
    fn handoff_sync(&self, from: Option<u32>, to: Option<u32>) -> Res<(String, bool)> {
        let (Some(a), Some(b)) = (from, to) else {
            return Ok((self.block_sync(), true));
        };
        let groups = (self.threads / WARPGROUP_THREADS) as u32;
        let (lo, hi) = (a.min(b), a.max(b));
        // Pairs in order (0,1), (0,2), (1,2), ... after the owned regions' barriers.
        let pair = (0..lo).map(|i| groups - 1 - i).sum::<u32>() + (hi - lo - 1);
        let id = OWNED_BARRIER_BASE as u32 + groups + pair;
        if id > 15 {
            return Err(CodegenError::Unsupported(format!(
                "a handoff between warpgroups {a} and {b} of {groups} needs named barrier {id} \
                 (the hardware has 16)"
            )));
        }
        let sync = format!("attn_bar_sync({id}, {});", 2 * WARPGROUP_THREADS);
        Ok((sync, groups == 2))
    }

    /// Every element of `x` into the handoff buffer (one writer an element).
    fn write_handoff(&mut self, x: ValueId) -> Res<()> {
        let m = self.map(x);
        self.w.open_unrolled("s", m.slots());
        let store = format!(
            "attn_hb[{}] = {};",
            m.flat("s"),
            to_scratch(self.elem(x), &self.at(x, "s")?)
        );
        match m.writer("s") {
            Some(g) => self.w.line(format!("if ({g}) {store}")),
            None => self.w.line(store),
        }
        self.w.close("");
        Ok(())
    }

    /// Every slot of `res` (array `name`) from the handoff buffer.
    fn read_handoff(&mut self, res: ValueId, name: &str) -> Res<()> {
        let m = self.map(res);
        self.w.open_unrolled("s", m.slots());
        let v = from_scratch(self.elem(res), &format!("attn_hb[{}]", m.flat_clamped("s")));
        self.w.line(format!("{name}[s] = {v};"));
        self.w.close("");
        Ok(())
    }
}
