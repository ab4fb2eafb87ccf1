//! `attn check-variant FILE --module M --mask F --bounds G`: the checks of `#[variant]`
//! (signatures against the kernel's contract, bodies specialized in its probe) and the
//! bounds ⊇ mask property on random geometries, for a variant read from a file — with
//! random aux data of the declared kind, since the command has no definition of the mask:
//! it checks that the bounds visit every key the DSL mask allows, that every tile the
//! FULL_TILE (`--full-tile`) declares full is allowed whole, and reports the slack.

use std::path::PathBuf;

use super::variant_file::{check_constexpr_names, load_variant, VariantFns};
use crate::ops::unified_attention::variant_check::{check_bounds, CheckOptions, VariantCase};

/// The command's arguments.
#[derive(Clone, Debug, clap::Args)]
pub struct CheckVariantArgs {
    /// The Rust file holding the variant's `mod`.
    pub file: PathBuf,
    #[command(flatten)]
    pub fns: VariantFns,
    /// The variant's own constexprs, `NAME=VALUE` (repeatable).
    #[arg(long = "set", value_name = "NAME=VALUE")]
    pub constexprs: Vec<String>,
    /// Random geometries to probe.
    #[arg(long, default_value_t = 200)]
    pub cases: usize,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// Runs the checks; the report is the command's output, an error its failure.
pub fn check_variant(a: &CheckVariantArgs) -> Result<String, String> {
    let loaded = load_variant(&a.file, &a.fns, &a.constexprs)?;
    check_constexpr_names(&loaded.variant, "--set")?;
    let (v, kind) = (&loaded.variant, loaded.aux);
    let options = CheckOptions {
        cases: a.cases,
        seed: a.seed,
        ..CheckOptions::default()
    };
    let report = check_bounds(v, &options, &|rng, g| VariantCase {
        aux_i32: kind.map_or_else(Vec::new, |k| k.random_row(rng, g)),
        aux_f32: vec![],
        mask: None,
    })
    .map_err(|e| e.to_string())?;
    let summary = format!("{}: contract ok; bounds ⊇ mask over {report}\n", v.mask);
    if report.passed() {
        Ok(summary)
    } else {
        let mut why = vec![];
        if report.missed_count > 0 {
            why.push("the bounds skip keys the mask allows");
        }
        if report.unsound_full_count > 0 {
            why.push("FULL_TILE declares tiles full that hold keys the mask forbids");
        }
        Err(format!("{summary}{}", why.join("; ")))
    }
}
