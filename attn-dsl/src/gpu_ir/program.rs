//! The GPU IR's objects: a program mirrors the tile IR's structured control flow, and between
//! the tile ops (emitted per element by the tile emitter) it holds the memory hierarchy as
//! ops that passes can move, allocate and pipeline: shared allocations, asynchronous
//! global→shared copies, commit/wait groups, barriers, and tensor-core dots whose operands
//! are read from shared memory by fragment loads (`ldmatrix`).

use crate::ir::{OpId, ScalarType};

/// Index of a [`LocalAlloc`] in [`GpuProgram::allocs`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AllocId(pub u32);

/// A shared-memory buffer holding one 2D operand tile (per stage), row-major with its
/// contiguous global axis innermost: `rows × cols` 16-bit elements, each row padded by
/// `pad` elements so the eight 16-byte rows of an `ldmatrix` hit distinct bank groups — or,
/// `swizzled`, unpadded: the tile is stored as column blocks of [`SWIZZLE_COLS`] (one
/// 128-byte line per row, block after block), and in each block the 16-byte chunk `c` of
/// row `r` sits at chunk `c ^ (r % 8)`. An `ldmatrix`'s eight rows still hit eight bank
/// groups, and each block of eight rows is 1024 contiguous bytes: the 128-byte swizzle atom
/// the tensor cores' shared-memory descriptors (`wgmma`) read, K-major or MN-major.
#[derive(Clone, Debug, PartialEq)]
pub struct LocalAlloc {
    /// A readable name (the DSL variable of the tile it holds).
    pub name: String,
    pub elem: ScalarType,
    pub rows: usize,
    pub cols: usize,
    pub pad: usize,
    pub swizzled: bool,
    /// Buffers of the ring: 1, or 2 when the copy of iteration i + 1 overlaps iteration i.
    pub stages: usize,
    /// Byte offset in dynamic shared memory (assigned by `allocate_shared`).
    pub offset: usize,
}

/// Columns of a swizzled alloc's column block: one 128-byte line of 16-bit elements.
pub const SWIZZLE_COLS: usize = 64;
/// Bytes of a swizzle atom (eight 128-byte rows): the alignment of swizzled stages.
pub const SWIZZLE_ATOM_BYTES: usize = 1024;

impl LocalAlloc {
    /// Whether a `rows × cols` 16-bit tile can be swizzled: whole 128-byte lines per row and
    /// whole groups of eight rows.
    pub fn can_swizzle(rows: usize, cols: usize) -> bool {
        cols.is_multiple_of(SWIZZLE_COLS) && rows.is_multiple_of(8)
    }

    /// Elements of one column block of a swizzled stage.
    pub fn block_elems(&self) -> usize {
        self.rows * SWIZZLE_COLS
    }

    /// Bytes of one column block of a swizzled stage.
    pub fn block_bytes(&self) -> usize {
        self.block_elems() * self.elem.size_bytes()
    }

    /// The element offset of (`row`, `col`) in one stage (C++ expressions; `col` a multiple
    /// of 8 when swizzled: a chunk start).
    pub fn offset(&self, row: &str, col: &str) -> String {
        if !self.swizzled {
            return format!("({row}) * {} + ({col})", self.pitch());
        }
        if self.cols == SWIZZLE_COLS {
            return format!("({row}) * {SWIZZLE_COLS} + (((({col}) >> 3) ^ (({row}) & 7)) << 3)");
        }
        format!(
            "(({col}) >> 6) * {} + ({row}) * {SWIZZLE_COLS} + ((((({col}) >> 3) & 7) ^ (({row}) & 7)) << 3)",
            self.block_elems()
        )
    }

