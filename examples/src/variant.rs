//! A user variant as the op consumes it: the DSL text of its device functions and the
//! names to bind to the kernel's `MASK` and `BOUNDS` constexprs.

use attn_runtime::kernels::dsl_module::{
    module_from_source, module_text, DslModule, ModuleLoadError,
};
use attn_runtime::kernels::unified_attention;
use attn_runtime::ops::unified_attention::cpu::CpuVariant;
use attn_runtime::ops::unified_attention::plan::MaskVariant;

/// One variant: its module text (device functions only) and its MASK / BOUNDS names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Variant {
    /// The `mod .. { #[device] .. }` text, at its file's lines.
    pub source: String,
    /// The file it was written in, for messages.
    pub file: &'static str,
    pub mask: &'static str,
    pub bounds: &'static str,
}

impl Variant {
    /// Reads `mod <module_name>` out of a Rust file's text (the file compiles it as a
    /// `#[module]`, so its DSL is checked by the front end at build time).
    pub fn from_file(
        file_text: &str,
        module_name: &str,
        file: &'static str,
        mask: &'static str,
        bounds: &'static str,
    ) -> Result<Self, ModuleLoadError> {
        Ok(Variant {
            source: module_text(file_text, module_name, file)?,
            file,
            mask,
            bounds,
        })
    }

    /// The names the op binds to `MASK` and `BOUNDS`.
    pub fn mask_variant(&self) -> MaskVariant {
        MaskVariant::custom(self.mask, self.bounds)
    }

    /// The unified-attention module with this variant's device functions merged in.
    pub fn module(&self) -> Result<DslModule, ModuleLoadError> {
        unified_attention::module()?.merged_with(&module_from_source(&self.source, self.file)?)
    }

    /// This variant for the CPU op, with its `mask_aux` data (`[S, aux_stride]` i32).
    pub fn cpu<'a>(&'a self, aux: &'a [i32], aux_stride: usize) -> CpuVariant<'a> {
        CpuVariant {
            source: &self.source,
            label: self.file,
            mask: self.mask,
            bounds: self.bounds,
            aux,
            aux_stride,
        }
    }
}
