//! The `Mma` distribution: a tile `[m, n]` held as `mma.sync.m16n8k16` accumulator fragments.
//!
//! Rows are cut into 16-row slabs; warp `w` owns slabs `w, w + W, w + 2W, ...` (W warps) over
//! all `n` columns, cut into 8-column tiles. Within a slab, lane `(g, t) = (lane / 4, lane % 4)`
//! holds rows `g` and `g + 8` at columns `2t, 2t + 1` of every column tile, so slot
//! `s = (j · tiles_n + nt) · 4 + q` (slab `j` of the warp, column tile `nt`, fragment register
//! `q`) is row `16 · (w + jW) + g + 8 · (q >> 1)`, column `8 · nt + 2t + (q & 1)`: the four
//! slots of one `(j, nt)` are exactly the `float c[4]` operand of one `mma.sync`.
//!
//! A tile with one column (`n == 1`: a row vector `[m]` in `Slice(1, Mma)` or its unsqueezed
//! `[m, 1]`) is held by all four lanes of a quad: slot `s = 2j + h` is row
//! `16 · (w + jW) + g + 8h`. Row reductions of a fragment then end in the lanes that hold the
//! row, broadcasting a row vector back over the columns is a register read, and unsqueeze is
//! a copy. Elements past `m` rows or `n` columns (padding to 16 and 8) are unowned.
//!
//! Column split (`Mma { warps_per_cta: [1, W] }`, one 16-row slab): for small-M dots (decode
//! tiles of 16 rows under 4 warps) warp `w` owns the column block `[w · n/W, (w+1) · n/W)`
//! of the single slab instead, so every warp works; slot `s = nt · 4 + q` is column
//! `8 · (w · tiles_n + nt) + 2t + (q & 1)` with `tiles_n = n / (8W)`. Row vectors are then
//! replicated in every warp (and every lane of a quad); row reductions need a cross-warp step
//! (see `fragment_ops`), and only warp 0's first quad lane writes a row vector to memory.
//!
//! Warp grid (`Mma { warps_per_cta: [R, C] }`, both above 1): the two combined, for tiles
//! with fewer slabs than warps but more than one (MLA's 32 gathered heads on 4 warps). Warp
//! `w` is grid row `w % R` and grid column `w / R`: it owns slabs `w % R + jR` over column
//! block `w / R`. Columns are major so that, with `R = 4`, a grid column is one warpgroup:
//! warpgroup `c` holds all rows of column block `c`, which is what one `wgmma` per
//! warpgroup computes. A row vector is replicated over the `C` warps of a grid row; its
//! writer is the grid row's column-0 warp. `[W, 1]` and `[1, W]` are the two maps above.

/// Geometry of one tile in the `Mma` distribution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MmaMap {
    pub(crate) m: usize,
    pub(crate) n: usize,
    /// The warp grid: `row_warps × col_warps` warps. Warp `w` is grid row
    /// `w % row_warps` (it owns slabs `w % row_warps + j · row_warps`) and grid column
    /// `w / row_warps` (it owns that `n / col_warps`-wide column block).
    pub(crate) row_warps: usize,
    pub(crate) col_warps: usize,
    /// 16-row slabs of the tile, and per warp (rounded up).
    pub(crate) slabs: usize,
    pub(crate) slabs_per_warp: usize,
    /// 8-column tiles per warp (1 for row vectors).
    pub(crate) tiles_n: usize,
}

impl MmaMap {
    /// The row map: `warps` warps over the slabs, every warp over all columns.
    pub(crate) fn new(m: usize, n: usize, warps: usize) -> Self {
        Self::grid(m, n, warps.max(1), 1)
    }

    /// The column-split map of an `[m, n]` tile (`m <= 16`, `n` a multiple of `8 · warps`;
    /// the layout pass only chooses it then) or of its row vector (`n == 1`).
    #[cfg(test)]
    pub(crate) fn new_split(m: usize, n: usize, warps: usize) -> Self {
        Self::grid(m, n, 1, warps.max(1))
    }

