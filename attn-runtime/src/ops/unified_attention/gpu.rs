//! Unified attention on the GPU (DESIGN §3.6–3.7): validate on the host, plan (the same
//! [`LaunchPlan`] the CPU executor runs), look up or compile the specialization, map the
//! plan's buffer roles to device pointers, launch the attention kernel and, on the 3D path,
//! the segment reduce — all on the context's stream.
//!
//! Everything beyond the inputs lives in a [`UnifiedAttentionContext`] created once: the
//! stream, compiled kernel handles keyed by specialization, stand-in buffers for absent
//! optional inputs and the split-KV workspace. A call for an already-compiled
//! specialization allocates no device memory, so steady-state calls can be graph-captured.

#![deny(clippy::indexing_slicing, clippy::arithmetic_side_effects)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use attn_dsl::codegen::{emit_cuda, CodegenError, CudaKernel};
use attn_dsl::ir::{Param, ParamKind, ScalarType};
use attn_dsl::kernel::DslType;
use attn_dsl::passes::assume::Promises;
use attn_dsl::{Binding, ConstValue};
use cudarc::driver::{CudaSlice, CudaStream, DeviceRepr, DriverError};
use thiserror::Error;

use super::args::{Causal, HostCall, MmPrefixRanges, UnifiedAttentionArgs};
use super::config::{
    seq_threshold_3d, AttentionProblem, ConfigError, MmaKind, SplitKvWorkspace,
    UnifiedAttentionConfig,
};
use super::limits::check_scalars;
use super::plan::{
    choose_config, plan_launch, BufferRole, KernelArg as PlanArg, KernelLaunch, LaunchPlan,
    MaskVariant, PlanError, SegmentWorkspace,
};
use super::validate::{validate_inputs, InputError};
use super::variant::{validate_aux, AuxError, VariantModule};
use super::variant_args::AuxTensor;
use crate::kernels::dsl_module::ModuleLoadError;
use crate::kernels::specialization_cache::specialize_cached;
use crate::kernels::unified_attention;
use crate::launch::{scalar_type, CudaDevice, CudaKernelHandle, Grid, KernelArg, LaunchError};

/// Why a GPU unified-attention call did not run.
#[derive(Debug, Error)]
pub enum AttnError {
    /// The inputs failed host validation.
    #[error("invalid input: {0}")]
    Input(#[from] InputError),
    /// The configuration is not one the kernels support.
    #[error("invalid configuration: {0}")]
    Config(#[from] ConfigError),
    /// No launch plan fits the call.
    #[error("no launch plan: {0}")]
    Plan(#[from] PlanError),
    /// Loading the DSL kernel module failed.
    #[error("loading the DSL module: {0}")]
    Module(#[from] ModuleLoadError),
    /// A user variant's aux inputs are invalid.
    #[error("variant input: {0}")]
    Aux(#[from] AuxError),
    /// Specializing a DSL kernel for the call's constexprs failed.
    #[error("specializing `{kernel}` ({file}:{line}): {message}")]
    Specialize {
        /// Name of the kernel.
        kernel: String,
        /// Source file of the failing construct.
        file: String,
        /// Line in that file.
        line: usize,
        /// What failed.
        message: String,
    },
    /// Emitting CUDA for a specialization failed.
    #[error("emitting CUDA for {key}: {source}")]
    Codegen {
        /// The specialization key.
        key: String,
        /// The codegen error.
        #[source]
        source: CodegenError,
    },
    /// A kernel launch failed.
    #[error(transparent)]
    Launch(#[from] LaunchError),
    /// A host metadata copy and its device view have different lengths.
    #[error(
        "{what}: the host copy has {host} values but the device buffer {device}; the host copy \
         must mirror the device data"
    )]
    HostDeviceMismatch {
        /// Name of the metadata argument.
        what: &'static str,
        /// Values in the host copy.
        host: usize,
        /// Elements in the device view.
        device: usize,
    },
    /// A device buffer is shorter than its layout reaches.
    #[error("{what} buffer holds {len} elements; its layout reaches element {needed}")]
    BufferTooSmall {
        /// Name of the buffer.
        what: &'static str,
        /// Elements the buffer holds.
        len: usize,
        /// Elements its layout needs.
        needed: usize,
    },
    /// The 3D path needs more split-KV workspace than the context holds.
    #[error(
        "the 3D path needs {needed} f32 values of {buffer} ({tokens} tokens x {heads} heads x \
         {segments} segments{per_row}) but the context's {buffer} holds {capacity}; size \
         ContextOptions::workspace for it"
    )]
    WorkspaceTooSmall {
        /// `segm_output`, or `segm_max / segm_expsum`.
        buffer: &'static str,
        /// ` x {padded} padded head size` for `segm_output`, empty for the statistics.
        per_row: String,
        /// f32 values the call needs.
        needed: usize,
        /// f32 values the context's buffer holds.
        capacity: usize,
        /// Tokens of the call.
        tokens: usize,
        /// Query heads of the call.
        heads: usize,
        /// KV segments of the 3D path.
        segments: usize,
        /// Padded head size Dp of the workspace layout.
        padded: usize,
    },
    /// The 3D path was chosen without a split-KV workspace.
    #[error("the 3D path was chosen but the context has no split-KV workspace (ContextOptions::workspace is None)")]
    NoWorkspace,
    /// A kernel parameter does not match the argument the plan passes at its position.
    #[error("kernel `{kernel}` parameter {index} is `{param}` but the plan passes `{planned}` (or an argument of another kind)")]
    ParamOrder {
        /// Name of the kernel.
        kernel: String,
        /// Parameter index.
        index: usize,
        /// The kernel's parameter.
        param: String,
        /// What the plan passes there.
        planned: String,
    },
    /// The call provides no buffer for a kernel parameter (or the plan names it twice).
    #[error("kernel `{kernel}` parameter `{param}`: the call provides no buffer for it (or the plan names it twice)")]
    MissingBuffer {
        /// Name of the kernel.
        kernel: String,
        /// The parameter without a buffer.
        param: String,
    },
    /// A CUDA driver call failed.
    #[error("CUDA driver call failed while {during}: {source}")]
    Driver {
        /// What the op was doing.
        during: &'static str,
        /// The driver error.
        #[source]
        source: DriverError,
    },
    /// A kernel compile worker thread panicked.
    #[error("a kernel compile worker panicked while compiling {key}")]
    WorkerPanicked {
        /// The specialization key being compiled.
        key: String,
    },
    /// A specialization would be compiled while the stream captures a CUDA graph.
    #[error(
        "{key} is not compiled yet and the stream is capturing a graph: compiling and loading \
         inside a capture is not capturable; run the call once (or precompile) before capturing"
    )]
    CompileDuringCapture {
        /// The specialization key not yet compiled.
        key: String,
    },
    /// Capturing or launching a CUDA graph failed.
    #[error(transparent)]
    Graph(#[from] crate::graph::GraphError),
}

fn driver(during: &'static str) -> impl FnOnce(DriverError) -> AttnError {
    move |source| AttnError::Driver { during, source }
}

/// Capacity of the split-KV workspace `[tokens, Hq, NSEG, Dp]` (f32) the context allocates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkspaceCapacity {
    /// Largest token count a 3D call may have (decode: one token per sequence).
    pub max_tokens: usize,
    /// Largest query head count `Hq`.
    pub max_query_heads: usize,
    /// Largest head size (padded to a power of two for the layout).
    pub max_head_size: usize,
    /// Largest segment count NSEG of the 3D path.
    pub max_segments: usize,
}

