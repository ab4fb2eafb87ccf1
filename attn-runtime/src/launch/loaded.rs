//! A kernel loaded into one CUDA context, and the launch itself.

use super::args::{scalar_slot, KernelArg};
use super::device::query_limits;
use super::tensor_map::{check_map_spec, encode_maps, MapArg};
use super::validate::{
    validate_alignment, validate_args, validate_config, DeviceLimits, LaunchSpec,
    DEFAULT_SHARED_LIMIT,
};
use super::{Grid, LaunchError};
use crate::cache::{write_entry, CacheOutcome, CachedModule, ModuleCache};
use crate::jit::{self, Arch, CompiledModule, CudaSource, JitOptions, KernelStats, ModuleImage};
use cudarc::driver::sys::{CUfunction_attribute as FnAttr, CUtensorMap};
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
        let ((func, stats), outcome) = load_with_rebuild(ctx, source, &opts, cached)?;
        let func_max_threads = attribute(
            &func,
            FnAttr::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
            "reading the kernel's thread limit",
        )?;
        let static_shared = stats.shared_bytes;
        // Validate the shared-memory budget before asking the driver for it.
        validate_config(&spec, &limits, Grid([1, 1, 1]), static_shared, u32::MAX)?;
        // A malformed tensor map (type, box, parameters) fails here, not at the first launch.
        for map in &spec.tensor_maps {
            check_map_spec(&spec, map)?;
        }
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
    ///
    /// `args` are the ordinary parameters only. A kernel with TMA tensor maps
    /// ([`LaunchSpec::tensor_maps`]) gets them encoded here, from these arguments, and
    /// passed after them: its bulk copies read global memory through the maps, and a map
    /// embeds its buffer's address and extent, so only the launcher can build it.
    pub fn launch(
        &self,
        stream: &CudaStream,
        grid: Grid,
        mut args: Vec<KernelArg<'_>>,
    ) -> Result<(), LaunchError> {
        let grid = match crate::jit::source_override::grid_x_multiple() {
            Some(n) => Grid([grid.0[0].div_ceil(n) * n, grid.0[1], grid.0[2]]),
            None => grid,
        };
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
        // What the tensor maps are encoded from (only gathered when the kernel has some).
        let with_maps = !self.spec.tensor_maps.is_empty();
        let mut map_args = Vec::with_capacity(if with_maps { args.len() } else { 0 });
        for (i, arg) in args.iter_mut().enumerate() {
            match arg {
                KernelArg::Buffer(b) => {
                    let (elem, len) = (b.elem, b.len);
                    let (ptr, guard) = b.device_ptr(stream);
                    guards.push(guard);
                    validate_alignment(&self.spec, i, ptr)?;
                    slots[i] = ptr;
                    if with_maps {
                        map_args.push(MapArg::Buffer { elem, ptr, len });
                    }
                }
                KernelArg::Scalar(v) => {
                    slots[i] = scalar_slot(v);
                    if with_maps {
                        map_args.push(MapArg::Scalar(*v));
                    }
                }
            }
        }
        // The maps' storage (`CUtensorMap`: 128 bytes, at least 64-byte aligned, as the
        // kernel's `__grid_constant__` parameters need) lives until the launch returns; the
        // driver copies parameter values at the launch (into the node, under capture).
        let mut maps = if with_maps {
            encode_maps(&self.spec, &map_args)?
        } else {
            Vec::new()
        };
        let mut params: Vec<*mut c_void> = slots
            .iter_mut()
            .map(|s| (s as *mut u64).cast())
            .chain(maps.iter_mut().map(|m| (m as *mut CUtensorMap).cast()))
            .collect();
        self.ctx
            .bind_to_thread()
            .map_err(LaunchError::driver("binding the context"))?;
        // SAFETY: arguments were checked against the kernel's parameters (count, kind,
        // dtype, alignment) and one encoded map follows them per tensor-map parameter; the
        // views keep their buffers alive and the guards order this launch against other
        // streams' uses of them; `slots` and `maps` outlive the call.
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
        drop(maps);
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
            let edited = jit::source_override::replacement(source.entry);
            let module = jit::compile(&jit::source_override::effective(source, &edited), opts)?;
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

/// A non-negative attribute of the loaded function.
fn attribute(func: &CudaFunction, attr: FnAttr, what: &'static str) -> Result<u32, LaunchError> {
    Ok(func
        .get_attribute(attr)
        .map_err(LaunchError::driver(what))?
        .max(0) as u32)
}

/// The statistics of `m`'s entry loaded as `func`: ptxas's from the compile log where it
/// has the entry, with what the driver reports of the loaded function: its registers and
/// static shared memory always, its local memory as the stack frame where the log had
/// none. The log alone is not enough: the CUDA 13.0 NVRTC of the GPU host prints ptxas's
/// verbose lines only for a process's first `sm_90a` compile (2026-12-06; later ones log
/// nothing), so its spill counts are kept where they exist and the rest comes from the
/// image itself.
fn loaded_stats(func: &CudaFunction, m: &CompiledModule) -> Result<KernelStats, LaunchError> {
    let registers = attribute(
        func,
        FnAttr::CU_FUNC_ATTRIBUTE_NUM_REGS,
        "reading the kernel's register count",
    )?;
    let shared_bytes = attribute(
        func,
        FnAttr::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
        "reading the kernel's static shared memory",
    )?;
    let local_bytes = attribute(
        func,
        FnAttr::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES,
        "reading the kernel's local memory",
    )?;
    let logged = m.entry_stats();
    Ok(KernelStats {
        function: m.entry.clone(),
        arch: m.arch_label.clone(),
        registers,
        shared_bytes,
        stack_frame_bytes: logged.map_or(local_bytes, |s| s.stack_frame_bytes),
        ..logged.cloned().unwrap_or_default()
    })
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
    let stats = loaded_stats(&func, m)?;
    Ok((func, stats))
}
