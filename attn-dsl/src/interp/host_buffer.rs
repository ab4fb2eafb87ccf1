//! Owned, dtype-tagged host buffers: the CPU counterpart of a device allocation, for
//! callers (tests, the CLI) that pick a dtype at run time rather than in Rust types.

use super::cpu_backend::CpuArg;
use super::host_slice::{HostSlice, HostSliceMut};
use crate::ir::ScalarType;
use half::{bf16, f16};

/// The value integer outputs are poisoned with (0xDEADBEEF as i32, sign-extended).
pub const INT_POISON: i64 = -0x2152_4111;

/// A typed vector of kernel elements.
#[derive(Clone, Debug, PartialEq)]
pub enum HostBuffer {
    Bf16(Vec<bf16>),
    F16(Vec<f16>),
    F32(Vec<f32>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    Bool(Vec<bool>),
}

impl HostBuffer {
    /// `len` zeros (false for bool) of `dtype`.
    pub fn zeros(dtype: ScalarType, len: usize) -> Self {
        Self::from_f64s(dtype, &vec![0.0; len])
    }

    /// Converts `values` to `dtype`: floats round to nearest even, integers truncate
    /// toward zero (saturating), bool tests `!= 0`. Handy for random test inputs.
    pub fn from_f64s(dtype: ScalarType, values: &[f64]) -> Self {
        let it = values.iter().copied();
        match dtype {
            ScalarType::Bf16 => HostBuffer::Bf16(it.map(bf16::from_f64).collect()),
            ScalarType::F16 => HostBuffer::F16(it.map(f16::from_f64).collect()),
            ScalarType::F32 => HostBuffer::F32(it.map(|x| x as f32).collect()),
            ScalarType::I32 => HostBuffer::I32(it.map(|x| x as i32).collect()),
            ScalarType::I64 => HostBuffer::I64(it.map(|x| x as i64).collect()),
            ScalarType::Bool => HostBuffer::Bool(it.map(|x| x != 0.0).collect()),
        }
    }

    pub fn dtype(&self) -> ScalarType {
        self.as_slice().dtype()
    }

    /// An output buffer before a kernel runs: NaN for floats, [`INT_POISON`] for integers,
    /// `true` for bools — so an element the kernel never writes shows up in a comparison.
    pub fn poisoned(dtype: ScalarType, len: usize) -> Self {
        match dtype {
            ScalarType::Bf16 => HostBuffer::Bf16(vec![bf16::NAN; len]),
            ScalarType::F16 => HostBuffer::F16(vec![f16::NAN; len]),
            ScalarType::F32 => HostBuffer::F32(vec![f32::NAN; len]),
            ScalarType::I32 => HostBuffer::I32(vec![INT_POISON as i32; len]),
            ScalarType::I64 => HostBuffer::I64(vec![INT_POISON; len]),
            ScalarType::Bool => HostBuffer::Bool(vec![true; len]),
        }
    }

    /// Size in bytes (bool as one byte).
    pub fn num_bytes(&self) -> usize {
        self.len() * self.dtype().size_bytes()
    }

    pub fn len(&self) -> usize {
        self.as_slice().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every element as `f64` (exact for all dtypes except `i64` beyond 2^53; bool → 0/1).
    pub fn to_f64s(&self) -> Vec<f64> {
        match self {
            HostBuffer::Bf16(v) => v.iter().map(|x| x.to_f64()).collect(),
            HostBuffer::F16(v) => v.iter().map(|x| x.to_f64()).collect(),
            HostBuffer::F32(v) => v.iter().map(|&x| x as f64).collect(),
            HostBuffer::I32(v) => v.iter().map(|&x| x as f64).collect(),
            HostBuffer::I64(v) => v.iter().map(|&x| x as f64).collect(),
            HostBuffer::Bool(v) => v.iter().map(|&x| x as u8 as f64).collect(),
        }
    }

    pub fn as_slice(&self) -> HostSlice<'_> {
        match self {
            HostBuffer::Bf16(v) => HostSlice::Bf16(v),
            HostBuffer::F16(v) => HostSlice::F16(v),
            HostBuffer::F32(v) => HostSlice::F32(v),
            HostBuffer::I32(v) => HostSlice::I32(v),
            HostBuffer::I64(v) => HostSlice::I64(v),
            HostBuffer::Bool(v) => HostSlice::Bool(v),
        }
    }

    pub fn as_mut_slice(&mut self) -> HostSliceMut<'_> {
        match self {
            HostBuffer::Bf16(v) => HostSliceMut::Bf16(v),
            HostBuffer::F16(v) => HostSliceMut::F16(v),
            HostBuffer::F32(v) => HostSliceMut::F32(v),
            HostBuffer::I32(v) => HostSliceMut::I32(v),
            HostBuffer::I64(v) => HostSliceMut::I64(v),
            HostBuffer::Bool(v) => HostSliceMut::Bool(v),
        }
    }

    /// This buffer as a `*const` kernel argument.
    pub fn arg_in(&self) -> CpuArg<'_> {
        CpuArg::In(self.as_slice())
    }

    /// This buffer as a `*mut` kernel argument.
    pub fn arg_out(&mut self) -> CpuArg<'_> {
        CpuArg::Out(self.as_mut_slice())
    }
}

macro_rules! from_vec {
    ($($t:ty => $v:ident),*) => {$(
        impl From<Vec<$t>> for HostBuffer {
            fn from(v: Vec<$t>) -> Self {
                HostBuffer::$v(v)
            }
        }
    )*};
}
from_vec!(bf16 => Bf16, f16 => F16, f32 => F32, i32 => I32, i64 => I64, bool => Bool);
