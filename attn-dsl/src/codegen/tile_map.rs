//! How a tile's elements are spread over the threads of a block: the register slots each
//! thread holds and which element (row-major flat index) each slot is.
//!
//! Two distributions exist, chosen from the value's IR layout (see `TileMap::for_layout`):
//! - `CyclicMap` (`Blocked` and unassigned layouts): element `f` lives in thread
//!   `f % T`, slot `f / T`, so consecutive threads own consecutive elements.
//! - `MmaMap` (`Mma` and `Slice(1, Mma)`): the `mma.sync.m16n8k16` accumulator fragment,
//!   warps owning whole 16-row slabs; row vectors are held by the four lanes of each quad.
//!
//! Every op that needs no element of another thread works slot by slot through
//! `TileMap::flat`, whatever the distribution; ops that move data between threads read the
//! distribution to decide whether a shuffle, a register copy or shared memory does it.

use super::elem_index::ElemIndex;
pub(crate) use super::mma_map::MmaMap;
use crate::ir::Layout;

/// The cyclic distribution of one tile over `threads` threads: thread `tid` owns the
/// elements at walk positions `w = tid + s·T` for slots `s = 0..ceil(E/T)`. The walk runs
/// row-major (consecutive threads own consecutive elements of a row), or column-major for
/// tiles whose `Blocked` layout makes the row axis the contiguous one (a transposed K tile),
/// so global accesses coalesce either way. When `E` is not a multiple of `T`, the last slot of
/// some threads is unowned: its value is never stored, and shared-memory reads clamp the
/// index into range.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CyclicMap {
    pub(crate) elems: usize,
    pub(crate) threads: usize,
    /// Rows and columns (rank 1: `[n]` is `n` rows of one column).
    rows: usize,
    cols: usize,
    /// Whether the walk runs down the columns (only for tiles with more than one of each).
    col_major: bool,
}

/// Two maps are equal when every slot holds the same element: row-major walks only depend on
/// the element count, column-major ones on the shape too.
impl PartialEq for CyclicMap {
    fn eq(&self, o: &Self) -> bool {
        let same_walk = match (self.col_major, o.col_major) {
            (false, false) => true,
            (true, true) => (self.rows, self.cols) == (o.rows, o.cols),
            _ => false,
        };
        self.elems == o.elems && self.threads == o.threads && same_walk
    }
}
impl Eq for CyclicMap {}

impl CyclicMap {
    pub(crate) fn new(shape: &[usize], threads: usize, col_major: bool) -> Self {
        let (rows, cols) = match shape {
            [r, c] => (*r, *c),
            [n] => (*n, 1),
            _ => (1, 1),
        };
        CyclicMap {
            elems: shape.iter().product(),
            threads,
            rows,
            cols,
            col_major: col_major && rows > 1 && cols > 1,
        }
    }

    fn slots(&self) -> usize {
        self.elems.div_ceil(self.threads).max(1)
    }

    fn has_tail(&self) -> bool {
        !self.elems.is_multiple_of(self.threads)
    }

    /// Walk position of `slot`.
    fn walk(&self, slot: &str) -> String {
        if self.slots() == 1 {
            "tid".into()
        } else {
            format!("(tid + {slot} * {})", self.threads)
        }
    }

    /// (position along the walk's fast axis, along its slow axis) of `slot`, split without
    /// a runtime division by the slot where the block's thread count allows.
    fn walk_coords(&self, slot: &str) -> (String, String) {
        let (t, fast_len) = (
            self.threads,
            if self.col_major { self.rows } else { self.cols },
        );
        if fast_len == 1 {
            return ("0".into(), self.walk(slot));
        }
        if self.slots() == 1 {
            return (format!("(tid % {fast_len})"), format!("(tid / {fast_len})"));
        }
        if t.is_multiple_of(fast_len) {
            return (
                format!("(tid % {fast_len})"),
                format!("(tid / {fast_len} + {slot} * {})", t / fast_len),
            );
        }
        if fast_len.is_multiple_of(t) {
            let per = fast_len / t;
            return (
                format!("(tid + ({slot} % {per}) * {t})"),
                format!("({slot} / {per})"),
            );
        }
        let w = self.walk(slot);
        (format!("({w} % {fast_len})"), format!("({w} / {fast_len})"))
    }

    fn coords(&self, slot: &str) -> (String, String) {
        let (fast, slow) = self.walk_coords(slot);
        if self.col_major {
            (fast, slow)
        } else {
            (slow, fast)
        }
    }

    fn flat(&self, slot: &str) -> String {
        if self.col_major {
            let (r, c) = self.coords(slot);
            format!("({r} * {} + {c})", self.cols)
        } else {
            self.walk(slot)
        }
    }

    fn index(&self, slot: &str) -> ElemIndex {
        if self.cols == 1 && !self.col_major {
            return ElemIndex::Flat(self.walk(slot));
        }
        let (row, col) = self.coords(slot);
        ElemIndex::Coords { row, col }
    }

