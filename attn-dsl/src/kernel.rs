//! What `instantiate!` produces, and how typed arguments reach a backend.
//!
//! A specialization is a zero-sized type implementing [`Kernel`]: static metadata
//! ([`KernelInfo`]: CUDA source, printed IR, content hash, parameters) plus a typed
//! argument struct generic over a [`Backend`]. The CUDA runtime and the CPU executor are
//! two backends of the same argument struct, so a test launches one kernel on both.

use crate::ir::ScalarType;

/// Rust element types that map to a DSL scalar type.
pub trait DslType: Copy + Send + Sync + 'static {
    const TYPE: ScalarType;
}

impl DslType for half::bf16 {
    const TYPE: ScalarType = ScalarType::Bf16;
}
impl DslType for half::f16 {
    const TYPE: ScalarType = ScalarType::F16;
}
impl DslType for f32 {
    const TYPE: ScalarType = ScalarType::F32;
}
impl DslType for i32 {
    const TYPE: ScalarType = ScalarType::I32;
}
impl DslType for i64 {
    const TYPE: ScalarType = ScalarType::I64;
}
impl DslType for bool {
    const TYPE: ScalarType = ScalarType::Bool;
}

/// A scalar kernel argument passed by value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ScalarArg {
    I32(i32),
    I64(i64),
    F32(f32),
    Bool(bool),
}

/// Where kernel arguments live: device memory (CUDA runtime) or host buffers (CPU executor).
pub trait Backend {
    /// A read-only buffer of `T` (a kernel `*const T` parameter).
    type In<'a, T: DslType>;
    /// A writable buffer of `T` (a kernel `*mut T` parameter).
    type Out<'a, T: DslType>;
    /// One marshalled argument.
    type Arg<'a>;
    fn input<'a, T: DslType>(p: Self::In<'a, T>) -> Self::Arg<'a>;
    fn output<'a, T: DslType>(p: Self::Out<'a, T>) -> Self::Arg<'a>;
    fn scalar<'a>(v: ScalarArg) -> Self::Arg<'a>;
}

/// How a runtime parameter is passed, in `'static` form for generated metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamInfo {
    Ptr {
        name: &'static str,
        elem: ScalarType,
        mutable: bool,
    },
    Scalar {
        name: &'static str,
        ty: ScalarType,
    },
}

/// Everything known about one specialization at compile time.
#[derive(Clone, Copy, Debug)]
pub struct KernelInfo {
    /// Kernel name as written in the DSL.
    pub kernel: &'static str,
    /// Specialization key: `kernel<NAME=value,...>`.
    pub key: &'static str,
    /// `extern "C"` entry point of `cuda_source`.
    pub entry: &'static str,
    pub cuda_source: &'static str,
    /// Content hash of the CUDA source + prelude + compiler version (hex).
    pub hash: &'static str,
    /// The specialized IR in its text form (parsable by `ir::parser`).
    pub ir_text: &'static str,
    pub params: &'static [ParamInfo],
    pub block_threads: u32,
    pub shared_bytes: u32,
}

/// A specialization produced by `instantiate!`.
pub trait Kernel {
    const INFO: KernelInfo;
    /// The typed argument struct (one field per runtime parameter, in order).
    type Args<'a, B: Backend>;
    /// Flattens typed arguments into launch order.
    fn marshal<'a, B: Backend>(args: Self::Args<'a, B>) -> Vec<B::Arg<'a>>;
}
