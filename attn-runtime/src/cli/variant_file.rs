//! A unified-attention variant read from a Rust file, as the CLI takes it: the flags naming
//! its device functions (shared by `check-variant`, `run --variant` and `bench --variant`),
//! loading and contract-checking it, and the random aux data of the declared kind (`--aux`)
//! that stands in for a user's real aux tensors.

use std::path::Path;

use crate::ops::unified_attention::variant::{AuxDtype, AuxRow, Variant};
use crate::ops::unified_attention::variant_check::CaseGeometry;
use crate::problem::SplitMix64;
use crate::registry::parse_binding;

/// The variant's `mod` and the device functions bound to the kernel's roles. Every flag
/// is optional to clap (`run` and `bench` take them only with `--variant`);
/// [`VariantFns::names`] states which are required.
#[derive(Clone, Debug, Default, PartialEq, Eq, clap::Args)]
pub struct VariantFns {
    /// The `mod` holding the variant's `#[device]` functions (required).
    #[arg(long, value_name = "M")]
    pub module: Option<String>,
    /// The device function bound to MASK (required).
    #[arg(long, value_name = "F")]
    pub mask: Option<String>,
    /// The device function bound to BOUNDS (required).
    #[arg(long, value_name = "G")]
    pub bounds: Option<String>,
    /// The device function bound to FULL_TILE (tiles every row sees whole skip the mask);
    /// default: none, every tile is masked.
    #[arg(long, value_name = "FN")]
    pub full_tile: Option<String>,
    /// Tile ranges the bounds return per q-block (`tile_ranges` of `#[variant]`; default 1).
    #[arg(long, value_name = "N")]
    pub tile_ranges: Option<i32>,
    /// Random i32 aux data: `ids` (contiguous ids per key, −1 padding), `bool:N` (N values
    /// 0/1 per sequence) or `int:N` (N values in [0, L]).
    #[arg(long, value_name = "KIND")]
    pub aux: Option<String>,
}

/// `--module`, `--mask`, `--bounds`: what a variant needs named.
pub struct FnNames<'a> {
    pub module: &'a str,
    pub mask: &'a str,
    pub bounds: &'a str,
}

impl VariantFns {
    /// Whether no flag of a variant was given.
    pub fn is_empty(&self) -> bool {
        *self == VariantFns::default()
    }

    /// The required names, or an error naming every missing flag.
    pub fn names(&self) -> Result<FnNames<'_>, String> {
        let missing: Vec<&str> = [
            (&self.module, "`--module M` (the variant's mod)"),
            (&self.mask, "`--mask F` (its device function bound to MASK)"),
            (
                &self.bounds,
                "`--bounds G` (its device function bound to BOUNDS)",
            ),
        ]
        .iter()
        .filter(|(v, _)| v.is_none())
        .map(|(_, flag)| *flag)
        .collect();
        match (&self.module, &self.mask, &self.bounds) {
            (Some(module), Some(mask), Some(bounds)) => Ok(FnNames {
                module,
                mask,
                bounds,
            }),
            _ => Err(format!("a variant file needs {}", missing.join(", "))),
        }
    }
}

/// The random aux data kinds of `--aux`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuxKind {
    Ids,
    Bool(usize),
    Int(usize),
}

impl AuxKind {
    /// Parses `--aux`.
    pub fn parse(s: &str) -> Result<AuxKind, String> {
        let n = |t: &str| t.parse::<usize>().map_err(|e| format!("--aux {s}: {e}"));
        match s.split_once(':') {
            None if s == "ids" => Ok(AuxKind::Ids),
            Some(("bool", t)) => Ok(AuxKind::Bool(n(t)?)),
            Some(("int", t)) => Ok(AuxKind::Int(n(t)?)),
            _ => Err(format!("--aux {s}: expected `ids`, `bool:N` or `int:N`")),
        }
    }

    /// What the variant declares for it.
    fn declaration(self) -> (AuxDtype, AuxRow) {
        match self {
            AuxKind::Ids => (AuxDtype::I32, AuxRow::PerKey),
            AuxKind::Bool(n) => (AuxDtype::Bool, AuxRow::Fixed(n)),
            AuxKind::Int(n) => (AuxDtype::I32, AuxRow::Fixed(n)),
        }
    }

    /// A random row for one sequence of geometry `g`.
    pub fn random_row(self, rng: &mut SplitMix64, g: CaseGeometry) -> Vec<i32> {
        let l = g.seq_len.max(1) as usize;
        match self {
            AuxKind::Ids => random_ids(rng, l),
            AuxKind::Bool(n) => (0..n).map(|_| rng.below(2) as i32).collect(),
            AuxKind::Int(n) => (0..n).map(|_| rng.below(l + 1) as i32).collect(),
        }
    }