    /// A copy's destination for the chunks of `row` that lane `lane` of `lanes` stores
    /// (chunks `lane + lanes·s`), as (C++ element offset of chunk s = 0, elements between
    /// consecutive `s`): one row pointer plus immediate offsets. Swizzled, `lanes` is a
    /// multiple of 8, so a lane's chunks keep their position in the line and step whole
    /// column blocks.
    pub fn copy_row(&self, row: &str, lane: &str, lanes: usize, chunk: usize) -> (String, usize) {
        if !self.swizzled {
            return (
                format!("({row}) * {} + ({lane}) * {chunk}", self.pitch()),
                lanes * chunk,
            );
        }
        let block = self.block_elems();
        (
            format!(
                "(({lane}) >> 3) * {block} + ({row}) * {SWIZZLE_COLS} + ((({lane}) & 7) ^ (({row}) & 7)) * {chunk}"
            ),
            (lanes / 8) * block,
        )
    }

    /// The elements between a copy's rows `row` and `row + rows` when that step keeps every
    /// row's place in its line (always unswizzled; swizzled, a whole number of the swizzle's
    /// 8-row period): a pass's row pointer is then the first pass's plus a constant, which
    /// the copies take as an immediate offset instead of addressing each row again.
    pub fn row_step(&self, rows: usize) -> Option<usize> {
        if !self.swizzled {
            return Some(rows * self.pitch());
        }
        rows.is_multiple_of(8).then_some(rows * SWIZZLE_COLS)
    }

    /// Row pitch in elements.
    pub fn pitch(&self) -> usize {
        self.cols + self.pad
    }
    /// Bytes of one stage (16-byte multiple, so every stage starts aligned; whole swizzle
    /// atoms when swizzled, so every stage's atoms stay 1024-byte aligned).
    pub fn stage_bytes(&self) -> usize {
        (self.rows * self.pitch() * self.elem.size_bytes()).next_multiple_of(self.alignment())
    }

    /// The byte alignment of the alloc's offset and stages.
    pub fn alignment(&self) -> usize {
        if self.swizzled {
            SWIZZLE_ATOM_BYTES
        } else {
            16
        }
    }
    pub fn bytes(&self) -> usize {
        self.stage_bytes() * self.stages
    }
}

/// Which buffer of an alloc's ring an access touches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stage {
    /// A single-buffered alloc.
    Only,
    /// The buffer of the enclosing pipelined loop's current iteration.
    Current,
    /// The prefetch target: the buffer the previous iteration read, refilled with the tile
    /// of the iteration `stages - 1` ahead.
    Next,
    /// Buffer `k` of the ring, filled before a pipelined loop with its iteration `k`.
    Fixed(usize),
    /// The buffer of the previous iteration, read one iteration late (a warp-specialized
    /// consumer's PV reading the V tile its stage holds: `gpu_ir::previous_stage`). The
    /// first iteration has none and reads the current buffer instead: its pass proved
    /// that the MMA reading it multiplies zeros there.
    Previous,
}

impl Stage {
    /// The same buffer seen from the next iteration, in the two-buffer view the sync
    /// analysis takes of any ring (the current stage and all the others): what this
    /// iteration read is what a later one refills, what it prefetched is read later.
    pub fn across_back_edge(self) -> Stage {
        match self {
            Stage::Current => Stage::Next,
            Stage::Next => Stage::Current,
            other => other,
        }
    }
}

/// How the tile of a load maps onto its alloc: element (r, c) of the tile is at alloc row
/// `r` and column `c` when the contiguous axis is 1, and at row `c`, column `r` when it is 0.
///
/// Threads copy in lane groups: `lanes` consecutive threads share an alloc row, taking its
/// chunks `lane, lane + lanes, ...`; the block's lane groups cover `threads / lanes` rows at
/// once and walk the tile's rows in passes. Few rows per thread keep the per-row address work
/// (a block-table load, 64-bit math) out of the per-chunk loop; more lanes per row make each
/// warp access fewer, longer runs (whole sectors, whole lines: see
/// [`TileInAlloc::min_lanes_for_rows`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TileInAlloc {
    /// The tile axis along which global memory is contiguous (the alloc's column axis).
    pub contiguous_axis: usize,
    /// Elements per 16-byte chunk (8 for 16-bit types).
    pub chunk: usize,
    /// Threads sharing one alloc row (a power of two dividing the warp).
    pub lanes: usize,
    /// Whether the source is contiguous along a whole alloc row, so a row's address is
    /// computed once per pass and each chunk adds its column to it.
    pub row_contiguous: bool,
}