    /// The map on a `row_warps × col_warps` warp grid (`n` a multiple of `8 · col_warps`
    /// when `col_warps > 1`, or a row vector).
    pub(crate) fn grid(m: usize, n: usize, row_warps: usize, col_warps: usize) -> Self {
        let (row_warps, col_warps) = (row_warps.max(1), col_warps.max(1));
        let slabs = m.div_ceil(16).max(1);
        let tiles_n = if n == 1 {
            1
        } else if col_warps > 1 {
            (n / (8 * col_warps)).max(1)
        } else {
            n.div_ceil(8).max(1)
        };
        MmaMap {
            m,
            n,
            row_warps,
            col_warps,
            slabs,
            slabs_per_warp: slabs.div_ceil(row_warps),
            tiles_n,
        }
    }

    /// Whether warps split the columns (`col_warps > 1`): row vectors are then replicated
    /// over a grid row's warps and row reductions need a cross-warp step.
    pub(crate) fn col_split(&self) -> bool {
        self.col_warps > 1
    }

    /// This warp's grid row (an expression).
    pub(crate) fn warp_row(&self) -> String {
        match (self.row_warps, self.col_warps) {
            (_, 1) => "attn_warp".into(),
            (1, _) => "0".into(),
            (rw, _) => format!("(attn_warp % {rw})"),
        }
    }

    /// This warp's grid column (an expression).
    pub(crate) fn warp_col(&self) -> String {
        match (self.row_warps, self.col_warps) {
            (_, 1) => "0".into(),
            (1, _) => "attn_warp".into(),
            (rw, _) => format!("(attn_warp / {rw})"),
        }
    }

    /// Whether some warps own slot groups past the last slab (their `slab` must be guarded).
    pub(crate) fn ragged_slabs(&self) -> bool {
        !self.slabs.is_multiple_of(self.row_warps)
    }

    /// Whether `other` distributes rows and columns over the same warp grid.
    pub(crate) fn same_grid(&self, other: &MmaMap) -> bool {
        (self.row_warps, self.col_warps) == (other.row_warps, other.col_warps)
    }

    /// Whether this is a quad-replicated row vector (one column).
    pub(crate) fn is_rows(&self) -> bool {
        self.n == 1
    }

    /// Slots per fragment row group: 4 registers per (slab, column tile), or 2 rows per slab.
    fn per_slab(&self) -> usize {
        if self.is_rows() {
            2
        } else {
            4 * self.tiles_n
        }
    }

    pub(crate) fn slots(&self) -> usize {
        self.slabs_per_warp * self.per_slab()
    }

    /// The warp's slab index of slab slot group `j` (an expression).
    pub(crate) fn slab(&self, j: &str) -> String {
        self.slab_of(&self.warp_row(), j)
    }

    /// The slab index of slab slot group `j` of the warp in grid row `warp_row` (an
    /// expression: another warp's, e.g. the first warp of a warpgroup).
    pub(crate) fn slab_of(&self, warp_row: &str, j: &str) -> String {
        if self.slabs_per_warp == 1 {
            warp_row.to_string()
        } else {
            format!("({warp_row} + {j} * {})", self.row_warps)
        }
    }

    /// Row of `slot` (an expression).
    pub(crate) fn row(&self, slot: &str) -> String {
        let j = format!("({slot} / {})", self.per_slab());
        let half = if self.is_rows() {
            format!("({slot} & 1)")
        } else {
            format!("(({slot} >> 1) & 1)")
        };
        format!("({} * 16 + attn_g + {half} * 8)", self.slab(&j))
    }

    /// Column of `slot` (an expression; `0` for row vectors).
    pub(crate) fn col(&self, slot: &str) -> String {
        if self.is_rows() {
            return "0".into();
        }
        if self.col_split() {
            return format!(
                "(({wc} * {tn} + ({slot} / 4) % {tn}) * 8 + 2 * attn_t4 + ({slot} & 1))",
                wc = self.warp_col(),
                tn = self.tiles_n
            );
        }
        if self.tiles_n == 1 {
            format!("(2 * attn_t4 + ({slot} & 1))")
        } else {
            format!(
                "((({slot} / 4) % {}) * 8 + 2 * attn_t4 + ({slot} & 1))",
                self.tiles_n
            )
        }
    }

