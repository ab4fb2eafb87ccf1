//! The subcommands. Output goes to a writer so tests can read it.

use super::progress::{bar, spinner};
use super::{CliContext, CliError, Command};
use crate::bench::{render_table, write_json, BenchResult};
use crate::cache::{CacheOutcome, ModuleCache};
use crate::jit::{Arch, JitOptions};
use crate::launch::{CudaDevice, CudaKernelHandle};
use crate::parity::{compare_outputs, run_on_cpu, run_on_gpu, DeviceProblem};
use crate::registry::{merge_bindings, parse_binding, BuiltKernel, KernelEntry};
use crate::timing::time_runs;
use std::io::Write;
use std::time::Instant;

/// Runs one command, writing its report to `out`.
pub fn run(cmd: &Command, ctx: &CliContext, out: &mut dyn Write) -> Result<(), CliError> {
    match cmd {
        Command::Demo => demo(ctx, out),
        Command::Masks(args) => masks(args, out),
        Command::CheckVariant(args) => {
            let pb = spinner(format!(
                "checking the variant: contract, then {} random geometries on the CPU executor",
                args.cases
            ));
            let report = super::check_variant::check_variant(args);
            pb.finish_and_clear();
            let report = report.map_err(|message| CliError::Build {
                kernel: "check-variant".into(),
                message,
            })?;
            write(out, &report)
        }
        Command::List => list(ctx, out),
        Command::Features => features(out),
        Command::Emit { kernel, bindings } => {
            let (_, built) = build(ctx, kernel, bindings)?;
            write(out, &built.cuda.source)
        }
        Command::Compile {
            kernel,
            bindings,
            arch,
        } => compile(ctx, kernel, bindings, arch.as_deref(), out),
        Command::Run {
            kernel,
            bindings,
            set,
            cpu,
            variant,
        } => {
            let all: Vec<String> = bindings.iter().chain(set).cloned().collect();
            match selected(variant, kernel)? {
                Some((file, fns)) => {
                    super::unified_variant::run(kernel, &all, &file, &fns, *cpu, out)
                }
                None => run_kernel(ctx, kernel, &all, *cpu, out),
            }
        }
        Command::Bench {
            kernels,
            bindings,
            runs,
            warmup,
            json,
            variant,
        } => {
            let timing = Timing {
                runs: *runs,
                warmup: *warmup,
                json,
            };
            bench(ctx, kernels, bindings, variant, &timing, out)
        }
    }
}

/// The variant of `--variant`, if any; only the unified-attention presets run one.
fn selected(
    v: &super::unified_variant::VariantSelection,
    kernel: &str,
) -> Result<Option<(std::path::PathBuf, super::variant_file::VariantFns)>, CliError> {
    let fail = |message: String| CliError::Build {
        kernel: kernel.into(),
        message,
    };
    let chosen = v.resolve().map_err(fail)?;
    if chosen.is_some() && !super::unified::is_preset(kernel) {
        return Err(fail(
            "`--variant` runs through the unified-attention op: name a preset \
             (`unified_attention`, `unified_attention_p0`, `_p3`, `_d1`), whose problem \
             geometry it uses"
                .into(),
        ));
    }
    Ok(chosen)
}

/// `attn bench`'s timing flags.
struct Timing<'a> {
    runs: usize,
    warmup: usize,
    json: &'a std::path::Path,
}

fn write(out: &mut dyn Write, text: &str) -> Result<(), CliError> {
    out.write_all(text.as_bytes())
        .map_err(|source| CliError::Io {
            path: "<stdout>".into(),
            source,
        })
}

fn list(ctx: &CliContext, out: &mut dyn Write) -> Result<(), CliError> {
    let mut s = String::new();
    for e in ctx.registry.entries() {
        let defaults: Vec<String> = (e.default_bindings)()
            .iter()
            .map(|b| format!("{}={}", b.name, b.value))
            .collect();
        s.push_str(&format!(
            "{:<12} {}\n{:<12} defaults: {}\n",
            e.name,
            e.summary,
            "",
            defaults.join(" ")
        ));
    }
    write(out, &s)
}