impl TileInAlloc {
    /// Chunks each thread of a row's lane group copies from a row of `cols` columns.
    pub fn slots_per_row(&self, cols: usize) -> usize {
        (cols / self.chunk).div_ceil(self.lanes)
    }

    /// Lanes per row for a `rows` x `per_row`-chunk tile copied by `threads` threads: the
    /// fewest that still give each row at least `min_lanes` (or, with fewer rows than lane
    /// groups, every thread a row), such that whole passes cover the rows. `None` when no
    /// power of two up to a warp fits.
    pub fn lanes_for(
        rows: usize,
        per_row: usize,
        threads: usize,
        min_lanes: usize,
    ) -> Option<usize> {
        let least = threads
            .div_ceil(rows.max(1))
            .max(min_lanes.min(per_row.max(1)));
        (0..=5)
            .map(|e| 1usize << e)
            .find(|&l| l >= least && threads.is_multiple_of(l) && rows.is_multiple_of(threads / l))
    }

    /// The least lanes per row of a copy feeding a dot with `m` rows per program. A tile read
    /// by few rows (decode: 16) streams from DRAM, and whole 128-byte lines per row and warp
    /// access are what keep the L2 from being the limit (D1: 0.392 ms with 8 lanes, 0.460 ms
    /// with 2, H200); a tile reused by 128 rows makes the loop issue-bound, and fewer rows
    /// per thread (fewer address computations) win (P0: 5.79 ms with 4 lanes, 6.23 ms with 8).
    pub fn min_lanes_for_rows(m: usize) -> usize {
        if m >= ISSUE_BOUND_ROWS {
            SECTOR_LANES
        } else {
            LINE_LANES
        }
    }
}

/// Lanes that cover one 32-byte sector of a row (two 16-byte chunks).
pub const SECTOR_LANES: usize = 2;
/// Lanes that cover one 128-byte line of a row.
pub const LINE_LANES: usize = 8;
/// Rows per program from which a copied tile's reuse makes its loop issue-bound.
pub const ISSUE_BOUND_ROWS: usize = 128;

/// Which iteration's addresses a copy moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyAt {
    /// Where the load was: the values it reads are all defined.
    InPlace,
    /// Before a pipelined loop: its iteration `k` (issued only when the loop has it).
    Prologue(usize),
    /// At the top of a pipelined loop's body: the iteration this many ahead (issued only
    /// when it exists), overlapping this iteration's math.
    Ahead(usize),
}

/// `cp.async` of a load's tile into an alloc, one 16-byte chunk per thread and step, masked
/// chunks zero-filled.
#[derive(Clone, Debug, PartialEq)]
pub struct AsyncCopy {
    /// The tile-IR load this copy replaces (its pointer, mask and zero `other`).
    pub load: OpId,
    pub dst: AllocId,
    pub stage: Stage,
    pub map: TileInAlloc,
    pub at: CopyAt,
    /// The pipelined loop whose first or next iteration the copy is for.
    pub loop_op: Option<OpId>,
    /// Who moves the bytes: the threads (`cp.async` chunks) or the tensor memory
    /// accelerator (TMA boxes, issued by the first lane of each warp).
    pub engine: CopyEngine,
    /// The load reads the tile of the iteration before its own, and the copy moves the
    /// tile of its own iteration instead (see [`OneBehind`]).
    pub behind: Option<OneBehind>,
}

/// How a load of the tile one iteration back (PV behind the scores: V of `j - step` read
/// in iteration `j`) names that iteration: its addresses read the induction variable only
/// through `prev` (`iv - step`), and its mask also holds `first_off` (`iv > lo`, the
/// first iteration having no tile behind it). Copied with `prev` bound to the copy's own
/// iteration and `first_off` to true, it moves the tile of that iteration, so the stage
/// holds it beside the iteration's other tiles (one address computation for K and V) and
/// the next iteration reads it from [`Stage::Previous`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OneBehind {
    pub prev: crate::ir::ValueId,
    pub first_off: crate::ir::ValueId,
}