    /// What pads a row up to the tensor's row stride (never read by a valid variant).
    pub fn padding(self) -> i32 {
        match self {
            AuxKind::Ids => -1,
            AuxKind::Bool(_) | AuxKind::Int(_) => 0,
        }
    }
}

/// Contiguous ids of random lengths (up to 64 keys) over `l` keys, the last few −1.
fn random_ids(rng: &mut SplitMix64, l: usize) -> Vec<i32> {
    let (mut id, mut left) = (0, 1 + rng.below(l.min(64)));
    let padding = rng.below(4);
    (0..l)
        .map(|k| {
            if k + padding >= l {
                return -1;
            }
            if left == 0 {
                id += 1;
                left = 1 + rng.below(l.min(64));
            }
            left -= 1;
            id
        })
        .collect()
}

/// A variant loaded from a file, contract-checked, with its aux kind.
#[derive(Clone, Debug)]
pub struct LoadedVariant {
    pub variant: Variant,
    pub aux: Option<AuxKind>,
}

/// Reads `fns.module` from `file`, binds `constexprs` (`NAME=VALUE`), declares the aux
/// tensor and runs the build-time checks of `#[variant]`.
pub fn load_variant(
    file: &Path,
    fns: &VariantFns,
    constexprs: &[String],
) -> Result<LoadedVariant, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let label = file.display().to_string();
    let n = fns.names()?;
    let mut v = Variant::from_file(&text, n.module, &label, n.mask, n.bounds)
        .map_err(|e| e.to_string())?
        .with_tile_ranges(fns.tile_ranges.unwrap_or(1));
    if let Some(f) = &fns.full_tile {
        v = v.with_full_tile(f);
    }
    for s in constexprs {
        let b = parse_binding(s).map_err(|e| e.to_string())?;
        v.constexprs.push((b.name, b.value));
    }
    let aux = fns.aux.as_deref().map(AuxKind::parse).transpose()?;
    if let Some(k) = aux {
        let (dtype, row) = k.declaration();
        v = v.with_aux_i32("aux", dtype, row);
    }
    v.check_contract().map_err(|e| e.to_string())?;
    Ok(LoadedVariant { variant: v, aux })
}

/// The variant's own constexprs (declared by its device functions, not the kernel's):
/// what `--set` may bind.
pub fn own_constexprs(v: &Variant) -> Result<Vec<String>, String> {
    let items = v.items().map_err(|e| e.to_string())?;
    let shared = attn_dsl::contract::unified_attention::SHARED;
    let mut names = vec![];
    for item in &items.module().items {
        let decls = attn_dsl::frontend::signature::constexpr_decls(&item.func)
            .map_err(|e| e.message.clone())?;
        for d in decls {
            if !names.contains(&d.name) && !shared.iter().any(|c| c.name == d.name) {
                names.push(d.name);
            }
        }
    }
    Ok(names)
}

/// `--set` values that bind a variant constexpr, checked against what it declares: a
/// misspelt name is an error naming the declared ones, not a silently ignored binding.
pub fn check_constexpr_names(v: &Variant, flag: &str) -> Result<(), String> {
    let declared = own_constexprs(v)?;
    for (name, _) in &v.constexprs {
        if !declared.contains(name) {
            return Err(format!(
                "`{flag} {name}=..`: `{name}` is not one of the variant's own constexprs \
                 (it declares: {}; the kernel's constexprs are the op's plan)",
                if declared.is_empty() {
                    "none".to_string()
                } else {
                    declared.join(", ")
                }
            ));
        }
    }
    Ok(())
}

/// One random aux tensor `[S, stride]` for the sequences `seqs` (rows padded to the
/// longest), and its stride.
pub fn random_aux(kind: AuxKind, seqs: &[CaseGeometry], seed: u64) -> (Vec<i32>, usize) {
    let mut rng = SplitMix64(seed);
    let rows: Vec<Vec<i32>> = seqs.iter().map(|&g| kind.random_row(&mut rng, g)).collect();
    let stride = rows.iter().map(Vec::len).max().unwrap_or(0).max(1);
    let mut flat = vec![kind.padding(); rows.len() * stride];
    for (s, r) in rows.iter().enumerate() {
        flat[s * stride..s * stride + r.len()].copy_from_slice(r);
    }
    (flat, stride)
}
