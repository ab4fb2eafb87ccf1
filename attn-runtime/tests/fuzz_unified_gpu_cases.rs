//! The GPU unified-attention fuzz's 2 400 calls, classified on the CPU (no `gpu` feature):
//! the same seeds and generator as `gpu_fuzz_unified.rs`, the same device-view lengths,
//! run through the op's own host path (`gpu::plan_host`, what `UnifiedAttentionContext::plan`
//! runs) and then through the launch-time checks that need no driver (the emitted
//! specialization's parameters, grid / block / shared-memory limits of an sm_90 device, the
//! `div16` divisibility promises of its key). Every verdict of the GPU run before a kernel
//! touches memory is decided here, so an accepted-malformed or rejected-valid case fails CI
//! instead of waiting for a GPU run.

mod fuzz_support;

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

use attn_dsl::codegen::CudaKernel;
use attn_dsl::ir::ParamKind;
use attn_runtime::launch::{
    check_map_spec, validate_args, validate_config, ArgSummary, DeviceLimits, Grid, LaunchSpec,
    ParamSpec, TensorMapSpec,
};
use attn_runtime::ops::unified_attention::gpu::{
    check_launch_params, emit_launch, kernel_key, plan_host, AttnError,
};
use attn_runtime::ops::unified_attention::plan::{KernelArg, KernelLaunch, LaunchPlan};
use fuzz_support::outcome::{Outcome, Tally};
use fuzz_support::unified_call::{cache_accepted, gpu_case, gpu_options, host_call, GPU_CASES};
use fuzz_support::unified_oracle::check;

/// Emitted kernels by `kernel_key` (the GPU profile's cases need ~300 specializations).
type Emitted = BTreeMap<String, Result<CudaKernel, String>>;

/// What the launcher checks before the driver call, for one launch of the plan.
fn launchable(launch: &KernelLaunch, emitted: &mut Emitted) -> Result<(), String> {
    if launch.grid.contains(&0) {
        return Ok(()); // nothing launches
    }
    let k = emitted
        .entry(kernel_key(launch))
        .or_insert_with(|| emit_launch(launch).map_err(|e| e.to_string()))
        .as_ref()
        .map_err(Clone::clone)?;
    check_launch_params(launch, &k.params).map_err(|e| e.to_string())?;
    let spec = LaunchSpec {
        entry: k.entry.clone(),
        params: ParamSpec::of_kernel(k),
        block_threads: k.block_threads,
        shared_bytes: k.shared_bytes,
        tensor_maps: TensorMapSpec::of_kernel(k),
    };
    validate_config(&spec, &DeviceLimits::SM90, Grid(launch.grid), 0, 1024)
        .map_err(|e| e.to_string())?;
    for map in &spec.tensor_maps {
        check_map_spec(&spec, map).map_err(|e| e.to_string())?;
    }
    let summaries: Vec<ArgSummary> = launch
        .args
        .iter()
        .zip(&k.params)
        .map(|((_, arg), p)| match (arg, p.kind) {
            (KernelArg::Scalar(v), _) => ArgSummary::Scalar(*v),
            (_, ParamKind::Ptr { elem, mutable }) => ArgSummary::Buffer { elem, mutable },
            (_, ParamKind::Scalar(t)) => unreachable!("check_launch_params: buffer on scalar {t}"),
        })
        .collect();
    validate_args(&spec, &summaries).map_err(|e| e.to_string())
}

/// The GPU run's host-side verdict on case `seed`: cache construction, the op's plan, the
/// launcher's checks.
fn host_verdict(seed: u64, emitted: &mut Emitted) -> Result<LaunchPlan, String> {
    let c = gpu_case(seed);
    if !cache_accepted(&c) {
        return Err("PagedKvCache::from_host refuses the pages".into());
    }
    let plan = plan_host(&host_call(&c), &gpu_options()).map_err(|e: AttnError| e.to_string())?;
    for launch in std::iter::once(&plan.attention).chain(&plan.reduce) {
        launchable(launch, emitted)?;
    }
    Ok(plan)
}

#[test]
fn gpu_fuzz_cases_classify_on_the_host() {
    let mut emitted = Emitted::new();
    let mut tally = Tally::default();
    let mut wrong = Vec::new();
    for seed in 1..=GPU_CASES {
        let verdict = check(&gpu_case(seed));
        let ran = catch_unwind(AssertUnwindSafe(|| host_verdict(seed, &mut emitted)));
        let detail = match &ran {
            Ok(Ok(_)) => "accepted".to_string(),
            Ok(Err(e)) => e.clone(),
            Err(_) => "panicked".to_string(),
        };
        let outcome = Outcome::of(ran, verdict.is_ok());
        tally.add(outcome);
        if !outcome.is_correct() {
            wrong.push(format!(
                "seed {seed}: {outcome:?}, oracle {verdict:?}, op {detail}; {:?}",
                gpu_case(seed)
            ));
        }
    }
    println!(
        "GPU fuzz cases on the host: {tally}; {} specializations",
        emitted.len()
    );
    assert!(wrong.is_empty(), "{tally}\n{}", wrong.join("\n"));
    assert!(tally.clean(), "{tally}");
    assert_eq!(tally.total(), GPU_CASES as usize, "{tally}");
    // The GPU run's own floor, and both sides exercised.
    assert!(tally.accepted >= 200 && tally.rejected >= 200, "{tally}");
}