impl WorkspaceCapacity {
    /// Elements of `segm_max` / `segm_expsum` (saturating: an impossible capacity fails
    /// its allocation instead of wrapping to a small one).
    pub fn stats_len(&self) -> usize {
        self.max_tokens
            .saturating_mul(self.max_query_heads)
            .saturating_mul(self.max_segments)
    }
    /// Elements of `segm_output`.
    pub fn output_len(&self) -> usize {
        let padded = self
            .max_head_size
            .checked_next_power_of_two()
            .unwrap_or(usize::MAX);
        self.stats_len().saturating_mul(padded)
    }
}

/// What a context is created with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContextOptions {
    /// The §6 heuristic's split-KV settings (`None`: the heuristic always picks 2D).
    pub split_kv: Option<SplitKvWorkspace>,
    /// The 3D workspace to preallocate (`None`: 3D calls fail with [`AttnError::NoWorkspace`]).
    pub workspace: Option<WorkspaceCapacity>,
}

impl ContextOptions {
    /// vLLM's backend defaults for one layer geometry: `seq_threshold_3D = 128 / Hkv`,
    /// 16 segments, a workspace for that many decode tokens.
    pub fn vllm_defaults(num_query_heads: usize, num_kv_heads: usize, head_size: usize) -> Self {
        let threshold = seq_threshold_3d(i32::try_from(num_kv_heads).unwrap_or(i32::MAX));
        Self::split_kv_up_to(threshold, num_query_heads, head_size)
    }

    /// This library's measured launch table for one layer geometry: split-KV for decode
    /// batches whose 2D grid has fewer than
    /// [`DECODE_2D_PROGRAMS`](super::plan::DECODE_2D_PROGRAMS) programs (63 sequences at
    /// Hkv 8; vLLM's `128 / Hkv` threshold is tuned for its own kernel), up to 16 segments,
    /// and a workspace for that many decode tokens.
    pub fn measured(num_query_heads: usize, num_kv_heads: usize, head_size: usize) -> Self {
        let hkv = i32::try_from(num_kv_heads.max(1)).unwrap_or(i32::MAX);
        let threshold = super::plan::DECODE_2D_PROGRAMS
            .saturating_sub(1)
            .checked_div(hkv)
            .unwrap_or(1)
            .max(1);
        Self::split_kv_up_to(threshold, num_query_heads, head_size)
    }

