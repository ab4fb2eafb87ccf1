//! `attn run|bench <preset> --variant FILE --module M --mask F --bounds G [..]`: a user
//! variant read from a file, run through the public op on the preset's problem geometry
//! (sequences, heads, head size, path; the variant replaces the preset's mask, window and
//! image ranges; scale `D^-0.5`).
//!
//! The reference needs the mask, and a file holds only DSL: the variant's own MASK is
//! evaluated on the CPU executor over every (query, key) pair of the problem
//! ([`dense_mask`]), and the dense f64 reference attends exactly the keys it allows. The
//! op attends what the variant's BOUNDS visit (and its FULL_TILE leaves unmasked), so
//! bounds that skip an allowed key, or a tile wrongly declared full, fail the comparison.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use half::bf16;

use super::unified::{bench_key, err, preset_row, run_checked, time_op, write, OpCase};
use super::variant_file::{
    check_constexpr_names, load_variant, random_aux, LoadedVariant, VariantFns,
};
use super::CliError;
use crate::bench::unified::{context_options, Row};
use crate::bench::BenchResult;
use crate::launch::CudaDevice;
use crate::ops::unified_attention::cpu::CpuVariant;
use crate::ops::unified_attention::gpu::UnifiedAttentionContext;
use crate::ops::unified_attention::variant_check::CaseGeometry;
use crate::ops::unified_attention::variant_dense_mask::{dense_mask, DenseMask, SequenceInputs};
use crate::reference::unified_attention::AttentionOptions;
use crate::testing::device_variant::DeviceVariantProblem;
use crate::testing::{masked_reference, Geometry, PagedData};

/// `--variant FILE` and the functions it binds (all absent: the preset's own mask).
#[derive(Clone, Debug, Default, PartialEq, Eq, clap::Args)]
pub struct VariantSelection {
    /// Run a user variant read from this Rust file instead of the preset's mask (with
    /// `--module`, `--mask`, `--bounds`; `--set NAME=VALUE` binds its own constexprs).
    #[arg(long = "variant", value_name = "FILE")]
    pub file: Option<PathBuf>,
    #[command(flatten)]
    pub fns: VariantFns,
}

impl VariantSelection {
    /// The file and functions, or `None` for the preset's mask; half a selection is an
    /// error naming the missing flag.
    pub fn resolve(&self) -> Result<Option<(PathBuf, VariantFns)>, String> {
        match &self.file {
            None if self.fns.is_empty() => Ok(None),
            None => Err(
                "`--module` / `--mask` / `--bounds` / `--full-tile` / `--tile-ranges` / `--aux` \
                 describe a variant: add `--variant FILE` (the Rust file holding its mod)"
                    .to_string(),
            ),
            Some(f) => {
                self.fns
                    .names()
                    .map_err(|e| format!("`--variant {}`: {e}", f.display()))?;
                Ok(Some((f.clone(), self.fns.clone())))
            }
        }
    }
}

/// The preset knobs among `--set` bindings; the rest bind the variant's constexprs.
fn split_set(raw: &[String]) -> (Vec<String>, Vec<String>) {
    raw.iter().cloned().partition(|r| {
        r.split_once('=')
            .is_some_and(|(n, _)| matches!(n.trim(), "SEQ" | "SEQS"))
    })
}

/// The variant, the preset row and the random problem it runs on.
struct VariantCase {
    loaded: LoadedVariant,
    row: Row,
    data: PagedData,
    /// The random `i32` aux tensor `[S, stride]` of the declared kind, and its stride.
    aux: Option<(Vec<i32>, usize)>,
}

const SEED: u64 = 1;

fn prepare(
    kernel: &str,
    raw: &[String],
    file: &Path,
    fns: &VariantFns,
) -> Result<VariantCase, CliError> {
    let (knobs, constexprs) = split_set(raw);
    let row = preset_row(kernel, &knobs, true)?;
    let loaded = load_variant(file, fns, &constexprs).map_err(|e| err(kernel, e))?;
    check_constexpr_names(&loaded.variant, "--set").map_err(|e| err(kernel, e))?;
    let data = PagedData::random(&Geometry::new(&row.seqs, row.heads, row.head_size), SEED);
    let aux = loaded
        .aux
        .map(|k| random_aux(k, &geometries(&data), SEED + 1));
    Ok(VariantCase {
        loaded,
        row,
        data,
        aux,
    })
}

fn geometries(data: &PagedData) -> Vec<CaseGeometry> {
    data.seq_lens
        .iter()
        .zip(data.cu_seqlens_q.windows(2))
        .map(|(&l, cu)| CaseGeometry {
            seq_len: l,
            query_len: cu[1] - cu[0],
        })
        .collect()
}

