//! IR types: scalars, pointers and tiles of rank ≤ 2, each tile carrying a layout slot.

use std::fmt;

/// Element types a kernel computes with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScalarType {
    Bf16,
    F16,
    F32,
    I32,
    I64,
    Bool,
}

impl ScalarType {
    /// Size of one element in bytes (bool is stored as one byte).
    pub fn size_bytes(self) -> usize {
        match self {
            ScalarType::Bf16 | ScalarType::F16 => 2,
            ScalarType::F32 | ScalarType::I32 => 4,
            ScalarType::I64 => 8,
            ScalarType::Bool => 1,
        }
    }
    pub fn is_float(self) -> bool {
        matches!(self, ScalarType::Bf16 | ScalarType::F16 | ScalarType::F32)
    }
    pub fn is_int(self) -> bool {
        matches!(self, ScalarType::I32 | ScalarType::I64)
    }
    /// The DSL/IR spelling (`bf16`, `f32`, ...).
    pub fn name(self) -> &'static str {
        match self {
            ScalarType::Bf16 => "bf16",
            ScalarType::F16 => "f16",
            ScalarType::F32 => "f32",
            ScalarType::I32 => "i32",
            ScalarType::I64 => "i64",
            ScalarType::Bool => "bool",
        }
    }
    pub fn from_name(s: &str) -> Option<Self> {
        Some(match s {
            "bf16" => ScalarType::Bf16,
            "f16" => ScalarType::F16,
            "f32" => ScalarType::F32,
            "i32" => ScalarType::I32,
            "i64" => ScalarType::I64,
            "bool" => ScalarType::Bool,
            _ => return None,
        })
    }
}

impl fmt::Display for ScalarType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What one element of a value is: a number or a pointer to numbers in global memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Elem {
    Scalar(ScalarType),
    /// Pointer into global memory to elements of the given type.
    Ptr(ScalarType),
}

impl Elem {
    pub fn scalar(self) -> Option<ScalarType> {
        match self {
            Elem::Scalar(s) => Some(s),
            Elem::Ptr(_) => None,
        }
    }
    pub fn pointee(self) -> Option<ScalarType> {
        match self {
            Elem::Ptr(s) => Some(s),
            Elem::Scalar(_) => None,
        }
    }
}

impl fmt::Display for Elem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Elem::Scalar(s) => write!(f, "{s}"),
            Elem::Ptr(s) => write!(f, "ptr<{s}>"),
        }
    }
}

/// Mapping of a tile's elements onto threads and memory (DESIGN §3.5).
///
/// Kernels never name a layout; passes assign them. `Unassigned` is what the front end
/// produces; the layout pass replaces it before code generation.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum Layout {
    #[default]
    Unassigned,
    /// Elements spread over threads in row-major blocks of `size_per_thread` contiguous
    /// elements along the last axis (`order` lists axes fastest first).
    Blocked(BlockedLayout),
    /// Accumulator fragment of `mma.sync.m16n8k16` (rows owned whole by a warp).
    Mma { warps_per_cta: [u32; 2] },
    /// Register operand fragment of a `dot` (`op_idx` 0 = A, 1 = B) of an Mma parent.
    DotOperand { op_idx: u8, parent: Box<Layout> },
    /// A rank-1 slice of a rank-2 parent along `dim` (row vectors of softmax state).
    Slice { dim: u8, parent: Box<Layout> },
    /// Staged in shared memory (swizzled, `stages`-deep ring).
    Shared {
        vec: u32,
        per_phase: u32,
        max_phase: u32,
        stages: u32,
    },
    /// Held by one warpgroup of the program (warps `4w .. 4w + 3`), spread by `inner` over
    /// its 128 threads; the program's other warpgroups hold none of it. Ops on owned tiles
    /// run on their owner alone, so two warpgroups can work on different tiles side by side
    /// (the seesaw schedule's scores, each warpgroup its own tile).
    Owned { warpgroup: u32, inner: Box<Layout> },
}

impl Layout {
    /// The warpgroup holding a tile of this layout, when one warpgroup holds it alone.
    pub fn owner(&self) -> Option<u32> {
        match self {
            Layout::Owned { warpgroup, .. } => Some(*warpgroup),
            _ => None,
        }
    }

    /// The layout over the threads that hold the tile (the owner's, for an owned tile).
    pub fn unowned(&self) -> &Layout {
        match self {
            Layout::Owned { inner, .. } => inner,
            l => l,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BlockedLayout {
    pub size_per_thread: Vec<u32>,
    pub threads_per_warp: Vec<u32>,
    pub warps_per_cta: Vec<u32>,
    pub order: Vec<u32>,
}

/// The type of an SSA value: an element type and a shape (empty shape = scalar).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Type {
    pub elem: Elem,
    pub shape: Vec<usize>,
    pub layout: Layout,
}

impl Type {
    pub fn scalar(s: ScalarType) -> Self {
        Type {
            elem: Elem::Scalar(s),
            shape: vec![],
            layout: Layout::Unassigned,
        }
    }
    pub fn ptr(s: ScalarType) -> Self {
        Type {
            elem: Elem::Ptr(s),
            shape: vec![],
            layout: Layout::Unassigned,
        }
    }
    pub fn tile(elem: Elem, shape: Vec<usize>) -> Self {
        Type {
            elem,
            shape,
            layout: Layout::Unassigned,
        }
    }
    pub fn is_scalar(&self) -> bool {
        self.shape.is_empty()
    }
    pub fn rank(&self) -> usize {
        self.shape.len()
    }
    pub fn num_elements(&self) -> usize {
        self.shape.iter().product()
    }
    /// Same shape and layout, another element type.
    pub fn with_elem(&self, elem: Elem) -> Self {
        Type {
            elem,
            shape: self.shape.clone(),
            layout: self.layout.clone(),
        }
    }
    pub fn with_shape(&self, shape: Vec<usize>) -> Self {
        Type {
            elem: self.elem,
            shape,
            layout: Layout::Unassigned,
        }
    }
}

impl fmt::Display for Type {
    /// `f32`, `ptr<bf16>`, `tile<f32, 16x64>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.shape.is_empty() {
            return write!(f, "{}", self.elem);
        }
        let dims: Vec<String> = self.shape.iter().map(|d| d.to_string()).collect();
        write!(f, "tile<{}, {}>", self.elem, dims.join("x"))
    }
}