    /// Split-KV (16 segments) for decode batches of up to `threshold` sequences, with a
    /// workspace for that many decode tokens.
    fn split_kv_up_to(threshold: i32, num_query_heads: usize, head_size: usize) -> Self {
        ContextOptions {
            split_kv: Some(SplitKvWorkspace {
                seq_threshold_3d: threshold,
                num_segments: 16,
            }),
            workspace: Some(WorkspaceCapacity {
                max_tokens: threshold.max(1) as usize,
                max_query_heads: num_query_heads,
                max_head_size: head_size,
                max_segments: 16,
            }),
        }
    }

    /// 2D only: no heuristic 3D, no workspace.
    pub fn two_d_only() -> Self {
        ContextOptions {
            split_kv: None,
            workspace: None,
        }
    }
}

/// The three f32 buffers of the 3D path (or 4-element stand-ins for 2D launches, whose
/// kernel declares them `*mut` but never touches them).
struct SegmentBuffers {
    output: CudaSlice<f32>,
    max: CudaSlice<f32>,
    expsum: CudaSlice<f32>,
}

impl SegmentBuffers {
    fn zeros(stream: &Arc<CudaStream>, stats: usize, output: usize) -> Result<Self, AttnError> {
        let alloc = |n: usize| {
            stream
                .alloc_zeros::<f32>(n.max(4))
                .map_err(driver("allocating the split-KV workspace"))
        };
        Ok(SegmentBuffers {
            output: alloc(output)?,
            max: alloc(stats)?,
            expsum: alloc(stats)?,
        })
    }
}

/// Device buffers the context owns and launches write through `&self` (hence the mutex).
struct ContextBuffers {
    workspace: Option<SegmentBuffers>,
    workspace_dummies: SegmentBuffers,
    /// Stand-in for absent read-only f32 inputs (sinks, ALiBi, qq_bias).
    dummy_f32: CudaSlice<f32>,
    /// Stand-in for absent read-only i32 inputs (ranges, per-sequence flags, ...).
    dummy_i32: CudaSlice<i32>,
}

/// One launched kernel, for the report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchedKernel {
    /// `kernel<NAME=value,...>`: the specialization key.
    pub key: String,
    /// Content hash of the generated CUDA.
    pub cuda_hash: String,
    /// Grid dims.
    pub grid: [u32; 3],
    /// Threads per block.
    pub block_threads: u32,
    /// Dynamic shared memory, in bytes.
    pub shared_bytes: u32,
}

/// What one call chose and launched.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchReport {
    /// The specialization the call chose.
    pub config: UnifiedAttentionConfig,
    /// The attention kernel launched.
    pub attention: LaunchedKernel,
    /// The 3D segment reduce.
    pub reduce: Option<LaunchedKernel>,
    /// Specializations this call had to compile (0 in steady state).
    pub compiled: usize,
}

impl LaunchReport {
    /// `2D` or `3D`.
    pub fn path_name(&self) -> &'static str {
        if self.config.is_3d {
            "3D"
        } else {
            "2D"
        }
    }
}

/// Reusable state of the GPU op: stream, compiled specializations, stand-in buffers and
/// the split-KV workspace. Create once per device (and layer family), call many times.
pub struct UnifiedAttentionContext {
    device: CudaDevice,
    stream: Arc<CudaStream>,
    options: ContextOptions,
    kernels: Mutex<BTreeMap<String, Arc<CudaKernelHandle>>>,
    buffers: Mutex<ContextBuffers>,
}

impl UnifiedAttentionContext {
    /// Allocates the workspace and stand-ins on `stream` (which must belong to `device`).
    pub fn new(
        device: &CudaDevice,
        stream: Arc<CudaStream>,
        options: ContextOptions,
    ) -> Result<Self, AttnError> {
        let workspace = options
            .workspace
            .map(|w| SegmentBuffers::zeros(&stream, w.stats_len(), w.output_len()))
            .transpose()?;
        let buffers = ContextBuffers {
            workspace,
            workspace_dummies: SegmentBuffers::zeros(&stream, 4, 4)?,
            dummy_f32: stream
                .alloc_zeros(4)
                .map_err(driver("allocating stand-in buffers"))?,
            dummy_i32: stream
                .alloc_zeros(4)
                .map_err(driver("allocating stand-in buffers"))?,
        };
        Ok(UnifiedAttentionContext {
            device: device.clone(),
            stream,
            options,
            kernels: Mutex::new(BTreeMap::new()),
            buffers: Mutex::new(buffers),
        })
    }

    /// The device this context launches on.
    pub fn device(&self) -> &CudaDevice {
        &self.device
    }
    /// The stream every launch of this context goes to.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
    /// The options the context was created with (workspace capacity, path limits).
    pub fn options(&self) -> &ContextOptions {
        &self.options
    }

    /// Number of specializations compiled and loaded so far.
    pub fn compiled_count(&self) -> usize {
        lock(&self.kernels).len()
    }

