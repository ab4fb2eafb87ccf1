//! The DSL kernels of the runtime, loaded as DSL modules.
//!
//! Until the `#[module]` proc macro is merged, each kernel file is parsed at run time from
//! its own text (`include_str!`): the file stays exactly what the macro will read, and
//! the switch to the macro-generated template is a change inside one `module()` function.

pub mod dsl_module;
pub mod specialization_cache;

/// Unified attention (spec `unified_attention.md`): `unified_attention` (2D and 3D),
/// `reduce_segments`, and the default mask / bounds device functions.
pub mod unified_attention {
    use super::dsl_module::{module_from_file_text, DslModule, ModuleLoadError};

    /// The kernel file as written (`#[module] pub mod unified { .. }`).
    pub const FILE_TEXT: &str = include_str!("unified_attention.rs");
    /// Name of the DSL module inside [`FILE_TEXT`].
    pub const MODULE_NAME: &str = "unified";
    /// The attention kernel (2D and 3D through `IS_3D`).
    pub const ATTENTION_KERNEL: &str = "unified_attention";
    /// The 3D segment combine.
    pub const REDUCE_KERNEL: &str = "reduce_segments";
    /// The default mask device function bound to `MASK` (spec §3.6).
    pub const DEFAULT_MASK: &str = "vllm_mask";
    /// The default tile-bounds device function bound to `BOUNDS` (spec §4).
    pub const DEFAULT_BOUNDS: &str = "vllm_bounds";

    /// The unified-attention DSL module, parsed once per thread.
    ///
    /// The one place that knows where the module's text comes from: once `#[module]`
    /// lands this becomes `unified::UNIFIED_ATTENTION_TEMPLATE.source()`.
    pub fn module() -> Result<DslModule, ModuleLoadError> {
        module_from_file_text(FILE_TEXT, MODULE_NAME, "attn-runtime/src/kernels/unified_attention.rs")
    }
}
