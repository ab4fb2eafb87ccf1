//! V-up (spec `mla_dcp.md` §6): `y[t, n, :] = lat_out[t, n, :] · W_UV[n]` for the combine output
//! lat_out `[T, N, L]` (batch-major), W_UV `[N, L, V]` and y `[T, N·V]`, all in the activation dtype
//! with f32 accumulation.
//!
//! The main path is ONE `cublasGemmStridedBatchedEx` whose batch strides read lat_out and write y in
//! place (§6.2): no transposes, no copies. A row-major product is a column-major product of the
//! transposes, so per head n cuBLAS computes `yₙᵀ (V×T, ld N·V) = W_UV[n]ᵀ (V×L, ld V) · xₙᵀ (L×T, ld N·L)`,
//! with batch strides L·V, L and V. The fallback is a plain CUDA kernel (one thread per
//! output element) that a DSL kernel fused with the combine will replace.

use super::act_dtype::{ActDtype, ActivationElem};
use super::cuda_source::{self, CudaSourceError, HALF_CONVERSIONS};
use cudarc::cublas::result::{gemm_strided_batched_ex, CublasError};
use cudarc::cublas::sys::{cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t};
use cudarc::cublas::CudaBlas;
use cudarc::driver::{
    CudaFunction, CudaStream, DevicePtr, DevicePtrMut, DriverError, LaunchConfig, PushKernelArg,
};
use std::ffi::{c_int, c_longlong};
use std::sync::Arc;

/// DeepSeek-V3 kv_lora_rank: the latent width L of lat_out.
pub const DEEPSEEK_LATENT: usize = 512;
/// DeepSeek-V3 v_head_dim: the per-head output width V.
pub const DEEPSEEK_V_HEAD: usize = 128;

/// Errors of the V-up: bad geometry, undersized buffers, cuBLAS / driver / NVRTC failures.
#[derive(Debug, thiserror::Error)]
pub enum VupError {
    /// A dimension of the V-up shape is 0.
    #[error("V-up dimension `{name}` is 0; heads, latent width and head width must be at least 1")]
    ZeroDim {
        /// Name of the dimension.
        name: &'static str,
    },
    /// A GEMM argument does not fit cuBLAS's `int`.
    #[error("V-up value `{name}` = {value} exceeds cuBLAS's int limit {max}")]
    TooLarge {
        /// Name of the value.
        name: &'static str,
        /// The value.
        value: usize,
        /// `i32::MAX`.
        max: i32,
    },
    /// A buffer is shorter than the shape needs.
    #[error("V-up buffer `{buffer}` holds {got} elements but {shape} needs at least {needed}")]
    BufferTooSmall {
        /// Name of the buffer.
        buffer: &'static str,
        /// Elements it holds.
        got: usize,
        /// Elements the shape needs.
        needed: usize,
        /// The V-up shape.
        shape: VupShape,
    },
    /// A buffer lives on another device than the V-up's stream.
    #[error("V-up buffer `{buffer}` lives on device {got} but the V-up runs on device {expected}")]
    WrongDevice {
        /// Name of the buffer.
        buffer: &'static str,
        /// Its device ordinal.
        got: usize,
        /// The stream's device ordinal.
        expected: usize,
    },
    /// Creating the cuBLAS handle failed.
    #[error("creating the cuBLAS handle for the V-up failed: {source}")]
    BlasInit {
        /// The cuBLAS error.
        source: CublasError,
    },
    /// The strided-batched GEMM failed.
    #[error("cuBLAS strided-batched GEMM failed for {shape} ({dtype}): {source}")]
    Blas {
        /// The V-up shape.
        shape: VupShape,
        /// The activation dtype.
        dtype: ActDtype,
        /// The cuBLAS error.
        source: CublasError,
    },
    /// A CUDA driver call failed.
    #[error("CUDA driver call failed while {during}: {source}")]
    Driver {
        /// What the V-up was doing.
        during: &'static str,
        /// The driver error.
        source: DriverError,
    },
    /// Compiling or loading the fallback CUDA kernel failed.
    #[error(transparent)]
    Source(#[from] CudaSourceError),
}

/// The V-up geometry: T tokens, N local heads, latent width L, per-head output width V.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VupShape {
    /// Tokens T.
    pub tokens: usize,
    /// Local heads N.
    pub heads: usize,
    /// Latent width L.
    pub latent: usize,
    /// Per-head output width V.
    pub v_head: usize,
}

impl std::fmt::Display for VupShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "V-up [T={}, N={}, L={}] x [N, L, V={}]",
            self.tokens, self.heads, self.latent, self.v_head
        )
    }
}