/// The two feature tables, a name and what it does a line.
fn features(out: &mut dyn Write) -> Result<(), CliError> {
    use attn_dsl::features::{OPT_IN, SHIPPED};
    let mut s = String::new();
    for (title, table) in [
        (
            "shipped (ATTN_CODEGEN_DISABLE=a,b switches them off)",
            SHIPPED,
        ),
        ("opt-in (ATTN_CODEGEN_ENABLE=a,b switches them on)", OPT_IN),
    ] {
        s.push_str(&format!("{title}:\n"));
        for (name, what) in table {
            s.push_str(&format!("  {name:<18} {what}\n"));
        }
    }
    write(out, &s)
}

/// Looks up `kernel`, merges bindings over its defaults and specializes it.
fn build<'r>(
    ctx: &'r CliContext,
    kernel: &str,
    raw: &[String],
) -> Result<(&'r KernelEntry, BuiltKernel), CliError> {
    let entry = ctx.registry.get(kernel)?;
    let bindings = merged(entry, raw)?;
    let built = (entry.build)(&bindings).map_err(|message| CliError::Build {
        kernel: kernel.into(),
        message,
    })?;
    Ok((entry, built))
}

fn merged(entry: &KernelEntry, raw: &[String]) -> Result<Vec<attn_dsl::Binding>, CliError> {
    let overrides = raw
        .iter()
        .map(|s| parse_binding(s))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(merge_bindings((entry.default_bindings)(), &overrides)?)
}

fn handle(built: &BuiltKernel) -> CudaKernelHandle {
    match &built.prelude {
        Some(p) => CudaKernelHandle::with_prelude(built.cuda.clone(), p.clone()),
        None => CudaKernelHandle::new(built.cuda.clone()),
    }
}

fn compile(
    ctx: &CliContext,
    kernel: &str,
    raw: &[String],
    arch: Option<&str>,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let (_, built) = build(ctx, kernel, raw)?;
    let arch: Arch = match arch {
        Some(a) => a.parse()?,
        None => CudaDevice::new(0).map(|d| d.arch()).unwrap_or(Arch::SM_90),
    };
    let h = handle(&built);
    let pb = spinner(format!("NVRTC: {} for {arch}", built.key));
    let started = Instant::now();
    let got = ModuleCache::from_env().get_or_compile(&h.source(), &JitOptions::new(arch));
    pb.finish_and_clear();
    let got = got?;
    let m = &got.module;
    let from = match &got.outcome {
        CacheOutcome::Hit => "disk cache hit".to_string(),
        CacheOutcome::Compiled { stored } => {
            format!("compiled{}", if *stored { ", cached" } else { "" })
        }
        CacheOutcome::Rebuilt { why } => format!("rebuilt ({why})"),
        CacheOutcome::Bypassed => "compiled (cache off)".to_string(),
    };
    let mut s = format!(
        "{}\n  entry     {}\n  target    {} ({}, {} bytes), NVRTC {}\n  source    {}\n  time      NVRTC {:.1} ms, total {:.1} ms\n  key       {}\n",
        built.key,
        m.entry,
        m.arch_label,
        m.image.kind(),
        m.image.len(),
        m.nvrtc_version,
        from,
        m.compile_time.as_secs_f64() * 1e3,
        started.elapsed().as_secs_f64() * 1e3,
        got.key,
    );
    for st in &m.stats {
        s.push_str(&format!(
            "  {}: {} registers, {} B spill stores, {} B spill loads, {} B stack, smem {} B static + {} B dynamic{}\n",
            st.function,
            st.registers,
            st.spill_store_bytes,
            st.spill_load_bytes,
            st.stack_frame_bytes,
            st.shared_bytes,
            built.cuda.shared_bytes,
            if st.spills() { "  [SPILLS]" } else { "" }
        ));
    }
    if m.stats.is_empty() {
        // The CUDA 13.0 NVRTC of the GPU host logs ptxas only for a process's first sm_90a
        // compile; a launch takes the same numbers from the driver (`LoadedKernel::stats`).
        s.push_str("  no ptxas statistics in NVRTC's log\n");
    }
    write(out, &s)
}

