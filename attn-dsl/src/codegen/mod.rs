//! CUDA C++ emission: one self-contained `extern "C" __global__` function per
//! specialization plus an in-memory prelude header (no system includes).
//!
//! # Execution model of the generated code
//! - A program instance is one thread block of `32 · num_warps` threads.
//! - Scalars are replicated: every thread computes them, so control flow (which only ever
//!   branches on scalars) is uniform and `__syncthreads()` / full-warp shuffles are legal
//!   anywhere.
//! - A tile lives in fully unrolled register arrays, spread over the threads by its layout
//!   (see [`tile_map`]): `Blocked` tiles cyclically (consecutive threads own consecutive
//!   elements along the contiguous axis), `Mma` tiles as `mma.sync.m16n8k16` accumulator
//!   fragments with every warp owning whole 16-row slabs, and `Slice(1, Mma)` row vectors
//!   held by the four lanes of the quad that holds the row. Every op that needs no other
//!   element works slot by slot in the distribution of its result.
//! - Index, pointer and mask tiles (pure functions of the element's coordinates and of
//!   scalars: `arange`, splats, `unsqueeze`, `broadcast` and elementwise ops over them) get
//!   no registers: each consumer recomputes the element it needs (see `recompute`), in
//!   whatever distribution the consumer has, so their broadcasts cost integer arithmetic.
//! - On `Mma` fragments, row reductions are an in-lane fold plus two quad shuffles,
//!   broadcasting a row vector over its fragment's columns is a register read, and
//!   `unsqueeze` of a row vector is a copy (see `fragment_ops`): the attention inner loop
//!   (scores, running max and sum, probabilities, rescaled accumulator) never leaves the
//!   registers except for the operand staging of its two dots.
//! - `dot` on bf16/f16 runs `mma.sync.m16n8k16` with f32 accumulation (see `dot`). When its
//!   result is an `Mma` tile the accumulator *is* the fragment array; A and B are staged in
//!   shared memory. A tile loaded only to be a dot operand is read from global memory by the
//!   staging loop itself (`staged_load`), and an A operand defined outside a loop is staged
//!   once and held as A fragments in registers across the loop (`operand_fragments`).
//! - Other exchanges (`broadcast` of stored tiles other than row vectors, `trans`, reductions
//!   outside the fragment layout, and layout conversions where two distributions meet) go
//!   through one dynamic shared-memory scratch buffer (`attn_scratch`, after the GPU IR's allocs in `attn_smem`), sized to the largest need
//!   of any op ([`CudaKernel::shared_bytes`]) and guarded by barriers before and after every
//!   write.
//!
//! # Numerics (the CPU executor's rules)
//! bf16/f16 values live in f32 registers and are rounded (nearest even) after every op;
//! f32 `+ - * /` and `sqrt` use the `__f*_rn` intrinsics so NVRTC's default FMA contraction
//! cannot change results; integer arithmetic wraps; shifts take their amount modulo the
//! width; `min`/`max` return the non-NaN operand (`fminf`/`fmaxf`); float→int casts truncate
//! and saturate (NaN → 0). Reductions through shared memory run in ascending index order from
//! the first element, like the executor. Row reductions of `Mma` fragments run in tree order:
//! each lane folds its columns of the row (column tiles ascending, then the tile's two
//! columns), then lanes combine with `xor 1` and `xor 2`; `max`/`min` (NaN-ignoring, started
//! from NaN) and integer sums are still exact, f32 sums agree with the executor to rounding.
//! Transcendentals are the CUDA `expf`/`logf`/... (≤ 2 ulp), and tensor-core dots sum each
//! 16-wide K step in hardware order, so those are close to, not identical with, the CPU.
//!
//! Global-memory writes of one program are not ordered against its other threads' reads of
//! the same addresses (no kernel needs that: each program reads its inputs and writes
//! disjoint outputs).

mod async_copy;
mod c_types;
mod copy_mask;
mod deferred_sum;
mod describe;
mod dot;
mod dot_shared;
mod elem_index;
mod elementwise;
mod emitter;
mod exchange;
mod fragment_ops;
mod handoff;
mod mask_bound;
mod memory;
mod mma_map;
mod names;
mod operand_fragments;
mod owned_region;
mod page_pointer;
mod page_row;
mod recompute;
mod remat;
mod remat_region;
mod row_scale;
mod run_rows;
mod scratch_ledger;
mod shared_rows;
mod staged_load;
mod staged_store;
pub mod tile_map;
mod tma_copy;
mod warp_roles;
mod warpgroup_loops;
mod wgmma;
mod wide_mul;
mod writer;

use crate::ir::{Function, Layout, Param};