/// The cuBLAS arguments of §6.2 for one shape (column-major view; A = W_UV, B = lat_out, C = y).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StridedGemmParams {
    /// Rows of C: V.
    pub m: c_int,
    /// Columns of C: T.
    pub n: c_int,
    /// Inner dimension: L.
    pub k: c_int,
    /// Leading dimension of A: V.
    pub lda: c_int,
    /// Batch stride of A: L·V.
    pub stride_a: c_longlong,
    /// Leading dimension of B: N·L.
    pub ldb: c_int,
    /// Batch stride of B: L.
    pub stride_b: c_longlong,
    /// Leading dimension of C: N·V.
    pub ldc: c_int,
    /// Batch stride of C: V.
    pub stride_c: c_longlong,
    /// Batch count: N.
    pub batch: c_int,
}

fn to_int(name: &'static str, value: usize) -> Result<c_int, VupError> {
    c_int::try_from(value).map_err(|_| VupError::TooLarge {
        name,
        value,
        max: c_int::MAX,
    })
}

impl VupShape {
    /// Validates the geometry (T may be 0: nothing to do).
    pub fn new(
        tokens: usize,
        heads: usize,
        latent: usize,
        v_head: usize,
    ) -> Result<Self, VupError> {
        for (name, v) in [("heads", heads), ("latent", latent), ("v_head", v_head)] {
            if v == 0 {
                return Err(VupError::ZeroDim { name });
            }
        }
        let shape = VupShape {
            tokens,
            heads,
            latent,
            v_head,
        };
        shape.gemm_params()?;
        shape.elems()?;
        Ok(shape)
    }

    /// DeepSeek-V3 widths (L = 512, V = 128).
    pub fn deepseek_v3(tokens: usize, heads: usize) -> Result<Self, VupError> {
        Self::new(tokens, heads, DEEPSEEK_LATENT, DEEPSEEK_V_HEAD)
    }

    /// Element counts of (lat_out, W_UV, y), checked against overflow.
    pub fn elems(&self) -> Result<(usize, usize, usize), VupError> {
        let mul = |name, a: usize, b: usize| {
            a.checked_mul(b).ok_or(VupError::TooLarge {
                name,
                value: usize::MAX,
                max: c_int::MAX,
            })
        };
        let x = mul(
            "lat_out elements",
            mul("lat_out elements", self.tokens, self.heads)?,
            self.latent,
        )?;
        let w = mul(
            "W_UV elements",
            mul("W_UV elements", self.heads, self.latent)?,
            self.v_head,
        )?;
        let y = mul(
            "y elements",
            mul("y elements", self.tokens, self.heads)?,
            self.v_head,
        )?;
        Ok((x, w, y))
    }

    /// The §6.2 mapping: m = V, n = T, k = L; lda = V, ldb = N·L, ldc = N·V; strides L·V, L, V.
    pub fn gemm_params(&self) -> Result<StridedGemmParams, VupError> {
        let lv = self
            .latent
            .checked_mul(self.v_head)
            .ok_or(VupError::TooLarge {
                name: "L*V",
                value: usize::MAX,
                max: c_int::MAX,
            })?;
        let nl = self.heads.checked_mul(self.latent);
        let nv = self.heads.checked_mul(self.v_head);
        Ok(StridedGemmParams {
            m: to_int("v_head", self.v_head)?,
            n: to_int("tokens", self.tokens)?,
            k: to_int("latent", self.latent)?,
            lda: to_int("v_head", self.v_head)?,
            stride_a: to_int("L*V", lv)? as c_longlong,
            ldb: to_int("N*L", nl.unwrap_or(usize::MAX))?,
            stride_b: self.latent as c_longlong,
            ldc: to_int("N*V", nv.unwrap_or(usize::MAX))?,
            stride_c: self.v_head as c_longlong,
            batch: to_int("heads", self.heads)?,
        })
    }

    /// Checks the three buffers' lengths and devices against this shape and `stream`.
    fn check_buffers<E, X: DevicePtr<E>, W: DevicePtr<E>, Y: DevicePtrMut<E>>(
        &self,
        stream: &CudaStream,
        lat_out: &X,
        w_uv: &W,
        y: &Y,
    ) -> Result<(), VupError> {
        let (nx, nw, ny) = self.elems()?;
        let expected = stream.context().ordinal();
        let checks = [
            (
                "lat_out",
                lat_out.len(),
                nx,
                lat_out.stream().context().ordinal(),
            ),
            ("w_uv", w_uv.len(), nw, w_uv.stream().context().ordinal()),
            ("y", y.len(), ny, y.stream().context().ordinal()),
        ];
        for (buffer, got, needed, device) in checks {
            if device != expected {
                return Err(VupError::WrongDevice {
                    buffer,
                    got: device,
                    expected,
                });
            }
            if got < needed {
                return Err(VupError::BufferTooSmall {
                    buffer,
                    got,
                    needed,
                    shape: *self,
                });
            }
        }
        Ok(())
    }
}

