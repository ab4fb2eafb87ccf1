//! `attn run` / `attn bench` of the unified-attention presets (`unified_attention` = P1,
//! `_p0`, `_p3`, `_d1`), through the public op rather than the registry's one-kernel model:
//! the op plans and launches one or two kernels (3D: attention + reduce) over a paged cache.
//!
//! `run` builds the preset's problem (random bf16 inputs from SplitMix64 in a shuffled paged
//! cache, the preset's window, image ranges and scale), runs it on the GPU through
//! `ops::unified_attention::gpu::unified_attention` (or through the DSL kernels on the CPU
//! executor, `ops::unified_attention::cpu`) and checks it against the dense f64 reference.
//! `bench` times the op with CUDA events on the criterion bench's problem
//! ([`crate::bench::unified::Prepared`]). `SEQ=<n>` sets the sequence length (prefill:
//! query length too), `SEQS=<n>` the number of sequences.

use std::io::Write;
use std::time::{Duration, Instant};

use cudarc::driver::DriverError;
use half::bf16;

use super::CliError;
use crate::bench::unified::{context_options, Prepared, Row, PRESETS};
use crate::bench::BenchResult;
use crate::launch::CudaDevice;
use crate::ops::unified_attention::args::UnifiedAttentionArgs;
use crate::ops::unified_attention::cpu::{run_unified_attention_cpu, CpuOptions, CpuVariant};
use crate::ops::unified_attention::gpu::{
    run_plan, AttnError, LaunchReport, UnifiedAttentionContext,
};
use crate::ops::unified_attention::plan::PathChoice;
use crate::reference::unified_attention::{
    unified_attention as reference, AttentionOptions, MmRanges, ReferenceError,
    UnifiedAttentionProblem,
};
use crate::registry::parse_binding;
use crate::testing::device_variant::DeviceVariantProblem;
use crate::testing::{Geometry, PagedData, ATOL, RTOL};
use crate::timing::time_runs;
use attn_dsl::ConstValue;

/// The problem knobs these presets take.
const KNOBS: &str = "SEQ=<sequence length> (prefill rows: the query length too), \
                     SEQS=<number of sequences>";

/// Whether `name` is a unified-attention preset entry.
pub fn is_preset(name: &str) -> bool {
    PRESETS.iter().any(|(n, _)| *n == name)
}

pub(super) fn err(kernel: &str, message: impl Into<String>) -> CliError {
    CliError::Build {
        kernel: kernel.into(),
        message: message.into(),
    }
}

/// The preset's row with `SEQ` / `SEQS` applied. `strict`: any other binding is an error
/// (`run`); otherwise other bindings are ignored (`bench --set` applies to every kernel).
pub fn preset_row(kernel: &str, raw: &[String], strict: bool) -> Result<Row, CliError> {
    let mut row =
        Row::preset(kernel).ok_or_else(|| err(kernel, "not a unified-attention preset"))?;
    for r in raw {
        let b = parse_binding(r)?;
        let positive = || match b.value {
            ConstValue::Int(v) if v > 0 => Ok(v as usize),
            _ => Err(err(
                kernel,
                format!("`{r}`: {} must be a positive integer", b.name),
            )),
        };
        match b.name.as_str() {
            "SEQ" => row = row.with_seq_len(positive()?),
            "SEQS" => row = row.with_num_seqs(positive()?),
            _ if !strict => {}
            _ => {
                return Err(err(
                    kernel,
                    format!(
                        "`{r}`: the preset takes {KNOBS}; the constexprs are the op's plan \
                         for the shape (see `attn emit {kernel}`)"
                    ),
                ))
            }
        }
    }
    Ok(row)
}

fn shape(row: &Row) -> String {
    let (q, l) = row.seqs.first().copied().unwrap_or((0, 0));
    format!(
        "{} {} x (q {q}, kv {l}), Hq {} / Hkv {}, D {}, W {}, {} image ranges{}, scale {:.4}",
        row.id,
        row.seqs.len(),
        row.heads.0,
        row.heads.1,
        row.head_size,
        row.sliding_window,
        row.mm_ranges.len(),
        if row.clamp { " (clamped)" } else { "" },
        row.softmax_scale()
    )
}

