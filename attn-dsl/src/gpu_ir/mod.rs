//! The GPU IR: the level between the laid-out tile IR and CUDA text where the memory
//! hierarchy is explicit. Shared allocations, asynchronous copies, commit/wait groups,
//! barriers and `ldmatrix` fragment loads are objects here, so passes can decide where they
//! go: which loads become copies, which loops prefetch a stage ahead, where the program
//! must synchronize, and which bytes each buffer takes. The tile ops in between are emitted
//! by the tile emitter as before.

pub mod allocate;
pub mod dead_tiles;
pub mod hold_a;
pub mod lower;
pub mod mma_chain;
pub mod mma_defer;
pub mod mma_overlap;
pub mod pipeline;
pub mod previous_stage;
pub mod printer;
pub mod program;
pub mod pv_wait_behind;
pub mod remat;
pub mod row_affine;
pub mod seesaw_ring;
pub mod sink;
pub mod split_ring;
pub mod staged_store;
pub mod sync;
pub mod tma;
pub mod verify;
pub mod wait_in_scale;
pub mod warp_specialize;
pub mod warpgroup_turns;

pub use program::*;

use crate::ir::Function;
use crate::passes::axis_info;

/// The GPU-level pipeline, in order:
pub fn compile(f: &Function) -> Result<GpuProgram, String> {
    // Dot operands loaded only for their dot become async copies into shared allocs, read
    // back as ldmatrix fragments (no register round trip, no per-element staging).
    let mut p = lower::lower(f, axis_info::analyze(f));
    // Tiles that only fed the replaced loads (masks, guards) are not emitted at all.
    dead_tiles::run(f, &mut p);
    // What only one branch reads (the score mask of a tile that may be full) runs in it.
    sink::run(f, &mut p);
    // Copies whose addresses the next iteration can recompute fly one iteration ahead.
    pipeline::run(f, &mut p);
    // Under warpgroup MMAs the next tile's copies (their address work) run while the
    // iteration's first dot computes on the tensor cores.
    mma_overlap::run(f, &mut p);
    // The next tile's scores (a rotated loop's carried dot) compute under this tile's softmax.
    mma_defer::run(f, &mut p);
    // Two warpgroups take turns issuing MMAs, so one's softmax hides behind the other's.
    warpgroup_turns::run(f, &mut p)?;
    // A dot accumulating into the previous dot's result continues its MMAs, no wait between.
    mma_chain::run(f, &mut p);
    // Waits and barriers from the dependencies of the final schedule (after pipelining,
    // which fixes where every copy and read is).
    sync::run(&mut p.body);
    // On Hopper, a producer warpgroup takes the loop's copies off the math warps.
    warp_specialize::run(f, &mut p)?;
    // A split loop with PV one tile behind reads V from the previous stage, so a stage
    // holds one tile's K and V again (one address computation in the producer).
    previous_stage::run(f, &mut p);
    // Opt-in: its keys and values as rings of their own, K's part of a stage freed once the
    // scores completed, so the next keys need not wait for PV (measured slower as placed).
    split_ring::run(&mut p);
    // The seesaw's halves (a loop unrolled by two, each half's scores on one warpgroup) as
    // two parts of one ring whose stage is the tile: two tiles' buffers, not two rings.
    seesaw_ring::run(f, &mut p);
    // The consumers hold the first k-steps of a loop-invariant A that most of a long dot's
    // shared-memory reads are (MLA's queries) in registers.
    hold_a::run(f, &mut p);
    // Opt-in: PV issued after the softmax is waited for in the next iteration, in place in
    // the carried accumulator, so the next scores queue behind it on the tensor cores.
    pv_wait_behind::run(f, &mut p);
    // A wait for MMAs that run under the softmax goes into the arms of the accumulator's
    // rescale, a basic block ptxas cannot hoist it out of above the softmax.
    wait_in_scale::run(f, &mut p);
    // On Hopper (opt-in), the producer, or the math warps of an unsplit program, move a
    // paged tile as TMA boxes (a page's rows by 64 columns) instead of each thread
    // computing an address per 16 bytes; the schedule stays.
    tma::run(f, &mut p);
    // Fragment tiles stored after the loops leave through the freed shared memory in whole
    // lines, not eight rows of 16 bytes per warp access.
    staged_store::run(f, &mut p);
    // Bytes by liveness, once nothing moves any more.
    allocate::run(&mut p);
    verify::verify(f, &p)?;
    Ok(p)
}
