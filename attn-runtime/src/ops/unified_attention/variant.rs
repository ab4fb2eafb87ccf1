//! A user variant of unified attention, as both backends run it: the DSL text of its
//! `#[device]` functions (merged into the kernel's module), the names bound to `MASK` and
//! `BOUNDS`, how many tile ranges its bounds return, its own constexprs, and the aux
//! tensors it reads (declared, so the op validates them like every other input).
//!
//! Why a value and not a type: a variant's configuration (a window, a sink count) often
//! arrives at run time, like the built-in mask's; the compiled specialization is cached by
//! the merged module's content hash and the bindings, exactly like the built-in one.

use attn_dsl::contract::VariantSource;
use attn_dsl::template::Template;
use attn_dsl::ConstValue;
use thiserror::Error;

use super::plan::MaskVariant;
use crate::kernels::dsl_module::{module_from_source, module_text, DslModule, ModuleLoadError};
use crate::kernels::unified_attention;

/// How long each sequence's row of an aux tensor must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuxRow {
    /// One value per key position: the row of sequence `s` holds `seq_lens[s]` values.
    PerKey,
    /// A fixed number of values per sequence.
    Fixed(usize),
}

/// What an aux value means to the variant; `Bool` rides in the `i32` slot as 0 / 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuxDtype {
    /// `i32` values.
    I32,
    /// Booleans, stored as `i32` 0 / 1.
    Bool,
    /// `f32` values.
    F32,
}

/// One aux tensor a variant reads: `[S, row_stride]`, row `s` at `s · row_stride`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuxDecl {
    /// Name in messages (the variant's word for it, e.g. `doc_ids`).
    pub name: &'static str,
    /// What its values mean.
    pub dtype: AuxDtype,
    /// How long each sequence's row is.
    pub row: AuxRow,
}

/// A variant: see the module doc.
#[derive(Clone, Debug, PartialEq)]
pub struct Variant {
    /// The `mod .. { #[device] .. }` text, at its file's lines.
    pub source: String,
    /// The file it was written in, for messages.
    pub file: String,
    /// Device function bound to `MASK`.
    pub mask: String,
    /// Device function bound to `BOUNDS`.
    pub bounds: String,
    /// Device function bound to `FULL_TILE` (tiles every row sees whole: no mask there);
    /// `None`: every tile is masked.
    pub full_tile: Option<String>,
    /// `TILE_RANGES`: how many ranges the bounds function returns (its `r` argument).
    pub tile_ranges: i32,
    /// The variant's own constexprs (declared by its device functions), e.g. `NUM_SINKS`.
    pub constexprs: Vec<(String, ConstValue)>,
    /// The `i32` (or `Bool`) aux tensor it reads as `aux`, if any.
    pub aux_i32: Option<AuxDecl>,
    /// The `f32` aux tensor it reads as `aux_f32`, if any.
    pub aux_f32: Option<AuxDecl>,
}

/// A variant that breaks the kernel's contract (the `#[variant]` message, at its line).
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("{file}:{line}: {message}")]
pub struct ContractError {
    /// File of the offending construct.
    pub file: String,
    /// Line in that file.
    pub line: usize,
    /// What breaks the contract.
    pub message: String,
}

/// Why a variant's aux inputs were refused.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum AuxError {
    /// The variant reads an aux tensor the call does not pass.
    #[error("variant `{variant}` reads the {dtype} aux tensor `{name}` but the call passes none; pass it as `aux_{slot}`")]
    Missing {
        /// Name of the variant (its mask function).
        variant: String,
        /// The variant's name for the tensor.
        name: &'static str,
        /// Its dtype, in words.
        dtype: &'static str,
        /// The call's slot for it (`i32` or `f32`).
        slot: &'static str,
    },
    /// The call passes an aux tensor the variant does not declare.
    #[error("the call passes an `aux_{slot}` tensor but variant `{variant}` declares none; declare it with `Variant::with_aux_{slot}`")]
    Undeclared {
        /// Name of the variant (its mask function).
        variant: String,
        /// The call's slot (`i32` or `f32`).
        slot: &'static str,
    },
    /// A sequence's aux row is longer than the row stride.
    #[error("aux tensor `{name}`: row stride {stride} is less than the {needed} values row {seq} needs ({rule})")]
    RowTooShort {
        /// The variant's name for the tensor.
        name: &'static str,
        /// Sequence index.
        seq: usize,
        /// Row stride, in values.
        stride: usize,
        /// Values the row needs.
        needed: usize,
        /// Why the row needs that many (per key, or fixed).
        rule: &'static str,
    },
    /// The aux tensor is shorter than its rows reach.
    #[error("aux tensor `{name}` holds {len} values; {seqs} sequences with row stride {stride} need {needed}")]
    TooSmall {
        /// The variant's name for the tensor.
        name: &'static str,
        /// Values it holds.
        len: usize,
        /// Sequences S.
        seqs: usize,
        /// Row stride, in values.
        stride: usize,
        /// Values its rows need.
        needed: usize,
    },
    /// A bool aux tensor holds a value other than 0 or 1.
    #[error("aux tensor `{name}` is bool (0 or 1) but element {index} is {value}")]
    NotBool {
        /// The variant's name for the tensor.
        name: &'static str,
        /// Index of the element.
        index: usize,
        /// Its value.
        value: i32,
    },
    /// The aux tensor's layout is not representable (e.g. a row offset overflows).
    #[error("aux tensor `{name}`: {what}")]
    Layout {
        /// The variant's name for the tensor.
        name: &'static str,
        /// What is wrong.
        what: String,
    },
}

