//! In-process kernel slots: the first launch compiles (or loads from disk) and loads the
//! module; every later launch reads a `OnceLock` and compares a context pointer — no
//! hashing of sources, no lock on the hot path.

use super::args::{Cuda, KernelArg};
use super::loaded::LoadedKernel;
use super::tensor_map::TensorMapSpec;
use super::validate::{LaunchSpec, ParamSpec};
use super::{Grid, LaunchError};
use crate::jit::CudaSource;
use attn_dsl::codegen::CudaKernel;
use attn_dsl::kernel::Kernel;
use cudarc::driver::{CudaContext, CudaStream};
use std::any::TypeId;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, OnceLock};

/// One kernel's loaded modules: the first context in a `OnceLock` (the fast path), any
/// further contexts (multi-GPU) behind a mutex.
#[derive(Default)]
pub struct KernelSlot {
    first: OnceLock<Arc<LoadedKernel>>,
    others: Mutex<Vec<Arc<LoadedKernel>>>,
}

impl KernelSlot {
    pub const fn new() -> Self {
        KernelSlot {
            first: OnceLock::new(),
            others: Mutex::new(Vec::new()),
        }
    }

    /// The kernel loaded into `ctx`, loading it with `load` on first use in that context.
    pub fn get_or_load(
        &self,
        ctx: &Arc<CudaContext>,
        load: impl FnOnce() -> Result<LoadedKernel, LaunchError>,
    ) -> Result<Arc<LoadedKernel>, LaunchError> {
        if let Some(k) = self.first.get() {
            if k.belongs_to(ctx) {
                return Ok(k.clone());
            }
            return self.other_context(ctx, || load().map(Arc::new));
        }
        let loaded = Arc::new(load()?);
        // A concurrent first load may have won; both are valid, keep the winner.
        let winner = self.first.get_or_init(|| loaded.clone());
        if winner.belongs_to(ctx) {
            return Ok(winner.clone());
        }
        self.other_context(ctx, || Ok(loaded))
    }

    /// Already loaded into some context (for reporting `attn compile` stats).
    pub fn loaded(&self) -> Option<Arc<LoadedKernel>> {
        self.first.get().cloned()
    }

    fn other_context(
        &self,
        ctx: &Arc<CudaContext>,
        load: impl FnOnce() -> Result<Arc<LoadedKernel>, LaunchError>,
    ) -> Result<Arc<LoadedKernel>, LaunchError> {
        let mut others = self.others.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(k) = others.iter().find(|k| k.belongs_to(ctx)) {
            return Ok(k.clone());
        }
        let k = load()?;
        others.push(k.clone());
        Ok(k)
    }
}

/// The launch handle of one `instantiate!` kernel type; make it a `static` for
/// lookup-free launches: `static FLASH: TypedKernel<Flash> = TypedKernel::new();`.
pub struct TypedKernel<K> {
    slot: KernelSlot,
    _kernel: PhantomData<fn() -> K>,
}

impl<K: Kernel> TypedKernel<K> {
    pub const fn new() -> Self {
        TypedKernel {
            slot: KernelSlot::new(),
            _kernel: PhantomData,
        }
    }

    /// Launches with the typed argument struct `instantiate!` generated for `K`.
    pub fn launch<'a>(
        &self,
        stream: &Arc<CudaStream>,
        grid: impl Into<Grid>,
        args: K::Args<'a, Cuda>,
    ) -> Result<(), LaunchError> {
        let k = self.load(stream.context())?;
        k.launch(stream, grid.into(), K::marshal::<Cuda>(args))
    }

    /// Loads (compiling on first use) into `ctx`.
    pub fn load(&self, ctx: &Arc<CudaContext>) -> Result<Arc<LoadedKernel>, LaunchError> {
        self.slot.get_or_load(ctx, || {
            LoadedKernel::load(ctx, &CudaSource::from_info(&K::INFO), spec_of::<K>())
        })
    }
}

impl<K: Kernel> Default for TypedKernel<K> {
    fn default() -> Self {
        TypedKernel::new()
    }
}