/// How an [`AsyncCopy`] moves its tile.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum CopyEngine {
    /// Every thread copies its 16-byte chunks with `cp.async`.
    #[default]
    Threads,
    /// The warps' first lanes issue the tile as TMA boxes through [`GpuProgram::tensor_maps`]`[map]`,
    /// `group_rows` alloc rows each (whose source rows are one row stride apart), one box
    /// per 64-column block; they complete on the alloc stage's `mbarrier`. The threads
    /// still evaluate the copy's mask in their chunk distribution and zero the masked chunks
    /// once the boxes land ([`GpuOp::TmaLanded`]): a box reads whole rows, the mask's zeros
    /// (the tail of the last page, keys no query attends) are the copy's semantics.
    Tma { map: usize, group_rows: usize },
}

/// Who waits for a stage's TMA boxes where they land ([`GpuOp::TmaLanded`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Landing {
    /// The copying threads read the stage themselves (the math warps', or a producer whose
    /// consumers wait only for its hand-over): every thread waits, then zeroes its masked
    /// chunks.
    Copiers,
    /// A producer whose consumers wait on the boxes themselves ([`Self::Consumers`]): only a
    /// thread with masked chunks waits, to zero them before the hand-over; the others hand
    /// the stage over as soon as its boxes are issued.
    Zeroers,
    /// A consumer after its wait for the producer's hand-over: waits on the boxes'
    /// mbarrier (FlashAttention-3's handoff: the landing reaches the consumers directly,
    /// not through the producer).
    Consumers,
}

/// A row stride the launcher knows: `konst`, or `coeff ×` a scalar kernel parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TmaStride {
    Const(i64),
    Param {
        value: crate::ir::ValueId,
        coeff: i64,
    },
}

/// A tensor map a TMA copy reads through: the buffer of pointer parameter `base` as rows
/// of `row_stride` elements, boxes of `box_rows × box_cols` (the launcher encodes it per
/// launch: `codegen::TensorMapParam`).
#[derive(Clone, Debug, PartialEq)]
pub struct TmaView {
    pub base: crate::ir::ValueId,
    pub elem: ScalarType,
    pub row_stride: TmaStride,
    pub box_rows: usize,
    pub box_cols: usize,
}

/// Where a tensor-core dot reads an operand.
#[derive(Clone, Debug, PartialEq)]
pub enum OperandSource {
    /// From registers: held fragments, repacked accumulator fragments or the tile emitter's
    /// scratch staging (its choice).
    Registers,
    /// Fragment loads from an alloc: `ldmatrix` (`.trans` when `trans`) per 16-wide k-step.
    Shared {
        alloc: AllocId,
        stage: Stage,
        map: TileInAlloc,
        trans: bool,
    },
}

impl OperandSource {
    pub fn alloc(&self) -> Option<(AllocId, Stage)> {
        match self {
            OperandSource::Shared { alloc, stage, .. } => Some((*alloc, *stage)),
            OperandSource::Registers => None,
        }
    }
}

