//! Runtime values of the executor: every SSA value (scalar or tile) is a dense row-major
//! buffer of one of four element families. The shape and exact dtype are not stored here;
//! they come from the value's IR type, which the executor consults when it needs them.

use super::error::{malformed, Fault};

/// A global-memory address: which kernel argument, and an element offset into it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ptr {
    pub arg: u32,
    pub off: i64,
}

/// The elements of one value, row-major. Scalars have one element.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum TileData {
    /// bf16/f16/f32 values, each already rounded to its dtype.
    Float(Vec<f64>),
    /// i32/i64 values, each already wrapped to its width.
    Int(Vec<i64>),
    Bool(Vec<bool>),
    Ptr(Vec<Ptr>),
}

impl TileData {
    pub(crate) fn len(&self) -> usize {
        match self {
            TileData::Float(v) => v.len(),
            TileData::Int(v) => v.len(),
            TileData::Bool(v) => v.len(),
            TileData::Ptr(v) => v.len(),
        }
    }

    /// Family name for diagnostics.
    pub(crate) fn family(&self) -> &'static str {
        match self {
            TileData::Float(_) => "float",
            TileData::Int(_) => "integer",
            TileData::Bool(_) => "bool",
            TileData::Ptr(_) => "pointer",
        }
    }

    pub(crate) fn floats(&self) -> Result<&[f64], Fault> {
        match self {
            TileData::Float(v) => Ok(v),
            other => Err(malformed(format!(
                "expected a float value, got a {} value",
                other.family()
            ))),
        }
    }

    pub(crate) fn ints(&self) -> Result<&[i64], Fault> {
        match self {
            TileData::Int(v) => Ok(v),
            other => Err(malformed(format!(
                "expected an integer value, got a {} value",
                other.family()
            ))),
        }
    }

    pub(crate) fn bools(&self) -> Result<&[bool], Fault> {
        match self {
            TileData::Bool(v) => Ok(v),
            other => Err(malformed(format!(
                "expected a bool value, got a {} value",
                other.family()
            ))),
        }
    }

    pub(crate) fn ptrs(&self) -> Result<&[Ptr], Fault> {
        match self {
            TileData::Ptr(v) => Ok(v),
            other => Err(malformed(format!(
                "expected a pointer value, got a {} value",
                other.family()
            ))),
        }
    }

    /// The single element of a scalar bool (an `if`/`while` condition).
    pub(crate) fn scalar_bool(&self) -> Result<bool, Fault> {
        match self.bools()? {
            [b] => Ok(*b),
            v => Err(malformed(format!(
                "expected a scalar bool, got {} elements",
                v.len()
            ))),
        }
    }

    /// The single element of a scalar integer (loop bounds).
    pub(crate) fn scalar_int(&self) -> Result<i64, Fault> {
        match self.ints()? {
            [i] => Ok(*i),
            v => Err(malformed(format!(
                "expected a scalar integer, got {} elements",
                v.len()
            ))),
        }
    }

    /// A new value whose element `i` is `self[idx[i]]`: the one primitive behind splat,
    /// broadcast and transpose. `idx` must hold valid indices.
    pub(crate) fn gather(&self, idx: &[usize]) -> TileData {
        match self {
            TileData::Float(v) => TileData::Float(idx.iter().map(|&i| v[i]).collect()),
            TileData::Int(v) => TileData::Int(idx.iter().map(|&i| v[i]).collect()),
            TileData::Bool(v) => TileData::Bool(idx.iter().map(|&i| v[i]).collect()),
            TileData::Ptr(v) => TileData::Ptr(idx.iter().map(|&i| v[i]).collect()),
        }
    }
}

/// Checks that two operands of an elementwise op have the same number of elements.
pub(crate) fn same_len(a: usize, b: usize) -> Result<(), Fault> {
    if a == b {
        Ok(())
    } else {
        Err(malformed(format!(
            "elementwise operands differ in size: {a} vs {b} elements"
        )))
    }
}
