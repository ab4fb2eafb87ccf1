//! Hand-written CUDA C++ for the plumbing kernels (V-up fallback, AG+RS correction, spin delay),
//! compiled with NVRTC for the device's exact arch and loaded as a module. These are stand-ins
//! until the DSL emits them; they include no headers, so NVRTC needs no include path.

use cudarc::driver::{CudaContext, CudaFunction, CudaModule, DriverError};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions, Ptx};
use std::sync::Arc;

/// Device-side bf16/f16 <-> f32 conversions (PTX `cvt`, sm_80+), shared by the kernels here.
pub const HALF_CONVERSIONS: &str = r#"
typedef unsigned short bf16_bits;
typedef unsigned short f16_bits;
__device__ __forceinline__ float bf16_to_f32(bf16_bits b) {
    return __uint_as_float(((unsigned int)b) << 16);
}
__device__ __forceinline__ bf16_bits f32_to_bf16(float x) {
    unsigned short r;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(x));
    return r;
}
__device__ __forceinline__ float f16_to_f32(f16_bits h) {
    float r;
    asm("cvt.f32.f16 %0, %1;" : "=f"(r) : "h"(h));
    return r;
}
__device__ __forceinline__ f16_bits f32_to_f16(float x) {
    unsigned short r;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(x));
    return r;
}
"#;

/// Failure to turn a CUDA source string into loaded functions.
#[derive(Debug, thiserror::Error)]
pub enum CudaSourceError {
    /// NVRTC rejected the source.
    #[error("NVRTC failed to compile `{name}` for {arch}: {message}")]
    Compile {
        /// Name of the source.
        name: String,
        /// The `sm_XY` arch compiled for.
        arch: String,
        /// NVRTC's log.
        message: String,
    },
    /// A CUDA driver call failed.
    #[error("CUDA driver call failed while {during} `{name}`: {source}")]
    Driver {
        /// What was being done.
        during: &'static str,
        /// Name of the source or function.
        name: String,
        /// The driver error.
        source: DriverError,
    },
}

/// The `sm_XY` arch string of a compute capability.
pub fn arch_of(major: i32, minor: i32) -> String {
    format!("sm_{major}{minor}")
}

/// Compiles `src` to PTX for `arch` (no device needed: CI checks the sources with this).
pub fn compile_for_arch(name: &str, src: &str, arch: &str) -> Result<Ptx, CudaSourceError> {
    let opts = CompileOptions {
        options: vec![format!("--gpu-architecture={arch}"), "--std=c++17".into()],
        name: Some(format!("{name}.cu")),
        ..Default::default()
    };
    compile_ptx_with_opts(src, opts).map_err(|e| CudaSourceError::Compile {
        name: name.to_string(),
        arch: arch.to_string(),
        message: e.to_string(),
    })
}

/// Compiles `src` for `ctx`'s device and loads it.
pub fn load_module(
    ctx: &Arc<CudaContext>,
    name: &str,
    src: &str,
) -> Result<Arc<CudaModule>, CudaSourceError> {
    let driver = |during| {
        let name = name.to_string();
        move |source| CudaSourceError::Driver {
            during,
            name,
            source,
        }
    };
    let (major, minor) = ctx
        .compute_capability()
        .map_err(driver("querying the compute capability for"))?;
    let ptx = compile_for_arch(name, src, &arch_of(major, minor))?;
    ctx.load_module(ptx).map_err(driver("loading the module"))
}

/// Looks up `function` in `module` and loads its code now (not at its first launch, see
/// [`crate::launch::ensure_function_loaded`]).
pub fn load_function(
    module: &Arc<CudaModule>,
    function: &str,
) -> Result<CudaFunction, CudaSourceError> {
    let driver = |during| {
        move |source| CudaSourceError::Driver {
            during,
            name: function.to_string(),
            source,
        }
    };
    let func = module
        .load_function(function)
        .map_err(driver("looking up the function"))?;
    crate::launch::ensure_function_loaded(&func).map_err(driver("loading the code of"))?;
    Ok(func)
}
