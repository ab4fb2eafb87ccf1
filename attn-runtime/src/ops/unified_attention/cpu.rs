//! Unified attention on the CPU executor: the DSL kernels, specialized exactly as the GPU
//! op specializes them, run over the same launch plan (DESIGN §3.4). This is how CI, which
//! has no GPU, checks the kernels against the dense reference.
//!
//! The problem is given in the reference's form ([`UnifiedAttentionProblem`]: f32 host
//! arrays plus options), so one test input feeds both. Inputs are converted to the kernel
//! dtype (round to nearest even); pass values already representable in that dtype to
//! compare against the reference without input rounding noise. Every output buffer starts
//! NaN-filled (poisoned), so an element the kernels fail to write cannot pass a comparison.

use std::collections::BTreeMap;

use attn_dsl::interp::{CpuArg, ExecError, ExecStats, HostBuffer};
use attn_dsl::ir::{Function, ScalarType};
use thiserror::Error;

use super::args::max_query_len;
use super::config::{
    AlibiMode, AttentionProblem, CausalMode, ConfigError, MmRangeEncoding, MmaKind,
    SplitKvWorkspace,
};
use super::gpu::emit_launch_for;
use super::limits::{check_scalars, ScalarArgs};
use super::plan::{
    choose_config, plan_launch, BufferRole, KernelArg, KernelLaunch, LaunchPlan, LaunchShape,
    MaskVariant, PathChoice, PlanError,
};
use super::validate::{validate_inputs, InputError, TensorMeta, UnifiedAttentionInputs};
use super::variant::{validate_aux, AuxError, AuxView, Variant, VariantModule};
use crate::kernels::dsl_module::{DslModule, ModuleLoadError};
use crate::kernels::specialization_cache::specialize_cached;
use crate::kernels::unified_attention;
use crate::ops::host_launch::{run_launch, HostRunError};
pub use crate::ops::host_launch::{HostLaunch, HostLauncher};
use crate::reference::unified_attention::{Causality, MmRanges, UnifiedAttentionProblem};
use crate::reference::Dtype;

/// A user variant and its aux data (`[S, stride]` tensors, row `s` at `s · stride`).
#[derive(Clone, Copy, Debug)]
pub struct CpuVariant<'a> {
    /// The variant (mask, bounds and aux declarations).
    pub variant: &'a Variant,
    /// The `i32` (or bool) aux tensor and its row stride.
    pub aux_i32: Option<(&'a [i32], usize)>,
    /// The `f32` aux tensor and its row stride.
    pub aux_f32: Option<(&'a [f32], usize)>,
}

impl<'a> CpuVariant<'a> {
    /// A variant that reads one `i32` aux tensor.
    pub fn with_i32(variant: &'a Variant, aux: &'a [i32], stride: usize) -> Self {
        CpuVariant {
            variant,
            aux_i32: Some((aux, stride)),
            aux_f32: None,
        }
    }
}

/// How to run: dtype, path, variant, and test knobs.
#[derive(Clone, Copy, Debug)]
pub struct CpuOptions<'a> {
    /// Element type of q, K/V and out.
    pub dtype: Dtype,
    /// 2D / 3D override, or the §6 heuristic.
    pub path: PathChoice,
    /// The §6 split-KV workspace settings ([`PathChoice::Heuristic`] looks at them).
    pub split_kv: Option<SplitKvWorkspace>,
    /// A user variant and its aux data; `None`: vLLM's mask.
    pub variant: Option<CpuVariant<'a>>,
    /// Extra elements after each token row of q and out (poisoned): exercises the
    /// stride arguments and lets tests check that nothing outside the rows is written.
    pub row_padding: usize,
    /// The tensor-core target whose launch-table tiling to plan (the executor runs the tile
    /// IR whatever the target; a GPU's, `MmaKind::for_arch`, makes both run one
    /// specialization).
    pub mma: MmaKind,
    /// What runs each launch instead of the executor (`None`: the executor).
    pub launcher: Option<&'a dyn HostLauncher>,
}