/// `attn run <preset>`: the op on the GPU (or the CPU executor) against the f64 reference.
pub fn run(
    kernel: &str,
    raw: &[String],
    force_cpu: bool,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let row = preset_row(kernel, raw, true)?;
    let data = PagedData::random(&Geometry::new(&row.seqs, row.heads, row.head_size), 1);
    let ranges: Vec<[i32; 2]> = row
        .seqs
        .iter()
        .flat_map(|_| row.mm_ranges.iter().copied())
        .collect();
    let options = AttentionOptions {
        sliding_window: row.sliding_window,
        mm_ranges: if ranges.is_empty() {
            MmRanges::None
        } else {
            MmRanges::PerSequence(&ranges, row.mm_ranges.len())
        },
        mm_prefix_clamp_sw: row.clamp,
        ..AttentionOptions::default()
    };
    let problem = {
        let mut p = data.problem(options);
        p.scale = row.softmax_scale();
        p
    };
    let header = format!("{kernel} [{}]", shape(&row));
    let case = OpCase {
        kernel,
        path: row.path,
        data: &data,
        problem: &problem,
        mm_ranges: (&ranges, row.mm_ranges.len()),
        variant: None,
    };
    run_checked(
        &case,
        &header,
        || reference_by_kv_head(&problem).map_err(|e| e.to_string()),
        force_cpu,
        out,
    )
}

/// One run of the op: the problem, the preset's path and image ranges, and a variant.
pub struct OpCase<'a> {
    pub kernel: &'a str,
    pub path: PathChoice,
    pub data: &'a PagedData,
    /// The reference's view of `data`: scale, window, image ranges, clamp.
    pub problem: &'a UnifiedAttentionProblem<'a>,
    /// Per-sequence image ranges (flattened `[S, R]`) and R.
    pub mm_ranges: (&'a [[i32; 2]], usize),
    pub variant: Option<CpuVariant<'a>>,
}

/// Runs `case` on the GPU (or the CPU executor) while `reference` runs on other cores,
/// prints `header`, where it ran, the times and the verdict; a mismatch is an error.
pub fn run_checked(
    case: &OpCase<'_>,
    header: &str,
    reference: impl FnOnce() -> Result<Vec<f64>, String> + Send,
    force_cpu: bool,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let kernel = case.kernel;
    let on_gpu = !force_cpu && CudaDevice::is_available();
    if !on_gpu && !force_cpu {
        write(out, "no GPU: running on the CPU executor\n")?;
    }
    let pb = super::progress::spinner(format!(
        "{kernel}: the op on the {} while the dense f64 reference runs",
        if on_gpu { "GPU" } else { "CPU executor" }
    ));
    let (op, (want, ref_elapsed)) = std::thread::scope(|scope| {
        let reference = scope.spawn(|| {
            let t = Instant::now();
            (reference(), t.elapsed())
        });
        let op = run_op(case, on_gpu);
        let want = reference.join().expect("the reference thread panicked");
        (op, want)
    });
    pb.finish_and_clear();
    let (where_, path, got, elapsed) = op?;
    let want = want.map_err(|e| err(kernel, format!("reference: {e}")))?;
    let verdict = judge(&got, &want);
    write(
        out,
        &format!(
            "{header} on {where_}: {path}, {:.1} ms (dense f64 reference {:.1} ms)\n  {}\n",
            elapsed.as_secs_f64() * 1e3,
            ref_elapsed.as_secs_f64() * 1e3,
            verdict.line
        ),
    )?;
    if verdict.failed > 0 {
        return Err(err(kernel, verdict.line));
    }
    Ok(())
}

