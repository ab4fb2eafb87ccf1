//! Layout glue of the AG+RS parity mode. The history reduce writes the exchange layout (chunk p =
//! heads of rank p, `[N, T, 512]`), while `ag_rs.rs` takes the gathered-head layout `[T, D·N, 512]`
//! and returns the merged history of this rank's heads as `[T, N, 512]` f32. Two small kernels
//! bridge them: `agrs_pack` (exchange layout → gathered layout, bit copies) and `agrs_unpack`
//! (merged f32 → a one-chunk exchange buffer in the activation dtype), so the same DSL combine
//! (with DCP_SIZE = 1) merges the history with the current part. Hand-written stand-ins like the
//! other plumbing kernels, until the DSL emits them.

use super::super::act_dtype::{ActDtype, ActivationElem};
use super::super::chunk_layout::ChunkLayout;
use super::super::cuda_source::{self, HALF_CONVERSIONS};
use super::error::MlaError;
use cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg,
};
use std::sync::Arc;

/// CUDA source of the two glue kernels (one thread per latent element).
pub const AG_RS_GLUE_SOURCE: &str = r#"
extern "C" __global__ void agrs_pack(const unsigned short* __restrict__ send_out,
                                     const float* __restrict__ send_lse,
                                     unsigned short* __restrict__ out, float* __restrict__ lse,
                                     long long tokens, int ranks, int heads,
                                     long long chunk_stride_out, long long chunk_stride_lse,
                                     long long lse_offset) {
    long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long dn = (long long)ranks * heads;
    if (idx >= tokens * dn * 512) return;
    long long l = idx % 512;
    long long rest = idx / 512;
    long long g = rest % dn;
    long long t = rest / dn;
    long long p = g / heads;
    long long row = (g % heads) * tokens + t;
    out[idx] = send_out[p * chunk_stride_out + row * 512 + l];
    if (l == 0) lse[t * dn + g] = send_lse[p * chunk_stride_lse + lse_offset + row];
}
#define AGRS_UNPACK(SUFFIX, FROM_F32)                                                              \
extern "C" __global__ void agrs_unpack_##SUFFIX(const float* __restrict__ merged_out,            \
                                                const float* __restrict__ merged_lse,            \
                                                unsigned short* __restrict__ recv_out,           \
                                                float* __restrict__ recv_lse,                    \
                                                long long tokens, int heads,                     \
                                                long long lse_offset) {                          \
    long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;                           \
    if (idx >= tokens * heads * 512) return;                                                    \
    long long l = idx % 512;                                                                    \
    long long rest = idx / 512;                                                                 \
    long long h = rest % heads;                                                                 \
    long long t = rest / heads;                                                                 \
    long long row = h * tokens + t;                                                             \
    recv_out[row * 512 + l] = FROM_F32(merged_out[idx]);                                        \
    if (l == 0) recv_lse[lse_offset + row] = merged_lse[t * heads + h];                         \
}
AGRS_UNPACK(bf16, f32_to_bf16)
AGRS_UNPACK(f16, f32_to_f16)
"#;

/// The full translation unit (conversions + kernels).
pub fn ag_rs_glue_source() -> String {
    format!("{HALF_CONVERSIONS}\n{AG_RS_GLUE_SOURCE}")
}

const BLOCK: u32 = 256;

/// The compiled glue kernels for one device.
#[derive(Debug)]
pub(crate) struct AgRsGlue {
    pack: CudaFunction,
    unpack_bf16: CudaFunction,
    unpack_f16: CudaFunction,
}