    /// Validates a call and plans it, without launching (host only).
    pub fn plan<T: DslType>(
        &self,
        args: &UnifiedAttentionArgs<'_, T>,
    ) -> Result<LaunchPlan, AttnError> {
        args.check_buffers()?;
        validate_inputs(&args.inputs())?;
        check_scalars(&args.scalars())?;
        if let Some(v) = &args.variant {
            validate_aux(
                v.variant,
                args.seq_lens.host,
                v.aux_i32.as_ref().map(AuxTensor::view),
                v.aux_f32.as_ref().map(AuxTensor::view),
            )?;
        }
        let problem = AttentionProblem {
            mma: MmaKind::for_arch(self.device.arch()),
            ..args.attention_problem(self.options.split_kv)
        };
        let cfg = choose_config(&problem, args.path)?;
        let mask = args
            .variant
            .as_ref()
            .map_or_else(MaskVariant::default, |v| v.variant.mask_variant());
        let mut plan = plan_launch(&cfg, &args.launch_shape(), T::TYPE, &mask)?;
        plan.variant = args.variant.as_ref().map(|v| VariantModule::of(v.variant));
        if let Some(ws) = plan.workspace {
            let cap = self.options.workspace.ok_or(AttnError::NoWorkspace)?;
            check_workspace(&ws, &cap)?;
        }
        Ok(plan)
    }

    /// Compiles (NVRTC, or the disk cache) every specialization the plans need that is not
    /// loaded yet, on up to `threads` threads; returns how many were compiled. Tests and
    /// benches call it to pay compile time once, in parallel, before timing or checking.
    pub fn precompile(&self, plans: &[LaunchPlan], threads: usize) -> Result<usize, AttnError> {
        let mut jobs: BTreeMap<String, Job> = BTreeMap::new();
        {
            let loaded = lock(&self.kernels);
            for (launch, variant) in plans.iter().flat_map(launches) {
                let key = kernel_key_for(launch, variant);
                if !loaded.contains_key(&key) {
                    jobs.entry(key).or_insert_with(|| Job::of(launch, variant));
                }
            }
        }
        let jobs: Vec<(String, Job)> = jobs.into_iter().collect();
        let next = AtomicUsize::new(0);
        let done: Mutex<Vec<(String, Result<CudaKernelHandle, AttnError>)>> = Mutex::new(vec![]);
        let workers = threads.clamp(1, jobs.len().max(1));
        let ctx = self.stream.context();
        std::thread::scope(|s| {
            for _ in 0..workers {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some((key, job)) = jobs.get(i) else { break };
                    let built = job.build(key).and_then(|h| {
                        h.load(ctx)?;
                        Ok(h)
                    });
                    lock(&done).push((key.clone(), built));
                });
            }
        });
        let done = done.into_inner().unwrap_or_else(|p| p.into_inner());
        if done.len() != jobs.len() {
            let finished: Vec<&String> = done.iter().map(|(k, _)| k).collect();
            let key = jobs
                .iter()
                .map(|(k, _)| k)
                .find(|k| !finished.contains(k))
                .cloned()
                .unwrap_or_default();
            return Err(AttnError::WorkerPanicked { key });
        }
        let mut kernels = lock(&self.kernels);
        let mut compiled: usize = 0;
        for (key, built) in done {
            kernels.insert(key, Arc::new(built?));
            compiled = compiled.saturating_add(1);
        }
        Ok(compiled)
    }

    /// The loaded handle of `launch`'s specialization, compiling it on first use.
    fn kernel(
        &self,
        launch: &KernelLaunch,
        variant: Option<&VariantModule>,
    ) -> Result<ResolvedKernel, AttnError> {
        let cache_key = kernel_key_for(launch, variant);
        let key = launch_key_for(launch, variant);
        let mut kernels = lock(&self.kernels);
        if let Some(h) = kernels.get(&cache_key) {
            return Ok(ResolvedKernel {
                handle: h.clone(),
                key,
                compiled: false,
            });
        }
        // Loading a module may synchronize the context, which a capture cannot record.
        if crate::graph::is_capturing(&self.stream)
            .map_err(driver("querying the capture status"))?
        {
            return Err(AttnError::CompileDuringCapture { key });
        }
        let handle = Job::of(launch, variant).build(&key)?;
        handle.load(self.stream.context())?;
        let handle = Arc::new(handle);
        kernels.insert(cache_key, handle.clone());
        Ok(ResolvedKernel {
            handle,
            key,
            compiled: true,
        })
    }

    fn buffers(&self) -> MutexGuard<'_, ContextBuffers> {
        lock(&self.buffers)
    }
}

/// The whole host side of a call, in the op's order, on its host view (what
/// [`UnifiedAttentionContext::plan`] runs with the context's options): buffer extents and
/// host/device metadata lengths, input validation, the scalar contract, the §6
/// configuration, the launch plan and the 3D workspace fit. Needs no GPU.
pub fn plan_host(call: &HostCall<'_>, options: &ContextOptions) -> Result<LaunchPlan, AttnError> {
    call.check_buffers()?;
    validate_inputs(&call.inputs())?;
    check_scalars(&call.scalars())?;
    let cfg = choose_config(&call.attention_problem(options.split_kv), call.path)?;
    let plan = plan_launch(
        &cfg,
        &call.launch_shape(),
        call.dtype,
        &MaskVariant::default(),
    )?;
    if let Some(ws) = plan.workspace {
        let cap = options.workspace.ok_or(AttnError::NoWorkspace)?;
        check_workspace(&ws, &cap)?;
    }
    Ok(plan)
}

