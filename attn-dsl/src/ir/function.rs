//! Arena-allocated kernel functions: values and ops live in vectors, blocks hold op ids,
//! source locations sit beside each op so diagnostics and emitted CUDA name the DSL line.

use super::ops::OpKind;
use super::types::{ScalarType, Type};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(pub u32);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId(pub u32);

/// A DSL source position (1-based line and column; 0 = unknown).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Loc {
    pub line: u32,
    pub col: u32,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ValueData {
    pub ty: Type,
    /// The DSL variable this value came from, for readable IR and CUDA.
    pub name: Option<String>,
}

/// A straight-line list of ops with block arguments (loop variables, induction var).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Block {
    pub args: Vec<ValueId>,
    pub ops: Vec<OpId>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Op {
    pub kind: OpKind,
    pub operands: Vec<ValueId>,
    pub results: Vec<ValueId>,
    pub regions: Vec<Block>,
    pub loc: Loc,
}

/// How a runtime kernel parameter is passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ParamKind {
    /// Pointer to global memory; `mutable` when the kernel may store through it.
    Ptr { elem: ScalarType, mutable: bool },
    /// A scalar passed by value.
    Scalar(ScalarType),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    pub name: String,
    pub kind: ParamKind,
    /// The entry-block argument carrying this parameter.
    pub value: ValueId,
}

/// A specialized kernel: runtime parameters, body, and launch metadata.
#[derive(Clone, Debug, PartialEq)]
pub struct Function {
    pub name: String,
    pub params: Vec<Param>,
    pub values: Vec<ValueData>,
    pub ops: Vec<Op>,
    /// Entry block; its args are the params' values, it ends in `Return`.
    pub body: Block,
    /// Threads per program = 32 · num_warps.
    pub num_warps: u32,
    /// Integer parameters the caller promises are multiples of a power of two (name,
    /// divisor): part of the specialization, like Triton's `tt.divisibility`, so strides
    /// can prove 16-byte aligned rows; the launcher checks the promise (see
    /// [`crate::passes::assume::divisible`]).
    pub assumed_divisible: Vec<(String, u64)>,
    /// 64-bit integer parameters the caller promises lie in `int`'s range (see
    /// [`crate::passes::assume::fits_i32`]): a product with a sign-extended `int` is then
    /// one 32 × 32 → 64-bit multiply. The launcher checks the promise.
    pub assumed_i32: Vec<String>,
    /// Contractible f32 arithmetic and hardware `exp` in CUDA (the kernel's `fast_math`).
    pub fast_math: bool,
    /// Buffers of each software-pipelined copy ring (the kernel's `num_stages`): the
    /// pipeliner issues a loop's copies `num_stages - 1` iterations ahead.
    pub num_stages: u32,
    /// Tiles move as TMA boxes on sm_90a (the kernel's `tma` attribute, resolved per
    /// specialization; `ATTN_CODEGEN_ENABLE=tma` forces it for every kernel).
    pub tma_copies: bool,
    /// A producer warpgroup takes the pipelined loop's copies on warpgroup targets (the
    /// kernel's `warp_specialize` attribute).
    pub warp_specialize: ScheduleChoice,
    /// A two-warpgroup program's warpgroups take turns issuing their MMAs on warpgroup
    /// targets (the kernel's `pingpong` attribute).
    pub pingpong: ScheduleChoice,
    /// The launcher targets Hopper's warpgroup MMAs (sm_90a): dots over whole warpgroups
    /// get swizzled operand allocs, A read from shared memory, and a `wgmma` path beside
    /// their `mma.sync` one (a code-generation target, set after specialization like the
    /// divisibility promises; part of the source, so of every cache key).
    pub warpgroup_mma: bool,
}

/// How a kernel attribute settles a schedule the compiler could choose itself
/// (`warp_specialize`, `pingpong`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ScheduleChoice {
    /// The attribute is absent: the compiler applies the schedule where it can.
    #[default]
    Auto,
    /// `= true`: the schedule is required on warpgroup targets; a program it cannot take
    /// fails to compile, saying why (other targets have no such schedule).
    Required,
    /// `= false`: never.
    Off,
}

impl ScheduleChoice {
    /// Whether the compiler may apply the schedule.
    pub fn allowed(self) -> bool {
        self != ScheduleChoice::Off
    }
}

impl Function {
    pub fn new(name: impl Into<String>, num_warps: u32) -> Self {
        Function {
            name: name.into(),
            params: vec![],
            values: vec![],
            ops: vec![],
            body: Block::default(),
            num_warps,
            assumed_divisible: Vec::new(),
            assumed_i32: Vec::new(),
            fast_math: false,
            num_stages: 2,
            tma_copies: false,
            warp_specialize: ScheduleChoice::Auto,
            pingpong: ScheduleChoice::Auto,
            warpgroup_mma: false,
        }
    }
    pub fn value(&self, v: ValueId) -> &ValueData {
        &self.values[v.0 as usize]
    }
    pub fn ty(&self, v: ValueId) -> &Type {
        &self.values[v.0 as usize].ty
    }
    pub fn op(&self, o: OpId) -> &Op {
        &self.ops[o.0 as usize]
    }
    pub fn op_mut(&mut self, o: OpId) -> &mut Op {
        &mut self.ops[o.0 as usize]
    }
    pub fn new_value(&mut self, ty: Type, name: Option<String>) -> ValueId {
        self.values.push(ValueData { ty, name });
        ValueId(self.values.len() as u32 - 1)
    }
    /// Adds a runtime parameter as a new entry-block argument.
    pub fn add_param(&mut self, name: &str, kind: ParamKind) -> ValueId {
        let ty = match kind {
            ParamKind::Ptr { elem, .. } => Type::ptr(elem),
            ParamKind::Scalar(s) => Type::scalar(s),
        };
        let v = self.new_value(ty, Some(name.to_string()));
        self.body.args.push(v);
        self.params.push(Param {
            name: name.to_string(),
            kind,
            value: v,
        });
        v
    }
    /// Appends a detached op to the arena (not yet in any block) and returns its id.
    pub fn push_op(&mut self, op: Op) -> OpId {
        self.ops.push(op);
        OpId(self.ops.len() as u32 - 1)
    }
    /// How many operands (of ops and terminators reachable from the body) read each value.
    pub fn use_counts(&self) -> Vec<u32> {
        let mut uses = vec![0u32; self.values.len()];
        self.walk(&mut |_, op| {
            for v in &op.operands {
                uses[v.0 as usize] += 1;
            }
        });
        uses
    }
    /// Visits every op reachable from the body, parents before the ops of their regions.
    pub fn walk(&self, f: &mut impl FnMut(OpId, &Op)) {
        fn walk_block(func: &Function, b: &Block, f: &mut impl FnMut(OpId, &Op)) {
            for &o in &b.ops {
                let op = func.op(o);
                f(o, op);
                for r in &op.regions {
                    walk_block(func, r, f);
                }
            }
        }
        walk_block(self, &self.body, f);
    }
}