impl Default for CpuOptions<'_> {
    fn default() -> Self {
        CpuOptions {
            dtype: Dtype::Bf16,
            path: PathChoice::Heuristic,
            split_kv: None,
            variant: None,
            row_padding: 0,
            mma: MmaKind::Sync,
            launcher: None,
        }
    }
}

/// What a CPU run produced.
#[derive(Clone, Debug)]
pub struct CpuRun {
    /// `[T, Hq, D]` as f32 (from the kernel dtype).
    pub output: Vec<f32>,
    /// The whole output buffer, padding included (NaN where nothing was stored).
    pub raw_output: Vec<f32>,
    /// Elements between consecutive tokens of `raw_output`.
    pub out_token_stride: usize,
    /// The launch plan that ran.
    pub plan: LaunchPlan,
    /// Executor statistics of the attention launch and, in 3D, of the reduce.
    pub stats: Vec<ExecStats>,
}

/// Why a CPU run failed.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum CpuError {
    /// The inputs failed host validation.
    #[error("invalid input: {0}")]
    Input(#[from] InputError),
    /// The configuration is not one the kernels support.
    #[error("invalid configuration: {0}")]
    Config(#[from] ConfigError),
    /// No launch plan fits the run.
    #[error("no launch plan: {0}")]
    Plan(#[from] PlanError),
    /// Loading the DSL kernel module failed.
    #[error("loading the DSL module: {0}")]
    Module(#[from] ModuleLoadError),
    /// A user variant's aux inputs are invalid.
    #[error("variant input: {0}")]
    Aux(#[from] AuxError),
    /// Specializing a DSL kernel for the run's constexprs failed.
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
    /// An input buffer has the wrong number of elements.
    #[error("{what} has {got} elements, expected {expected}")]
    BufferSize {
        /// Name of the buffer.
        what: &'static str,
        /// Elements it has.
        got: usize,
        /// Elements expected.
        expected: usize,
    },
    /// A kernel parameter does not match the argument the plan passes at its position.
    #[error("kernel `{kernel}` parameter {index} is `{param}` but the plan passes `{planned}`")]
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
    /// The plan names a buffer the run did not provide (or names it twice).
    #[error("kernel `{kernel}` parameter `{param}`: the plan names a buffer the run did not provide (or names it twice)")]
    MissingBuffer {
        /// Name of the kernel.
        kernel: String,
        /// The parameter without a buffer.
        param: String,
    },
    /// A [`HostLauncher`] failed running a kernel.
    #[error("launching `{kernel}` on the host: {message}")]
    Launcher {
        /// Name of the kernel.
        kernel: String,
        /// What failed.
        message: String,
    },
    /// The CPU executor failed running a kernel.
    #[error("executing `{kernel}`: {source}")]
    Exec {
        /// Name of the kernel.
        kernel: String,
        /// The executor's error.
        #[source]
        source: ExecError,
    },
}

/// `[T, Hq, D]` output of unified attention computed by the DSL kernels on the CPU.
pub fn unified_attention_cpu(
    problem: &UnifiedAttentionProblem<'_>,
    options: &CpuOptions<'_>,
) -> Result<Vec<f32>, CpuError> {
    Ok(run_unified_attention_cpu(problem, options)?.output)
}

/// [`unified_attention_cpu`] with everything a test may want to inspect.
pub fn run_unified_attention_cpu(
    problem: &UnifiedAttentionProblem<'_>,
    options: &CpuOptions<'_>,
) -> Result<CpuRun, CpuError> {
    let dims = Dims::of(problem)?;
    validate(problem, &dims, options.dtype.scalar_type())?;
    check_scalars(&scalars(problem))?;
    let attention_problem = attention_problem(problem, &dims, options);
    let cfg = choose_config(&attention_problem, options.path)?;
    let shape = launch_shape(problem, &dims, options);
    if let Some(v) = options.variant {
        validate_aux(
            v.variant,
            problem.seq_lens,
            v.aux_i32.map(|(a, s)| host_view(a, s)),
            v.aux_f32.map(|(a, s)| host_view(a, s)),
        )?;
    }
    let variant = options
        .variant
        .map_or_else(MaskVariant::default, |v| v.variant.mask_variant());
    let mut plan = plan_launch(&cfg, &shape, options.dtype.scalar_type(), &variant)?;
    plan.variant = options.variant.map(|v| VariantModule::of(v.variant));
    let module = kernel_module(options.variant.as_ref())?;
    let mut buffers = host_buffers(problem, &dims, options, &plan);
    let file = module.label().to_string();
    let host = HostRun {
        module: &module,
        file: &file,
        variant: plan.variant.as_ref(),
        launcher: options.launcher,
    };
    let mut stats = vec![host.execute(&plan.attention, &mut buffers)?];
    if let Some(reduce) = &plan.reduce {
        stats.push(host.execute(reduce, &mut buffers)?);
    }
    let raw = buffers
        .remove(&BufferRole::Output)
        .map(|b| b.to_f64s())
        .unwrap_or_default();
    let stride = shape.out_strides[0];
    let mut output = Vec::with_capacity(dims.num_tokens * dims.hq * dims.d);
    for t in 0..dims.num_tokens {
        let row = t * stride;
        output.extend(raw[row..row + dims.hq * dims.d].iter().map(|&x| x as f32));
    }
    Ok(CpuRun {
        output,
        raw_output: raw.iter().map(|&x| x as f32).collect(),
        out_token_stride: stride,
        plan,
        stats,
    })
}

/// The kernel module, merged with the variant's device functions when there is one.
fn kernel_module(variant: Option<&CpuVariant<'_>>) -> Result<DslModule, CpuError> {
    match variant {
        None => Ok(unified_attention::module()?),
        Some(v) => Ok(v.variant.module()?),
    }
}

fn host_view<E>(values: &[E], row_stride: usize) -> AuxView<'_, E> {
    AuxView {
        len: values.len(),
        row_stride,
        host: Some(values),
    }
}

/// Sizes derived from the problem's flat arrays.
struct Dims {
    num_tokens: usize,
    num_seqs: usize,
    hq: usize,
    hkv: usize,
    d: usize,
    num_blocks: usize,
    max_seqlen_q: usize,
}

impl Dims {
    fn of(p: &UnifiedAttentionProblem<'_>) -> Result<Dims, CpuError> {
        // Saturating products: a size that does not fit cannot match a real buffer's length.
        let row = p.num_query_heads.saturating_mul(p.head_size);
        let page = p
            .block_size
            .saturating_mul(p.num_kv_heads)
            .saturating_mul(p.head_size);
        let num_tokens = p.q.len().checked_div(row).unwrap_or(0);
        let num_blocks = p.k_cache.len().checked_div(page).unwrap_or(0);
        exact("q", p.q.len(), num_tokens.saturating_mul(row))?;
        exact("k_cache", p.k_cache.len(), num_blocks.saturating_mul(page))?;
        exact("v_cache", p.v_cache.len(), num_blocks.saturating_mul(page))?;
        let max_seqlen_q = max_query_len(p.cu_seqlens_q);
        Ok(Dims {
            num_tokens,
            num_seqs: p.cu_seqlens_q.len().saturating_sub(1),
            hq: p.num_query_heads,
            hkv: p.num_kv_heads,
            d: p.head_size,
            num_blocks,
            max_seqlen_q,
        })
    }
}

fn exact(what: &'static str, got: usize, expected: usize) -> Result<(), CpuError> {
    if got == expected {
        Ok(())
    } else {
        Err(CpuError::BufferSize {
            what,
            got,
            expected,
        })
    }
}

/// The shared host-side input rules (validate.rs), on the logical (unpadded) tensors.
fn validate(
    p: &UnifiedAttentionProblem<'_>,
    dims: &Dims,
    dtype: ScalarType,
) -> Result<(), CpuError> {
    let o = &p.options;
    let q = TensorMeta::contiguous([dims.num_tokens, dims.hq, dims.d], dtype);
    let kv = TensorMeta::contiguous([dims.num_blocks, p.block_size, dims.hkv, dims.d], dtype);
    let rows = dims.num_seqs;
    let (seq_ranges, query_ranges) = match o.mm_ranges {
        MmRanges::None => (None, None),
        MmRanges::PerSequence(r, n) => (Some((r.as_flattened(), [rows, n, 2])), None),
        MmRanges::PerQuery(r) => (None, Some((r.as_flattened(), [r.len(), 2]))),
    };
    let inputs = UnifiedAttentionInputs {
        q,
        k: kv,
        v: kv,
        out: q,
        cu_seqlens_q: p.cu_seqlens_q,
        seq_lens: p.seq_lens,
        block_table: p.block_table,
        block_table_shape: [rows, p.block_table_stride],
        block_table_stride: p.block_table_stride,
        mm_prefix_range: seq_ranges,
        mm_prefix_query_range: query_ranges,
        per_seq_causal_len: match o.causality {
            Causality::PerSequence(f) => Some(f.len()),
            _ => None,
        },
        rswa_prefix_lens: o.r_swa.map(|r| r.prefix_lens),
        sinks_len: o.sinks.map(<[f32]>::len),
        alibi_slopes_len: o.alibi.map(|a| a.slopes.len()),
        qq_bias_shape: o
            .qq_bias
            .map(|b| [b.values.len() / b.stride0.max(1), b.stride0]),
    };
    Ok(validate_inputs(&inputs)?)
}

/// The scalar arguments in the op's types (the reference's f64 values, as the GPU op takes them).
fn scalars(p: &UnifiedAttentionProblem<'_>) -> ScalarArgs {
    ScalarArgs {
        softmax_scale: p.scale as f32,
        softcap: p.options.softcap.map(|c| c as f32),
        sliding_window: p.options.sliding_window,
        chunk_lookback: p.options.chunk_lookback,
    }
}

/// The §6 view of the problem: geometry and enabled features.
fn attention_problem(
    p: &UnifiedAttentionProblem<'_>,
    dims: &Dims,
    options: &CpuOptions<'_>,
) -> AttentionProblem {
    let o = &p.options;
    AttentionProblem {
        num_query_heads: dims.hq as i32,
        num_kv_heads: dims.hkv as i32,
        head_size: dims.d as i32,
        block_size: p.block_size as i32,
        kv_elem_bytes: options.dtype.scalar_type().size_bytes() as i32,
        sliding_window: o.sliding_window,
        causal: match o.causality {
            Causality::Causal => CausalMode::Causal,
            Causality::NonCausal => CausalMode::NonCausal,
            Causality::PerSequence(_) => CausalMode::PerSequence,
        },
        chunk_lookback: o.chunk_lookback,
        mm: match o.mm_ranges {
            MmRanges::None => MmRangeEncoding::None,
            MmRanges::PerSequence(_, r) => MmRangeEncoding::PerSequence {
                max_ranges: r as i32,
            },
            MmRanges::PerQuery(_) => MmRangeEncoding::PerQuery,
        },
        mm_prefix_clamp_sw: o.mm_prefix_clamp_sw,
        r_swa_window: o.r_swa.map(|r| r.window),
        softcap: o.softcap.unwrap_or(0.0) as f32,
        use_sinks: o.sinks.is_some(),
        alibi: match o.alibi {
            None => AlibiMode::None,
            Some(a) if a.sqrt => AlibiMode::Sqrt,
            Some(_) => AlibiMode::Linear,
        },
        use_qq_bias: o.qq_bias.is_some(),
        max_seqlen_q: dims.max_seqlen_q as i32,
        num_seqs: dims.num_seqs as i32,
        split_kv: options.split_kv,
        batch_invariant: false,
        mma: options.mma,
    }
}

fn launch_shape(
    p: &UnifiedAttentionProblem<'_>,
    dims: &Dims,
    options: &CpuOptions<'_>,
) -> LaunchShape {
    let row = dims.hq * dims.d + options.row_padding;
    let o = &p.options;
    LaunchShape {
        num_tokens: dims.num_tokens,
        num_seqs: dims.num_seqs,
        max_seqlen_q: dims.max_seqlen_q,
        q_strides: [row, dims.d],
        out_strides: [row, dims.d],
        kv_strides: [p.block_size * dims.hkv * dims.d, dims.hkv * dims.d, dims.d],
        block_table_stride: p.block_table_stride,
        qq_bias_stride0: o.qq_bias.map_or(0, |b| b.stride0),
        mask_aux_stride: options.variant.and_then(|v| v.aux_i32).map(|(_, s)| s),
        mask_aux_f32_stride: options.variant.and_then(|v| v.aux_f32).map(|(_, s)| s),
        softmax_scale: p.scale as f32,
        softcap: o.softcap.unwrap_or(0.0) as f32,
        num_sinks: o.sinks.map_or(0, <[f32]>::len),
    }
}

/// Host buffers for every role the plan uses; outputs and workspace poisoned with NaN.
fn host_buffers(
    p: &UnifiedAttentionProblem<'_>,
    dims: &Dims,
    options: &CpuOptions<'_>,
    plan: &LaunchPlan,
) -> BTreeMap<BufferRole, HostBuffer> {
    use BufferRole as B;
    let dtype = plan.dtype;
    let o = &p.options;
    let f64s = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<f64>>();
    let row = dims.hq * dims.d;
    let padded = row + options.row_padding;
    let mut q = vec![f64::NAN; dims.num_tokens * padded];
    for t in 0..dims.num_tokens {
        for (i, &x) in p.q[t * row..(t + 1) * row].iter().enumerate() {
            q[t * padded + i] = f64::from(x);
        }
    }
    let mut m: BTreeMap<BufferRole, HostBuffer> = BTreeMap::new();
    m.insert(B::Query, HostBuffer::from_f64s(dtype, &q));
    m.insert(B::KeyCache, HostBuffer::from_f64s(dtype, &f64s(p.k_cache)));
    m.insert(
        B::ValueCache,
        HostBuffer::from_f64s(dtype, &f64s(p.v_cache)),
    );
    m.insert(
        B::Output,
        HostBuffer::from_f64s(dtype, &vec![f64::NAN; dims.num_tokens * padded]),
    );
    m.insert(B::CuSeqlensQ, HostBuffer::I32(p.cu_seqlens_q.to_vec()));
    m.insert(B::SeqLens, HostBuffer::I32(p.seq_lens.to_vec()));
    m.insert(B::BlockTable, HostBuffer::I32(p.block_table.to_vec()));
    if let Some(ws) = plan.workspace {
        let nan = |n: usize| HostBuffer::F32(vec![f32::NAN; n]);
        m.insert(B::SegmentOutput, nan(ws.output_len()));
        m.insert(B::SegmentMax, nan(ws.stats_len()));
        m.insert(B::SegmentExpSum, nan(ws.stats_len()));
    }
    if let Causality::PerSequence(flags) = o.causality {
        m.insert(
            B::PerSeqCausal,
            HostBuffer::I32(flags.iter().map(|&c| i32::from(c)).collect()),
        );
    }
    match o.mm_ranges {
        MmRanges::None => {}
        MmRanges::PerSequence(r, _) => {
            m.insert(B::MmPrefixRange, HostBuffer::I32(r.as_flattened().to_vec()));
        }
        MmRanges::PerQuery(r) => {
            m.insert(
                B::MmPrefixQueryRange,
                HostBuffer::I32(r.as_flattened().to_vec()),
            );
        }
    }
    if let Some(r) = o.r_swa {
        m.insert(B::RswaPrefixLens, HostBuffer::I32(r.prefix_lens.to_vec()));
    }
    if let Some(s) = o.sinks {
        m.insert(B::Sinks, HostBuffer::F32(s.to_vec()));
    }
    if let Some(a) = o.alibi {
        m.insert(B::AlibiSlopes, HostBuffer::F32(a.slopes.to_vec()));
    }
    if let Some(b) = o.qq_bias {
        m.insert(B::QqBias, HostBuffer::F32(b.values.to_vec()));
    }
    if let Some(v) = options.variant {
        // An empty tensor still needs an address: one never-read element.
        if let Some((aux, _)) = v.aux_i32 {
            let aux = if aux.is_empty() {
                vec![0]
            } else {
                aux.to_vec()
            };
            m.insert(B::MaskAux, HostBuffer::I32(aux));
        }
        if let Some((aux, _)) = v.aux_f32 {
            let aux = if aux.is_empty() {
                vec![0.0]
            } else {
                aux.to_vec()
            };
            m.insert(B::MaskAuxF32, HostBuffer::F32(aux));
        }
    }
    m
}

/// What runs the launches of one CPU run: the module they specialize from and who runs them.
struct HostRun<'a> {
    module: &'a DslModule,
    file: &'a str,
    variant: Option<&'a VariantModule>,
    launcher: Option<&'a dyn HostLauncher>,
}

impl HostRun<'_> {
    /// Specializes (cached) and runs one launch of the plan.
    fn execute(
        &self,
        launch: &KernelLaunch,
        buffers: &mut BTreeMap<BufferRole, HostBuffer>,
    ) -> Result<ExecStats, CpuError> {
        let f = specialize_cached(self.module, launch.kernel, &launch.bindings).map_err(|e| {
            CpuError::Specialize {
                kernel: launch.kernel.to_string(),
                file: self.file.to_string(),
                line: e.span.start().line,
                message: e.message,
            }
        })?;
        if launch.grid.contains(&0) {
            return Ok(ExecStats::default());
        }
        let mut dummies: Vec<HostBuffer> = launch
            .args
            .iter()
            .filter_map(|(_, a)| match a {
                KernelArg::Dummy(t) => Some(HostBuffer::zeros(*t, 1)),
                _ => None,
            })
            .collect();
        let args = marshal(&f, launch, buffers, &mut dummies)?;
        let cuda = || emit_launch_for(launch, self.variant).map_err(|e| e.to_string());
        let host = HostLaunch {
            kernel: &f,
            grid: launch.grid,
            cuda: &cuda,
        };
        let kernel = launch.kernel.to_string();
        run_launch(self.launcher, host, args).map_err(|e| match e {
            HostRunError::Exec(source) => CpuError::Exec { kernel, source },
            HostRunError::Launcher(message) => CpuError::Launcher { kernel, message },
        })
    }
}

/// Turns the plan's argument roles into executor arguments, checking the parameter order
/// against the specialized kernel (`*mut` parameters get writable buffers).
fn marshal<'a>(
    f: &Function,
    launch: &KernelLaunch,
    buffers: &'a mut BTreeMap<BufferRole, HostBuffer>,
    dummies: &'a mut [HostBuffer],
) -> Result<Vec<CpuArg<'a>>, CpuError> {
    let mut by_role: BTreeMap<BufferRole, &'a mut HostBuffer> =
        buffers.iter_mut().map(|(r, b)| (*r, b)).collect();
    let mut dummies = dummies.iter_mut();
    let mut args = Vec::with_capacity(launch.args.len());
    for (index, (name, arg)) in launch.args.iter().enumerate() {
        let param = f.params.get(index);
        if param.map(|p| p.name.as_str()) != Some(*name) {
            return Err(CpuError::ParamOrder {
                kernel: launch.kernel.to_string(),
                index,
                param: param.map_or_else(|| "<none>".to_string(), |p| p.name.clone()),
                planned: (*name).to_string(),
            });
        }
        let mutable = matches!(
            param.map(|p| &p.kind),
            Some(attn_dsl::ir::ParamKind::Ptr { mutable: true, .. })
        );
        let buffer: Option<&'a mut HostBuffer> = match arg {
            KernelArg::Scalar(v) => {
                args.push(CpuArg::Scalar(*v));
                continue;
            }
            KernelArg::Buffer(role) => by_role.remove(role),
            KernelArg::Dummy(_) => dummies.next(),
        };
        let buffer = buffer.ok_or_else(|| CpuError::MissingBuffer {
            kernel: launch.kernel.to_string(),
            param: (*name).to_string(),
        })?;
        args.push(if mutable {
            buffer.arg_out()
        } else {
            let shared: &'a HostBuffer = buffer;
            shared.arg_in()
        });
    }
    if f.params.len() != launch.args.len() {
        return Err(CpuError::ParamOrder {
            kernel: launch.kernel.to_string(),
            index: launch.args.len(),
            param: f
                .params
                .get(launch.args.len())
                .map_or_else(|| "<none>".to_string(), |p| p.name.clone()),
            planned: "<end of arguments>".to_string(),
        });
    }
    Ok(args)
}
