//! The device a kernel runs on: its context, exact arch, and limits.

use super::validate::DeviceLimits;
use super::LaunchError;
use crate::jit::Arch;
use cudarc::driver::sys::CUdevice_attribute as A;
use cudarc::driver::{CudaContext, CudaStream};
use std::sync::Arc;

/// A CUDA device with what launches need to know about it.
#[derive(Clone, Debug)]
pub struct CudaDevice {
    ctx: Arc<CudaContext>,
    arch: Arch,
    limits: DeviceLimits,
    name: String,
}

impl CudaDevice {
    /// Opens device `ordinal`; typed errors when there is no driver or no such device.
    pub fn new(ordinal: usize) -> Result<Self, LaunchError> {
        ensure_driver()?;
        let count = CudaContext::device_count().map_err(LaunchError::driver("counting devices"))?;
        if ordinal >= count.max(0) as usize {
            return Err(LaunchError::NoDevice { ordinal, count });
        }
        let ctx = CudaContext::new(ordinal).map_err(LaunchError::driver("creating the context"))?;
        CudaDevice::from_context(ctx)
    }

    /// Wraps an existing context (for composing with other cudarc users).
    pub fn from_context(ctx: Arc<CudaContext>) -> Result<Self, LaunchError> {
        let (major, minor) = ctx
            .compute_capability()
            .map_err(LaunchError::driver("reading the compute capability"))?;
        let limits = query_limits(&ctx)?;
        let name = ctx
            .name()
            .map_err(LaunchError::driver("reading the device name"))?;
        Ok(CudaDevice {
            arch: Arch::native(major, minor),
            limits,
            name,
            ctx,
        })
    }

    /// True when a driver and at least one device are present (never panics).
    pub fn is_available() -> bool {
        ensure_driver().is_ok() && CudaContext::device_count().map(|n| n > 0).unwrap_or(false)
    }

    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }
    pub fn arch(&self) -> Arch {
        self.arch
    }
    pub fn limits(&self) -> &DeviceLimits {
        &self.limits
    }
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The context's default stream.
    pub fn default_stream(&self) -> Arc<CudaStream> {
        self.ctx.default_stream()
    }
    pub fn new_stream(&self) -> Result<Arc<CudaStream>, LaunchError> {
        self.ctx
            .new_stream()
            .map_err(LaunchError::driver("creating a stream"))
    }
}

/// Fails with [`LaunchError::NoDriver`] instead of cudarc's panic when libcuda is missing.
#[cfg(feature = "dynamic-loading")]
pub fn ensure_driver() -> Result<(), LaunchError> {
    // SAFETY: only probes the dynamic loader.
    if unsafe { cudarc::driver::sys::is_culib_present() } {
        Ok(())
    } else {
        Err(LaunchError::NoDriver)
    }
}

/// Linked builds (`candle-cuda`): the loader resolved libcuda before `main`, so it is there.
#[cfg(not(feature = "dynamic-loading"))]
pub fn ensure_driver() -> Result<(), LaunchError> {
    Ok(())
}

/// Reads the limits launches are validated against.
pub(crate) fn query_limits(ctx: &Arc<CudaContext>) -> Result<DeviceLimits, LaunchError> {
    let get = |a| {
        ctx.attribute(a)
            .map(|v| v.max(0) as u32)
            .map_err(LaunchError::driver("reading device limits"))
    };
    Ok(DeviceLimits {
        max_grid: [
            get(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?,
            get(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?,
            get(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)?,
        ],
        max_block_threads: get(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
        max_shared_optin: get(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?,
        sm_count: get(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
    })
}