    fn owned(&self, slot: &str) -> Option<String> {
        self.has_tail()
            .then(|| format!("{} < {}", self.walk(slot), self.elems))
    }
}

/// The `MmaMap` of an `Mma` layout's warp grid for an `[m, n]` tile (`n == 1`: its row
/// vector), on `warps` warps; a grid that does not multiply out to them is the row map.
fn mma_map(warps_per_cta: &[u32; 2], m: usize, n: usize, warps: usize) -> MmaMap {
    let [r, c] = warps_per_cta.map(|x| x.max(1) as usize);
    if r * c == warps {
        MmaMap::grid(m, n, r, c)
    } else {
        MmaMap::new(m, n, warps)
    }
}

/// The distribution of one tile value (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TileMap {
    Cyclic(CyclicMap),
    Mma(MmaMap),
}

impl TileMap {
    /// The row-major cyclic distribution.
    pub(crate) fn new(shape: &[usize], threads: usize) -> Self {
        TileMap::Cyclic(CyclicMap::new(shape, threads, false))
    }

    /// The distribution of a tile of `shape` with IR layout `layout`: `Mma` for rank-2 tiles
    /// and rank-1 `Slice(1, Mma)` row vectors, cyclic for everything else.
    pub(crate) fn for_layout(layout: &Layout, shape: &[usize], threads: usize) -> Self {
        let warps = threads / 32;
        match (layout, shape) {
            (Layout::Mma { warps_per_cta }, [m, n]) => {
                TileMap::Mma(mma_map(warps_per_cta, *m, *n, warps))
            }
            (Layout::Slice { dim: 1, parent }, [m]) => match **parent {
                Layout::Mma { warps_per_cta } => {
                    TileMap::Mma(mma_map(&warps_per_cta, *m, 1, warps))
                }
                _ => TileMap::new(shape, threads),
            },
            (Layout::Blocked(b), [_, _]) => {
                TileMap::Cyclic(CyclicMap::new(shape, threads, b.order.first() == Some(&0)))
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
            TileMap::Cyclic(c) => c.index(slot),
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

    /// Every element is owned by exactly one (thread, slot), and `index` and `flat` agree.
    #[test]
    fn cyclic_walks_cover_every_element_once() {
        for (shape, threads, col_major) in [
            (vec![128, 64], 128, true),
            (vec![64, 128], 128, false),
            (vec![3, 5], 32, true),
            (vec![16, 256], 64, false),
            (vec![200], 64, false),
            (vec![48, 24], 64, true),
        ] {
            let m = CyclicMap::new(&shape, threads, col_major);
            let cols = if shape.len() == 2 { shape[1] } else { 1 };
            let mut seen = vec![0; m.elems];
            for tid in 0..threads {
                for s in 0..m.slots() {
                    let eval = |e: &str| {
                        eval_expr(
                            &e.replace("tid", &tid.to_string())
                                .replace('s', &s.to_string()),
                        )
                    };
                    let w = eval(&m.walk("s"));
                    if w >= m.elems as i64 {
                        continue;
                    }
                    let (r, c) = m.coords("s");
                    let flat = eval(&r) * cols as i64 + eval(&c);
                    assert_eq!(flat, eval(&m.flat("s")), "{shape:?}");
                    seen[flat as usize] += 1;
                }
            }
            assert!(
                seen.iter().all(|&n| n == 1),
                "{shape:?} {col_major}: {seen:?}"
            );
        }
    }

    /// Evaluates the `+ - * / %` integer expressions the maps produce.
    fn eval_expr(e: &str) -> i64 {
        fn parse(t: &[char], i: &mut usize, prec: u8) -> i64 {
            let mut v = atom(t, i);
            loop {
                let op = match t.get(*i) {
                    Some(&c @ ('+' | '-')) if prec == 0 => c,
                    Some(&c @ ('*' | '/' | '%')) => c,
                    _ => return v,
                };
                *i += 1;
                let rhs = if op == '+' || op == '-' {
                    parse(t, i, 1)
                } else {
                    atom(t, i)
                };
                v = match op {
                    '+' => v + rhs,
                    '-' => v - rhs,
                    '*' => v * rhs,
                    '/' => v / rhs,
                    _ => v % rhs,
                };
            }
        }
        fn atom(t: &[char], i: &mut usize) -> i64 {
            if t[*i] == '(' {
                *i += 1;
                let v = parse(t, i, 0);
                *i += 1;
                return v;
            }
            let start = *i;
            while *i < t.len() && t[*i].is_ascii_digit() {
                *i += 1;
            }
            t[start..*i]
                .iter()
                .collect::<String>()
                .parse()
                .expect("number")
        }
        let t: Vec<char> = e.chars().filter(|c| !c.is_whitespace()).collect();
        parse(&t, &mut 0, 0)
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
