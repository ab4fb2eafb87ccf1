//! The CPU [`Backend`]: the typed argument struct of a kernel made by `instantiate!` borrows
//! host slices (`&[T]` for `*const T`, `&mut [T]` for `*mut T`), so the same struct that
//! launches on a GPU runs on the executor.

use super::host_slice::{HostSlice, HostSliceMut};
use crate::kernel::{Backend, DslType, ScalarArg};

/// Marker type of the CPU executor backend.
#[derive(Clone, Copy, Debug, Default)]
pub struct Cpu;

/// One marshalled kernel argument for the CPU executor.
#[derive(Debug)]
pub enum CpuArg<'a> {
    /// A `*const T` parameter.
    In(HostSlice<'a>),
    /// A `*mut T` parameter.
    Out(HostSliceMut<'a>),
    /// A by-value parameter.
    Scalar(ScalarArg),
    /// A slice of a `DslType` that is not one of the six DSL types; rejected by `run`
    /// (the `Backend` methods cannot fail, so the error waits until then).
    Unsupported { type_name: &'static str },
}

impl Backend for Cpu {
    type In<'a, T: DslType> = &'a [T];
    type Out<'a, T: DslType> = &'a mut [T];
    type Arg<'a> = CpuArg<'a>;

    fn input<'a, T: DslType>(p: Self::In<'a, T>) -> CpuArg<'a> {
        HostSlice::of(p).map_or(
            CpuArg::Unsupported {
                type_name: std::any::type_name::<T>(),
            },
            CpuArg::In,
        )
    }

    fn output<'a, T: DslType>(p: Self::Out<'a, T>) -> CpuArg<'a> {
        HostSliceMut::of(p).map_or(
            CpuArg::Unsupported {
                type_name: std::any::type_name::<T>(),
            },
            CpuArg::Out,
        )
    }

    fn scalar<'a>(v: ScalarArg) -> CpuArg<'a> {
        CpuArg::Scalar(v)
    }
}

impl CpuArg<'_> {
    /// What this argument is, for mismatch messages (`*const bf16`, `i32 scalar`).
    pub fn describe(&self) -> String {
        match self {
            CpuArg::In(s) => format!("*const {} buffer", s.dtype()),
            CpuArg::Out(s) => format!("*mut {} buffer", s.dtype()),
            CpuArg::Scalar(v) => format!("{} scalar", scalar_arg_name(v)),
            CpuArg::Unsupported { type_name } => {
                format!("buffer of unsupported type `{type_name}`")
            }
        }
    }
}

fn scalar_arg_name(v: &ScalarArg) -> &'static str {
    match v {
        ScalarArg::I32(_) => "i32",
        ScalarArg::I64(_) => "i64",
        ScalarArg::F32(_) => "f32",
        ScalarArg::Bool(_) => "bool",
    }
}
