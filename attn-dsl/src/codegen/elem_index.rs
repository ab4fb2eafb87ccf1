//! Which element of a tile a recomputed expression is about: a row-major flat index (the
//! cyclic distribution knows only that) or a (row, column) pair (the `Mma` distribution knows
//! both directly). Carrying coordinates spares index tiles the `/` and `%` that would
//! otherwise recover them from the flat index of every fragment element.

/// One element of a tile of rank ≤ 2, as C++ expressions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ElemIndex {
    /// Row-major flat index.
    Flat(String),
    /// Row and column; rank-1 tiles use the row as their index and column `0`.
    Coords { row: String, col: String },
}

impl ElemIndex {
    /// The flat index into a tile of `shape`.
    pub(crate) fn flat(&self, shape: &[usize]) -> String {
        match self {
            ElemIndex::Flat(f) => f.clone(),
            ElemIndex::Coords { row, col } => match shape {
                [_, n] if *n != 1 && row == "0" => col.clone(),
                [_, n] if *n != 1 => format!("({row} * {n} + {col})"),
                _ => row.clone(),
            },
        }
    }

    /// (row, column) in a tile of `shape` (rank 1: the index and `0`).
    pub(crate) fn coords(&self, shape: &[usize]) -> (String, String) {
        match (self, shape) {
            (ElemIndex::Coords { row, col }, _) => (row.clone(), col.clone()),
            (ElemIndex::Flat(f), [_, 1]) | (ElemIndex::Flat(f), [_]) => (f.clone(), "0".into()),
            (ElemIndex::Flat(f), [_, n]) => (format!("({f} / {n})"), format!("({f} % {n})")),
            (ElemIndex::Flat(_), _) => ("0".into(), "0".into()),
        }
    }

    /// The element of the `[n]` operand of an unsqueeze (along `axis`) that this element of
    /// its `shape`d result copies.
    pub(crate) fn squeezed(&self, shape: &[usize], axis: usize) -> ElemIndex {
        let (row, col) = self.coords(shape);
        let index = if axis == 0 { col } else { row };
        ElemIndex::Coords {
            row: index,
            col: "0".into(),
        }
    }

    /// The element of a `src`-shaped tile that `broadcast` copies to this element of its
    /// `dst`-shaped result: size-1 source dims are pinned to 0.
    pub(crate) fn broadcast_source(&self, src: &[usize], dst: &[usize]) -> ElemIndex {
        if src.len() == 1 {
            let row = if src[0] == 1 {
                "0".into()
            } else {
                self.coords(dst).0
            };
            return ElemIndex::Coords {
                row,
                col: "0".into(),
            };
        }
        let (row, col) = self.coords(dst);
        ElemIndex::Coords {
            row: if src.first() == Some(&1) {
                "0".into()
            } else {
                row
            },
            col: if src.get(1) == Some(&1) {
                "0".into()
            } else {
                col
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_and_coordinates_agree() {
        let c = ElemIndex::Coords {
            row: "r".into(),
            col: "c".into(),
        };
        assert_eq!(c.flat(&[64, 32]), "(r * 32 + c)");
        assert_eq!(c.flat(&[64, 1]), "r");
        let f = ElemIndex::Flat("f".into());
        assert_eq!(f.coords(&[8, 4]), ("(f / 4)".into(), "(f % 4)".into()));
        assert_eq!(f.coords(&[8]), ("f".into(), "0".into()));
        // [1, 32] broadcast to [64, 32]: the column survives, the row is pinned.
        assert_eq!(c.broadcast_source(&[1, 32], &[64, 32]).flat(&[1, 32]), "c");
        assert_eq!(c.broadcast_source(&[64, 1], &[64, 32]).flat(&[64, 1]), "r");
        // unsqueeze(0) of [32] to [1, 32]: element (0, c) copies element c.
        assert_eq!(c.squeezed(&[1, 32], 0).flat(&[32]), "c");
        assert_eq!(c.squeezed(&[64, 1], 1).flat(&[64]), "r");
    }
}