/// Each launch of a plan with the variant module it specializes against (the reduce never
/// reads the mask, so it is shared by every variant).
fn launches(p: &LaunchPlan) -> Vec<(&KernelLaunch, Option<&VariantModule>)> {
    let mut v = vec![(&p.attention, p.variant.as_ref())];
    v.extend(p.reduce.iter().map(|r| (r, None)));
    v
}

/// The call's workspace fits the context's, buffer by buffer; the error names the buffer
/// that does not fit (the layout is flat, so the element counts are what must fit).
pub fn check_workspace(ws: &SegmentWorkspace, cap: &WorkspaceCapacity) -> Result<(), AttnError> {
    let too_small = |buffer, per_row: String, needed, capacity| AttnError::WorkspaceTooSmall {
        buffer,
        per_row,
        needed,
        capacity,
        tokens: ws.num_tokens,
        heads: ws.num_query_heads,
        segments: ws.num_segments,
        padded: ws.head_size_padded,
    };
    if ws.stats_len() > cap.stats_len() {
        return Err(too_small(
            "segm_max / segm_expsum",
            String::new(),
            ws.stats_len(),
            cap.stats_len(),
        ));
    }
    if ws.output_len() > cap.output_len() {
        return Err(too_small(
            "segm_output",
            format!(" x {} padded head size", ws.head_size_padded),
            ws.output_len(),
            cap.output_len(),
        ));
    }
    Ok(())
}

/// A poisoned lock only means another thread panicked after a complete insert; the map
/// and the buffers are still consistent.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// `kernel<NAME=value,...>`: the specialization of a launch of the shipped module.
pub fn launch_key(launch: &KernelLaunch) -> String {
    launch_key_for(launch, None)
}

/// `kernel<NAME=value,...>`, `+wgmma` when generated for warpgroup MMAs: a specialization
/// of the shipped module for a tensor-core target.
pub fn specialization_key(kernel: &str, bindings: &[Binding], mma: MmaKind) -> String {
    let b: Vec<String> = bindings
        .iter()
        .map(|b| format!("{}={}", b.name, b.value))
        .collect();
    let target = match mma {
        MmaKind::Warpgroup => "+wgmma",
        MmaKind::Sync => "",
    };
    format!("{kernel}<{}>{target}", b.join(","))
}

/// The launch's [`specialization_key`], plus `@` and the content hash of a variant's text
/// for a variant's launch, since its device function names alone do not identify it.
pub fn launch_key_for(launch: &KernelLaunch, variant: Option<&VariantModule>) -> String {
    let key = specialization_key(launch.kernel, &launch.bindings, launch.mma);
    match variant {
        None => key,
        Some(v) => format!("{key}@{}", &v.hash[..16]),
    }
}

/// The key of the compiled kernel a launch of the shipped module needs: its
/// specialization plus the stride arguments it may assume are multiples of 16 (two calls
/// with the same bindings but differently aligned strides run different code).
pub fn kernel_key(launch: &KernelLaunch) -> String {
    kernel_key_for(launch, None)
}

/// [`kernel_key`] of a launch that may specialize a variant's module.
pub fn kernel_key_for(launch: &KernelLaunch, variant: Option<&VariantModule>) -> String {
    let promises = promises(launch);
    format!(
        "{}|div16[{}]{}",
        launch_key_for(launch, variant),
        promises.divisible.join(","),
        promises.i32_key()
    )
}

/// What `launch`'s stride arguments promise its specialization: those that are multiples
/// of 16 (what proves paged K/V rows 16-byte aligned, so they move by `cp.async`), and with
/// `ATTN_CODEGEN_ENABLE=wide_mul` the 64-bit ones in `int`'s range (a page times its stride
/// is then one widening multiply). Both are part of its key. Only strides: sizes such as the
/// batch vary call to call and would multiply the specializations for nothing.
pub fn promises(launch: &KernelLaunch) -> Promises {
    promises_with(launch, attn_dsl::features::wide_mul())
}

