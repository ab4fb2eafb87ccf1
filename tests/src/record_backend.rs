//! A backend that records what `Kernel::marshal` hands it, to check argument order and kinds
//! without a GPU or the CPU executor.

use attn_dsl::ir::ScalarType;
use attn_dsl::kernel::{Backend, DslType, ScalarArg};

/// Buffers are host slices; each marshalled argument becomes a [`Recorded`] entry.
pub struct RecordBackend;

/// One marshalled argument: its kind, element type and, for buffers, the slice's address
/// and length (distinct per argument, so a swap is visible).
#[derive(Clone, Debug, PartialEq)]
pub enum Recorded {
    Input {
        elem: ScalarType,
        addr: usize,
        len: usize,
    },
    Output {
        elem: ScalarType,
        addr: usize,
        len: usize,
    },
    Scalar(ScalarArg),
}

impl Backend for RecordBackend {
    type In<'a, T: DslType> = &'a [T];
    type Out<'a, T: DslType> = &'a mut [T];
    type Arg<'a> = Recorded;

    fn input<'a, T: DslType>(p: Self::In<'a, T>) -> Self::Arg<'a> {
        Recorded::Input {
            elem: T::TYPE,
            addr: p.as_ptr() as usize,
            len: p.len(),
        }
    }
    fn output<'a, T: DslType>(p: Self::Out<'a, T>) -> Self::Arg<'a> {
        Recorded::Output {
            elem: T::TYPE,
            addr: p.as_ptr() as usize,
            len: p.len(),
        }
    }
    fn scalar<'a>(v: ScalarArg) -> Self::Arg<'a> {
        Recorded::Scalar(v)
    }
}