/// One GPU-IR op.
#[derive(Clone, Debug, PartialEq)]
pub enum GpuOp {
    /// A tile-IR op emitted as is (elementwise work, reductions, stores, terminators).
    Tile(OpId),
    /// A tile-IR `for`; `pipelined` loops rotate their allocs' stages every iteration.
    For {
        op: OpId,
        body: GpuBlock,
        pipelined: bool,
    },
    If {
        op: OpId,
        then_block: GpuBlock,
        else_block: GpuBlock,
    },
    While {
        op: OpId,
        before: GpuBlock,
        after: GpuBlock,
    },
    AsyncCopy(AsyncCopy),
    /// `cp.async.commit_group`: the copies issued since the last commit form one group.
    Commit,
    /// `cp.async.wait_group N`: at most `pending` groups of this thread still in flight.
    Wait {
        pending: u32,
    },
    /// `__syncthreads()`, with the dependency that needs it.
    Barrier {
        reason: BarrierReason,
    },
    /// A tile-IR `dot` on tensor cores with its operand sources. `inline_wait`: the op
    /// waits for its own MMAs; when false, a later [`GpuOp::MmaWait`] of the same dot does,
    /// and what lies between runs while the tensor cores work (warpgroup MMAs only: on
    /// targets whose MMAs are synchronous the wait is where the op is).
    Mma {
        dot: OpId,
        a: OperandSource,
        b: OperandSource,
        inline_wait: bool,
        /// The dot whose in-flight MMAs this one continues in the same accumulator (its
        /// result is this dot's accumulator, used nowhere else): no wait between them, and
        /// this dot's wait completes both (see [`super::mma_chain`]).
        chained_from: Option<OpId>,
    },
    /// Where the TMA boxes of `alloc`'s `stage` are known to have landed (after the `wait`
    /// that lands its `cp.async` form, before a producer's hand-over, or after a consumer's
    /// wait for the stage): who waits on the stage's `mbarrier` and zeroes the chunks their
    /// copy distribution found masked is `by`'s.
    TmaLanded {
        alloc: AllocId,
        stage: Stage,
        by: Landing,
    },
    /// The register A operand of warpgroup MMA `dot` packed into its fragments ahead of the
    /// MMA, which reads them from there: tile `from` (of A's type; zeros when `None`), in
    /// an array the first `PackA` of `dot` declares. A loop carrying A packs the yielded
    /// tile at the end of its body (32 registers carried instead of 64 at 64 × 128 bf16)
    /// and the initial zeros before it, and the warpgroup turn that issues the MMA holds
    /// the MMA instructions alone (the other warpgroup waits for the turn).
    PackA {
        dot: OpId,
        from: Option<crate::ir::ValueId>,
    },
    /// The first `steps` k-steps of warpgroup MMA `dot`'s A, read once from its
    /// loop-invariant alloc (`a`) into fragment registers: those k-steps of every iteration
    /// take A from the registers (see [`super::hold_a`]). Placed before the loop, after its
    /// copies are visible.
    HoldA {
        dot: OpId,
        a: OperandSource,
        steps: usize,
    },
    /// Where an [`GpuOp::Mma`] issued without `inline_wait` completes: nothing reads its
    /// accumulator before this point. `in_scale`: the next op, a row scale of the
    /// accumulator, whose warp-uniform branch takes the wait at the head of both arms, so
    /// ptxas cannot hoist it above the work before (see [`super::wait_in_scale`]).
    MmaWait {
        dot: OpId,
        in_scale: Option<OpId>,
    },
    /// Where the MMAs of `dot` issued in the previous iteration of the loop (or, after the
    /// loop, in its last) complete: `dot` accumulates in place into the loop's carried
    /// `value` (its argument inside the body, its result after the loop) and is waited for
    /// only here, so the next iteration's first MMAs queue behind it (see
    /// [`super::pv_wait_behind`]).
    MmaWaitCarried {
        dot: OpId,
        value: crate::ir::ValueId,
    },
    /// The two warpgroups of a program take turns issuing tensor-core work (warpgroup MMAs
    /// only), so one's softmax runs while the other's MMAs do.
    Turn(Turn),
    /// A step of the stage handshake between the producer warpgroup and the consumers of a
    /// warp-specialized loop ([`WarpSpecialization`]).
    Stage(StageSync),
    /// A tile store that leaves through shared memory (see [`StagedStore`]).
    StagedStore(StagedStore),
}

/// The store of a fragment tile (an accumulator's rows, spread over the warps a few columns
/// a lane) through shared memory: after a barrier (the bytes are reused: other threads may
/// still read what lay there), each thread writes its fragment pairs into `buf`; after a
/// second, each row leaves in 16-byte chunks, `map.lanes` threads a row, so a warp's store
/// covers whole 128-byte lines instead of eight rows by 16 bytes. Pointer and mask are
/// recomputed per chunk, as an [`AsyncCopy`]'s are.
#[derive(Clone, Debug, PartialEq)]
pub struct StagedStore {
    /// The tile-IR store this replaces.
    pub store: OpId,
    pub buf: AllocId,
    pub map: TileInAlloc,
}