/// [`promises`], the range promise made or not by `wide`.
fn promises_with(launch: &KernelLaunch, wide: bool) -> Promises {
    let args: Vec<(&'static str, i64, bool)> = stride_args(launch).collect();
    let all: Vec<(&'static str, i64)> = args.iter().map(|&(n, v, _)| (n, v)).collect();
    let sixty_four: Vec<(&'static str, i64)> = args
        .iter()
        .filter(|&&(_, _, is_i64)| wide && is_i64)
        .map(|&(n, v, _)| (n, v))
        .collect();
    Promises::kept_by(&all, &sixty_four)
}

/// The stride arguments of `launch` that are multiples of 16 ([`promises`]).
pub fn divisible_strides(launch: &KernelLaunch) -> Vec<&'static str> {
    promises(launch).divisible
}

/// The integer stride arguments of `launch`: (name, value, whether 64-bit).
fn stride_args(launch: &KernelLaunch) -> impl Iterator<Item = (&'static str, i64, bool)> + '_ {
    use attn_dsl::kernel::ScalarArg::{I32, I64};
    launch.args.iter().filter_map(|(name, a)| {
        let (v, wide) = match a {
            super::plan::KernelArg::Scalar(I32(v)) => (i64::from(*v), false),
            super::plan::KernelArg::Scalar(I64(v)) => (*v, true),
            _ => return None,
        };
        name.contains("stride").then_some((*name, v, wide))
    })
}

/// The 64-bit stride arguments of `launch` in range, whatever the feature says.
#[cfg(test)]
fn strides_in_i32(launch: &KernelLaunch) -> Vec<&'static str> {
    promises_with(launch, true).fits_i32
}

/// A specialization to build, in a form that can cross threads (bindings carry spans,
/// which cannot).
struct Job {
    kernel: &'static str,
    bindings: Vec<(String, ConstValue)>,
    promises: Promises,
    mma: MmaKind,
    variant: Option<VariantModule>,
}

impl Job {
    fn of(launch: &KernelLaunch, variant: Option<&VariantModule>) -> Job {
        Job {
            kernel: launch.kernel,
            bindings: launch
                .bindings
                .iter()
                .map(|b| (b.name.clone(), b.value.clone()))
                .collect(),
            promises: promises(launch),
            mma: launch.mma,
            variant: variant.cloned(),
        }
    }

    /// Specializes (cached IR) and emits CUDA; the handle compiles on its first `load`.
    fn build(&self, key: &str) -> Result<CudaKernelHandle, AttnError> {
        let bindings: Vec<Binding> = self
            .bindings
            .iter()
            .map(|(n, v)| Binding::new(n.clone(), v.clone()))
            .collect();
        Ok(CudaKernelHandle::new(emit(
            self.kernel,
            &bindings,
            self.promises.clone(),
            key,
            self.mma,
            self.variant.as_ref(),
        )?))
    }
}

/// The CUDA the op launches for `launch` of the shipped module (specialization cached).
pub fn emit_launch(launch: &KernelLaunch) -> Result<CudaKernel, AttnError> {
    emit_launch_for(launch, None)
}

/// The CUDA the op launches for the attention launch of `plan`, variant included.
pub fn emit_plan_attention(plan: &LaunchPlan) -> Result<CudaKernel, AttnError> {
    emit_launch_for(&plan.attention, plan.variant.as_ref())
}

/// The CUDA the op launches for `launch` of `variant`'s module (the shipped one for `None`).
pub fn emit_launch_for(
    launch: &KernelLaunch,
    variant: Option<&VariantModule>,
) -> Result<CudaKernel, AttnError> {
    emit(
        launch.kernel,
        &launch.bindings,
        promises(launch),
        &launch_key_for(launch, variant),
        launch.mma,
        variant,
    )
}

fn emit(
    kernel: &str,
    bindings: &[Binding],
    promises: Promises,
    key: &str,
    mma: MmaKind,
    variant: Option<&VariantModule>,
) -> Result<CudaKernel, AttnError> {
    let module = match variant {
        None => unified_attention::module()?,
        Some(v) => v.module()?,
    };
    let f = specialize_cached(&module, kernel, bindings).map_err(|e| AttnError::Specialize {
        kernel: kernel.to_string(),
        file: module.label().to_string(),
        line: e.span.start().line,
        message: e.message,
    })?;
    let mut f = (*f).clone();
    promises
        .apply(&mut f)
        .map_err(|message| AttnError::Specialize {
            kernel: kernel.to_string(),
            file: module.label().to_string(),
            line: 0,
            message,
        })?;
    f.warpgroup_mma = mma == MmaKind::Warpgroup;
    emit_cuda(&f).map_err(|source| AttnError::Codegen {
        key: key.to_string(),
        source,
    })
}

/// Checks the plan's arguments against the specialized kernel's parameters: same names
/// in the same order, every `*mut` parameter given a buffer the op lets kernels write
/// (output, workspace), stand-ins and scalars of the parameter's type. Host only, so CI runs it.
pub fn check_launch_params(launch: &KernelLaunch, params: &[Param]) -> Result<(), AttnError> {
    if params.len() != launch.args.len() {
        return Err(order_error(
            launch,
            params,
            params.len().min(launch.args.len()),
        ));
    }
    for (index, ((name, arg), param)) in launch.args.iter().zip(params).enumerate() {
        let fits = match (arg, param.kind) {
            // A writable buffer may sit on a `*const` parameter (the reduce reads the
            // workspace); an input never on a `*mut` one.
            (PlanArg::Buffer(role), ParamKind::Ptr { mutable, .. }) => !mutable || writes(*role),
            (PlanArg::Dummy(t), ParamKind::Ptr { elem, .. }) => elem == *t,
            (PlanArg::Scalar(v), ParamKind::Scalar(t)) => scalar_type(v) == t,
            _ => false,
        };
        if param.name != *name || !fits {
            return Err(order_error(launch, params, index));
        }
    }
    Ok(())
}

/// Roles the op writes.
fn writes(role: BufferRole) -> bool {
    matches!(
        role,
        BufferRole::Output
            | BufferRole::SegmentOutput
            | BufferRole::SegmentMax
            | BufferRole::SegmentExpSum
    )
}

/// Runs unified attention: validates, plans, compiles on first use, launches the attention
/// kernel and (3D) the segment reduce on the context's stream. `args` is `&mut` because it
/// holds the output view. Returns what was chosen.
pub fn unified_attention<T: DslType + DeviceRepr>(
    ctx: &UnifiedAttentionContext,
    args: &mut UnifiedAttentionArgs<'_, T>,
) -> Result<LaunchReport, AttnError> {
    let plan = ctx.plan(args)?;
    run_plan(ctx, &plan, args)
}

/// Launches an already validated plan (from [`UnifiedAttentionContext::plan`] on the same
/// `args`): benches use it to keep host-side validation out of the timed loop.
pub fn run_plan<T: DslType + DeviceRepr>(
    ctx: &UnifiedAttentionContext,
    plan: &LaunchPlan,
    args: &mut UnifiedAttentionArgs<'_, T>,
) -> Result<LaunchReport, AttnError> {
    let attention = ctx.kernel(&plan.attention, plan.variant.as_ref())?;
    let reduce = match &plan.reduce {
        Some(l) => Some((l, ctx.kernel(l, None)?)),
        None => None,
    };
    let mut buffers = ctx.buffers();
    launch(ctx, &attention.handle, &plan.attention, args, &mut buffers)?;
    if let Some((l, r)) = &reduce {
        launch(ctx, &r.handle, l, args, &mut buffers)?;
    }
    Ok(LaunchReport {
        config: plan.config,
        compiled: [
            attention.compiled,
            reduce.as_ref().is_some_and(|(_, r)| r.compiled),
        ]
        .into_iter()
        .filter(|&c| c)
        .count(),
        attention: attention.report(&plan.attention),
        reduce: reduce.map(|(l, r)| r.report(l)),
    })
}

/// A specialization's handle as one call found it.
struct ResolvedKernel {
    handle: Arc<CudaKernelHandle>,
    key: String,
    /// Whether this call compiled it.
    compiled: bool,
}

impl ResolvedKernel {
    fn report(self, launch: &KernelLaunch) -> LaunchedKernel {
        let k = self.handle.kernel();
        LaunchedKernel {
            cuda_hash: k.hash.clone(),
            grid: launch.grid,
            block_threads: k.block_threads,
            shared_bytes: k.shared_bytes,
            key: self.key,
        }
    }
}

/// One launch of the plan; a grid with a zero extent (no tokens) launches nothing.
fn launch<T: DslType + DeviceRepr>(
    ctx: &UnifiedAttentionContext,
    handle: &CudaKernelHandle,
    launch: &KernelLaunch,
    args: &mut UnifiedAttentionArgs<'_, T>,
    buffers: &mut ContextBuffers,
) -> Result<(), AttnError> {
    if launch.grid.contains(&0) {
        return Ok(());
    }
    let kernel_args = resolve_args(launch, &handle.kernel().params, args, buffers)?;
    handle.launch(&ctx.stream, Grid(launch.grid), kernel_args)?;
    Ok(())
}

/// Turns the plan's roles into device arguments, checking the parameter order against the
/// specialized kernel. Each writable buffer is handed out at most once.
fn resolve_args<'b, T: DslType + DeviceRepr>(
    launch: &KernelLaunch,
    params: &[Param],
    args: &'b mut UnifiedAttentionArgs<'_, T>,
    buffers: &'b mut ContextBuffers,
) -> Result<Vec<KernelArg<'b>>, AttnError> {
    use BufferRole as B;
    check_launch_params(launch, params)?;
    let UnifiedAttentionArgs {
        q,
        out,
        cache,
        cu_seqlens_q,
        seq_lens,
        block_table,
        causal,
        mm_prefix_ranges,
        rswa,
        sinks,
        alibi_slopes,
        qq_bias,
        variant,
        ..
    } = args;
    let cache = &**cache;
    let ContextBuffers {
        workspace,
        workspace_dummies,
        dummy_f32,
        dummy_i32,
    } = buffers;
    let (dummy_f32, dummy_i32) = (&*dummy_f32, &*dummy_i32);
    let mut out = Some(out.data.slice_mut(..));
    let (mut segm_out, mut segm_max, mut segm_expsum) = match workspace {
        Some(w) => (
            Some(w.output.slice_mut(..)),
            Some(w.max.slice_mut(..)),
            Some(w.expsum.slice_mut(..)),
        ),
        None => (None, None, None),
    };
    let mut writable_dummies = [
        &mut workspace_dummies.output,
        &mut workspace_dummies.max,
        &mut workspace_dummies.expsum,
    ]
    .into_iter();
    let mut resolved = Vec::with_capacity(params.len());
    for ((name, arg), param) in launch.args.iter().zip(params) {
        let missing = || AttnError::MissingBuffer {
            kernel: launch.kernel.to_string(),
            param: (*name).to_string(),
        };
        let writable = matches!(param.kind, ParamKind::Ptr { mutable: true, .. });
        let karg = match *arg {
            PlanArg::Scalar(v) => KernelArg::Scalar(v),
            PlanArg::Dummy(ScalarType::F32) if writable => {
                KernelArg::output(writable_dummies.next().ok_or_else(missing)?.slice_mut(..))
            }
            PlanArg::Dummy(ScalarType::F32) => KernelArg::input(dummy_f32.as_view()),
            PlanArg::Dummy(ScalarType::I32) => KernelArg::input(dummy_i32.as_view()),
            PlanArg::Dummy(_) => return Err(missing()),
            PlanArg::Buffer(role) => match role {
                B::Query => KernelArg::input(q.data.slice(..)),
                B::KeyCache => KernelArg::input(cache.k()),
                B::ValueCache => KernelArg::input(cache.v()),
                B::Output => KernelArg::output(out.take().ok_or_else(missing)?),
                B::SegmentOutput => {
                    KernelArg::output(segm_out.take().ok_or(AttnError::NoWorkspace)?)
                }
                B::SegmentMax => KernelArg::output(segm_max.take().ok_or(AttnError::NoWorkspace)?),
                B::SegmentExpSum => {
                    KernelArg::output(segm_expsum.take().ok_or(AttnError::NoWorkspace)?)
                }
                B::CuSeqlensQ => KernelArg::input(cu_seqlens_q.device.slice(..)),
                B::SeqLens => KernelArg::input(seq_lens.device.slice(..)),
                B::BlockTable => KernelArg::input(block_table.device.slice(..)),
                B::PerSeqCausal => match causal {
                    Causal::PerSequence(flags) => KernelArg::input(flags.slice(..)),
                    _ => return Err(missing()),
                },
                B::MmPrefixRange => match mm_prefix_ranges {
                    MmPrefixRanges::PerSequence { ranges, .. } => {
                        KernelArg::input(ranges.device.slice(..))
                    }
                    _ => return Err(missing()),
                },
                B::MmPrefixQueryRange => match mm_prefix_ranges {
                    MmPrefixRanges::PerQuery(rows) => KernelArg::input(rows.device.slice(..)),
                    _ => return Err(missing()),
                },
                B::RswaPrefixLens => KernelArg::input(
                    rswa.as_ref()
                        .ok_or_else(missing)?
                        .prefix_lens
                        .device
                        .slice(..),
                ),
                B::Sinks => KernelArg::input(sinks.as_ref().ok_or_else(missing)?.slice(..)),
                B::AlibiSlopes => {
                    KernelArg::input(alibi_slopes.as_ref().ok_or_else(missing)?.slopes.slice(..))
                }
                B::QqBias => {
                    KernelArg::input(qq_bias.as_ref().ok_or_else(missing)?.values.slice(..))
                }
                B::MaskAux => KernelArg::input(
                    variant
                        .as_ref()
                        .and_then(|v| v.aux_i32.as_ref())
                        .ok_or_else(missing)?
                        .device
                        .slice(..),
                ),
                B::MaskAuxF32 => KernelArg::input(
                    variant
                        .as_ref()
                        .and_then(|v| v.aux_f32.as_ref())
                        .ok_or_else(missing)?
                        .device
                        .slice(..),
                ),
            },
        };
        resolved.push(karg);
    }
    Ok(resolved)
}

