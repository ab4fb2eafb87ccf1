//! How a tile's elements are spread over the threads of a block: the register slots each
//! thread holds and which element (row-major flat index) each slot is.
//!
//! Two distributions exist, chosen from the value's IR layout (see [`TileMap::for_layout`]):
//! - [`CyclicMap`] (`Blocked` and unassigned layouts): element `f` lives in thread
//!   `f % T`, slot `f / T`, so consecutive threads own consecutive elements.
//! - [`MmaMap`] (`Mma` and `Slice(1, Mma)`): the `mma.sync.m16n8k16` accumulator fragment,
//!   warps owning whole 16-row slabs; row vectors are held by the four lanes of each quad.
//!
//! Every op that needs no element of another thread works slot by slot through
//! [`TileMap::flat`], whatever the distribution; ops that move data between threads read the
//! distribution to decide whether a shuffle, a register copy or shared memory does it.

use super::elem_index::ElemIndex;
pub(crate) use super::mma_map::MmaMap;
use crate::ir::Layout;

/// The cyclic distribution of one tile over `threads` threads: thread `tid` owns the
/// elements `f = tid + s·T` for slots `s = 0..ceil(E/T)`. When `E` is not a multiple of `T`,
/// the last slot of some threads is unowned: its value is never stored, and shared-memory
/// reads clamp the index into range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CyclicMap {
    pub(crate) elems: usize,
    pub(crate) threads: usize,
}

impl CyclicMap {
    pub(crate) fn new(shape: &[usize], threads: usize) -> Self {
        CyclicMap {
            elems: shape.iter().product(),
            threads,
        }
    }

    fn slots(&self) -> usize {
        self.elems.div_ceil(self.threads).max(1)
    }

    fn has_tail(&self) -> bool {
        !self.elems.is_multiple_of(self.threads)
    }

    fn flat(&self, slot: &str) -> String {
        if self.slots() == 1 {
            "tid".into()
        } else {
            format!("(tid + {slot} * {})", self.threads)
        }
    }

    fn owned(&self, slot: &str) -> Option<String> {
        self.has_tail()
            .then(|| format!("{} < {}", self.flat(slot), self.elems))
    }
}

/// The distribution of one tile value (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TileMap {
    Cyclic(CyclicMap),
    Mma(MmaMap),
}

impl TileMap {
    /// The cyclic distribution (what every tile used before layouts reached the emitter).
    pub(crate) fn new(shape: &[usize], threads: usize) -> Self {
        TileMap::Cyclic(CyclicMap::new(shape, threads))
    }

    /// The distribution of a tile of `shape` with IR layout `layout`: `Mma` for rank-2 tiles
    /// and rank-1 `Slice(1, Mma)` row vectors, cyclic for everything else.
    pub(crate) fn for_layout(layout: &Layout, shape: &[usize], threads: usize) -> Self {
        let warps = threads / 32;
        match (layout, shape) {
            (Layout::Mma { .. }, [m, n]) => TileMap::Mma(MmaMap::new(*m, *n, warps)),
            (Layout::Slice { dim: 1, parent }, [m]) if matches!(**parent, Layout::Mma { .. }) => {
                TileMap::Mma(MmaMap::new(*m, 1, warps))
            }
            _ => TileMap::new(shape, threads),
        }
    }

    /// Number of elements of the tile.
    pub(crate) fn elems(&self) -> usize {
        match self {
            TileMap::Cyclic(c) => c.elems,
            TileMap::Mma(m) => m.m * m.n,
        }
    }

    /// Register slots per thread.
    pub(crate) fn slots(&self) -> usize {
        match self {
            TileMap::Cyclic(c) => c.slots(),
            TileMap::Mma(m) => m.slots(),
        }
    }

    /// The flat (row-major) element index of `slot` (a C++ expression).
    pub(crate) fn flat(&self, slot: &str) -> String {
        match self {
            TileMap::Cyclic(c) => c.flat(slot),
            TileMap::Mma(m) => m.flat(slot),
        }
    }

    /// The element `slot` holds: coordinates for `Mma` tiles, the flat index otherwise.
    pub(crate) fn index(&self, slot: &str) -> ElemIndex {
        match self {
            TileMap::Cyclic(c) => ElemIndex::Flat(c.flat(slot)),
            TileMap::Mma(m) => ElemIndex::Coords {
                row: m.row(slot),
                col: m.col(slot),
            },
        }
    }

    /// Condition under which this thread holds a valid element in `slot`, or `None` when it
    /// always does. Several threads may hold the same element (quad-replicated row vectors).
    pub(crate) fn owned(&self, slot: &str) -> Option<String> {
        match self {
            TileMap::Cyclic(c) => c.owned(slot),
            TileMap::Mma(m) => m.owned(slot),
        }
    }

    /// Condition under which this thread is the one that writes `slot`'s element to memory
    /// (exactly one thread per element), or `None` when every owned slot writes.
    pub(crate) fn writer(&self, slot: &str) -> Option<String> {
        match self {
            TileMap::Cyclic(c) => c.owned(slot),
            TileMap::Mma(m) => m.writer(slot),
        }
    }

    /// The flat index of `slot`, clamped into range: safe to read shared memory with.
    pub(crate) fn flat_clamped(&self, slot: &str) -> String {
        let always_in_range = match self {
            TileMap::Cyclic(c) => !c.has_tail(),
            TileMap::Mma(m) => m.always_in_range(),
        };
        if always_in_range {
            self.flat(slot)
        } else {
            format!("attn_min({}, {})", self.flat(slot), self.elems().max(1) - 1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_and_tails() {
        let m = TileMap::new(&[16, 64], 128);
        assert_eq!(m.slots(), 8);
        assert_eq!(m.owned("s"), None);
        let m = TileMap::new(&[3, 5], 32);
        assert_eq!(m.slots(), 1);
        assert_eq!(m.owned("s").as_deref(), Some("tid < 15"));
        let m = TileMap::new(&[200], 64);
        assert_eq!(m.slots(), 4);
        assert_eq!(m.owned("s").as_deref(), Some("(tid + s * 64) < 200"));
        assert_eq!(m.writer("s"), m.owned("s"));
    }

    #[test]
    fn layouts_choose_the_distribution() {
        let mma = Layout::Mma {
            warps_per_cta: [4, 1],
        };
        let row = Layout::Slice {
            dim: 1,
            parent: Box::new(mma.clone()),
        };
        assert!(matches!(
            TileMap::for_layout(&mma, &[64, 64], 128),
            TileMap::Mma(_)
        ));
        // A row vector and its unsqueezed column share one distribution: unsqueeze is a copy.
        assert_eq!(
            TileMap::for_layout(&row, &[64], 128),
            TileMap::for_layout(&mma, &[64, 1], 128)
        );
        assert!(matches!(
            TileMap::for_layout(&Layout::Unassigned, &[64, 64], 128),
            TileMap::Cyclic(_)
        ));
    }
}