/// The op on the GPU or the CPU executor: where it ran, its path, `[T, Hq, D]`, its time.
fn run_op(
    case: &OpCase<'_>,
    on_gpu: bool,
) -> Result<(String, String, Vec<f32>, Duration), CliError> {
    let (kernel, data, problem) = (case.kernel, case.data, case.problem);
    let started = Instant::now();
    let (where_, path, got) = if on_gpu {
        let dev = CudaDevice::new(0)?;
        let ctx = UnifiedAttentionContext::new(&dev, dev.default_stream(), context_options())
            .map_err(|e| err(kernel, e.to_string()))?;
        let v = case.variant;
        let (aux_i32, aux_f32) = (v.and_then(|v| v.aux_i32), v.and_then(|v| v.aux_f32));
        let mut dp = DeviceVariantProblem::<bf16>::upload(ctx.stream(), data, aux_i32, aux_f32)
            .map_err(|e| err(kernel, e.to_string()))?;
        let (ranges, max_ranges) = case.mm_ranges;
        if !ranges.is_empty() {
            dp.set_mm_ranges(ranges, max_ranges)
                .map_err(|e| err(kernel, e.to_string()))?;
        }
        let (got, report) = dp
            .run_checked_with(&ctx, data, v.map(|v| v.variant), case.path, |a| {
                a.softmax_scale = problem.scale as f32;
                a.sliding_window = problem.options.sliding_window;
                a.mm_prefix_clamp_sliding_window = problem.options.mm_prefix_clamp_sw;
            })
            .map_err(|e| err(kernel, format!("GPU op: {e}")))?;
        let path = format!(
            "{} path, tile {}, block_m {}",
            report.path_name(),
            report.config.tile_size,
            report.config.block_m
        );
        (
            format!(
                "GPU ({}, {}) via ops::unified_attention::gpu",
                dev.name(),
                dev.arch()
            ),
            path,
            got,
        )
    } else {
        let cpu = CpuOptions {
            path: case.path,
            variant: case.variant,
            ..CpuOptions::default()
        };
        let run = run_unified_attention_cpu(problem, &cpu)
            .map_err(|e| err(kernel, format!("CPU executor: {e}")))?;
        let path = format!(
            "{} path, tile {}, block_m {}",
            run.plan.path_name(),
            run.plan.config.tile_size,
            run.plan.config.block_m
        );
        (
            "the CPU executor (DSL kernels interpreted, ops::unified_attention::cpu)".to_string(),
            path,
            run.output,
        )
    };
    Ok((where_, path, got, started.elapsed()))
}

/// The dense f64 reference, one KV head (and its query-head group) per task over all
/// cores: the heads are independent when no per-head option (sinks, ALiBi) is set, which
/// holds for the presets. Falls back to one call otherwise.
pub fn reference_by_kv_head(p: &UnifiedAttentionProblem<'_>) -> Result<Vec<f64>, ReferenceError> {
    let (hq, hkv, d) = (p.num_query_heads, p.num_kv_heads, p.head_size);
    let per_head = p.options.sinks.is_some() || p.options.alibi.is_some();
    if hkv <= 1 || d == 0 || !hq.is_multiple_of(hkv) || per_head {
        return reference(p);
    }
    let g = hq / hkv;
    let tokens = p.q.len() / (hq * d);
    let slots = p.k_cache.len() / (hkv * d);
    let one_head = |h: usize| -> Result<Vec<f64>, ReferenceError> {
        let q: Vec<f32> = (0..tokens)
            .flat_map(|t| {
                p.q[(t * hq + h * g) * d..(t * hq + (h + 1) * g) * d]
                    .iter()
                    .copied()
            })
            .collect();
        let slice = |c: &[f32]| -> Vec<f32> {
            (0..slots)
                .flat_map(|s| c[(s * hkv + h) * d..(s * hkv + h + 1) * d].iter().copied())
                .collect()
        };
        let (k, v) = (slice(p.k_cache), slice(p.v_cache));
        reference(&UnifiedAttentionProblem {
            q: &q,
            num_query_heads: g,
            k_cache: &k,
            v_cache: &v,
            num_kv_heads: 1,
            ..*p
        })
    };
    let threads = std::thread::available_parallelism()
        .map_or(4, |t| t.get())
        .min(hkv);
    let parts: Vec<(usize, Result<Vec<f64>, ReferenceError>)> = std::thread::scope(|scope| {
        let one_head = &one_head;
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                scope.spawn(move || {
                    (i..hkv)
                        .step_by(threads)
                        .map(|h| (h, one_head(h)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("a reference thread panicked"))
            .collect()
    });
    let mut out = vec![0.0; tokens * hq * d];
    for (h, part) in parts {
        let part = part?;
        for t in 0..tokens {
            out[(t * hq + h * g) * d..(t * hq + (h + 1) * g) * d]
                .copy_from_slice(&part[t * g * d..(t + 1) * g * d]);
        }
    }
    Ok(out)
}

pub(super) struct Verdict {
    pub failed: usize,
    pub line: String,
}

/// Every element against `|err| <= ATOL + RTOL·|ref|` (NaN and a length mismatch fail).
pub(super) fn judge(got: &[f32], want: &[f64]) -> Verdict {
    if got.len() != want.len() {
        return Verdict {
            failed: want.len().max(1),
            line: format!(
                "MISMATCH: output has {} elements, the reference {}",
                got.len(),
                want.len()
            ),
        };
    }
    let (mut failed, mut max_abs, mut at) = (0usize, 0.0f64, 0usize);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let e = (f64::from(g) - w).abs();
        let e = if e.is_nan() { f64::INFINITY } else { e };
        // NaN anywhere fails: `ok` only when the comparison holds.
        let ok = e <= ATOL + RTOL * w.abs();
        if !ok {
            failed += 1;
        }
        if e > max_abs {
            (max_abs, at) = (e, i);
        }
    }
    let rule = format!("|err| <= atol {ATOL:.1e} + rtol {RTOL:.1e}*|ref| (spec §7 bf16 tolerance)");
    let worst = format!(
        "max abs err {max_abs:.3e} at element {at} (|ref| {:.3e}, allowed there {:.3e})",
        want.get(at).map_or(0.0, |w| w.abs()),
        want.get(at).map_or(ATOL, |w| ATOL + RTOL * w.abs()),
    );
    let line = if failed == 0 {
        format!("PASS: all {} elements within {rule}; {worst}", want.len())
    } else {
        format!(
            "MISMATCH: {failed} of {} elements outside {rule}; {worst}",
            want.len()
        )
    };
    Verdict { failed, line }
}

#[derive(Debug)]
enum TimedError {
    Driver(DriverError),
    Op(AttnError),
}

impl From<DriverError> for TimedError {
    fn from(e: DriverError) -> Self {
        TimedError::Driver(e)
    }
}

impl std::fmt::Display for TimedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TimedError::Driver(e) => write!(f, "CUDA driver: {e}"),
            TimedError::Op(e) => write!(f, "{e}"),
        }
    }
}