/// Generated CUDA for one specialization, ready for NVRTC.
#[derive(Clone, Debug, PartialEq)]
pub struct CudaKernel {
    /// The `extern "C"` entry point name (unique per specialization).
    pub entry: String,
    /// The kernel translation unit; it includes [`PRELUDE_NAME`] and nothing else.
    pub source: String,
    /// Content hash (hex blake3) of source + prelude + compiler version.
    pub hash: String,
    /// Runtime parameters in launch order.
    pub params: Vec<Param>,
    /// Threads per block: 32 · num_warps, plus a producer warpgroup when warp-specialized.
    pub block_threads: u32,
    /// Dynamic shared memory the kernel needs, in bytes.
    pub shared_bytes: u32,
    /// Integer parameters this code assumes divisible (name, divisor): the launcher must
    /// check every call against them.
    pub assumed_divisible: Vec<(String, u64)>,
    /// 64-bit integer parameters this code assumes lie in `int`'s range: the launcher must
    /// check every call against them.
    pub assumed_i32: Vec<String>,
    /// TMA tensor maps the launcher encodes for every launch and passes after
    /// [`Self::params`], in this order (`const __grid_constant__ attn_tensor_map`).
    pub tensor_maps: Vec<TensorMapParam>,
}

/// A tensor map the kernel's bulk copies read through: a 2D view of one pointer
/// parameter's buffer as rows of `row_stride` elements (dim 0: the `row_stride` elements
/// of a row, dim 1: `ceil(len / row_stride)` rows, so no box reads past the buffer:
/// out-of-range elements arrive as zeros), boxes of `box_rows × box_cols` elements stored
/// with the 128-byte swizzle (the layout of the GPU IR's swizzled allocs). The kernel turns
/// a row's element offset `o` from the base into the box coordinate `(o % row_stride,
/// o / row_stride)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorMapParam {
    /// The C++ parameter name.
    pub name: String,
    /// Index in [`CudaKernel::params`] of the pointer whose buffer the map views.
    pub base_param: usize,
    /// Element type (16-bit: the swizzled allocs hold 16-bit tiles).
    pub elem: crate::ir::ScalarType,
    /// Elements between consecutive rows of the view.
    pub row_stride: RowStride,
    pub box_rows: u32,
    pub box_cols: u32,
}

/// A row stride known at launch: `coeff × the value of scalar parameter `param`` (or
/// `coeff` alone when `param` is `None`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowStride {
    pub param: Option<usize>,
    pub coeff: i64,
}

/// Name under which [`PRELUDE`] must be handed to NVRTC as an in-memory header.
pub const PRELUDE_NAME: &str = "attn_prelude.cuh";
/// Device helpers the generated kernels use (bf16/f16 types, mma wrappers, math).
pub const PRELUDE: &str = include_str!("prelude.cuh");

/// Why a function could not be turned into CUDA.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CodegenError {
    #[error("codegen: {0}")]
    Unsupported(String),
    #[error("codegen: num_warps = {0}; allowed: 1..=32 (at most 1024 threads per block)")]
    NumWarps(u32),
    #[error("codegen: value %{0} is used before it is defined")]
    UndefinedValue(u32),
    #[error("codegen: malformed IR: {0}")]
    Malformed(String),
    #[error(
        "codegen: kernel `{kernel}` needs {needed} bytes of shared memory; at most {limit} bytes \
         (227 KiB) fit one block on any supported GPU"
    )]
    SharedMemory {
        kernel: String,
        needed: usize,
        limit: usize,
    },
}

/// Emits CUDA for a specialized kernel.
///
/// Tiles whose layout is still unassigned (IR built by hand, not through
/// [`crate::passes::optimize`]) get the layout pass's layouts first, so the emitted code is
/// the same whichever way the IR arrived.
pub fn emit_cuda(f: &Function) -> Result<CudaKernel, CodegenError> {
    let unassigned = f
        .values
        .iter()
        .any(|v| !v.ty.is_scalar() && v.ty.layout == Layout::Unassigned);
    let laid_out = unassigned.then(|| {
        let mut g = f.clone();
        crate::passes::layout::run(&mut g);
        g
    });
    let f = laid_out.as_ref().unwrap_or(f);
    // Opt-in: a two-warpgroup key loop whose warpgroups take its tiles in turn (the
    // seesaw, `passes::seesaw`), where the loop has that shape and the code generator
    // places it (an owned dot whose shared operand stays in registers, a second tile that
    // does not fit beside the ring: the loop as written). Tests emit it directly.
    if crate::features::on("seesaw") {
        if let Some(Ok(done)) = emit_rewritten(f, seesaw_in_place, |_| true) {
            return Ok(done);
        }
    }
    // Warpgroup targets software-pipeline the key loop where the split reads PV's V from
    // the previous stage (`gpu_ir::previous_stage`): PV one tile behind the scores, the
    // softmax under it. Opt-in elsewhere: PV behind on any loop, or the scores one tile
    // ahead (with `softmax_ahead`, their softmax too).
    if f.warpgroup_mma {
        use crate::gpu_ir::previous_stage;
        if previous_stage::worth_trying(f) {
            let pass = crate::passes::pv_behind::run;
            if let Some(done) = emit_rewritten(f, pass, previous_stage::reads_previous_stage) {
                return done;
            }
        }
        if crate::features::on("pv_behind") {
            if let Some(done) = emit_rewritten(f, crate::passes::pv_behind::run, |_| true) {
                return done;
            }
        }
        if crate::features::on("rotate") || crate::features::on("softmax_ahead") {
            if let Some(done) = emit_rewritten(f, crate::passes::rotate_scores::run, |_| true) {
                return done;
            }
        }
    }
    emit_laid_out(f)
}

