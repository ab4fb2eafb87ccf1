//! One MLA-DCP decode step (single rank: A2A, AG+RS or loopback exchange) captured in a CUDA
//! graph: fork, current part on the side stream, history, exchange, join, combine and V-up
//! recorded once and replayed per step.
//!
//! The kernels read the step metadata (token → request, query starts, this rank's history
//! lengths) from the context's metadata buffer, so a replay may change the KV lengths as
//! long as the launches stay the same (set `MlaDcpConfig::forced_splits` so the split
//! count does not follow the longest history): [`MlaDcpGraph::replay`] re-plans on the
//! host, requires the captured launches, and uploads the new metadata before launching the
//! graph. Everything else the step reads (q, the cache, the block table, W_UV) lives in
//! the caller's buffers, which must be the captured ones.

#![deny(clippy::indexing_slicing, clippy::arithmetic_side_effects)]

use cudarc::driver::{CudaStream, DevicePtr};
use std::sync::Arc;

use super::op::{
    mla_dcp_decode, DecodeElem, LaunchReport, MlaDcpContext, MlaDcpDecodeArgs, MlaError,
};
use crate::graph::{capture, GraphError, StepGraph};

/// A captured decode step of one rank.
#[derive(Debug)]
pub struct MlaDcpGraph {
    graph: StepGraph,
    buffers: Vec<(&'static str, u64)>,
    report: LaunchReport,
}

impl MlaDcpGraph {
    /// Prepares the step outside the capture (checks, plan, NVRTC, module loads, metadata
    /// upload, the cuBLAS warm-up), then captures its stream work on the main stream.
    pub fn capture<E: DecodeElem>(
        ctx: &mut MlaDcpContext<E>,
        args: &MlaDcpDecodeArgs<'_, E>,
    ) -> Result<Self, MlaError> {
        ctx.prepare_call(args)?;
        let main = ctx.main_stream().clone();
        let buffers = buffer_addresses(args, &main);
        let mut report = None;
        let graph = capture(&main, || {
            report = Some(mla_dcp_decode(ctx, args)?);
            Ok::<(), MlaError>(())
        })?;
        let report = report.ok_or(GraphError::Empty)?;
        Ok(MlaDcpGraph {
            graph,
            buffers,
            report,
        })
    }

    /// Replays the step for `args`: same buffers as captured, the same launches for the
    /// new batch metadata (uploaded first when it changed); the result lands in the
    /// context's output as after a call.
    pub fn replay<E: DecodeElem>(
        &self,
        ctx: &mut MlaDcpContext<E>,
        args: &MlaDcpDecodeArgs<'_, E>,
    ) -> Result<(), MlaError> {
        let main = ctx.main_stream().clone();
        if main.cu_stream() != self.graph.stream().cu_stream() {
            return Err(GraphError::ReplayMismatch {
                what: "the context's main stream".into(),
                captured: "the capture stream".into(),
                now: "another stream".into(),
            }
            .into());
        }
        let now = buffer_addresses(args, &main);
        if let Some(((name, c), (_, n))) = self.buffers.iter().zip(&now).find(|(c, n)| c != n) {
            return Err(GraphError::ReplayMismatch {
                what: format!("device buffer `{name}`"),
                captured: format!("{c:#x}"),
                now: format!("{n:#x}"),
            }
            .into());
        }
        ctx.restep_for_replay(args)?;
        self.replay_unchecked()
    }

    /// Replays without checks or metadata upload (benches; a loop that validated itself).
    pub fn replay_unchecked(&self) -> Result<(), MlaError> {
        Ok(self.graph.launch()?)
    }

    /// What the captured call reported.
    pub fn report(&self) -> &LaunchReport {
        &self.report
    }

    /// The stream the graph was captured on (the context's main stream).
    pub fn stream(&self) -> &Arc<CudaStream> {
        self.graph.stream()
    }
}

/// Base addresses of the caller's buffers the captured launches hold (lengths may change:
/// each replay's host checks cover them).
fn buffer_addresses<E>(args: &MlaDcpDecodeArgs<'_, E>, s: &CudaStream) -> Vec<(&'static str, u64)> {
    let ptr = |name, v: &dyn Fn() -> u64| (name, v());
    let mut v = vec![
        ptr("q_loc", &|| args.q_loc.device_ptr(s).0),
        ptr("cur_kv", &|| args.cur_kv.device_ptr(s).0),
        ptr("cache", &|| args.cache.device_ptr(s).0),
        ptr("block_table", &|| args.block_table.device_ptr(s).0),
        ptr("w_uv", &|| args.w_uv.device_ptr(s).0),
    ];
    if let Some(q) = &args.q_all {
        v.push(("q_all", q.device_ptr(s).0));
    }
    v
}
