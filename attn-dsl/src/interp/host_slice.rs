//! Borrowed, dtype-tagged views of host memory: what a kernel argument points to while
//! the executor runs. Element access converts to the executor's value families
//! (`f64`/`i64`/`bool`) and back, exactly (values are already rounded to the dtype).

use super::HostBuffer;
use crate::ir::ScalarType;
use crate::kernel::DslType;
use half::{bf16, f16};
use std::any::TypeId;

/// A read-only typed view of host memory (a `*const T` kernel argument).
#[derive(Clone, Copy, Debug)]
pub enum HostSlice<'a> {
    Bf16(&'a [bf16]),
    F16(&'a [f16]),
    F32(&'a [f32]),
    I32(&'a [i32]),
    I64(&'a [i64]),
    Bool(&'a [bool]),
}

/// A writable typed view of host memory (a `*mut T` kernel argument).
#[derive(Debug)]
pub enum HostSliceMut<'a> {
    Bf16(&'a mut [bf16]),
    F16(&'a mut [f16]),
    F32(&'a mut [f32]),
    I32(&'a mut [i32]),
    I64(&'a mut [i64]),
    Bool(&'a mut [bool]),
}

/// Reinterprets `&[T]` as `&[U]` when they are the same type. This is how a generic
/// `T: DslType` slice becomes a tagged view without extending the `DslType` contract.
fn same_type_slice<T: 'static, U: 'static>(s: &[T]) -> Option<&[U]> {
    if TypeId::of::<T>() != TypeId::of::<U>() {
        return None;
    }
    // SAFETY: T and U are the same type (equal TypeIds), so the pointer, length, layout
    // and validity invariants of the slice carry over unchanged; the lifetime is kept.
    Some(unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<U>(), s.len()) })
}

fn same_type_slice_mut<T: 'static, U: 'static>(s: &mut [T]) -> Option<&mut [U]> {
    if TypeId::of::<T>() != TypeId::of::<U>() {
        return None;
    }
    // SAFETY: as in `same_type_slice`; the unique borrow moves into the result.
    Some(unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr().cast::<U>(), s.len()) })
}

impl<'a> HostSlice<'a> {
    /// Tags a typed slice; `None` for a `DslType` that is not one of the six DSL types.
    pub fn of<T: DslType>(s: &'a [T]) -> Option<Self> {
        Some(match T::TYPE {
            ScalarType::Bf16 => HostSlice::Bf16(same_type_slice(s)?),
            ScalarType::F16 => HostSlice::F16(same_type_slice(s)?),
            ScalarType::F32 => HostSlice::F32(same_type_slice(s)?),
            ScalarType::I32 => HostSlice::I32(same_type_slice(s)?),
            ScalarType::I64 => HostSlice::I64(same_type_slice(s)?),
            ScalarType::Bool => HostSlice::Bool(same_type_slice(s)?),
        })
    }

    pub fn dtype(&self) -> ScalarType {
        match self {
            HostSlice::Bf16(_) => ScalarType::Bf16,
            HostSlice::F16(_) => ScalarType::F16,
            HostSlice::F32(_) => ScalarType::F32,
            HostSlice::I32(_) => ScalarType::I32,
            HostSlice::I64(_) => ScalarType::I64,
            HostSlice::Bool(_) => ScalarType::Bool,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            HostSlice::Bf16(s) => s.len(),
            HostSlice::F16(s) => s.len(),
            HostSlice::F32(s) => s.len(),
            HostSlice::I32(s) => s.len(),
            HostSlice::I64(s) => s.len(),
            HostSlice::Bool(s) => s.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `i` of a float buffer (`None` for other dtypes or `i` out of range).
    pub(crate) fn float(&self, i: usize) -> Option<f64> {
        match self {
            // bf16 is the top half of an f32: widen by shifting (exact, and much cheaper
            // than `half`'s generic path in debug builds).
            HostSlice::Bf16(s) => s
                .get(i)
                .map(|x| f32::from_bits((x.to_bits() as u32) << 16) as f64),
            HostSlice::F16(s) => s.get(i).map(|x| x.to_f64()),
            HostSlice::F32(s) => s.get(i).map(|&x| x as f64),
            _ => None,
        }
    }

    pub(crate) fn int(&self, i: usize) -> Option<i64> {
        match self {
            HostSlice::I32(s) => s.get(i).map(|&x| x as i64),
            HostSlice::I64(s) => s.get(i).copied(),
            _ => None,
        }
    }

    pub(crate) fn bool(&self, i: usize) -> Option<bool> {
        match self {
            HostSlice::Bool(s) => s.get(i).copied(),
            _ => None,
        }
    }
}

impl HostSlice<'_> {
    /// An owned copy (a launcher that runs the kernel elsewhere takes its inputs so).
    pub fn to_buffer(&self) -> HostBuffer {
        match *self {
            HostSlice::Bf16(s) => HostBuffer::Bf16(s.to_vec()),
            HostSlice::F16(s) => HostBuffer::F16(s.to_vec()),
            HostSlice::F32(s) => HostBuffer::F32(s.to_vec()),
            HostSlice::I32(s) => HostBuffer::I32(s.to_vec()),
            HostSlice::I64(s) => HostBuffer::I64(s.to_vec()),
            HostSlice::Bool(s) => HostBuffer::Bool(s.to_vec()),
        }
    }
}

impl<'a> HostSliceMut<'a> {
    /// Overwrites the view with `b`'s elements; `false` (nothing written) when the dtype or
    /// the length differ.
    pub fn copy_from(&mut self, b: &HostBuffer) -> bool {
        match (self, b) {
            (HostSliceMut::Bf16(d), HostBuffer::Bf16(s)) if d.len() == s.len() => {
                d.copy_from_slice(s)
            }
            (HostSliceMut::F16(d), HostBuffer::F16(s)) if d.len() == s.len() => {
                d.copy_from_slice(s)
            }
            (HostSliceMut::F32(d), HostBuffer::F32(s)) if d.len() == s.len() => {
                d.copy_from_slice(s)
            }
            (HostSliceMut::I32(d), HostBuffer::I32(s)) if d.len() == s.len() => {
                d.copy_from_slice(s)
            }
            (HostSliceMut::I64(d), HostBuffer::I64(s)) if d.len() == s.len() => {
                d.copy_from_slice(s)
            }
            (HostSliceMut::Bool(d), HostBuffer::Bool(s)) if d.len() == s.len() => {
                d.copy_from_slice(s)
            }
            _ => return false,
        }
        true
    }

    /// Tags a typed slice; `None` for a `DslType` that is not one of the six DSL types.
    pub fn of<T: DslType>(s: &'a mut [T]) -> Option<Self> {
        Some(match T::TYPE {
            ScalarType::Bf16 => HostSliceMut::Bf16(same_type_slice_mut(s)?),
            ScalarType::F16 => HostSliceMut::F16(same_type_slice_mut(s)?),
            ScalarType::F32 => HostSliceMut::F32(same_type_slice_mut(s)?),
            ScalarType::I32 => HostSliceMut::I32(same_type_slice_mut(s)?),
            ScalarType::I64 => HostSliceMut::I64(same_type_slice_mut(s)?),
            ScalarType::Bool => HostSliceMut::Bool(same_type_slice_mut(s)?),
        })
    }

    /// A read-only view of the same memory (loads from an output argument).
    pub fn as_slice(&self) -> HostSlice<'_> {
        match self {
            HostSliceMut::Bf16(s) => HostSlice::Bf16(s),
            HostSliceMut::F16(s) => HostSlice::F16(s),
            HostSliceMut::F32(s) => HostSlice::F32(s),
            HostSliceMut::I32(s) => HostSlice::I32(s),
            HostSliceMut::I64(s) => HostSlice::I64(s),
            HostSliceMut::Bool(s) => HostSlice::Bool(s),
        }
    }

    pub fn dtype(&self) -> ScalarType {
        self.as_slice().dtype()
    }

    pub fn len(&self) -> usize {
        self.as_slice().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes a float (already rounded to the buffer's dtype, so the narrowing is exact).
    /// Returns `false` for a non-float buffer or `i` out of range.
    pub(crate) fn set_float(&mut self, i: usize, v: f64) -> bool {
        match self {
            HostSliceMut::Bf16(s) => s.get_mut(i).map(|x| *x = bf16::from_f64(v)).is_some(),
            HostSliceMut::F16(s) => s.get_mut(i).map(|x| *x = f16::from_f64(v)).is_some(),
            HostSliceMut::F32(s) => s.get_mut(i).map(|x| *x = v as f32).is_some(),
            _ => false,
        }
    }

    pub(crate) fn set_int(&mut self, i: usize, v: i64) -> bool {
        match self {
            HostSliceMut::I32(s) => s.get_mut(i).map(|x| *x = v as i32).is_some(),
            HostSliceMut::I64(s) => s.get_mut(i).map(|x| *x = v).is_some(),
            _ => false,
        }
    }

    pub(crate) fn set_bool(&mut self, i: usize, v: bool) -> bool {
        match self {
            HostSliceMut::Bool(s) => s.get_mut(i).map(|x| *x = v).is_some(),
            _ => false,
        }
    }
}
