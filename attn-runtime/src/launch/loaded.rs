//! A kernel loaded into one CUDA context, and the launch itself.

use super::args::{scalar_slot, KernelArg};
use super::device::query_limits;
use super::validate::{
    validate_alignment, validate_args, validate_config, DeviceLimits, LaunchSpec,
    DEFAULT_SHARED_LIMIT,
};
use super::{Grid, LaunchError};
use crate::cache::{write_entry, CacheOutcome, CachedModule, ModuleCache};
use crate::jit::{self, Arch, CompiledModule, CudaSource, JitOptions, KernelStats, ModuleImage};
use cudarc::driver::sys::CUfunction_attribute as FnAttr;
use cudarc::driver::{result, CudaContext, CudaFunction, CudaStream};
use cudarc::nvrtc::Ptx;
use std::ffi::c_void;
use std::sync::{Arc, OnceLock};

/// A kernel ready to launch in one context: function handle, limits, metadata.
#[derive(Debug)]
pub struct LoadedKernel {
    pub(crate) func: CudaFunction,
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) limits: DeviceLimits,
    pub(crate) func_max_threads: u32,
    pub spec: LaunchSpec,
    /// ptxas statistics of the entry (static smem, registers, spills).
    pub stats: KernelStats,
    /// Where the module came from (disk cache hit, compiled, rebuilt).
    pub outcome: CacheOutcome,
}

/// The process-wide disk cache (configured from the environment once).
pub fn process_cache() -> &'static ModuleCache {
    static CACHE: OnceLock<ModuleCache> = OnceLock::new();
    CACHE.get_or_init(ModuleCache::from_env)
}

impl LoadedKernel {
    /// Compiles (or loads from the disk cache) and loads `source` into `ctx`, opting into
    /// large dynamic shared memory when `spec` asks for more than 48 KB.
    pub fn load(
        ctx: &Arc<CudaContext>,
        source: &CudaSource<'_>,
        spec: LaunchSpec,
    ) -> Result<Self, LaunchError> {
        let (major, minor) = ctx
            .compute_capability()
            .map_err(LaunchError::driver("reading the compute capability"))?;
        let opts = JitOptions::new(Arch::native(major, minor));
        let cached = process_cache().get_or_compile(source, &opts)?;
        let limits = query_limits(ctx)?;
        let (func, outcome) = load_with_rebuild(ctx, source, &opts, cached)?;
        let stats = func.1;
        let func = func.0;
        let func_max_threads = func
            .get_attribute(FnAttr::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)
            .map_err(LaunchError::driver("reading the kernel's thread limit"))?
            .max(0) as u32;
        let static_shared = func
            .get_attribute(FnAttr::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)
            .map_err(LaunchError::driver(
                "reading the kernel's static shared memory",
            ))?
            .max(0) as u32;
        let stats = KernelStats {
            shared_bytes: static_shared,
            ..stats
        };
        // Validate the shared-memory budget before asking the driver for it.
        validate_config(&spec, &limits, Grid([1, 1, 1]), static_shared, u32::MAX)?;
        if spec.shared_bytes > DEFAULT_SHARED_LIMIT {
            func.set_attribute(
                FnAttr::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                spec.shared_bytes as i32,
            )
            .map_err(LaunchError::driver(
                "opting into large dynamic shared memory",
            ))?;
        }
        Ok(LoadedKernel {
            func,
            ctx: ctx.clone(),
            limits,
            func_max_threads,
            spec,
            stats,
            outcome,
        })
    }

    /// Validates and launches on `stream` (which must belong to this kernel's context).
    pub fn launch(
        &self,
        stream: &CudaStream,
        grid: Grid,
        mut args: Vec<KernelArg<'_>>,
    ) -> Result<(), LaunchError> {
        validate_config(
            &self.spec,
            &self.limits,
            grid,
            self.stats.shared_bytes,
            self.func_max_threads,
        )?;
        let summaries: Vec<_> = args.iter().map(KernelArg::summary).collect();
        validate_args(&self.spec, &summaries)?;
        // Stable storage: the driver reads each argument through a pointer to its slot.
        let mut slots: Vec<u64> = vec![0; args.len()];
        let mut guards = Vec::with_capacity(args.len());
        for (i, arg) in args.iter_mut().enumerate() {
            match arg {
                KernelArg::Buffer(b) => {
                    let (ptr, guard) = b.device_ptr(stream);
                    guards.push(guard);
                    validate_alignment(&self.spec, i, ptr)?;
                    slots[i] = ptr;
                }
                KernelArg::Scalar(v) => slots[i] = scalar_slot(v),
            }
        }
        let mut params: Vec<*mut c_void> =
            slots.iter_mut().map(|s| (s as *mut u64).cast()).collect();
        self.ctx
            .bind_to_thread()
            .map_err(LaunchError::driver("binding the context"))?;
        // SAFETY: arguments were checked against the kernel's parameters (count, kind,
        // dtype, alignment); the views keep their buffers alive and the guards order
        // this launch against other streams' uses of them.
        unsafe {
            result::launch_kernel(
                self.func.cu_function(),
                (grid.0[0], grid.0[1], grid.0[2]),
                (self.spec.block_threads, 1, 1),
                self.spec.shared_bytes,
                stream.cu_stream(),
                &mut params,
            )
        }
        .map_err(LaunchError::driver("launching the kernel"))?;
        drop(guards);
        Ok(())
    }

    /// Whether this kernel was loaded into `ctx`.
    pub fn belongs_to(&self, ctx: &Arc<CudaContext>) -> bool {
        Arc::ptr_eq(&self.ctx, ctx)
    }
}

/// Loads the image; an unloadable cache hit is compiled afresh and its entry rewritten.
fn load_with_rebuild(
    ctx: &Arc<CudaContext>,
    source: &CudaSource<'_>,
    opts: &JitOptions,
    cached: CachedModule,
) -> Result<((CudaFunction, KernelStats), CacheOutcome), LaunchError> {
    match load_image(ctx, &cached.module) {
        Ok(f) => Ok((f, cached.outcome)),
        Err(e) if cached.outcome != CacheOutcome::Hit => Err(e),
        Err(e) => {
            let module = jit::compile(source, opts)?;
            if let Some(dir) = &process_cache().config().dir {
                let _ = write_entry(dir, &cached.key, &module);
            }
            let f = load_image(ctx, &module)?;
            Ok((
                f,
                CacheOutcome::Rebuilt {
                    why: format!("cached image did not load: {e}"),
                },
            ))
        }
    }
}

fn load_image(
    ctx: &Arc<CudaContext>,
    m: &CompiledModule,
) -> Result<(CudaFunction, KernelStats), LaunchError> {
    let ptx = match &m.image {
        ModuleImage::Cubin(bytes) => Ptx::from_binary(bytes.clone()),
        ModuleImage::Ptx(text) => Ptx::from_src(text.clone()),
    };
    let module = ctx
        .load_module(ptx)
        .map_err(LaunchError::driver("loading the module"))?;
    let func = module
        .load_function(&m.entry)
        .map_err(LaunchError::driver("finding the entry point"))?;
    super::eager::ensure_function_loaded(&func)
        .map_err(LaunchError::driver("loading the entry point's code"))?;
    Ok((func, m.entry_stats().cloned().unwrap_or_default()))
}
