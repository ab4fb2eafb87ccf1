//! The front end's output: a module of kernels and device functions whose bodies stay as
//! `syn` syntax trees (they carry spans; the specializer lowers them with constexprs bound).

use proc_macro2::Span;

/// A DSL module: the kernels and `#[device]` helpers that travel together.
#[derive(Clone)]
pub struct Module {
    pub items: Vec<Item>,
}

impl Module {
    pub fn item(&self, name: &str) -> Option<&Item> {
        self.items.iter().find(|i| i.name() == name)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ItemKind {
    /// `#[kernel]`: a launchable entry point.
    Kernel,
    /// `#[device]`: inlined into callers; callable from kernels and other device functions.
    Device,
}

/// One `#[kernel]` or `#[device]` function.
#[derive(Clone)]
pub struct Item {
    pub kind: ItemKind,
    /// The function as written (generics hold the constexprs, inputs the runtime params).
    pub func: syn::ItemFn,
    /// `require(cond, "message")` rules from the attribute, checked at specialization.
    pub requires: Vec<Require>,
    /// Warps per program (`#[kernel(num_warps = 4)]` or a constexpr expression such as
    /// `num_warps = BLOCK_M / 16`); 4 when unspecified.
    pub num_warps: LaunchCount,
    /// Buffers of each software-pipelined copy ring (`#[kernel(num_stages = 3)]` or a
    /// constexpr expression); 2 when unspecified: one tile computed while the next lands.
    pub num_stages: LaunchCount,
    /// `fast_math = true`: the CUDA back end may contract f32 arithmetic into FMAs and use
    /// the hardware `exp2` for `exp` (the CPU executor stays exact; GPU parity tolerances
    /// cover the difference).
    pub fast_math: bool,
    /// `tma = <bool or constexpr expression>`: the program's paged and dense tiles move as
    /// TMA boxes where the target has them (sm_90a), else by `cp.async` as always. A
    /// schedule choice for the launcher to make per specialization (measured: long MLA
    /// history programs gain, short ones lose), not a change of meaning.
    pub tma: ConstFlag,
    /// `warp_specialize = <bool or constexpr expression>`: a producer warpgroup takes the
    /// pipelined loop's copies (sm_90a). `None` leaves it to the compiler (it splits the
    /// programs it can); `true` requires the split on warpgroup targets (a program the
    /// split cannot take is then an error, not a silently slower kernel); `false` keeps
    /// the copies on the math warps.
    pub warp_specialize: Option<ConstFlag>,
    /// `pingpong = <bool or constexpr expression>`: a program's two warpgroups take turns
    /// issuing their MMAs, one's softmax under the other's GEMMs (sm_90a). `None`, `true`
    /// and `false` as for [`Item::warp_specialize`].
    pub pingpong: Option<ConstFlag>,
}

/// A boolean kernel attribute: a literal, or a constexpr expression evaluated once the
/// constexprs are bound (like a `require` condition).
#[derive(Clone)]
pub enum ConstFlag {
    Fixed(bool),
    Constexpr { expr: Box<syn::Expr>, span: Span },
}

/// A launch count of a kernel attribute: warps per program, or pipeline stages.
///
/// An expression lets it follow a tile constexpr (one warp per 16-row slab keeps a `dot`
/// accumulator in tensor-core fragments for every `BLOCK_M`; a decode tiling streams with
/// more stages than a prefill one).
#[derive(Clone)]
pub enum LaunchCount {
    /// Known when the attribute is parsed (a literal, or the default).
    Fixed(u32),
    /// A constexpr expression, evaluated once the constexprs are bound (like a `require`).
    Constexpr { expr: Box<syn::Expr>, span: Span },
}

impl LaunchCount {
    /// The count when it does not depend on constexprs.
    pub fn fixed(&self) -> Option<u32> {
        match self {
            LaunchCount::Fixed(n) => Some(*n),
            LaunchCount::Constexpr { .. } => None,
        }
    }
}

impl Item {
    pub fn name(&self) -> String {
        self.func.sig.ident.to_string()
    }
}

/// A constexpr rule: `require(cond, "message")`.
#[derive(Clone)]
pub struct Require {
    pub cond: syn::Expr,
    pub message: String,
    pub span: Span,
}