/// The handshake of a warp-specialized ring: per stage, a *full* mbarrier (the producer's
/// copies landed) and an *empty* one (the consumers are done reading it); per ring *part*
/// where the ring is split ([`WarpSpecialization::parts`]): part 0 is the whole ring, or
/// its keys with the values as part 1 (see [`super::split_ring`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StageSync {
    /// Producer, before filling `stage` for the iteration `at` names (issued only when the
    /// loop has it): wait until the consumers released the stage's previous fill.
    Acquire {
        stage: Stage,
        at: CopyAt,
        part: usize,
    },
    /// Producer, at the top of an iteration: this thread's copies of the current stage
    /// landed (`cp.async.wait_group 0`; TMA boxes issued, and where they carry masked
    /// chunks landed and zeroed by the `tma_landed` before it), fenced for the async proxy,
    /// arrived on *full*.
    Filled,
    /// Producer, after the copies of `stage` for the iteration `at` names (issued only when
    /// the loop has it): each thread's copies arrive on the stage's *full* mbarrier as they
    /// land (`cp.async.mbarrier.arrive.noinc`), so the producer waits only for free stages.
    /// Takes [`Self::Filled`]'s place when the split's `copies_arrive` is set.
    Issued {
        stage: Stage,
        at: CopyAt,
        part: usize,
    },
    /// Consumer: wait on the current stage's *full* mbarrier (part 0 at the top of an
    /// iteration), in the iterations `when` names; `by` one warpgroup (the seesaw's halves:
    /// each warpgroup waits before its own first read, `gpu_ir::seesaw_ring`), or `None`:
    /// every consumer warp.
    Wait {
        part: usize,
        when: Iterations,
        by: Option<u32>,
    },
    /// Consumer: every read of `stage` is done (warpgroup MMAs waited for): arrive on its
    /// *empty* mbarrier. [`Stage::Current`] at the end of an iteration; [`Stage::Previous`]
    /// (none in the first iteration) where the last MMA reading the previous stage
    /// completed.
    Release { stage: Stage, part: usize },
}

/// Which iterations of the ring's loop run a [`StageSync::Wait`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Iterations {
    All,
    /// The first only (a part read before the loop's steady state needs it).
    First,
    /// All but the first.
    AfterFirst,
}

/// A warp-specialized kernel (FlashAttention-3's producer/consumer split): one extra
/// warpgroup, the producer, runs [`Self::producer`] — the pipelined loop's skeleton with
/// its copies and the scalars their addresses need — while the program's own threads, the
/// consumers, run [`GpuProgram::body`] without those copies. `setmaxnreg` moves registers
/// from the producer (few: addresses) to the consumers (accumulators).
#[derive(Clone, Debug, PartialEq)]
pub struct WarpSpecialization {
    /// The producer's program: scalar work, the control flow down to the loop, the loop
    /// with its copies and [`StageSync`] steps.
    pub producer: GpuBlock,
    /// The program before the split, for targets that run it on the consumers' threads
    /// alone (no `setmaxnreg`, no mbarriers: the `mma.sync` branch of the source).
    pub unsplit: GpuBlock,
    /// The pipelined loop whose ring the producer fills.
    pub loop_op: OpId,
    /// Threads of the producer warpgroup (after the consumers' in the block).
    pub producer_threads: usize,
    /// Byte offset of the ring's mbarriers in dynamic shared memory (inside `alloc_bytes`):
    /// `full[s]` for each stage `s`, then `empty[s]`, 8 bytes each.
    pub mbar_offset: usize,
    /// Stages of the ring (the kernel's `num_stages`), each with its full and empty
    /// mbarrier: the producer fills `stages - 1` tiles ahead of the consumers.
    pub stages: usize,
    /// Parts of the ring, each with its own full and empty mbarriers a stage: 1, or 2 where
    /// the keys and values are rings of their own on one stage counter ([`super::split_ring`]).
    pub parts: usize,
    /// The producer's copies arrive on the *full* mbarriers themselves ([`StageSync::Issued`]:
    /// one arrival a producer thread, the consumers fence the async proxy after their wait)
    /// instead of the producer waiting for them ([`StageSync::Filled`]). On for the loops
    /// `previous_stage` rewrites (their consumers release a stage one iteration later),
    /// elsewhere opt-in (`ATTN_CODEGEN_ENABLE=copy_arrive`); not with TMA copies.
    pub copies_arrive: bool,
}