fn grid(elems: usize) -> Result<LaunchConfig, MlaError> {
    let blocks =
        u32::try_from(elems.div_ceil(BLOCK as usize)).map_err(|_| MlaError::OverCapacity {
            what: "AG+RS glue thread blocks",
            got: elems.div_ceil(BLOCK as usize),
            max: u32::MAX as usize,
        })?;
    Ok(LaunchConfig {
        grid_dim: (blocks.max(1), 1, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    })
}

fn to_i32(what: &'static str, v: usize) -> Result<i32, MlaError> {
    i32::try_from(v).map_err(|_| MlaError::OverCapacity {
        what,
        got: v,
        max: i32::MAX as usize,
    })
}

/// Elements of a `[..]` block of the exchange (the chunk layout already checked its bytes).
fn elems(dims: &[usize]) -> Result<usize, MlaError> {
    dims.iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or(MlaError::SizeOverflow {
            buffer: "AG+RS glue",
        })
}

/// `bytes / elem_bytes` as the i64 stride the glue kernels take.
fn stride(bytes: usize, elem_bytes: usize) -> Result<i64, MlaError> {
    let n = bytes.checked_div(elem_bytes).unwrap_or(0);
    i64::try_from(n).map_err(|_| MlaError::SizeOverflow {
        buffer: "AG+RS glue stride",
    })
}

impl AgRsGlue {
    pub fn new(stream: &Arc<CudaStream>) -> Result<Self, MlaError> {
        let module = cuda_source::load_module(stream.context(), "agrs_glue", &ag_rs_glue_source())?;
        Ok(AgRsGlue {
            pack: cuda_source::load_function(&module, "agrs_pack")?,
            unpack_bf16: cuda_source::load_function(&module, "agrs_unpack_bf16")?,
            unpack_f16: cuda_source::load_function(&module, "agrs_unpack_f16")?,
        })
    }

    /// `send` (exchange layout `chunk`) → `out [T, D·N, 512]`, `lse [T, D·N]`.
    pub fn pack<E: ActivationElem>(
        &self,
        stream: &Arc<CudaStream>,
        chunk: &ChunkLayout,
        send: &CudaSlice<u8>,
        out: &mut CudaSlice<E>,
        lse: &mut CudaSlice<f32>,
    ) -> Result<(), MlaError> {
        let elems = elems(&[chunk.tokens, chunk.ranks, chunk.heads, chunk.latent])?;
        if elems == 0 {
            return Ok(());
        }
        let cfg = grid(elems)?;
        let tokens = chunk.tokens as i64;
        let ranks = to_i32("AG+RS ranks", chunk.ranks)?;
        let heads = to_i32("AG+RS heads", chunk.heads)?;
        let cso = stride(chunk.chunk_bytes(), chunk.dtype.size_bytes())?;
        let csl = stride(chunk.chunk_bytes(), 4)?;
        let lse_off = stride(chunk.lse_offset_in_chunk(), 4)?;
        let (send_ptr, _rs) = send.device_ptr(stream);
        let (out_ptr, _ro) = out.device_ptr_mut(stream);
        let (lse_ptr, _rl) = lse.device_ptr_mut(stream);
        let mut b = stream.launch_builder(&self.pack);
        b.arg(&send_ptr)
            .arg(&send_ptr)
            .arg(&out_ptr)
            .arg(&lse_ptr)
            .arg(&tokens)
            .arg(&ranks)
            .arg(&heads)
            .arg(&cso)
            .arg(&csl)
            .arg(&lse_off);
        // SAFETY: the arguments match `agrs_pack`; `send` holds `chunk.total_bytes()` bytes and
        // `out`/`lse` were allocated for the context's bucket (T·D·N·512, T·D·N ≥ this call's).
        unsafe { b.launch(cfg) }
            .map(|_| ())
            .map_err(MlaError::driver("launching the AG+RS pack kernel"))
    }

    /// Merged history `merged_out [T, N, 512]` f32, `merged_lse [T, N]` → `recv`, a one-chunk
    /// exchange buffer of layout `one` (`[N, T, 512]` activations + `[N, T]` f32 LSEs).
    pub fn unpack<E: ActivationElem>(
        &self,
        stream: &Arc<CudaStream>,
        one: &ChunkLayout,
        merged_out: &CudaSlice<f32>,
        merged_lse: &CudaSlice<f32>,
        recv: &mut CudaSlice<u8>,
    ) -> Result<(), MlaError> {
        let elems = elems(&[one.tokens, one.heads, one.latent])?;
        if elems == 0 {
            return Ok(());
        }
        let cfg = grid(elems)?;
        let tokens = one.tokens as i64;
        let heads = to_i32("AG+RS heads", one.heads)?;
        let lse_off = stride(one.lse_offset_in_chunk(), 4)?;
        let func = match E::DTYPE {
            ActDtype::Bf16 => &self.unpack_bf16,
            ActDtype::F16 => &self.unpack_f16,
        };
        let (mo, _r1) = merged_out.device_ptr(stream);
        let (ml, _r2) = merged_lse.device_ptr(stream);
        let (rv, _r3) = recv.device_ptr_mut(stream);
        let mut b = stream.launch_builder(func);
        b.arg(&mo)
            .arg(&ml)
            .arg(&rv)
            .arg(&rv)
            .arg(&tokens)
            .arg(&heads)
            .arg(&lse_off);
        // SAFETY: the arguments match `agrs_unpack_*`; the buffers hold the T·N·512 / T·N
        // elements and the one-chunk layout's bytes of this call's T.
        unsafe { b.launch(cfg) }
            .map(|_| ())
            .map_err(MlaError::driver("launching the AG+RS unpack kernel"))
    }
}