/// V-up through cuBLAS: one strided-batched GEMM on the handle's stream.
#[derive(Debug)]
pub struct VupGemm {
    blas: CudaBlas,
    stream: Arc<CudaStream>,
}

impl VupGemm {
    /// Creates the cuBLAS handle bound to `stream` (once; reused by every call).
    pub fn new(stream: Arc<CudaStream>) -> Result<Self, VupError> {
        let blas = CudaBlas::new(stream.clone()).map_err(|source| VupError::BlasInit { source })?;
        Ok(VupGemm { blas, stream })
    }

    /// The stream the GEMM runs on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// y = V-up(lat_out, W_UV), enqueued on [`Self::stream`].
    pub fn run<E, X, W, Y>(
        &self,
        shape: &VupShape,
        lat_out: &X,
        w_uv: &W,
        y: &mut Y,
    ) -> Result<(), VupError>
    where
        E: ActivationElem,
        X: DevicePtr<E>,
        W: DevicePtr<E>,
        Y: DevicePtrMut<E>,
    {
        let stream = self.stream().clone();
        shape.check_buffers(&stream, lat_out, w_uv, y)?;
        if shape.tokens == 0 {
            return Ok(());
        }
        let p = shape.gemm_params()?;
        let dt = E::DTYPE.cuda_data_type();
        let (alpha, beta) = (1.0f32, 0.0f32);
        let (a, _record_a) = w_uv.device_ptr(&stream);
        let (b, _record_b) = lat_out.device_ptr(&stream);
        let (c, _record_c) = y.device_ptr_mut(&stream);
        // SAFETY: the pointers are live device buffers of this context whose lengths were checked
        // against the extents the parameters address; alpha/beta are host f32 as COMPUTE_32F wants.
        let result = unsafe {
            gemm_strided_batched_ex(
                *self.blas.handle(),
                cublasOperation_t::CUBLAS_OP_N,
                cublasOperation_t::CUBLAS_OP_N,
                p.m,
                p.n,
                p.k,
                (&alpha) as *const f32 as *const _,
                a as *const _,
                dt,
                p.lda,
                p.stride_a,
                b as *const _,
                dt,
                p.ldb,
                p.stride_b,
                (&beta) as *const f32 as *const _,
                c as *mut _,
                dt,
                p.ldc,
                p.stride_c,
                p.batch,
                cublasComputeType_t::CUBLAS_COMPUTE_32F,
                cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        };
        result.map_err(|source| VupError::Blas {
            shape: *shape,
            dtype: E::DTYPE,
            source,
        })
    }
}

/// CUDA source of the fallback: one thread per y element, f32 FMA chain over L, one rounding.
pub const VUP_FALLBACK_SOURCE: &str = r#"
#define VUP_FALLBACK(SUFFIX, TO_F32, FROM_F32)                                                     \
extern "C" __global__ void vup_fallback_##SUFFIX(const unsigned short* __restrict__ x,           \
                                                 const unsigned short* __restrict__ w,           \
                                                 unsigned short* __restrict__ y,                 \
                                                 long long tokens, int heads, int latent,        \
                                                 int v_head) {                                   \
    long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;                           \
    long long total = tokens * heads * v_head;                                                  \
    if (idx >= total) return;                                                                   \
    long long v = idx % v_head;                                                                 \
    long long tn = idx / v_head;                                                                \
    long long n = tn % heads;                                                                   \
    const unsigned short* xr = x + tn * latent;                                                 \
    const unsigned short* wc = w + n * (long long)latent * v_head + v;                          \
    float acc = 0.0f;                                                                           \
    for (int l = 0; l < latent; ++l) {                                                          \
        acc = fmaf(TO_F32(xr[l]), TO_F32(wc[(long long)l * v_head]), acc);                      \
    }                                                                                           \
    y[idx] = FROM_F32(acc);                                                                     \
}
VUP_FALLBACK(bf16, bf16_to_f32, f32_to_bf16)
VUP_FALLBACK(f16, f16_to_f32, f32_to_f16)
"#;

/// The full fallback translation unit (conversions + kernels).
pub fn vup_fallback_source() -> String {
    format!("{HALF_CONVERSIONS}\n{VUP_FALLBACK_SOURCE}")
}

const FALLBACK_BLOCK: u32 = 256;

/// V-up by a plain CUDA kernel (NVRTC), for cross-checking cuBLAS and as a stand-in until the DSL
/// kernel fused with the combine lands.
#[derive(Debug)]
pub struct VupFallback {
    stream: Arc<CudaStream>,
    bf16: CudaFunction,
    f16: CudaFunction,
}