    pub(crate) fn flat(&self, slot: &str) -> String {
        if self.is_rows() {
            self.row(slot)
        } else {
            format!("({} * {} + {})", self.row(slot), self.n, self.col(slot))
        }
    }

    fn rows_exact(&self) -> bool {
        self.m == self.slabs_per_warp * self.row_warps * 16
    }

    fn cols_exact(&self) -> bool {
        self.is_rows() || self.n == self.tiles_n * 8 * self.col_warps
    }

    /// The global 8-column tile of this warp's column tile `nt` (an expression).
    pub(crate) fn col_tile(&self, nt: &str) -> String {
        if self.col_split() {
            format!("({} * {} + {nt})", self.warp_col(), self.tiles_n)
        } else {
            nt.to_string()
        }
    }

    /// Whether each lane's slot pairs `(2i, 2i + 1)` are two adjacent columns (`2t`, `2t + 1`)
    /// of one row, both inside the tile: a fragment, not a row vector, with no column past
    /// `n`. Stores may then write a pair in one access.
    pub(crate) fn column_pairs(&self) -> bool {
        !self.is_rows() && self.cols_exact()
    }

    /// Whether every slot of every thread is a real element.
    pub(crate) fn always_in_range(&self) -> bool {
        self.rows_exact() && self.cols_exact()
    }

    /// Condition under which `slot` is a real element (`None`: always).
    pub(crate) fn owned(&self, slot: &str) -> Option<String> {
        let mut c = Vec::new();
        if !self.rows_exact() {
            c.push(format!("{} < {}", self.row(slot), self.m));
        }
        if !self.cols_exact() {
            c.push(format!("{} < {}", self.col(slot), self.n));
        }
        (!c.is_empty()).then(|| c.join(" && "))
    }

    /// Condition under which `slot`'s column is inside the tile (`None`: always).
    pub(crate) fn col_guard(&self, slot: &str) -> Option<String> {
        (!self.cols_exact()).then(|| format!("{} < {}", self.col(slot), self.n))
    }

    /// Condition under which this lane writes `slot` to memory: owned, and for row vectors
    /// only the first lane of the quad.
    pub(crate) fn writer(&self, slot: &str) -> Option<String> {
        let mut c: Vec<String> = self.owned(slot).into_iter().collect();
        if self.is_rows() {
            c.push("attn_t4 == 0".into());
            if self.col_split() {
                c.push(format!("{} == 0", self.warp_col()));
            }
        }
        (!c.is_empty()).then(|| c.join(" && "))
    }

    /// The slot of the row vector (`n == 1` map with the same rows) holding the row of
    /// fragment slot `slot` of this map.
    pub(crate) fn row_slot_of(&self, slot: &str) -> String {
        format!("(({slot} / {}) * 2 + (({slot} >> 1) & 1))", self.per_slab())
    }