/// A step of the warpgroups' turn-taking around a loop (two named barriers, one per
/// warpgroup: a warpgroup waits on its own before it issues, and arrives on the other's
/// after).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Turn {
    /// Before the loop: warpgroup 1 hands the first turn to warpgroup 0.
    Begin,
    /// Before an MMA: wait for this warpgroup's turn.
    Take,
    /// After an MMA's issue: the other warpgroup's turn.
    Pass,
    /// After the loop: warpgroup 0 takes warpgroup 1's last pass, so both barriers end
    /// with every arrival matched.
    End,
}

/// Why a barrier is there (printed, and pinned by tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BarrierReason {
    /// Other threads' copies must be visible before a fragment load (read after write).
    CopiesVisible,
    /// Every thread must be done reading a buffer before a copy overwrites it.
    BufferFree,
    /// The top of a pipelined loop: this iteration's stage landed, the last one is free.
    PipelineStage,
}

/// A straight-line list of GPU ops (block arguments stay those of the tile-IR block).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuBlock {
    pub ops: Vec<GpuOp>,
}

/// A kernel at the GPU level: the tile function it was lowered from plus its shared
/// allocations and the op tree.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuProgram {
    pub allocs: Vec<LocalAlloc>,
    pub body: GpuBlock,
    /// Bytes of dynamic shared memory taken by the allocs (the tile emitter's scratch
    /// buffer starts here).
    pub alloc_bytes: usize,
    /// Contiguity, divisibility and constancy of the function's values, as lowering saw
    /// them (the emitter's question too: which stores may pair slots).
    pub axis: crate::passes::axis_info::AxisAnalysis,
    /// The tensor maps of the TMA copies ([`CopyEngine::Tma`]).
    pub tensor_maps: Vec<TmaView>,
    /// Byte offset of the TMA copies' bookkeeping in dynamic shared memory (inside
    /// `alloc_bytes`): an mbarrier per stage of each TMA alloc, then each tensor map's
    /// row-stride reciprocal, 8 bytes each. Dynamic, not static, shared memory: a static
    /// array would move the dynamic base off the 1024-byte alignment the swizzle needs.
    pub tma_offset: usize,
    /// The producer/consumer split, when the program is warp-specialized.
    pub specialization: Option<WarpSpecialization>,
}

impl GpuProgram {
    /// Buffers of pipelined loop `loop_op`'s ring: the kernel's `num_stages`, or what the
    /// split made of them for its loop (the seesaw's one buffer a half, `seesaw_ring`).
    pub fn ring_stages(&self, f: &crate::ir::Function, loop_op: OpId) -> usize {
        match &self.specialization {
            Some(ws) if ws.loop_op == loop_op => ws.stages,
            _ => f.num_stages as usize,
        }
    }
}

impl GpuProgram {
    pub fn alloc(&self, id: AllocId) -> &LocalAlloc {
        &self.allocs[id.0 as usize]
    }

    /// The allocs TMA copies fill, in program order (their mbarriers are
    /// `tma_stages · k + stage`).
    pub fn tma_allocs(&self) -> Vec<AllocId> {
        let mut out = Vec::new();
        for b in self.copying_blocks() {
            walk_block(b, &mut |op| {
                if let GpuOp::AsyncCopy(c) = op {
                    if matches!(c.engine, CopyEngine::Tma { .. }) && !out.contains(&c.dst) {
                        out.push(c.dst);
                    }
                }
            });
        }
        out
    }

