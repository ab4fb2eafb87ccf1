//! The IR: SSA values, structured control flow (`For`/`If`/`While` with regions), ops in an
//! arena with source locations in a side field. Built only through [`Builder`], which
//! type-checks as it goes; [`Function`] is what the passes, the CPU executor and the CUDA
//! emitter consume.

pub mod builder;
pub mod function;
pub mod ops;
pub mod parser;
pub mod printer;
pub mod types;
pub mod verify;

pub use builder::{Builder, IrError, IrResult};
pub use function::{
    Block, Function, Loc, Op, OpId, Param, ParamKind, ScheduleChoice, ValueData, ValueId,
};
pub use ops::{BinaryOp, CmpPred, OpKind, ReduceKind, Scalar, UnaryOp};
pub use types::{BlockedLayout, Elem, Layout, ScalarType, Type};
