//! How a tile's elements are spread over the threads of a block.
//!
//! With `T` threads and a tile of `E` elements (row-major flat index `f`), thread `tid`
//! owns the elements `f = tid + s·T` for slots `s = 0..ceil(E/T)`, held in a register array
//! indexed by the (compile-time) slot. Consecutive threads own consecutive elements, so
//! global accesses along the contiguous axis coalesce. Scalars are replicated in every
//! thread. When `E` is not a multiple of `T`, the last slot of some threads is unowned:
//! their value is never stored, and shared-memory reads clamp the index into range.

/// The distribution of one tile shape over `threads` threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TileMap {
    pub(crate) elems: usize,
    pub(crate) threads: usize,
}

impl TileMap {
    pub(crate) fn new(shape: &[usize], threads: usize) -> Self {
        TileMap {
            elems: shape.iter().product(),
            threads,
        }
    }

    /// Register slots per thread.
    pub(crate) fn slots(&self) -> usize {
        self.elems.div_ceil(self.threads).max(1)
    }

    /// Whether some thread has an unowned slot (then accesses need [`Self::owned`]).
    pub(crate) fn has_tail(&self) -> bool {
        !self.elems.is_multiple_of(self.threads)
    }

    /// The flat element index of `slot` (a C++ expression).
    pub(crate) fn flat(&self, slot: &str) -> String {
        if self.slots() == 1 {
            "tid".into()
        } else {
            format!("(tid + {slot} * {})", self.threads)
        }
    }

    /// Condition under which this thread owns `slot`, or `None` when it always does.
    pub(crate) fn owned(&self, slot: &str) -> Option<String> {
        self.has_tail()
            .then(|| format!("{} < {}", self.flat(slot), self.elems))
    }

    /// The flat index of `slot`, clamped into range: safe to read shared memory with.
    pub(crate) fn flat_clamped(&self, slot: &str) -> String {
        if self.has_tail() {
            format!("attn_min({}, {})", self.flat(slot), self.elems - 1)
        } else {
            self.flat(slot)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_and_tails() {
        let m = TileMap::new(&[16, 64], 128);
        assert_eq!((m.slots(), m.has_tail()), (8, false));
        assert_eq!(m.owned("s"), None);
        let m = TileMap::new(&[3, 5], 32);
        assert_eq!((m.slots(), m.has_tail()), (1, true));
        assert_eq!(m.owned("s").as_deref(), Some("tid < 15"));
        let m = TileMap::new(&[200], 64);
        assert_eq!(m.slots(), 4);
        assert_eq!(m.owned("s").as_deref(), Some("(tid + s * 64) < 200"));
    }
}