fn run_kernel(
    ctx: &CliContext,
    kernel: &str,
    raw: &[String],
    force_cpu: bool,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    if super::unified::is_preset(kernel) {
        return super::unified::run(kernel, raw, force_cpu, out);
    }
    let (entry, built) = build(ctx, kernel, raw)?;
    let bindings = merged(entry, raw)?;
    let problem = (entry.problem)(&bindings).map_err(|message| CliError::Build {
        kernel: kernel.into(),
        message,
    })?;
    let want = (entry.reference)(&problem);
    let on_gpu = !force_cpu && CudaDevice::is_available();
    let started = Instant::now();
    let (where_, got) = if on_gpu {
        let dev = CudaDevice::new(0)?;
        let stream = dev.default_stream();
        let outputs = run_on_gpu(&stream, &handle(&built), &problem)?;
        (format!("GPU ({}, {})", dev.name(), dev.arch()), outputs)
    } else {
        if !force_cpu {
            write(out, "no GPU: running on the CPU executor\n")?;
        }
        let exec = ctx.cpu.as_ref().ok_or_else(|| {
            CliError::NoCpuPath(
                "the CPU executor is not wired into this build (attn_dsl::interp pending)".into(),
            )
        })?;
        let ir = built.ir.as_ref().ok_or_else(|| {
            CliError::NoCpuPath(format!("{kernel} has no IR for the CPU executor"))
        })?;
        let pb = spinner(format!("{kernel}: the CPU executor runs the kernel"));
        let outputs = run_on_cpu(exec.as_ref(), ir, &problem);
        pb.finish_and_clear();
        let outputs = outputs.map_err(|m| CliError::Build {
            kernel: kernel.into(),
            message: format!("CPU executor: {m}"),
        })?;
        ("CPU executor".to_string(), outputs)
    };
    let elapsed = started.elapsed();
    let cmp = compare_outputs(&built.key, "vs reference", &got, &want, entry.tolerance)?;
    let mut s = format!(
        "{} [{}] on {where_}: {:.1} ms\n",
        built.key,
        problem.label,
        elapsed.as_secs_f64() * 1e3
    );
    let tol = entry.tolerance;
    for c in cmp {
        // Say which rule judged it: a large relative error can only pass where |ref| is
        // small enough for atol to cover it.
        s.push_str(&format!(
            "  {}: {} elements within |err| <= atol {:.1e} + rtol {:.1e}*|ref| (max abs err {:.3e}; \
             max rel err {:.3e}, where |ref| is small and atol decides)\n",
            c.name, c.checked, tol.atol, tol.rtol, c.max_abs_err, c.max_rel_err
        ));
    }
    write(out, &s)
}

