//! Wait and barrier insertion from dependencies (the membar analysis): walking the final
//! program in order, each shared buffer (alloc × stage) is in-flight (copies issued, not
//! waited), landed (this thread's copies done, others' not yet visible) or read (fragment
//! loads since the last barrier). A fragment load of an in-flight buffer needs a wait, of a
//! landed one a barrier (read after write); a copy into a buffer read since the last barrier
//! needs a barrier first (write after read). One barrier clears every buffer at once, which
//! is why a pipelined loop needs only the one at its top. Loops are walked twice (the second
//! time from the state their back edge carries), branches from the same entry state.
//!
//! [`check`] runs the same walk without inserting anything: the verifier uses it to prove
//! every access of a lowered program is ordered.

use super::program::{AllocId, BarrierReason, GpuBlock, GpuOp, Stage};
use std::collections::BTreeMap;

type Key = (AllocId, Stage);

/// The buffer an access touches in the analysis' two-buffer view of a ring: a prologue's
/// buffer 0 is the first iteration's current one, its later buffers are among the others.
fn key(alloc: AllocId, s: Stage) -> Key {
    match s {
        Stage::Fixed(0) => (alloc, Stage::Current),
        Stage::Fixed(_) => (alloc, Stage::Next),
        other => (alloc, other),
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Flags {
    in_flight: bool,
    landed: bool,
    read: bool,
}

#[derive(Clone, Debug, Default, PartialEq)]
struct State(BTreeMap<Key, Flags>);

impl State {
    fn join(&self, o: &State) -> State {
        let mut out = self.0.clone();
        for (k, f) in &o.0 {
            let e = out.entry(*k).or_default();
            e.in_flight |= f.in_flight;
            e.landed |= f.landed;
            e.read |= f.read;
        }
        State(out)
    }
    /// The state as the next iteration sees it: its current stage is this one's next.
    fn across_back_edge(&self) -> State {
        State(
            self.0
                .iter()
                .map(|((a, s), f)| ((*a, s.across_back_edge()), *f))
                .collect(),
        )
    }
    fn wait_all(&mut self) {
        self.land(|_| true);
    }
    /// `wait_group N > 0` at the top of a pipelined body: the oldest groups, those of the
    /// current iteration's stage, have landed; the prefetches of later ones may still fly.
    fn wait_current(&mut self) {
        self.land(|s| s == Stage::Current);
    }
    fn land(&mut self, which: impl Fn(Stage) -> bool) {
        for ((_, s), f) in self.0.iter_mut() {
            if f.in_flight && which(*s) {
                (f.in_flight, f.landed) = (false, true);
            }
        }
    }
    fn barrier(&mut self) {
        for f in self.0.values_mut() {
            (f.landed, f.read) = (false, false);
        }
    }
    fn get(&self, k: Key) -> Flags {
        self.0.get(&k).copied().unwrap_or_default()
    }
}

/// An access the walk found unordered (only reported by [`check`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unordered {
    pub alloc: AllocId,
    pub what: &'static str,
}

/// Inserts the waits and barriers `b` needs.
pub fn run(b: &mut GpuBlock) {
    let mut w = Walker {
        insert: true,
        problems: vec![],
    };
    w.block(b, State::default());
}

/// Reports the accesses of `b` that lack a wait or barrier.
pub fn check(b: &GpuBlock) -> Vec<Unordered> {
    let mut copy = b.clone();
    let mut w = Walker {
        insert: false,
        problems: vec![],
    };
    w.block(&mut copy, State::default());
    w.problems
}

struct Walker {
    insert: bool,
    problems: Vec<Unordered>,
}

impl Walker {
    fn block(&mut self, b: &mut GpuBlock, mut st: State) -> State {
        let mut out = Vec::with_capacity(b.ops.len());
        for mut op in std::mem::take(&mut b.ops) {
            st = self.op(&mut op, st, &mut out);
            out.push(op);
        }
        b.ops = out;
        st
    }

    fn op(&mut self, op: &mut GpuOp, mut st: State, out: &mut Vec<GpuOp>) -> State {
        match op {
            GpuOp::AsyncCopy(c) => {
                let k = key(c.dst, c.stage);
                if st.get(k).read {
                    self.need(
                        out,
                        &mut st,
                        c.dst,
                        "copy over a buffer still being read",
                        false,
                    );
                }
                st.0.entry(k).or_default().in_flight = true;
            }
            GpuOp::Wait { pending: 0 } => st.wait_all(),
            GpuOp::Wait { .. } => st.wait_current(),
            GpuOp::Barrier { .. } => st.barrier(),
            GpuOp::Mma { a, b, .. } => {
                for k in [a.alloc(), b.alloc()].into_iter().flatten() {
                    self.before_read(out, &mut st, k);
                }
                for k in [a.alloc(), b.alloc()].into_iter().flatten() {
                    st.0.entry(k).or_default().read = true;
                }
            }
            // Held A fragments are read from their alloc where the `HoldA` is.
            GpuOp::HoldA { a, .. } => {
                if let Some(k) = a.alloc() {
                    self.before_read(out, &mut st, k);
                    st.0.entry(k).or_default().read = true;
                }
            }
            GpuOp::For {
                body, pipelined, ..
            } => {
                // Only a pipelined loop's back edge swaps the current and next stages; a
                // loop nested in one (a mask loop over ranges) runs within one iteration of
                // it, and its stages stay where they are.
                let back = |s: &State| {
                    if *pipelined {
                        s.across_back_edge()
                    } else {
                        s.clone()
                    }
                };
                let once = self.dry(body, st.clone());
                let entry = st.join(&back(&once));
                let exit = self.block(body, entry.clone());
                return st.join(&back(&exit));
            }
            GpuOp::If {
                then_block,
                else_block,
                ..
            } => {
                let t = self.block(then_block, st.clone());
                let e = self.block(else_block, st);
                return t.join(&e);
            }
            GpuOp::While { before, after, .. } => {
                let once = self.dry(before, st.clone());
                let once = self.dry(after, once);
                let entry = st.join(&once);
                let b = self.block(before, entry);
                let a = self.block(after, b.clone());
                return b.join(&a);
            }
            _ => {}
        }
        st
    }

    /// The state after one pass over `b` with nothing inserted or reported.
    fn dry(&mut self, b: &GpuBlock, st: State) -> State {
        let mut w = Walker {
            insert: self.insert,
            problems: vec![],
        };
        let mut copy = b.clone();
        w.block(&mut copy, st)
    }

    fn before_read(&mut self, out: &mut Vec<GpuOp>, st: &mut State, k: Key) {
        if st.get(k).in_flight {
            if self.insert {
                out.push(GpuOp::Wait { pending: 0 });
                st.wait_all();
            } else {
                self.problems.push(Unordered {
                    alloc: k.0,
                    what: "fragment load before its copy was waited for",
                });
            }
        }
        if st.get(k).landed {
            self.need(
                out,
                st,
                k.0,
                "fragment load before other threads' copies are visible",
                true,
            );
        }
    }

    fn need(
        &mut self,
        out: &mut Vec<GpuOp>,
        st: &mut State,
        a: AllocId,
        what: &'static str,
        raw: bool,
    ) {
        if self.insert {
            let reason = if raw {
                BarrierReason::CopiesVisible
            } else {
                BarrierReason::BufferFree
            };
            out.push(GpuOp::Barrier { reason });
            st.barrier();
        } else {
            self.problems.push(Unordered { alloc: a, what });
        }
    }
}
