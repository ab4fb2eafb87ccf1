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
    /// Warps per program (`#[kernel(num_warps = 4)]`); 4 when unspecified.
    pub num_warps: u32,
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