fn bench(
    ctx: &CliContext,
    kernels: &[String],
    raw: &[String],
    variant: &super::unified_variant::VariantSelection,
    timing: &Timing<'_>,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let (runs, warmup, json) = (timing.runs, timing.warmup, timing.json);
    let names: Vec<String> = match (kernels.is_empty(), variant.file.is_some()) {
        (true, true) => vec!["unified_attention".into()],
        (true, false) => ctx.registry.names().iter().map(|s| s.to_string()).collect(),
        (false, _) => kernels.to_vec(),
    };
    let mut chosen = None;
    for name in &names {
        chosen = selected(variant, name)?;
    }
    if !CudaDevice::is_available() {
        return Err(CliError::NoGpu("no CUDA driver or device found".into()));
    }
    let dev = CudaDevice::new(0)?;
    let stream = dev.default_stream();
    let pb = bar((names.len() * (runs + warmup)) as u64);
    let mut results = Vec::new();
    for name in &names {
        if let Some((file, fns)) = &chosen {
            pb.set_message(format!("{name} + {}", fns.mask.as_deref().unwrap_or("?")));
            let tick = || pb.inc(1);
            results.push(super::unified_variant::bench_one(
                &dev, name, raw, file, fns, runs, warmup, &tick,
            )?);
            continue;
        }
        if super::unified::is_preset(name) {
            pb.set_message(name.clone());
            let tick = || pb.inc(1);
            results.push(super::unified::bench_one(
                &dev, name, raw, runs, warmup, &tick,
            )?);
            continue;
        }
        let entry = ctx.registry.get(name)?;
        // Only the bindings this kernel knows apply to it.
        let known: Vec<String> = (entry.default_bindings)()
            .iter()
            .map(|b| b.name.clone())
            .collect();
        let mine: Vec<String> = raw
            .iter()
            .filter(|r| {
                r.split_once('=')
                    .is_some_and(|(n, _)| known.iter().any(|k| k == n.trim()))
            })
            .cloned()
            .collect();
        let (_, built) = build(ctx, name, &mine)?;
        let problem =
            (entry.problem)(&merged(entry, &mine)?).map_err(|message| CliError::Build {
                kernel: name.clone(),
                message,
            })?;
        let h = handle(&built);
        pb.set_message(format!("{name} (compiling)"));
        h.load(stream.context())?;
        let mut dev_problem = DeviceProblem::upload(&stream, &problem)?;
        pb.set_message(name.clone());
        for _ in 0..warmup {
            dev_problem.launch(&stream, &h)?;
            pb.inc(1);
        }
        let times = time_runs(&stream, runs, || {
            pb.inc(1);
            dev_problem.launch(&stream, &h)
        })?;
        results.push(BenchResult::from_runs(
            name,
            &built.key,
            &problem.label,
            problem.flops,
            problem.bytes,
            &times,
        ));
    }
    pb.finish_and_clear();
    write_json(json, &format!("{} ({})", dev.name(), dev.arch()), &results).map_err(|source| {
        CliError::Io {
            path: json.to_path_buf(),
            source,
        }
    })?;
    write(
        out,
        &format!(
            "{}results written to {}\n",
            render_table(&results),
            json.display()
        ),
    )
}

fn masks(args: &super::masks::MasksArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let pb = spinner("probing the DSL bounds of every q-block on the CPU executor");
    let pic = super::masks::picture(args).map_err(|message| CliError::Build {
        kernel: "unified_attention".into(),
        message,
    })?;
    pb.finish_and_clear();
    write(out, &super::masks::ascii(&pic, args.cols))?;
    if let Some(dir) = args.svg.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| CliError::Io {
            path: dir.into(),
            source,
        })?;
    }
    std::fs::write(&args.svg, super::masks::svg(&pic)).map_err(|source| CliError::Io {
        path: args.svg.clone(),
        source,
    })?;
    write(out, &format!("SVG written to {}\n", args.svg.display()))
}

/// The main job of the README: every registered kernel against its reference, then the
/// seed geometry of spec §4 (Gemma4 sliding layer, one image range wider than the window).
fn demo(ctx: &CliContext, out: &mut dyn Write) -> Result<(), CliError> {
    let where_ = if CudaDevice::is_available() {
        let dev = CudaDevice::new(0)?;
        format!("on the GPU ({}, {})", dev.name(), dev.arch())
    } else {
        "on the CPU executor (no GPU found)".to_string()
    };
    write(out, &format!("attn demo: running {where_}\n\n"))?;
    for entry in ctx.registry.entries() {
        // Unified attention's and MLA history's presets have no one-kernel problem (and the
        // full shapes are too large for the CPU executor): the seed geometry below stands for
        // unified attention, the `mla_*` tests for MLA.
        if (entry.problem)(&(entry.default_bindings)()).is_err() {
            continue;
        }
        run_kernel(ctx, entry.name, &[], false, out)?;
    }
    write(
        out,
        "\nunified attention, Gemma4 sliding layer (L 4096, SW 1024, image [1024, 2303] clamped):\n",
    )?;
    let args = super::masks::MasksArgs {
        seq_len: 4096,
        query_len: None,
        window: 1024,
        q_heads: 16,
        kv_heads: 8,
        head_size: 256,
        ranges: vec![[1024, 2303]],
        no_clamp: false,
        bidirectional: false,
        chunk_lookback: -1,
        cols: 64,
        svg: "device-out/demo-masks.svg".into(),
    };
    masks(&args, out)
}
