//! `attn check-variant FILE --module M --mask F --bounds G`: the checks of `#[variant]`
//! (signatures against the kernel's contract, bodies specialized in its probe) and the
//! bounds ⊇ mask property on random geometries, for a variant read from a file — with
//! random aux data of the declared kind, since the command has no definition of the mask:
//! it checks that the bounds visit every key the DSL mask allows, and reports the slack.

use std::path::PathBuf;

use crate::ops::unified_attention::variant::{AuxDtype, AuxRow, Variant};
use crate::ops::unified_attention::variant_check::{
    check_bounds, CaseGeometry, CheckOptions, VariantCase,
};
use crate::problem::SplitMix64;
use crate::registry::parse_binding;

/// The command's arguments.
#[derive(Clone, Debug, clap::Args)]
pub struct CheckVariantArgs {
    /// The Rust file holding the variant's `mod`.
    pub file: PathBuf,
    /// The `mod` holding its `#[device]` functions.
    #[arg(long)]
    pub module: String,
    /// The device function bound to MASK.
    #[arg(long)]
    pub mask: String,
    /// The device function bound to BOUNDS.
    #[arg(long)]
    pub bounds: String,
    /// Tile ranges the bounds return per q-block (`tile_ranges` of `#[variant]`).
    #[arg(long, default_value_t = 1)]
    pub tile_ranges: i32,
    /// The variant's own constexprs, `NAME=VALUE` (repeatable).
    #[arg(long = "set", value_name = "NAME=VALUE")]
    pub constexprs: Vec<String>,
    /// Random i32 aux data: `ids` (contiguous ids per key, −1 padding), `bool:N` (N values
    /// 0/1 per sequence) or `int:N` (N values in [0, L]).
    #[arg(long)]
    pub aux: Option<String>,
    /// Random geometries to probe.
    #[arg(long, default_value_t = 200)]
    pub cases: usize,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// The random aux data kinds of `--aux`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AuxKind {
    Ids,
    Bool(usize),
    Int(usize),
}

fn aux_kind(s: &str) -> Result<AuxKind, String> {
    let n = |t: &str| t.parse::<usize>().map_err(|e| format!("--aux {s}: {e}"));
    match s.split_once(':') {
        None if s == "ids" => Ok(AuxKind::Ids),
        Some(("bool", t)) => Ok(AuxKind::Bool(n(t)?)),
        Some(("int", t)) => Ok(AuxKind::Int(n(t)?)),
        _ => Err(format!("--aux {s}: expected `ids`, `bool:N` or `int:N`")),
    }
}

fn random_aux(kind: AuxKind, rng: &mut SplitMix64, g: CaseGeometry) -> Vec<i32> {
    let l = g.seq_len.max(1) as usize;
    match kind {
        AuxKind::Ids => {
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
        AuxKind::Bool(n) => (0..n).map(|_| rng.below(2) as i32).collect(),
        AuxKind::Int(n) => (0..n).map(|_| rng.below(l + 1) as i32).collect(),
    }
}

/// Runs the checks; the report is the command's output, an error its failure.
pub fn check_variant(a: &CheckVariantArgs) -> Result<String, String> {
    let text =
        std::fs::read_to_string(&a.file).map_err(|e| format!("{}: {e}", a.file.display()))?;
    let label = a.file.display().to_string();
    let mut v = Variant::from_file(&text, &a.module, &label, &a.mask, &a.bounds)
        .map_err(|e| e.to_string())?
        .with_tile_ranges(a.tile_ranges);
    for s in &a.constexprs {
        let b = parse_binding(s).map_err(|e| e.to_string())?;
        v.constexprs.push((b.name, b.value));
    }
    let kind = a.aux.as_deref().map(aux_kind).transpose()?;
    if let Some(k) = kind {
        let (dtype, row) = match k {
            AuxKind::Ids => (AuxDtype::I32, AuxRow::PerKey),
            AuxKind::Bool(n) => (AuxDtype::Bool, AuxRow::Fixed(n)),
            AuxKind::Int(n) => (AuxDtype::I32, AuxRow::Fixed(n)),
        };
        v = v.with_aux_i32("aux", dtype, row);
    }
    v.check_contract().map_err(|e| e.to_string())?;
    let options = CheckOptions {
        cases: a.cases,
        seed: a.seed,
        ..CheckOptions::default()
    };
    let report = check_bounds(&v, &options, &|rng, g| VariantCase {
        aux_i32: kind.map_or_else(Vec::new, |k| random_aux(k, rng, g)),
        aux_f32: vec![],
        mask: None,
    })
    .map_err(|e| e.to_string())?;
    let summary = format!("{}: contract ok; bounds ⊇ mask over {report}\n", a.mask);
    if report.passed() {
        Ok(summary)
    } else {
        Err(format!("{summary}the bounds skip keys the mask allows"))
    }
}
