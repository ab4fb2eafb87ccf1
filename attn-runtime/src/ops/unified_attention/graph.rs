//! Unified attention captured in a CUDA graph: one call's launches recorded once and
//! replayed per step (a decode loop, where host launch overhead dominates small batches).
//!
//! The kernels read every per-step value that may change without changing the launch
//! (KV lengths, block table, query starts, q, the cache) from device memory, so a replay
//! sees whatever the caller wrote into the *same* buffers since. What a replay cannot
//! change is what the host baked into the launches: the plan (path, tile sizes, grids,
//! scalars, strides) and the buffer addresses. [`UnifiedAttentionGraph::replay`] checks
//! both against the capture (and validates the new host metadata like a call) before
//! launching, so a mismatched replay is a typed error, never a read of stale or freed memory.

#![deny(clippy::indexing_slicing, clippy::arithmetic_side_effects)]

use attn_dsl::kernel::DslType;
use cudarc::driver::{CudaStream, DevicePtr, DeviceRepr};

use super::args::{Causal, MmPrefixRanges, UnifiedAttentionArgs};
use super::gpu::{kernel_key_for, run_plan, AttnError, LaunchReport, UnifiedAttentionContext};
use super::plan::{KernelArg, KernelLaunch, LaunchPlan};
use crate::graph::{capture, GraphError, StepGraph};

/// A captured unified-attention call and what it was captured for.
#[derive(Debug)]
pub struct UnifiedAttentionGraph {
    graph: StepGraph,
    signature: PlanSignature,
    buffers: Vec<BufferAddress>,
    report: LaunchReport,
}

impl UnifiedAttentionGraph {
    /// Validates and plans `args` like a call, compiles what the plan needs (outside the
    /// capture: loading a module is not capturable), then captures the call's launches on
    /// the context's stream. Nothing runs until the first replay.
    pub fn capture<T: DslType + DeviceRepr>(
        ctx: &UnifiedAttentionContext,
        args: &mut UnifiedAttentionArgs<'_, T>,
    ) -> Result<Self, AttnError> {
        let plan = ctx.plan(args)?;
        ctx.precompile(std::slice::from_ref(&plan), 1)?;
        let buffers = buffer_addresses(args, ctx.stream());
        let mut report = None;
        let graph = capture(ctx.stream(), || {
            report = Some(run_plan(ctx, &plan, args)?);
            Ok::<(), AttnError>(())
        })?;
        let report = report.ok_or(GraphError::Empty)?;
        Ok(UnifiedAttentionGraph {
            graph,
            signature: PlanSignature::of(&plan),
            buffers,
            report,
        })
    }

    /// Replays the captured call for `args`: the host copies of the new metadata are
    /// validated like a call's, the plan they give must be the captured one, and every
    /// device buffer must be the one captured (same address and length). The caller has
    /// written the new values into those buffers on the context's stream (or ordered the
    /// writes before this call).
    pub fn replay<T: DslType + DeviceRepr>(
        &self,
        ctx: &UnifiedAttentionContext,
        args: &UnifiedAttentionArgs<'_, T>,
    ) -> Result<(), AttnError> {
        if !same_stream(ctx.stream(), self.graph.stream()) {
            return Err(mismatch(
                "the context's stream",
                "the capture stream",
                "another stream",
            )
            .into());
        }
        let plan = ctx.plan(args)?;
        self.signature.check(&PlanSignature::of(&plan))?;
        check_buffers(&self.buffers, &buffer_addresses(args, ctx.stream()))?;
        self.replay_unchecked()
    }

    /// Replays without checking anything: for callers (benches, a serving loop) that
    /// validated the step themselves.
    pub fn replay_unchecked(&self) -> Result<(), AttnError> {
        Ok(self.graph.launch()?)
    }

    /// What the captured call chose (path, tiles, kernels).
    pub fn report(&self) -> &LaunchReport {
        &self.report
    }

    /// The stream replays run on.
    pub fn stream(&self) -> &std::sync::Arc<CudaStream> {
        self.graph.stream()
    }
}

/// What the host baked into the captured launches.
#[derive(Clone, Debug, PartialEq)]
struct PlanSignature {
    config: super::config::UnifiedAttentionConfig,
    launches: Vec<LaunchSignature>,
}

#[derive(Clone, Debug, PartialEq)]
struct LaunchSignature {
    /// The compiled kernel's key (specialization, variant hash, divisible strides).
    kernel: String,
    grid: [u32; 3],
    args: Vec<(&'static str, KernelArg)>,
}

impl LaunchSignature {
    fn of(launch: &KernelLaunch, plan: &LaunchPlan, is_attention: bool) -> Self {
        let variant = if is_attention {
            plan.variant.as_ref()
        } else {
            None
        };
        LaunchSignature {
            kernel: kernel_key_for(launch, variant),
            grid: launch.grid,
            args: launch.args.clone(),
        }
    }
}

impl PlanSignature {
    fn of(plan: &LaunchPlan) -> Self {
        let mut launches = vec![LaunchSignature::of(&plan.attention, plan, true)];
        launches.extend(
            plan.reduce
                .iter()
                .map(|r| LaunchSignature::of(r, plan, false)),
        );
        PlanSignature {
            config: plan.config,
            launches,
        }
    }