/// The op on `args` timed with CUDA events: `runs` timed calls after `warmup`, on a plan
/// validated once (as the criterion bench does); the first call's report and the times.
pub(super) fn time_op(
    ctx: &UnifiedAttentionContext,
    args: &mut UnifiedAttentionArgs<'_, bf16>,
    runs: usize,
    warmup: usize,
    tick: &dyn Fn(),
) -> Result<(LaunchReport, Vec<f64>), String> {
    let plan = ctx.plan(args).map_err(|e| e.to_string())?;
    let report = run_plan(ctx, &plan, args).map_err(|e| e.to_string())?;
    for _ in 0..warmup {
        run_plan(ctx, &plan, args).map_err(|e| e.to_string())?;
        tick();
    }
    let times = time_runs(ctx.stream(), runs, || {
        tick();
        run_plan(ctx, &plan, args)
            .map(|_| ())
            .map_err(TimedError::Op)
    })
    .map_err(|e| e.to_string())?;
    Ok((report, times))
}

/// The bench key of a launch: path and tiling.
pub(super) fn bench_key(report: &LaunchReport) -> String {
    format!(
        "unified_attention {} path tile {} block_m {}",
        report.path_name(),
        report.config.tile_size,
        report.config.block_m
    )
}

/// `attn bench <preset>`: the op timed with CUDA events, `runs` timed calls after `warmup`,
/// on a plan validated once (as the criterion bench does). Useful FLOPs count the (q, k)
/// pairs the mask allows; bytes are q, out and the whole KV once.
pub fn bench_one(
    dev: &CudaDevice,
    kernel: &str,
    raw: &[String],
    runs: usize,
    warmup: usize,
    tick: &dyn Fn(),
) -> Result<BenchResult, CliError> {
    let row = preset_row(kernel, raw, false)?;
    let ctx = UnifiedAttentionContext::new(dev, dev.default_stream(), context_options())
        .map_err(|e| err(kernel, e.to_string()))?;
    let stream = ctx.stream().clone();
    let mut prepared = Prepared::build(&stream, &row).map_err(|e| err(kernel, e))?;
    let mut args = prepared.args(&row);
    let (report, times) =
        time_op(&ctx, &mut args, runs, warmup, tick).map_err(|e| err(kernel, e))?;
    let key = bench_key(&report);
    Ok(BenchResult::from_runs(
        kernel,
        &key,
        &shape(&row),
        row.useful_flops(),
        row.io_bytes(),
        &times,
    ))
}

pub(super) fn write(out: &mut dyn Write, text: &str) -> Result<(), CliError> {
    out.write_all(text.as_bytes())
        .map_err(|source| CliError::Io {
            path: "<stdout>".into(),
            source,
        })
}