fn order_error(launch: &KernelLaunch, params: &[Param], index: usize) -> AttnError {
    AttnError::ParamOrder {
        kernel: launch.kernel.to_string(),
        index,
        param: params
            .get(index)
            .map_or_else(|| "<none>".to_string(), |p| p.name.clone()),
        planned: launch.args.get(index).map_or_else(
            || "<end of arguments>".to_string(),
            |(n, _)| (*n).to_string(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_64_bit_strides_in_int_range_are_promised() {
        use super::super::plan::KernelArg::Scalar;
        use attn_dsl::kernel::ScalarArg::{I32, I64};
        let launch = KernelLaunch {
            kernel: "k",
            bindings: vec![],
            grid: [1, 1, 1],
            args: vec![
                ("kv_stride_block", Scalar(I64(16384))),
                ("kv_stride_slot", Scalar(I64(1 << 27))),
                ("q_stride0", Scalar(I64(-(1 << 27) + 1))),
                ("num_seqs", Scalar(I64(4))),
                ("block_table_stride", Scalar(I32(64))),
            ],
            mma: MmaKind::Sync,
        };
        assert_eq!(strides_in_i32(&launch), ["kv_stride_block", "q_stride0"]);
    }

    #[test]
    fn workspace_capacity_pads_the_head_size() {
        let c = WorkspaceCapacity {
            max_tokens: 8,
            max_query_heads: 4,
            max_head_size: 96,
            max_segments: 16,
        };
        assert_eq!(c.stats_len(), 8 * 4 * 16);
        assert_eq!(c.output_len(), 8 * 4 * 16 * 128);
    }

    #[test]
    fn vllm_defaults_follow_the_backend_constants() {
        let o = ContextOptions::vllm_defaults(32, 8, 128);
        assert_eq!(
            o.split_kv,
            Some(SplitKvWorkspace {
                seq_threshold_3d: 16,
                num_segments: 16
            })
        );
        assert_eq!(o.workspace.map(|w| w.max_tokens), Some(16));
        assert_eq!(ContextOptions::two_d_only().workspace, None);
    }
}