impl VupFallback {
    /// Compiles the kernels for `stream`'s device.
    pub fn new(stream: Arc<CudaStream>) -> Result<Self, VupError> {
        let module =
            cuda_source::load_module(stream.context(), "vup_fallback", &vup_fallback_source())?;
        let bf16 = cuda_source::load_function(&module, "vup_fallback_bf16")?;
        let f16 = cuda_source::load_function(&module, "vup_fallback_f16")?;
        Ok(VupFallback { stream, bf16, f16 })
    }

    /// The stream the kernel runs on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// y = V-up(lat_out, W_UV), enqueued on [`Self::stream`].
    pub fn run<E, X, W, Y>(
        &self,
        shape: &VupShape,
        lat_out: &X,
        w_uv: &W,
        y: &mut Y,
    ) -> Result<(), VupError>
    where
        E: ActivationElem,
        X: DevicePtr<E>,
        W: DevicePtr<E>,
        Y: DevicePtrMut<E>,
    {
        shape.check_buffers(&self.stream, lat_out, w_uv, y)?;
        let (_, _, total) = shape.elems()?;
        if total == 0 {
            return Ok(());
        }
        let blocks = total.div_ceil(FALLBACK_BLOCK as usize);
        let grid = u32::try_from(blocks).map_err(|_| VupError::TooLarge {
            name: "fallback grid blocks",
            value: blocks,
            max: c_int::MAX,
        })?;
        let func = match E::DTYPE {
            ActDtype::Bf16 => &self.bf16,
            ActDtype::F16 => &self.f16,
        };
        let tokens = shape.tokens as i64;
        let heads = to_int("heads", shape.heads)?;
        let latent = to_int("latent", shape.latent)?;
        let v_head = to_int("v_head", shape.v_head)?;
        let (x_ptr, _rx) = lat_out.device_ptr(&self.stream);
        let (w_ptr, _rw) = w_uv.device_ptr(&self.stream);
        let (y_ptr, _ry) = y.device_ptr_mut(&self.stream);
        let cfg = LaunchConfig {
            grid_dim: (grid, 1, 1),
            block_dim: (FALLBACK_BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut launch = self.stream.launch_builder(func);
        launch
            .arg(&x_ptr)
            .arg(&w_ptr)
            .arg(&y_ptr)
            .arg(&tokens)
            .arg(&heads)
            .arg(&latent)
            .arg(&v_head);
        // SAFETY: the argument list matches the kernel's signature; the buffers were checked to
        // hold the T·N·L, N·L·V and T·N·V elements the kernel addresses.
        unsafe { launch.launch(cfg) }
            .map(|_| ())
            .map_err(|source| VupError::Driver {
                during: "launching the V-up fallback kernel",
                source,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemm_params_match_spec_6_2_for_deepseek_tp8() {
        let s = VupShape::deepseek_v3(7, 16).unwrap();
        let p = s.gemm_params().unwrap();
        assert_eq!(
            p,
            StridedGemmParams {
                m: 128,
                n: 7,
                k: 512,
                lda: 128,
                stride_a: 65536,
                ldb: 16 * 512,
                stride_b: 512,
                ldc: 16 * 128,
                stride_c: 128,
                batch: 16,
            }
        );
        assert_eq!(
            s.elems().unwrap(),
            (7 * 16 * 512, 16 * 512 * 128, 7 * 16 * 128)
        );
    }

    #[test]
    fn all_128_heads_are_fine_on_cuda() {
        // The Ascend N·L < 65536 limit (§6.3) does not exist for cuBLAS.
        let p = VupShape::deepseek_v3(1, 128)
            .unwrap()
            .gemm_params()
            .unwrap();
        assert_eq!(p.ldb, 65536);
    }

    #[test]
    fn zero_and_oversized_dims_are_typed_errors() {
        assert!(matches!(
            VupShape::new(4, 0, 512, 128),
            Err(VupError::ZeroDim { name: "heads" })
        ));
        assert!(matches!(
            VupShape::new(4, 16, 0, 128),
            Err(VupError::ZeroDim { name: "latent" })
        ));
        assert!(matches!(
            VupShape::new(4, 16, 512, 0),
            Err(VupError::ZeroDim { name: "v_head" })
        ));
        let err = VupShape::new(1 << 31, 16, 512, 128).unwrap_err();
        assert!(
            matches!(err, VupError::TooLarge { name: "tokens", .. }),
            "{err}"
        );
        let err = VupShape::new(1, 1 << 22, 1024, 128).unwrap_err();
        assert!(
            matches!(err, VupError::TooLarge { name: "N*L", .. }),
            "{err}"
        );
        assert!(VupShape::new(0, 16, 512, 128).is_ok());
    }

    #[test]
    fn messages_name_the_value_and_the_limit() {
        let msg = VupShape::new(1 << 31, 16, 512, 128)
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("2147483648") && msg.contains("2147483647"),
            "{msg}"
        );
    }
}