    /// The allocs holding operand tiles (what copies fill and dots read), not the staging
    /// buffers of [`GpuOp::StagedStore`]s.
    pub fn operand_allocs(&self) -> Vec<&LocalAlloc> {
        let mut staging = Vec::new();
        walk_block(&self.body, &mut |op| {
            if let GpuOp::StagedStore(s) = op {
                staging.push(s.buf);
            }
        });
        (0..self.allocs.len())
            .map(|i| AllocId(i as u32))
            .filter(|a| !staging.contains(a))
            .map(|a| self.alloc(a))
            .collect()
    }

    /// The programs that issue copies: the body, and a split program's producer.
    pub fn copying_blocks(&self) -> Vec<&GpuBlock> {
        let mut out = vec![&self.body];
        out.extend(self.specialization.as_ref().map(|ws| &ws.producer));
        out
    }

    /// Stages of the ring TMA copies fill (one mbarrier each per alloc): the ring's
    /// `num_stages`.
    pub fn tma_stages(&self) -> usize {
        self.tma_allocs()
            .iter()
            .map(|&a| self.alloc(a).stages)
            .max()
            .unwrap_or(0)
    }

    /// Bytes of the TMA bookkeeping (see [`Self::tma_offset`]).
    pub fn tma_bytes(&self) -> usize {
        let allocs = self.tma_allocs().len();
        if allocs == 0 {
            return 0;
        }
        8 * (self.tma_stages() * allocs + self.tensor_maps.len())
    }

    /// Bytes of a warp-specialized ring's mbarriers (see [`WarpSpecialization::mbar_offset`]).
    pub fn ws_bytes(&self) -> usize {
        self.specialization
            .as_ref()
            .map_or(0, |ws| 8 * 2 * ws.stages * ws.parts)
    }

    /// Threads per block: the consumers' (the function's warps), plus the producer's.
    pub fn block_threads(&self, consumer_threads: usize) -> usize {
        consumer_threads
            + self
                .specialization
                .as_ref()
                .map_or(0, |s| s.producer_threads)
    }
}

/// Calls `f` on every op of `b`, nested blocks included, in program order.
pub fn walk_block(b: &GpuBlock, f: &mut dyn FnMut(&GpuOp)) {
    for op in &b.ops {
        f(op);
        for inner in nested(op) {
            walk_block(inner, f);
        }
    }
}

/// The nested blocks of an op.
pub fn nested(op: &GpuOp) -> Vec<&GpuBlock> {
    match op {
        GpuOp::For { body, .. } => vec![body],
        GpuOp::If {
            then_block,
            else_block,
            ..
        } => vec![then_block, else_block],
        GpuOp::While { before, after, .. } => vec![before, after],
        _ => vec![],
    }
}

/// The block holding `For` loop `loop_op` (at any depth) and the loop's index in it.
pub fn loop_holder(b: &mut GpuBlock, loop_op: OpId) -> Option<(&mut GpuBlock, usize)> {
    let at = b
        .ops
        .iter()
        .position(|o| matches!(o, GpuOp::For { op, .. } if *op == loop_op));
    match at {
        Some(at) => Some((b, at)),
        None => b
            .ops
            .iter_mut()
            .flat_map(nested_mut)
            .find_map(|inner| loop_holder(inner, loop_op)),
    }
}

/// The body of `For` loop `loop_op` (at any depth).
pub fn loop_body_mut(b: &mut GpuBlock, loop_op: OpId) -> Option<&mut GpuBlock> {
    let (holder, at) = loop_holder(b, loop_op)?;
    match &mut holder.ops[at] {
        GpuOp::For { body, .. } => Some(body),
        _ => None,
    }
}

/// The nested blocks of an op, mutably.
pub fn nested_mut(op: &mut GpuOp) -> Vec<&mut GpuBlock> {
    match op {
        GpuOp::For { body, .. } => vec![body],
        GpuOp::If {
            then_block,
            else_block,
            ..
        } => vec![then_block, else_block],
        GpuOp::While { before, after, .. } => vec![before, after],
        _ => vec![],
    }
}