impl VariantCase {
    fn cpu_variant(&self) -> CpuVariant<'_> {
        CpuVariant {
            variant: &self.loaded.variant,
            aux_i32: self.aux.as_ref().map(|(a, s)| (a.as_slice(), *s)),
            aux_f32: None,
        }
    }

    /// The variant's DSL mask over every pair of the problem.
    fn dense_mask(&self, kernel: &str) -> Result<DenseMask, CliError> {
        let geometries = geometries(&self.data);
        let seqs: Vec<SequenceInputs<'_>> = geometries
            .iter()
            .enumerate()
            .map(|(s, &geometry)| SequenceInputs {
                geometry,
                aux_i32: self
                    .aux
                    .as_ref()
                    .map_or(&[][..], |(a, stride)| &a[s * stride..(s + 1) * stride]),
                aux_f32: &[],
            })
            .collect();
        let pb = super::progress::spinner(format!(
            "evaluating {} on the CPU executor over every (query, key) pair",
            self.loaded.variant.mask
        ));
        let mask = dense_mask(&self.loaded.variant, &seqs);
        pb.finish_and_clear();
        mask.map_err(|e| err(kernel, format!("evaluating the variant's MASK: {e}")))
    }

    fn shape(&self, kernel: &str, file: &Path) -> String {
        let r = &self.row;
        let (q, l) = r.seqs.first().copied().unwrap_or((0, 0));
        let v = &self.loaded.variant;
        let mut own: Vec<String> = v
            .constexprs
            .iter()
            .map(|(n, x)| format!("{n}={x}"))
            .collect();
        if let Some(k) = self.loaded.aux {
            own.push(format!("aux {k:?}"));
        }
        format!(
            "{kernel} + variant {} ({}{}) [{} geometry: {} x (q {q}, kv {l}), Hq {} / Hkv {}, D {}, scale {:.4}]",
            v.mask,
            file.display(),
            if own.is_empty() { String::new() } else { format!("; {}", own.join(", ")) },
            r.id,
            r.seqs.len(),
            r.heads.0,
            r.heads.1,
            r.head_size,
            1.0 / (r.head_size as f64).sqrt()
        )
    }
}

/// `attn run <preset> --variant ..`: the op with the variant against the dense f64
/// reference of its own DSL mask.
pub fn run(
    kernel: &str,
    raw: &[String],
    file: &Path,
    fns: &VariantFns,
    force_cpu: bool,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let case = prepare(kernel, raw, file, fns)?;
    let started = Instant::now();
    let mask = case.dense_mask(kernel)?;
    write(
        out,
        &format!(
            "{}'s DSL mask on the CPU executor: {} allowed (query, key) pairs, {:.1} ms\n",
            case.loaded.variant.mask,
            mask.allowed_pairs(),
            started.elapsed().as_secs_f64() * 1e3
        ),
    )?;
    let problem = case.data.problem(AttentionOptions::default());
    let op = OpCase {
        kernel,
        path: case.row.path,
        data: &case.data,
        problem: &problem,
        mm_ranges: (&[], 0),
        variant: Some(case.cpu_variant()),
    };
    let header = case.shape(kernel, file);
    let reference = || {
        Ok(masked_reference(&case.data, &|s, q, k| {
            mask.allowed(s, q, k)
        }))
    };
    run_checked(&op, &header, reference, force_cpu, out)
}

/// `attn bench <preset> --variant ..`: the op with the variant timed with CUDA events,
/// after one checked call (every output written, finite, padding untouched). Useful FLOPs
/// count the pairs the variant's DSL mask allows; bytes are q, out and the whole KV once.
#[allow(clippy::too_many_arguments)]
pub fn bench_one(
    dev: &CudaDevice,
    kernel: &str,
    raw: &[String],
    file: &Path,
    fns: &VariantFns,
    runs: usize,
    warmup: usize,
    tick: &dyn Fn(),
) -> Result<BenchResult, CliError> {
    let case = prepare(kernel, raw, file, fns)?;
    let pairs = case.dense_mask(kernel)?.allowed_pairs();
    let ctx = UnifiedAttentionContext::new(dev, dev.default_stream(), context_options())
        .map_err(|e| err(kernel, e.to_string()))?;
    let v = case.cpu_variant();
    let mut dp = DeviceVariantProblem::<bf16>::upload(ctx.stream(), &case.data, v.aux_i32, None)
        .map_err(|e| err(kernel, e.to_string()))?;
    let variant = Some(&case.loaded.variant);
    dp.run_checked(&ctx, &case.data, variant, case.row.path)
        .map_err(|e| err(kernel, format!("GPU op: {e}")))?;
    let mut args = dp.args(&case.data, variant, case.row.path);
    let (report, times) =
        time_op(&ctx, &mut args, runs, warmup, tick).map_err(|e| err(kernel, e))?;
    let (hq, d) = (case.row.heads.0, case.row.head_size);
    Ok(BenchResult::from_runs(
        &format!("{kernel}+{}", case.loaded.variant.mask),
        &bench_key(&report),
        &case.shape(kernel, file),
        4.0 * (hq * d) as f64 * pairs as f64,
        case.row.io_bytes(),
        &times,
    ))
}