impl Variant {
    /// Reads `mod <module_name>` out of a Rust file's text (the file compiles it as a
    /// `#[module]`, so its DSL is checked by the front end at build time).
    pub fn from_file(
        file_text: &str,
        module_name: &str,
        file: &str,
        mask: &str,
        bounds: &str,
    ) -> Result<Self, ModuleLoadError> {
        Ok(Variant::new(
            module_text(file_text, module_name, file)?,
            file,
            mask,
            bounds,
        ))
    }

    /// From what `#[variant]` embedded (checked when the user's crate compiled).
    pub fn from_source(v: &VariantSource) -> Self {
        let variant = Variant::new(v.text_at_file_lines(), v.file, v.mask, v.bounds)
            .with_tile_ranges(v.tile_ranges);
        match v.full_tile {
            Some(f) => variant.with_full_tile(f),
            None => variant,
        }
    }

    /// From the text the `#[module]` macro embedded (no file reading).
    pub fn from_template(template: &Template, mask: &str, bounds: &str) -> Self {
        let offset = "\n".repeat(template.line_offset() as usize);
        Variant::new(
            format!("{offset}{}", template.source()),
            template.file(),
            mask,
            bounds,
        )
    }

    fn new(source: String, file: &str, mask: &str, bounds: &str) -> Self {
        Variant {
            source,
            file: file.to_string(),
            mask: mask.to_string(),
            bounds: bounds.to_string(),
            full_tile: None,
            tile_ranges: 1,
            constexprs: vec![],
            aux_i32: None,
            aux_f32: None,
        }
    }

    /// Binds one of the variant's own constexprs (overriding its declared default).
    pub fn with_constexpr(mut self, name: &str, value: impl Into<VariantValue>) -> Self {
        let value = value.into().0;
        self.constexprs.retain(|(n, _)| n != name);
        self.constexprs.push((name.to_string(), value));
        self
    }

    /// Binds `FULL_TILE` to the variant's device function `name`: a tile it declares full
    /// must be allowed whole for every row of the block (`variant_check` checks it).
    pub fn with_full_tile(mut self, name: &str) -> Self {
        self.full_tile = Some(name.to_string());
        self
    }

    /// The number of tile ranges the bounds function returns per q-block.
    pub fn with_tile_ranges(mut self, n: i32) -> Self {
        self.tile_ranges = n;
        self
    }

    /// Declares the `i32` (or bool) aux tensor the variant reads as `aux`.
    pub fn with_aux_i32(mut self, name: &'static str, dtype: AuxDtype, row: AuxRow) -> Self {
        self.aux_i32 = Some(AuxDecl { name, dtype, row });
        self
    }

    /// Declares the `f32` aux tensor the variant reads as `aux_f32`.
    pub fn with_aux_f32(mut self, name: &'static str, row: AuxRow) -> Self {
        self.aux_f32 = Some(AuxDecl {
            name,
            dtype: AuxDtype::F32,
            row,
        });
        self
    }

    /// What the plan binds for this variant.
    pub fn mask_variant(&self) -> MaskVariant {
        let custom = MaskVariant::custom(&self.mask, &self.bounds);
        MaskVariant {
            full_tile: self.full_tile.clone().unwrap_or(custom.full_tile.clone()),
            tile_ranges: Some(self.tile_ranges),
            constexprs: self.constexprs.clone(),
            ..custom
        }
    }

    /// The variant's own items, parsed (cached per thread by content).
    pub fn items(&self) -> Result<DslModule, ModuleLoadError> {
        module_from_source(&self.source, &self.file)
    }

    /// The unified-attention module with this variant's device functions merged in.
    pub fn module(&self) -> Result<DslModule, ModuleLoadError> {
        unified_attention::module()?.merged_with(&self.items()?)
    }