    /// Names the first difference (the launch count, a kernel, a grid, an argument).
    fn check(&self, now: &PlanSignature) -> Result<(), GraphError> {
        if self.config != now.config || self.launches.len() != now.launches.len() {
            return Err(mismatch(
                "the configuration (path, tiles)",
                format!("{:?}", self.config),
                format!("{:?}", now.config),
            ));
        }
        for (c, n) in self.launches.iter().zip(&now.launches) {
            if c.kernel != n.kernel {
                return Err(mismatch("the kernel", &c.kernel, &n.kernel));
            }
            if c.grid != n.grid {
                return Err(mismatch(
                    format!("the grid of {}", c.kernel),
                    format!("{:?}", c.grid),
                    format!("{:?}", n.grid),
                ));
            }
            if let Some(((name, a), (_, b))) =
                c.args.iter().zip(&n.args).find(|((_, a), (_, b))| a != b)
            {
                return Err(mismatch(
                    format!("argument `{name}` of {}", c.kernel),
                    format!("{a:?}"),
                    format!("{b:?}"),
                ));
            }
        }
        Ok(())
    }
}

fn mismatch(
    what: impl Into<String>,
    captured: impl Into<String>,
    now: impl Into<String>,
) -> GraphError {
    GraphError::ReplayMismatch {
        what: what.into(),
        captured: captured.into(),
        now: now.into(),
    }
}

/// One device buffer of the call: the launches hold its base address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct BufferAddress {
    name: &'static str,
    ptr: u64,
    len: usize,
}

fn address<V: DevicePtr<E>, E>(name: &'static str, view: &V, stream: &CudaStream) -> BufferAddress {
    let (ptr, _record) = view.device_ptr(stream);
    BufferAddress {
        name,
        ptr,
        len: view.len(),
    }
}

/// Every device buffer `args` hands to the launches, in a fixed order.
fn buffer_addresses<T: DslType>(
    args: &UnifiedAttentionArgs<'_, T>,
    s: &CudaStream,
) -> Vec<BufferAddress> {
    let mut v = vec![
        address("q", &args.q.data, s),
        address("out", &args.out.data, s),
        address("k_cache", &args.cache.k(), s),
        address("v_cache", &args.cache.v(), s),
        address("cu_seqlens_q", &args.cu_seqlens_q.device, s),
        address("seq_lens", &args.seq_lens.device, s),
        address("block_table", &args.block_table.device, s),
    ];
    if let Causal::PerSequence(flags) = &args.causal {
        v.push(address("causal flags", flags, s));
    }
    match &args.mm_prefix_ranges {
        MmPrefixRanges::None => {}
        MmPrefixRanges::PerSequence { ranges, .. } => {
            v.push(address("mm_prefix_ranges", &ranges.device, s));
        }
        MmPrefixRanges::PerQuery(rows) => v.push(address("mm_prefix_ranges", &rows.device, s)),
    }
    if let Some(r) = &args.rswa {
        v.push(address("rswa prefix_lens", &r.prefix_lens.device, s));
    }
    if let Some(x) = &args.sinks {
        v.push(address("sinks", x, s));
    }
    if let Some(a) = &args.alibi_slopes {
        v.push(address("alibi_slopes", &a.slopes, s));
    }
    if let Some(b) = &args.qq_bias {
        v.push(address("qq_bias", &b.values, s));
    }
    if let Some(variant) = &args.variant {
        if let Some(a) = &variant.aux_i32 {
            v.push(address("variant aux", &a.device, s));
        }
        if let Some(a) = &variant.aux_f32 {
            v.push(address("variant aux_f32", &a.device, s));
        }
    }
    v
}

fn describe(b: Option<&BufferAddress>) -> String {
    b.map_or_else(
        || "absent".to_string(),
        |b| format!("{} at {:#x}, {} elements", b.name, b.ptr, b.len),
    )
}

/// The replay's buffers are the captured ones, one for one.
fn check_buffers(captured: &[BufferAddress], now: &[BufferAddress]) -> Result<(), GraphError> {
    let n = captured.len().max(now.len());
    for i in 0..n {
        let (c, w) = (captured.get(i), now.get(i));
        // Lengths may change (each replay's validation covers them); the launches hold
        // only the names' order and the base addresses.
        let same = matches!((c, w), (Some(c), Some(w)) if c.name == w.name && c.ptr == w.ptr);
        if !same {
            let name = c.or(w).map_or("a buffer", |b| b.name);
            return Err(mismatch(
                format!("device buffer `{name}`"),
                describe(c),
                describe(w),
            ));
        }
    }
    Ok(())
}

fn same_stream(a: &CudaStream, b: &CudaStream) -> bool {
    a.cu_stream() == b.cu_stream()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buf(name: &'static str, ptr: u64, len: usize) -> BufferAddress {
        BufferAddress { name, ptr, len }
    }

    #[test]
    fn a_moved_or_extra_buffer_is_named() {
        let captured = [buf("q", 0x1000, 64), buf("seq_lens", 0x2000, 4)];
        assert!(check_buffers(&captured, &captured).is_ok());
        let moved = [buf("q", 0x1000, 64), buf("seq_lens", 0x3000, 4)];
        let err = check_buffers(&captured, &moved).unwrap_err().to_string();
        assert!(
            err.contains("`seq_lens`") && err.contains("0x2000") && err.contains("0x3000"),
            "{err}"
        );
        let shorter = [buf("q", 0x1000, 32), buf("seq_lens", 0x2000, 4)];
        assert!(
            check_buffers(&captured, &shorter).is_ok(),
            "only the base address is captured"
        );
        let extra = [
            buf("q", 0x1000, 64),
            buf("seq_lens", 0x2000, 4),
            buf("sinks", 0x4000, 8),
        ];
        let err = check_buffers(&captured, &extra).unwrap_err().to_string();
        assert!(err.contains("`sinks`") && err.contains("absent"), "{err}");
    }
}