    /// Whether `rows` is the row vector of this fragment's rows (same rows, same warps).
    pub(crate) fn has_row_vector(&self, rows: &MmaMap) -> bool {
        rows.is_rows() && !self.is_rows() && rows.m == self.m && rows.same_grid(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Evaluates `map` for every (warp, lane, slot) of its grid and checks that the owned
    /// slots cover every element exactly once (fragments), or each row once per lane of every
    /// quad of the grid row's `C` warps (row vectors).
    fn coverage(map: MmaMap) {
        let (m, n, rw, cw) = (map.m, map.n, map.row_warps, map.col_warps);
        let mut seen = vec![0usize; m * n];
        for warp in 0..rw * cw {
            let (wr, wc) = (warp % rw, warp / rw);
            for lane in 0..32 {
                let (g, t) = (lane / 4, lane % 4);
                for s in 0..map.slots() {
                    let slab = wr + (s / map.per_slab()) * rw;
                    let (row, col) = if map.is_rows() {
                        (slab * 16 + g + (s & 1) * 8, 0)
                    } else {
                        let nt = wc * map.tiles_n + (s / 4) % map.tiles_n;
                        (slab * 16 + g + ((s >> 1) & 1) * 8, nt * 8 + 2 * t + (s & 1))
                    };
                    if row < m && col < n {
                        seen[row * n + col] += 1;
                    }
                }
            }
        }
        let want = if map.is_rows() { 4 * cw } else { 1 };
        assert!(
            seen.iter().all(|&c| c == want),
            "{m}x{n}/{rw}x{cw}: {seen:?}"
        );
    }

    #[test]
    fn every_element_has_its_owners() {
        for (m, n, w) in [
            (64, 64, 4),
            (16, 32, 4),
            (64, 1, 4),
            (70, 50, 4),
            (8, 4, 2),
            (128, 8, 4),
            (48, 24, 2),
            (33, 1, 2),
        ] {
            coverage(MmaMap::new(m, n, w));
        }
    }

    /// The column-split map: every element of a 16-row tile exactly once over the warps, and
    /// a row vector in all four lanes of every quad of every warp.
    #[test]
    fn column_split_covers_every_element() {
        for (m, n, warps) in [
            (16, 32, 4),
            (16, 512, 4),
            (8, 64, 2),
            (16, 1, 4),
            (10, 1, 2),
        ] {
            coverage(MmaMap::new_split(m, n, warps));
        }
        let f = MmaMap::new_split(16, 64, 4);
        assert_eq!((f.slots(), f.owned("s")), (8, None));
        assert!(f.col("s").contains("attn_warp * 2"));
        let r = MmaMap::new_split(16, 1, 4);
        assert!(f.has_row_vector(&r) && !f.has_row_vector(&MmaMap::new(16, 1, 4)));
        assert_eq!(
            r.writer("s").as_deref(),
            Some("attn_t4 == 0 && attn_warp == 0")
        );
    }

    /// The grid map: every element exactly once, every row-vector row in the four lanes of
    /// every quad of the `C` warps of its grid row.
    #[test]
    fn warp_grid_covers_every_element() {
        for (m, n, rw, cw) in [
            (32, 32, 2, 2),
            (32, 512, 2, 2),
            (64, 64, 4, 2),
            (48, 16, 2, 2),
        ] {
            for cols in [n, 1] {
                coverage(MmaMap::grid(m, cols, rw, cw));
            }
        }
        let f = MmaMap::grid(32, 512, 2, 2);
        assert_eq!(
            (f.slots(), f.owned("s"), f.ragged_slabs()),
            (128, None, false)
        );
        assert!(f.col("s").contains("(attn_warp / 2) * 32"));
        assert_eq!(f.slab("j"), "(attn_warp % 2)");
        let r = MmaMap::grid(32, 1, 2, 2);
        assert!(f.has_row_vector(&r) && !f.has_row_vector(&MmaMap::new_split(32, 1, 4)));
        assert_eq!(
            r.writer("s").as_deref(),
            Some("attn_t4 == 0 && (attn_warp / 2) == 0")
        );
        assert!(MmaMap::grid(48, 16, 2, 2).ragged_slabs());
    }

    #[test]
    fn expressions_and_guards() {
        let f = MmaMap::new(64, 64, 4);
        assert_eq!(f.slots(), 32);
        assert_eq!(f.owned("s"), None);
        assert_eq!(
            f.flat("s"),
            "((attn_warp * 16 + attn_g + ((s >> 1) & 1) * 8) * 64 + (((s / 4) % 8) * 8 + 2 * attn_t4 + (s & 1)))"
        );
        let r = MmaMap::new(64, 1, 4);
        assert_eq!(r.slots(), 2);
        assert_eq!(r.writer("s").as_deref(), Some("attn_t4 == 0"));
        assert!(f.has_row_vector(&r));
        let tail = MmaMap::new(70, 50, 4);
        assert_eq!(tail.slabs_per_warp, 2);
        assert!(tail
            .owned("s")
            .is_some_and(|c| c.contains("< 70") && c.contains("< 50")));
    }
}