/// `f` rewritten by `pass` and emitted, when the pass applies, its GPU program is one
/// `accept` takes and the result fits: a loop rewrite that buffers a tile of its own (the
/// rotated loop's first keys: MLA's 72 KB latent tiles, head size 512) or that the GPU IR
/// cannot place leaves the loop as written; so does PV one tile behind where the split does
/// not then read V from the previous stage (slower than the loop as written there: see
/// `docs/gpu_ir.md`).
fn emit_rewritten(
    f: &Function,
    pass: fn(&mut Function) -> bool,
    accept: fn(&crate::gpu_ir::GpuProgram) -> bool,
) -> Option<Result<CudaKernel, CodegenError>> {
    let mut g = f.clone();
    if !pass(&mut g) {
        return None;
    }
    let prog = crate::gpu_ir::compile(&g).ok().filter(accept)?;
    match emit_program(&g, &prog) {
        Err(CodegenError::Malformed(_) | CodegenError::SharedMemory { .. }) => None,
        done => Some(done),
    }
}

/// [`crate::passes::seesaw::apply`] as a pass in place.
fn seesaw_in_place(f: &mut Function) -> bool {
    match crate::passes::seesaw::apply(f) {
        Some(g) => {
            *f = g;
            true
        }
        None => false,
    }
}

fn emit_laid_out(f: &Function) -> Result<CudaKernel, CodegenError> {
    let prog = crate::gpu_ir::compile(f).map_err(CodegenError::Malformed)?;
    emit_program(f, &prog)
}

fn emit_program(
    f: &Function,
    prog: &crate::gpu_ir::GpuProgram,
) -> Result<CudaKernel, CodegenError> {
    let entry = names::sanitize(&f.name);
    let emit = |slots: bool| -> Result<emitter::Emitter<'_>, CodegenError> {
        let mut em = emitter::Emitter::new(f, prog)?;
        em.reduction_slots_allowed = slots;
        let header = format!(
            "Generated by attn-dsl {} from kernel `{}`: {} threads per block.",
            env!("CARGO_PKG_VERSION"),
            f.name,
            prog.block_threads(em.threads)
        );
        em.emit_kernel(&entry, &header)?;
        Ok(em)
    };
    let mut em = emit(true)?;
    let mut needed = prog.alloc_bytes + em.scratch_bytes;
    if needed > emitter::MAX_SHARED_BYTES {
        // What the ledger adds to the scratch buffer (the reductions' own slots, handoffs
        // moved off the bytes just read) may not fit beside the rest: emitted again without.
        em = emit(false)?;
        needed = prog.alloc_bytes + em.scratch_bytes;
    }
    if needed > emitter::MAX_SHARED_BYTES {
        return Err(CodegenError::SharedMemory {
            kernel: f.name.clone(),
            needed,
            limit: emitter::MAX_SHARED_BYTES,
        });
    }
    let (threads, shared) = (prog.block_threads(em.threads) as u32, needed as u32);
    let source = em.w.finish();
    Ok(CudaKernel {
        hash: content_hash(&source),
        entry,
        source,
        params: f.params.clone(),
        assumed_divisible: f.assumed_divisible.clone(),
        assumed_i32: f.assumed_i32.clone(),
        tensor_maps: em.tensor_maps.clone(),
        block_threads: threads,
        shared_bytes: shared,
    })
}

/// Hex blake3 of source ++ prelude ++ compiler version: the runtime's cache key basis.
pub fn content_hash(source: &str) -> String {
    let mut h = blake3::Hasher::new();
    h.update(source.as_bytes());
    h.update(PRELUDE.as_bytes());
    h.update(env!("CARGO_PKG_VERSION").as_bytes());
    h.finalize().to_hex().to_string()
}
