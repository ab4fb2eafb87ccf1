//! Variant contracts: what a kernel offers the device functions plugged into its `Device`
//! constexprs (argument names and types, the return type, the constexprs it shares), and
//! the check of a user's functions against it — at the user's spans, stating the expected
//! signature. `#[variant]` runs it when the user's crate compiles, the runtime before it
//! specializes, `attn check-variant` on demand: one check, one set of messages.
//!
//! Why data here and not in the kernel's crate: the proc macro runs inside rustc and can
//! only reach this crate; the kernel's crate pins that this data matches the kernel's
//! by-name call sites (a test compares the fields of `MaskArgs { .. }` / `BoundsArgs { .. }`).

mod check;
mod probe;
pub mod unified_attention;

pub use check::{check_not_plain, check_role, check_variant, expected_signature, VariantFns};
pub use probe::probe_variant;

/// One argument a kernel offers by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContractArg {
    pub name: &'static str,
    /// The type as a variant declares it (`Tile<i32>`, `bool`, `*const i32`).
    pub ty: &'static str,
    /// What it is, for the expected-signature message and the docs.
    pub doc: &'static str,
}

/// One `Device` constexpr of a kernel (`MASK`, `BOUNDS`, `FULL_TILE`) and its calling
/// convention.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContractRole {
    /// The kernel's constexpr (`MASK`).
    pub role: &'static str,
    /// The struct name of the by-name call (`MaskArgs`).
    pub call: &'static str,
    pub args: &'static [ContractArg],
    /// The one accepted return type.
    pub returns: &'static str,
    /// What the return value means.
    pub returns_doc: &'static str,
}

/// A kernel constexpr a variant's device functions may declare (received by name).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedConstexpr {
    pub name: &'static str,
    /// `i32` or `bool`.
    pub ty: &'static str,
}

/// Everything a kernel promises its variants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VariantContract {
    pub kernel: &'static str,
    pub mask: ContractRole,
    pub bounds: ContractRole,
    /// Optional: a variant that binds none gets a predicate that declares no tile full.
    pub full_tile: ContractRole,
    pub constexprs: &'static [SharedConstexpr],
    /// A one-program kernel calling both roles by name with the contract's types, in the
    /// kernel's own way; specializing it checks a variant's bodies (see `probe`).
    pub probe_source: &'static str,
    /// The probe's kernel name.
    pub probe_kernel: &'static str,
}

/// A variant as the `#[variant]` macro embeds it: its module text and what to bind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VariantSource {
    /// The module's tokens rendered as text; line 1 is line `line_offset + 1` of `file`.
    pub source: &'static str,
    pub file: &'static str,
    pub line_offset: u32,
    /// Device function bound to MASK.
    pub mask: &'static str,
    /// Device function bound to BOUNDS.
    pub bounds: &'static str,
    /// Device function bound to FULL_TILE, if the variant declares one.
    pub full_tile: Option<&'static str>,
    /// Tile ranges the bounds function returns per q-block.
    pub tile_ranges: i32,
}

impl VariantSource {
    /// The module text padded back to its file lines (errors name the user's lines).
    pub fn text_at_file_lines(&self) -> String {
        format!("{}{}", "\n".repeat(self.line_offset as usize), self.source)
    }
}
