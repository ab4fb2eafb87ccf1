//! Proc-macro front end of attn-dsl. The compiler itself lives in `attn-dsl`; this crate
//! parses attributes, runs the compiler inside rustc and turns its diagnostics into
//! compile errors at the right spans (DESIGN §3.2).
//!
//! ```ignore
//! use attn_dsl_macros::{instantiate, module};
//!
//! #[module]                      // device helpers travel with the kernels of the module
//! pub mod softmax {
//!     #[device] fn row_max<const N: i32>(x: Tile) -> Tile { x.max(1) }
//!     #[kernel(num_warps = 4, require(BLOCK >= 16, "BLOCK must be at least 16"))]
//!     pub fn softmax<T, const BLOCK: i32>(x: *const T, out: *mut T, n_cols: i32, stride: i32) { /* DSL */ }
//! }
//!
//! instantiate!(pub SoftmaxBf16 = softmax::softmax { T = bf16, BLOCK = 128 });
//! // SoftmaxBf16: attn_dsl::kernel::Kernel, SoftmaxBf16Args<'a, B>: its typed arguments;
//! // softmax::SOFTMAX_TEMPLATE: attn_dsl::template::Template for run-time specialization.
//! ```
//!
//! **Dependencies.** Generated code names `::attn_dsl::...` (and `::attn_dsl_macros::...` for
//! the hidden callback), so every crate that defines *or instantiates* kernels depends on
//! both `attn-dsl` and `attn-dsl-macros`. Element types (`bf16`, `f16`) are named through
//! `attn_dsl::half`, so no direct `half` dependency is needed.
//!
//! **Kernel bodies are DSL, not Rust**: the attributes never re-emit them. Inside a
//! `#[module]`, `#[kernel]` and `#[device]` are markers read by the module macro and need no
//! import.

mod binding_syntax;
mod definition;
mod instantiate;
mod kernel_export;
mod render;
mod specialization_type;
mod variant;

use proc_macro::TokenStream;

/// A module of DSL kernels and `#[device]` helpers: checks every kernel (all that does not
/// depend on constexpr values) and, per kernel `k`, makes `path::to::k` instantiable with
/// [`instantiate!`] and emits `K_TEMPLATE: attn_dsl::template::Template`.
#[proc_macro_attribute]
pub fn module(attr: TokenStream, item: TokenStream) -> TokenStream {
    let item: proc_macro2::TokenStream = item.into();
    match definition::expand_module(attr.into(), item.clone()) {
        Ok(tokens) => tokens.into(),
        Err(e) => definition::error_with_module_shell(e, &item).into(),
    }
}

/// A user variant of unified attention: `#[variant(mask = f, bounds = g[, full_tile = h]
/// [, tile_ranges = N])]` on a `mod` of `#[device]` functions. Checked when the crate compiles (signatures against
/// the kernel's contract, bodies specialized against it), errors at the user's tokens;
/// emits `VARIANT: attn_dsl::contract::VariantSource`.
#[proc_macro_attribute]
pub fn variant(attr: TokenStream, item: TokenStream) -> TokenStream {
    let item: proc_macro2::TokenStream = item.into();
    match variant::expand_variant(attr.into(), item.clone()) {
        Ok(tokens) => tokens.into(),
        Err(e) => definition::error_with_module_shell(e, &item).into(),
    }
}

/// A stand-alone DSL kernel: `#[kernel(num_warps = 4, require(COND, "message"), ..)]`.
/// Inside a `#[module]` it is a marker read by the module macro.
#[proc_macro_attribute]
pub fn kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    definition::expand_kernel(attr.into(), item.into())
        .unwrap_or_else(|e| e.to_compile_error())
        .into()
}

/// A DSL device function: inlined into the kernels of its `#[module]`, the only place it
/// may appear (outside a module it is an error, since nothing could call it).
#[proc_macro_attribute]
pub fn device(_attr: TokenStream, item: TokenStream) -> TokenStream {
    definition::expand_device(item.into())
        .unwrap_or_else(|e| e.to_compile_error())
        .into()
}

/// `instantiate!(vis Name = path::to::kernel { CONST = value, .. }; ..)`: specializes the
/// kernel inside rustc and emits `vis struct Name` (implementing `attn_dsl::kernel::Kernel`)
/// and `vis struct NameArgs<'a, B: Backend>`. Values: integers, floats, `true`/`false`,
/// dtypes (`bf16 f16 f32 i32 i64 bool`) and `#[device]` function names.
#[proc_macro]
pub fn instantiate(input: TokenStream) -> TokenStream {
    instantiate::expand_instantiate(input.into())
        .unwrap_or_else(|e| e.to_compile_error())
        .into()
}

/// Hidden: called by a kernel's callback macro with the module's tokens; not public API.
#[doc(hidden)]
#[proc_macro]
pub fn __instantiate_impl(input: TokenStream) -> TokenStream {
    instantiate::expand_instantiate_impl(input.into())
        .unwrap_or_else(|e| e.to_compile_error())
        .into()
}