    /// The build-time checks of `#[variant]`, at run time (a variant read from a file):
    /// signatures against the kernel's contract and bodies specialized in its probe.
    pub fn check_contract(&self) -> Result<(), ContractError> {
        let fail = |e: attn_dsl::DslError| ContractError {
            file: self.file.clone(),
            line: e.span.start().line,
            message: e.message,
        };
        let file: syn::File = syn::parse_str(&self.source).map_err(|e| ContractError {
            file: self.file.clone(),
            line: e.span().start().line,
            message: e.to_string(),
        })?;
        let items: Vec<syn::Item> = match file.items.as_slice() {
            [syn::Item::Mod(m)] => m
                .content
                .as_ref()
                .map(|(_, i)| i.clone())
                .unwrap_or_default(),
            other => other.to_vec(),
        };
        let c = &attn_dsl::contract::unified_attention::CONTRACT;
        let at = proc_macro2::Span::call_site();
        attn_dsl::contract::check_not_plain(&c.mask, &items, &self.mask).map_err(fail)?;
        attn_dsl::contract::check_not_plain(&c.bounds, &items, &self.bounds).map_err(fail)?;
        if let Some(f) = &self.full_tile {
            attn_dsl::contract::check_not_plain(&c.full_tile, &items, f).map_err(fail)?;
        }
        let module = self.items().map_err(|e| ContractError {
            file: self.file.clone(),
            line: 0,
            message: e.to_string(),
        })?;
        let parsed = module.module();
        let fns = attn_dsl::contract::VariantFns {
            mask: (&self.mask, at),
            bounds: (&self.bounds, at),
            full_tile: self.full_tile.as_deref().map(|f| (f, at)),
        };
        attn_dsl::contract::check_variant(c, &items, parsed, fns).map_err(fail)?;
        attn_dsl::contract::probe_variant(c, parsed, fns, self.tile_ranges, at).map_err(fail)
    }

    /// A short name for messages: the mask function.
    pub fn name(&self) -> &str {
        &self.mask
    }
}

/// A variant's module text in a form that crosses threads (compile workers re-parse it,
/// once per thread), identified by its content hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VariantModule {
    /// The module text.
    pub source: String,
    /// The file it was written in, for messages.
    pub file: String,
    /// blake3 of `source` (hex).
    pub hash: String,
}

impl VariantModule {
    /// The module text of `v`, hashed.
    pub fn of(v: &Variant) -> Self {
        VariantModule {
            source: v.source.clone(),
            file: v.file.clone(),
            hash: blake3::hash(v.source.as_bytes()).to_hex().to_string(),
        }
    }

    /// The unified-attention module with the variant's items merged in.
    pub fn module(&self) -> Result<DslModule, ModuleLoadError> {
        unified_attention::module()?.merged_with(&module_from_source(&self.source, &self.file)?)
    }
}

/// A constexpr value a variant is bound with (`4`, `true`, `0.5`).
#[derive(Clone, Debug, PartialEq)]
pub struct VariantValue(pub ConstValue);

impl From<i32> for VariantValue {
    fn from(v: i32) -> Self {
        VariantValue(ConstValue::Int(i64::from(v)))
    }
}
impl From<bool> for VariantValue {
    fn from(v: bool) -> Self {
        VariantValue(ConstValue::Bool(v))
    }
}
impl From<f64> for VariantValue {
    fn from(v: f64) -> Self {
        VariantValue(ConstValue::Float(v))
    }
}

/// Host view of one aux tensor of a call: its length, row stride and (optionally) values.
#[derive(Clone, Copy, Debug)]
pub struct AuxView<'a, E> {
    /// Values the tensor holds.
    pub len: usize,
    /// Row stride, in values.
    pub row_stride: usize,
    /// The values, when the host has them (bool tensors are checked to be 0 / 1).
    pub host: Option<&'a [E]>,
}

/// Checks a call's aux tensors against the variant's declarations.
pub fn validate_aux(
    variant: &Variant,
    seq_lens: &[i32],
    aux_i32: Option<AuxView<'_, i32>>,
    aux_f32: Option<AuxView<'_, f32>>,
) -> Result<(), AuxError> {
    let slot = |decl: Option<AuxDecl>, given: bool, slot: &'static str, dtype: &'static str| match (
        decl, given,
    ) {
        (Some(d), false) => Err(AuxError::Missing {
            variant: variant.name().to_string(),
            name: d.name,
            dtype,
            slot,
        }),
        (None, true) => Err(AuxError::Undeclared {
            variant: variant.name().to_string(),
            slot,
        }),
        _ => Ok(decl),
    };
    if let Some(d) = slot(variant.aux_i32, aux_i32.is_some(), "i32", "i32")? {
        let v = aux_i32.ok_or(AuxError::Undeclared {
            variant: variant.name().to_string(),
            slot: "i32",
        })?;
        check_rows(&d, seq_lens, v.len, v.row_stride)?;
        if let (AuxDtype::Bool, Some(host)) = (d.dtype, v.host) {
            check_bool(&d, seq_lens, host, v.row_stride)?;
        }
    }
    if let Some(d) = slot(variant.aux_f32, aux_f32.is_some(), "f32", "f32")? {
        let v = aux_f32.ok_or(AuxError::Undeclared {
            variant: variant.name().to_string(),
            slot: "f32",
        })?;
        check_rows(&d, seq_lens, v.len, v.row_stride)?;
    }
    Ok(())
}

