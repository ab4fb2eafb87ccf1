//! MLA-DCP decode of one rank as a candle op: `mla.forward(&q_loc, &cur_kv, &cache, &w_uv,
//! &call)` runs the whole step (current part on the context's side stream, history,
//! exchange, combine, V-up) on the candle device's stream and returns `y [T, N·128]` as a
//! new tensor.

use std::sync::Mutex;

use candle_core::cuda_backend::CudaDType;
use candle_core::{CpuStorage, CudaStorage, CustomOp1, Layout, Shape, Tensor};
use cudarc::driver::ValidAsZeroBits;
use cudarc::nccl::Comm;

use super::error::CandleOpError;
use super::storage_view::{view, Held};
use super::tensor_check::{check_mla, MlaShapes};
use super::unified_call::HostMeta;
use crate::launch::CudaDevice;
use crate::ops::mla_dcp::op::{
    mla_dcp_decode, DecodeElem, MlaDcpConfig, MlaDcpContext, MlaDcpDecodeArgs,
};
use crate::ops::mla_dcp::plan::V_HEAD;

const OP: &str = "MLA decode";

/// The host metadata of one decode step.
#[derive(Clone, Copy, Debug)]
pub struct MlaCall<'a> {
    /// q_len of each request.
    pub query_lens: &'a [u32],
    /// Total length (history + current chunk) of each request.
    pub seq_lens: &'a [u32],
    /// `i32 [batch, stride]` and its host copy.
    pub block_table: HostMeta<'a>,
}

/// One rank's MLA-DCP context on a candle CUDA device, its main stream the device's stream.
pub struct CandleMlaDecode<E> {
    ctx: Mutex<MlaDcpContext<E>>,
    device: candle_core::CudaDevice,
}

impl<E: DecodeElem + CudaDType + ValidAsZeroBits> CandleMlaDecode<E> {
    /// Builds the context (side stream, buffers of `config`'s bucket, cuBLAS) on `device`;
    /// `comm` as for [`MlaDcpContext::new`].
    pub fn new(
        device: &candle_core::CudaDevice,
        config: MlaDcpConfig,
        comm: Option<Comm>,
    ) -> candle_core::Result<Self> {
        let stream = device.cuda_stream();
        let dev = CudaDevice::from_context(stream.context().clone())
            .map_err(|e| CandleOpError::Mla(e.into()))?;
        let ctx = MlaDcpContext::new(&dev, stream, config, comm).map_err(CandleOpError::from)?;
        Ok(CandleMlaDecode {
            ctx: Mutex::new(ctx),
            device: device.clone(),
        })
    }

    /// One decode step; `y [T, N·128]` on the device.
    pub fn forward(
        &self,
        q_loc: &Tensor,
        cur_kv: &Tensor,
        cache: &Tensor,
        w_uv: &Tensor,
        call: &MlaCall<'_>,
    ) -> candle_core::Result<Tensor> {
        let shapes = check_mla(q_loc, cur_kv, cache, &call.block_table, w_uv)?;
        if !matches!(q_loc.device(), candle_core::Device::Cuda(d) if d.id() == self.device.id()) {
            return Err(CandleOpError::NeedsCuda {
                op: OP,
                tensor: "q_loc (on the context's device)",
            }
            .into());
        }
        q_loc.apply_op1_no_bwd(&MlaOp {
            mla: self,
            call,
            shapes,
            cur_kv,
            cache,
            w_uv,
        })
    }
}

struct MlaOp<'a, E> {
    mla: &'a CandleMlaDecode<E>,
    call: &'a MlaCall<'a>,
    shapes: MlaShapes,
    cur_kv: &'a Tensor,
    cache: &'a Tensor,
    w_uv: &'a Tensor,
}

impl<E: DecodeElem + CudaDType + ValidAsZeroBits> CustomOp1 for MlaOp<'_, E> {
    fn name(&self) -> &'static str {
        "attn-dsl MLA-DCP decode"
    }

    fn cpu_fwd(&self, _: &CpuStorage, _: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        Err(CandleOpError::NeedsCuda {
            op: OP,
            tensor: "q_loc",
        }
        .into())
    }

    fn cuda_fwd(&self, q: &CudaStorage, ql: &Layout) -> candle_core::Result<(CudaStorage, Shape)> {
        let held = Held::lock(
            OP,
            vec![
                ("cur_kv", self.cur_kv),
                ("cache", self.cache),
                ("block_table", self.call.block_table.device),
                ("w_uv", self.w_uv),
            ],
        )?;
        let args = MlaDcpDecodeArgs {
            query_lens: self.call.query_lens,
            seq_lens: self.call.seq_lens,
            q_loc: view::<E>(q, ql)?,
            q_all: None,
            cur_kv: held.view::<E>("cur_kv")?,
            cache: held.view::<E>("cache")?,
            block_table: held.view::<i32>("block_table")?,
            block_table_host: self.call.block_table.host,
            block_table_stride: self.shapes.block_table_stride,
            w_uv: held.view::<E>("w_uv")?,
        };
        let mut ctx = self.mla.ctx.lock().unwrap_or_else(|p| p.into_inner());
        mla_dcp_decode(&mut ctx, &args).map_err(CandleOpError::from)?;
        let n = self
            .shapes
            .tokens
            .saturating_mul(self.shapes.heads)
            .saturating_mul(V_HEAD);
        let mut y = q.device.alloc_zeros::<E>(n)?;
        ctx.main_stream()
            .memcpy_dtod(&ctx.output(), &mut y)
            .map_err(|e| {
                CandleOpError::Mla(crate::ops::mla_dcp::op::MlaError::Driver {
                    during: "copying y out of the context",
                    source: e,
                })
            })?;
        let shape = Shape::from((self.shapes.tokens, self.shapes.heads * V_HEAD));
        Ok((CudaStorage::wrap_cuda_slice(y, q.device.clone()), shape))
    }
}