fn spec_of<K: Kernel>() -> LaunchSpec {
    LaunchSpec {
        entry: K::INFO.entry.to_string(),
        params: K::INFO.params.iter().map(ParamSpec::from_info).collect(),
        block_threads: K::INFO.block_threads,
        shared_bytes: K::INFO.shared_bytes,
        // `instantiate!` kernels are compiled from their static source: no TMA maps.
        tensor_maps: Vec::new(),
    }
}

/// Launches `K` without a caller-held handle. The slot is found through a thread-local
/// map by `TypeId` (no lock, no source hashing); hold a `static TypedKernel<K>` to skip even that.
pub fn launch<'a, K: Kernel + 'static>(
    stream: &Arc<CudaStream>,
    grid: impl Into<Grid>,
    args: K::Args<'a, Cuda>,
) -> Result<(), LaunchError> {
    let slot = typed_slot::<K>();
    let ctx = stream.context();
    let k = slot.get_or_load(ctx, || {
        LoadedKernel::load(ctx, &CudaSource::from_info(&K::INFO), spec_of::<K>())
    })?;
    k.launch(stream, grid.into(), K::marshal::<Cuda>(args))
}

fn typed_slot<K: 'static>() -> &'static KernelSlot {
    thread_local! {
        static LOCAL: RefCell<BTreeMap<TypeId, &'static KernelSlot>> = const { RefCell::new(BTreeMap::new()) };
    }
    static GLOBAL: Mutex<BTreeMap<TypeId, &'static KernelSlot>> = Mutex::new(BTreeMap::new());
    let id = TypeId::of::<K>();
    if let Some(s) = LOCAL.with(|m| m.borrow().get(&id).copied()) {
        return s;
    }
    let slot = *GLOBAL
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry(id)
        .or_insert_with(|| Box::leak(Box::new(KernelSlot::new())));
    LOCAL.with(|m| m.borrow_mut().insert(id, slot));
    slot
}

/// A run-time specialization (`CudaKernel` from the emitter, or hand-written CUDA) with
/// its own slot: create once, launch many times with an untyped argument list.
pub struct CudaKernelHandle {
    kernel: CudaKernel,
    prelude: Option<String>,
    slot: KernelSlot,
}

impl CudaKernelHandle {
    pub fn new(kernel: CudaKernel) -> Self {
        CudaKernelHandle {
            kernel,
            prelude: None,
            slot: KernelSlot::new(),
        }
    }

    /// A kernel whose source includes `prelude` under the prelude name instead of the compiler's.
    pub fn with_prelude(kernel: CudaKernel, prelude: impl Into<String>) -> Self {
        CudaKernelHandle {
            kernel,
            prelude: Some(prelude.into()),
            slot: KernelSlot::new(),
        }
    }

    pub fn kernel(&self) -> &CudaKernel {
        &self.kernel
    }

    /// The translation unit as NVRTC sees it.
    pub fn source(&self) -> CudaSource<'_> {
        let s = CudaSource::from_kernel(&self.kernel);
        match &self.prelude {
            Some(p) => s.with_prelude(p),
            None => s,
        }
    }

    pub fn spec(&self) -> LaunchSpec {
        LaunchSpec {
            entry: self.kernel.entry.clone(),
            params: ParamSpec::of_kernel(&self.kernel),
            block_threads: self.kernel.block_threads,
            shared_bytes: self.kernel.shared_bytes,
            tensor_maps: TensorMapSpec::of_kernel(&self.kernel),
        }
    }

    /// Loads (compiling on first use) into `ctx`.
    pub fn load(&self, ctx: &Arc<CudaContext>) -> Result<Arc<LoadedKernel>, LaunchError> {
        self.slot
            .get_or_load(ctx, || LoadedKernel::load(ctx, &self.source(), self.spec()))
    }

    /// Validates `args` against the kernel's parameters and launches.
    pub fn launch(
        &self,
        stream: &Arc<CudaStream>,
        grid: impl Into<Grid>,
        args: Vec<KernelArg<'_>>,
    ) -> Result<(), LaunchError> {
        self.load(stream.context())?
            .launch(stream, grid.into(), args)
    }
}