/// Every sequence's row fits in its stride and the tensor holds every row.
fn check_rows(d: &AuxDecl, seq_lens: &[i32], len: usize, stride: usize) -> Result<(), AuxError> {
    let mut needed_total = 0usize;
    for (seq, &l) in seq_lens.iter().enumerate() {
        let (needed, rule) = row_len(d, l);
        if needed > stride {
            return Err(AuxError::RowTooShort {
                name: d.name,
                seq,
                stride,
                needed,
                rule,
            });
        }
        let end = seq
            .checked_mul(stride)
            .and_then(|start| start.checked_add(needed))
            .ok_or_else(|| AuxError::Layout {
                name: d.name,
                what: format!("row {seq} with stride {stride} overflows usize"),
            })?;
        needed_total = needed_total.max(end);
    }
    if len < needed_total {
        return Err(AuxError::TooSmall {
            name: d.name,
            len,
            seqs: seq_lens.len(),
            stride,
            needed: needed_total,
        });
    }
    Ok(())
}

fn row_len(d: &AuxDecl, seq_len: i32) -> (usize, &'static str) {
    match d.row {
        AuxRow::PerKey => (
            usize::try_from(seq_len).unwrap_or(0),
            "one value per key: seq_lens[s]",
        ),
        AuxRow::Fixed(n) => (n, "the variant's fixed row length"),
    }
}

fn check_bool(d: &AuxDecl, seq_lens: &[i32], host: &[i32], stride: usize) -> Result<(), AuxError> {
    for (seq, &l) in seq_lens.iter().enumerate() {
        let (n, _) = row_len(d, l);
        let start = seq * stride;
        for (i, &value) in host.iter().enumerate().skip(start).take(n) {
            if value != 0 && value != 1 {
                return Err(AuxError::NotBool {
                    name: d.name,
                    index: i,
                    value,
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn docs() -> Variant {
        Variant::new(String::new(), "v.rs", "m", "b").with_aux_i32(
            "doc_ids",
            AuxDtype::I32,
            AuxRow::PerKey,
        )
    }

    fn view(len: usize, row_stride: usize) -> Option<AuxView<'static, i32>> {
        Some(AuxView {
            len,
            row_stride,
            host: None,
        })
    }

    #[test]
    fn per_key_rows_need_the_sequence_length() {
        let v = docs();
        assert_eq!(validate_aux(&v, &[10, 20], view(40, 20), None), Ok(()));
        let short = validate_aux(&v, &[10, 20], view(40, 15), None).unwrap_err();
        assert!(
            matches!(
                short,
                AuxError::RowTooShort {
                    seq: 1,
                    needed: 20,
                    ..
                }
            ),
            "{short}"
        );
        let small = validate_aux(&v, &[10, 20], view(39, 20), None).unwrap_err();
        assert!(
            matches!(small, AuxError::TooSmall { needed: 40, .. }),
            "{small}"
        );
    }

    #[test]
    fn missing_and_undeclared_tensors_are_named() {
        let v = docs();
        let e = validate_aux(&v, &[1], None, None).unwrap_err();
        assert!(e.to_string().contains("`doc_ids`"), "{e}");
        let f = AuxView::<f32> {
            len: 4,
            row_stride: 4,
            host: None,
        };
        let e = validate_aux(&v, &[1], view(1, 1), Some(f)).unwrap_err();
        assert!(matches!(e, AuxError::Undeclared { slot: "f32", .. }), "{e}");
    }

    #[test]
    fn bool_tensors_hold_zero_or_one() {
        let v = Variant::new(String::new(), "v.rs", "m", "b").with_aux_i32(
            "tree",
            AuxDtype::Bool,
            AuxRow::Fixed(3),
        );
        let ok = [1, 0, 1, 0, 0, 1];
        let bad = [1, 0, 1, 0, 2, 1];
        fn with(h: &[i32]) -> Option<AuxView<'_, i32>> {
            Some(AuxView {
                len: h.len(),
                row_stride: 3,
                host: Some(h),
            })
        }
        assert_eq!(validate_aux(&v, &[3, 3], with(&ok), None), Ok(()));
        let e = validate_aux(&v, &[3, 3], with(&bad), None).unwrap_err();
        assert_eq!(
            e,
            AuxError::NotBool {
                name: "tree",
                index: 4,
                value: 2
            }
        );
    }
}
