//! Warp specialization (sm_90a): one extra warpgroup, the *producer*, fills a pipelined
//! loop's ring of K/V stages, and the program's own warps, the *consumers*, only compute.
//! This is FlashAttention-3's split: the copies' address work (block-table loads, 64-bit
//! offsets, masks and the V guard's reductions: 37 % of P0's loop stall samples) leaves the
//! math warps' instruction stream and runs beside it, and `setmaxnreg` gives the
//! consumers the registers the producer does not need.
//!
//! The split is a program transformation after `sync` (which fixed every copy, wait and
//! barrier): the producer's program is the consumers' skeleton — the scalar work, the
//! branches down to the loop, the loop — with only the ring's copies in it; the consumers'
//! program is the same without them. The ring's stages are handed over through two
//! mbarriers each ([`StageSync`]):
//!
//! ```text
//! producer                                   consumers
//! acquire(0); copies(lo) -> [0]; commit       wait Q's copies; barrier
//! for j:                                      for j:
//!   filled: wait_group 0; fence; arrive full    wait full[cur]
//!   acquire(next); copies(j+1) -> [next]        ... scores, softmax, PV (waited) ...
//!   commit                                      release: arrive empty[cur]
//! ```
//!
//! With `S` stages the prologue fills stages `0..S-1` (a commit group each), the loop's
//! copies are of tile `j + S - 1`, and `filled` waits for all but the newest `S - 2` groups:
//! the producer keeps `S - 1` tiles in flight while the consumers compute one.
//!
//! `acquire` waits on the stage's *empty* mbarrier for the consumers' release of its
//! previous fill (a fresh stage passes at once). Each producer thread fences its own landed
//! `cp.async` writes for the async proxy before its warp arrives on *full*, so the
//! consumers' `wgmma` reads them without a barrier. Every other barrier of the consumers
//! becomes a named barrier over their threads (the producer never reaches it). The split
//! runs before `tma`, which (opt-in) moves the producer's copies as boxes: `filled` then
//! first waits for their landing.
//!
//! Which programs: warpgroup targets, two stages or more, one pipelined loop reached through
//! branches without results, whose body holds no copies but the ring's and waits for every
//! MMA it issues; not a one-warpgroup program whose
//! accumulators would lose it its second block per SM (`costs_a_block`). Shipped
//! (`ATTN_CODEGEN_DISABLE=ws` turns it off): H200, one binary, P0 3.14 → 2.85 ms, P1 393 →
//! 373 µs (2026-12-02).

use super::program::{
    BarrierReason, CopyAt, GpuBlock, GpuOp, GpuProgram, StageSync, WarpSpecialization,
};
use crate::ir::{Function, OpId, OpKind, ScheduleChoice, ValueId};
use std::collections::BTreeSet;

/// Threads of the producer: one warpgroup (`setmaxnreg` applies per warpgroup).
pub const PRODUCER_THREADS: usize = 128;

/// Registers per SM (every sm_80/sm_90 part).
pub const SM_REGISTERS: usize = 65536;

/// Launch registers a thread needs per accumulator register to keep two split blocks an
/// SM: ptxas gives a consumer region what `setmaxnreg.inc` asks (P0's consumers reach
/// `R147` with 128 at launch), but an MMA `asm` statement whose accumulator operands
/// outnumber the launch's share (128 registers a thread at 256 threads) does not compile,
/// and a flash-attention consumer holds its accumulator, the scores and their operands.
const LAUNCH_REGS_PER_ACCUMULATOR_REG: usize = 2;

/// Whether two blocks of `block_threads` (producer included) leave each thread the registers
/// a program whose largest accumulator takes `accumulators` registers a thread needs. P3's
/// 64 × 256 tile (128 accumulator registers on one warpgroup) does not: 0.553 → 0.715 ms
/// split on one block an SM (H200, 2026-12-02); nor do two warpgroups over 128 × 128 (64
/// registers, 384 threads: ptxas found 80 registers too few).
pub fn two_blocks_fit(block_threads: usize, accumulators: usize) -> bool {
    SM_REGISTERS / (2 * block_threads.max(1)) >= LAUNCH_REGS_PER_ACCUMULATOR_REG * accumulators
}

/// Registers are allocated per thread in multiples of 8; `setmaxnreg` takes 24..=256.
const REG_GRANULE: usize = 8;
const MIN_SETMAXNREG: usize = 24;
/// The most registers a consumer thread takes (FlashAttention-3's figure; 255 is the ISA's).
const MAX_CONSUMER_REGS: usize = 240;
/// The registers the producer keeps: its copies' addresses and masks. 40 since the
/// built-in masks guard V by a bound on the key (no row reduction in the copy): P1's, P3's
/// and MLA's producers fit without spills (with the reductions P1's spilled at 40, so it
/// kept 56), and at one block an SM of 384 threads the consumers take 232 instead of 224
/// (P3 at 128 × 64 spilled 32 bytes at 224; NVRTC 13.0, sm_90a).
const PRODUCER_REGS: usize = 40;
/// How a block's registers split: per thread at launch (`__launch_bounds__` gives ptxas
/// this budget), the producer's and the consumers' after `setmaxnreg`.
pub struct RegisterSplit {
    pub launch: usize,
    pub producer: usize,
    pub consumer: usize,
}

/// The split of `blocks_per_sm` blocks of `consumers` + `producers` threads an SM: the
/// launch budget they leave each thread, the producer's share (as little as lets the
/// consumers reach their cap) and the consumers' (the rest).
pub fn register_split(consumers: usize, producers: usize, blocks_per_sm: usize) -> RegisterSplit {
    let round_down = |x: usize| x / REG_GRANULE * REG_GRANULE;
    let block_threads = consumers + producers;
    let launch = round_down(SM_REGISTERS / (blocks_per_sm * block_threads).max(1)).min(255);
    let producer = PRODUCER_REGS;
    let consumer = round_down((launch * block_threads - producer * producers) / consumers.max(1))
        .clamp(MIN_SETMAXNREG, MAX_CONSUMER_REGS);
    RegisterSplit {
        launch,
        producer,
        consumer,
    }
}

/// The most accumulator registers one thread of `f` holds for one dot.
pub fn largest_accumulator(f: &Function) -> usize {
    let threads = 32 * f.num_warps as usize;
    let mut most = 0;
    f.walk(&mut |_, op| {
        if op.kind == OpKind::Dot {
            most = most.max(f.ty(op.results[0]).num_elements() / threads);
        }
    });
    most
}

/// Whether splitting would halve a one-warpgroup program's blocks per SM (see
/// [`two_blocks_fit`]); programs of two warpgroups run one block an SM split or not.
fn costs_a_block(f: &Function) -> bool {
    let threads = 32 * f.num_warps as usize + PRODUCER_THREADS;
    f.num_warps <= 4 && !two_blocks_fit(threads, largest_accumulator(f))
}

/// Where the loop is: (op index, nested block index) per level, the last entry the loop's.
type Path = Vec<(usize, usize)>;

/// Splits `p` into producer and consumers when it qualifies (see the module note) and the
/// kernel's `warp_specialize` allows it. An error only where the kernel requires the split
/// (`warp_specialize = true`) and the program does not qualify: the reason.
pub fn run(f: &Function, p: &mut GpuProgram) -> Result<(), String> {
    let wanted = f.warp_specialize.allowed() && crate::features::on("ws");
    if !f.warpgroup_mma || !wanted {
        return Ok(());
    }
    match split(f, p) {
        Err(why) if f.warp_specialize == ScheduleChoice::Required => Err(format!(
            "`warp_specialize = true`, but `{}` cannot be split into a producer and consumers: {why}",
            f.name
        )),
        _ => Ok(()),
    }
}

/// The split itself, or why the program does not qualify.
fn split(f: &Function, p: &mut GpuProgram) -> Result<(), &'static str> {
    if f.num_stages < 2 {
        return Err("its copies are not pipelined (`num_stages` is 1)");
    }
    if costs_a_block(f) {
        return Err(
            "its accumulator needs more than half of a one-warpgroup program's registers, so \
             the producer would cost the SM its second block",
        );
    }
    let path = the_pipelined_loop(&p.body).ok_or("it has no single pipelined loop")?;
    let Some(GpuOp::For { op: loop_op, .. }) = op_at(&p.body, &path) else {
        return Err("it has no single pipelined loop");
    };
    let loop_op = *loop_op;
    if !splittable(f, &p.body, &path, loop_op) {
        return Err("the loop sits under control flow the producer cannot follow, or its MMAs are issued and never waited for");
    }
    if copies_run_regions(f, &p.body, loop_op) {
        return Err("a copy's mask runs a loop of its own inside the body");
    }
    // PV from the previous stage needs the copies to arrive on their stages, `cp.async`
    // by `cp.async.mbarrier.arrive`; TMA boxes land on mbarriers of their own, which the
    // producer waits for before it announces the stage.
    let arrive = copies_arrive(f) || super::previous_stage::applies(f, loop_op);
    let ring = Ring {
        loop_op,
        arrive: arrive && !super::tma::wanted(f),
    };
    let producer = producer_block(f, &p.body, &path, ring);
    if !producer_defines_its_reads(f, &producer, loop_op) {
        return Err("a scalar its copies read is not defined in the producer's program");
    }
    let unsplit = p.body.clone();
    consumer_block(&mut p.body, &path, loop_op);
    p.specialization = Some(WarpSpecialization {
        producer,
        unsplit,
        loop_op,
        producer_threads: PRODUCER_THREADS,
        mbar_offset: 0,
        parts: 1,
        stages: f.num_stages as usize,
        copies_arrive: ring.arrive,
    });
    Ok(())
}

/// The path to the program's only pipelined loop.
fn the_pipelined_loop(b: &GpuBlock) -> Option<Path> {
    let mut found = Vec::new();
    find_loops(b, &mut Vec::new(), &mut found);
    match found.len() {
        1 => found.pop(),
        _ => None,
    }
}

fn find_loops(b: &GpuBlock, at: &mut Path, found: &mut Vec<Path>) {
    for (i, op) in b.ops.iter().enumerate() {
        if let GpuOp::For {
            pipelined: true, ..
        } = op
        {
            at.push((i, 0));
            found.push(at.clone());
            at.pop();
            continue;
        }
        for (k, inner) in super::program::nested(op).into_iter().enumerate() {
            at.push((i, k));
            find_loops(inner, at, found);
            at.pop();
        }
    }
}

fn op_at<'b>(b: &'b GpuBlock, path: &[(usize, usize)]) -> Option<&'b GpuOp> {
    let (&(i, k), rest) = path.split_first()?;
    let op = b.ops.get(i)?;
    if rest.is_empty() {
        return Some(op);
    }
    op_at(super::program::nested(op).get(k)?, rest)
}

/// Whether the loop at `path` can be split: reached through branches without results, its
/// body copying only its own next stage and waiting for every MMA it issues.
fn splittable(f: &Function, b: &GpuBlock, path: &[(usize, usize)], loop_op: OpId) -> bool {
    let (&(i, k), rest) = match path.split_first() {
        Some(x) => x,
        None => return false,
    };
    let op = &b.ops[i];
    if rest.is_empty() {
        let GpuOp::For { body, .. } = op else {
            return false;
        };
        return loop_body_splittable(body, loop_op, f.num_stages as usize - 1);
    }
    match op {
        GpuOp::If { op, .. } if f.op(*op).results.is_empty() => {
            splittable(f, super::program::nested(&b.ops[i])[k], rest, loop_op)
        }
        _ => false,
    }
}

fn loop_body_splittable(body: &GpuBlock, loop_op: OpId, ahead: usize) -> bool {
    let mut ok = true;
    let mut issued = BTreeSet::new();
    let mut waited = BTreeSet::new();
    let mut chains = Vec::new();
    super::program::walk_block(body, &mut |op| match op {
        GpuOp::AsyncCopy(c) => {
            ok &= c.loop_op == Some(loop_op) && c.at == CopyAt::Ahead(ahead);
        }
        GpuOp::Mma {
            dot,
            inline_wait,
            chained_from,
            ..
        } => {
            if !inline_wait {
                issued.insert(*dot);
            }
            if let Some(first) = chained_from {
                chains.push((*dot, *first));
            }
            if *inline_wait {
                waited.insert(*dot);
            }
        }
        GpuOp::MmaWait { dot, .. } | GpuOp::MmaWaitCarried { dot, .. } => {
            waited.insert(*dot);
        }
        GpuOp::Stage(_) => ok = false,
        _ => {}
    });
    // The ring's copies sit in the body itself, after its top's wait and barrier.
    let top = body
        .ops
        .iter()
        .position(|o| matches!(o, GpuOp::Wait { .. }));
    let copies_nested = body.ops.iter().any(|o| {
        super::program::nested(o).iter().any(|inner| {
            let mut any = false;
            super::program::walk_block(inner, &mut |x| any |= matches!(x, GpuOp::AsyncCopy(_)));
            any
        })
    });
    // A chained dot's wait completes the dot it continues (see `mma_chain`).
    for &(dot, first) in chains.iter().rev() {
        if waited.contains(&dot) {
            waited.insert(first);
        }
    }
    ok && top.is_some() && !copies_nested && issued.is_subset(&waited)
}

/// Whether a ring copy's address or mask runs a loop or branch of its own (the V guard over
/// image ranges): in the producer's few registers it spilled (912 bytes, P3 at 128 × 64 on
/// two warpgroups, NVRTC 13.0), so such programs stay unsplit.
fn copies_run_regions(f: &Function, b: &GpuBlock, loop_op: OpId) -> bool {
    let defs = super::remat::defining_ops(f);
    let in_body = super::remat::defined_in(f, &f.op(loop_op).regions[0]);
    let mut found = false;
    super::program::walk_block(b, &mut |op| {
        if let GpuOp::AsyncCopy(c) = op {
            if c.loop_op == Some(loop_op) {
                let mut seen = BTreeSet::new();
                for &v in &f.op(c.load).operands {
                    walk_recomputation(f, &defs, &in_body, v, &mut seen, &mut |r| {
                        found |= matches!(r, Recomputed::Op(o) if !f.op(o).regions.is_empty())
                    });
                }
            }
        }
    });
    found
}

/// What recomputing a copy's value evaluates (see [`walk_recomputation`]).
enum Recomputed {
    /// A scalar defined outside the loop body: read by name, not recomputed.
    Named(ValueId),
    /// An op evaluated again (the ops of its regions are visited too).
    Op(OpId),
}

/// Visits what recomputing `v` in a copy evaluates, each value once (`seen` may span
/// several values of one walk).
fn walk_recomputation(
    f: &Function,
    defs: &[Option<OpId>],
    in_body: &[bool],
    v: ValueId,
    seen: &mut BTreeSet<ValueId>,
    visit: &mut impl FnMut(Recomputed),
) {
    if !seen.insert(v) {
        return;
    }
    if f.ty(v).is_scalar() && !in_body[v.0 as usize] {
        visit(Recomputed::Named(v));
        return;
    }
    let Some(o) = defs[v.0 as usize] else {
        return;
    };
    visit(Recomputed::Op(o));
    let mut operands: Vec<ValueId> = Vec::new();
    region_operands(f, o, &mut operands);
    for x in operands {
        walk_recomputation(f, defs, in_body, x, seen, visit);
    }
}

/// Whether `op` only computes scalars from scalars (the producer repeats such work: the
/// copies' addresses and the loop bounds read it, and the compiler drops what nothing reads).
fn scalar_only(f: &Function, op: &GpuOp) -> bool {
    let tile_op = match op {
        GpuOp::Tile(o) => *o,
        GpuOp::For { op, .. } | GpuOp::If { op, .. } | GpuOp::While { op, .. } => *op,
        _ => return false,
    };
    let t = f.op(tile_op);
    let scalars = |vs: &[crate::ir::ValueId]| vs.iter().all(|v| f.ty(*v).is_scalar());
    let effect_free = !matches!(t.kind, OpKind::Store { .. } | OpKind::Return);
    effect_free
        && scalars(&t.operands)
        && scalars(&t.results)
        && super::program::nested(op)
            .iter()
            .all(|b| b.ops.iter().all(|o| scalar_only(f, o) || is_yield(f, o)))
}

fn is_yield(f: &Function, op: &GpuOp) -> bool {
    matches!(op, GpuOp::Tile(o) if matches!(f.op(*o).kind, OpKind::Yield | OpKind::Condition)
        && f.op(*o).operands.iter().all(|v| f.ty(*v).is_scalar()))
}

fn is_terminator(f: &Function, op: &GpuOp) -> bool {
    matches!(op, GpuOp::Tile(o) if f.op(*o).kind.is_terminator())
}

fn ring_copy(op: &GpuOp, loop_op: OpId) -> bool {
    matches!(op, GpuOp::AsyncCopy(c) if c.loop_op == Some(loop_op))
}

/// The split's ring: its loop, and whether its copies arrive on the stages themselves
/// (see [`WarpSpecialization::copies_arrive`]).
#[derive(Clone, Copy)]
struct Ring {
    loop_op: OpId,
    arrive: bool,
}

/// The producer's version of `b`: scalar work, the ring's prologue copies (each stage
/// acquired first), the branch or loop on the path, the terminator.
fn producer_block(f: &Function, b: &GpuBlock, path: &[(usize, usize)], ring: Ring) -> GpuBlock {
    let Some((&(at, branch), rest)) = path.split_first() else {
        return GpuBlock::default();
    };
    let mut out = Vec::new();
    let mut fills = RingFills::new(ring);
    for (i, op) in b.ops.iter().enumerate() {
        let keep = match i.cmp(&at) {
            std::cmp::Ordering::Equal => {
                out.push(producer_path_op(f, op, branch, rest, ring));
                false
            }
            std::cmp::Ordering::Less => !fills.take(op, &mut out) && scalar_only(f, op),
            std::cmp::Ordering::Greater => is_terminator(f, op),
        };
        if keep {
            out.push(op.clone());
        }
    }
    GpuBlock { ops: out }
}

/// Whether the producer's copies arrive on the stages' mbarriers themselves by request
/// (see [`WarpSpecialization::copies_arrive`]).
fn copies_arrive(f: &Function) -> bool {
    crate::features::on("copy_arrive") && !super::tma::wanted(f)
}

/// The ring's copies of a producer block, each stage acquired before its first copy, and
/// the commits that close their groups (followed by the group's arrival when the copies
/// arrive on the stage themselves).
struct RingFills {
    ring: Ring,
    acquired: BTreeSet<super::program::Stage>,
    /// The stage and iteration of the open group's copies.
    group: Option<(super::program::Stage, CopyAt)>,
}

impl RingFills {
    fn new(ring: Ring) -> Self {
        RingFills {
            ring,
            acquired: BTreeSet::new(),
            group: None,
        }
    }

    /// Appends `op` (with the acquire before a stage's first copy) when it is one of the
    /// ring's copies or the commit of their group; whether it was.
    fn take(&mut self, op: &GpuOp, out: &mut Vec<GpuOp>) -> bool {
        match op {
            GpuOp::AsyncCopy(c) if c.loop_op == Some(self.ring.loop_op) => {
                if self.acquired.insert(c.stage) {
                    out.push(GpuOp::Stage(StageSync::Acquire {
                        stage: c.stage,
                        at: c.at,
                        part: 0,
                    }));
                }
                out.push(op.clone());
                self.group = Some((c.stage, c.at));
                true
            }
            GpuOp::Commit if self.group.is_some() => {
                out.push(GpuOp::Commit);
                let (stage, at) = self.group.take().expect("an open group");
                if self.ring.arrive {
                    out.push(GpuOp::Stage(StageSync::Issued { stage, at, part: 0 }));
                }
                true
            }
            _ => false,
        }
    }
}

/// The producer's version of the op on the path: the loop with its copies only, or a
/// branch whose other side is empty.
fn producer_path_op(
    f: &Function,
    op: &GpuOp,
    branch: usize,
    rest: &[(usize, usize)],
    ring: Ring,
) -> GpuOp {
    match op {
        GpuOp::For { op, body, .. } if rest.is_empty() => GpuOp::For {
            op: *op,
            body: producer_loop_body(f, body, ring),
            pipelined: true,
        },
        GpuOp::If {
            op,
            then_block,
            else_block,
        } => {
            let side = |k: usize, blk: &GpuBlock| {
                if k == branch {
                    producer_block(f, blk, rest, ring)
                } else {
                    GpuBlock {
                        ops: blk
                            .ops
                            .iter()
                            .filter(|o| is_terminator(f, o))
                            .cloned()
                            .collect(),
                    }
                }
            };
            GpuOp::If {
                op: *op,
                then_block: side(0, then_block),
                else_block: side(1, else_block),
            }
        }
        other => other.clone(),
    }
}

/// The loop body the producer runs: the current stage filled where the consumers' top
/// waited for it, the next one acquired before its copies.
fn producer_loop_body(f: &Function, body: &GpuBlock, ring: Ring) -> GpuBlock {
    let mut out = Vec::new();
    let mut filled = false;
    let mut fills = RingFills::new(ring);
    for op in &body.ops {
        if !filled && matches!(op, GpuOp::Wait { .. }) {
            if !ring.arrive {
                out.push(GpuOp::Stage(StageSync::Filled));
            }
            filled = true;
        } else if !fills.take(op, &mut out) && is_terminator(f, op) {
            out.push(op.clone());
        }
    }
    GpuBlock { ops: out }
}

/// Removes the ring's copies (and the commits of their groups) from the consumers' path,
/// waits for the consumers' own copies before the loop, and puts the stage handshake in
/// the loop body.
fn consumer_block(b: &mut GpuBlock, path: &[(usize, usize)], loop_op: OpId) {
    let Some((&(at, branch), rest)) = path.split_first() else {
        return;
    };
    if !rest.is_empty() {
        if let Some(inner) = super::program::nested_mut(&mut b.ops[at])
            .into_iter()
            .nth(branch)
        {
            consumer_block(inner, rest, loop_op);
        }
        return;
    }
    let (before, after) = b.ops.split_at(at);
    let mut ops = without_ring_copies(before, loop_op);
    // What the loop's top waited for besides the ring (the queries' copies) lands here.
    ops.push(GpuOp::Wait { pending: 0 });
    ops.push(GpuOp::Barrier {
        reason: BarrierReason::CopiesVisible,
    });
    let mut lp = after[0].clone();
    if let GpuOp::For { body, .. } = &mut lp {
        *body = consumer_loop_body(body, loop_op);
    }
    ops.push(lp);
    ops.extend(after[1..].iter().cloned());
    b.ops = ops;
}

/// `ops` without the ring's copies and without commits whose groups held only those.
pub(super) fn without_ring_copies(ops: &[GpuOp], loop_op: OpId) -> Vec<GpuOp> {
    let mut out = Vec::new();
    let (mut kept, mut dropped) = (false, false);
    for op in ops {
        match op {
            o if ring_copy(o, loop_op) => dropped = true,
            GpuOp::Commit => {
                if kept || !dropped {
                    out.push(GpuOp::Commit);
                }
                (kept, dropped) = (false, false);
            }
            GpuOp::AsyncCopy(_) => {
                kept = true;
                out.push(op.clone());
            }
            o => out.push(o.clone()),
        }
    }
    out
}

/// The consumers' loop body: the top's wait and barrier become the wait for the full
/// stage, the ring's copies go, the stage is released before the terminator. The body's
/// other waits and copy-visibility barriers go too: its only copies were the ring's, and
/// what the consumers copied before the loop landed before it (with three stages `sync`
/// waited for the queries again before the scores, every iteration, its top's
/// `wait_group 1` not covering single-buffered tiles: a barrier across both warpgroups).
fn consumer_loop_body(body: &GpuBlock, loop_op: OpId) -> GpuBlock {
    let mut ops = Vec::new();
    let mut top = true;
    for op in without_ring_copies(&body.ops, loop_op) {
        match op {
            GpuOp::Wait { .. } if top => {
                ops.push(GpuOp::Stage(StageSync::Wait {
                    part: 0,
                    when: super::program::Iterations::All,
                    by: None,
                }));
                top = false;
            }
            GpuOp::Wait { .. }
            | GpuOp::Barrier {
                reason: BarrierReason::PipelineStage | BarrierReason::CopiesVisible,
            } => {}
            o => ops.push(o),
        }
    }
    let term = ops.pop();
    ops.push(GpuOp::Stage(StageSync::Release {
        stage: super::program::Stage::Current,
        part: 0,
    }));
    ops.extend(term);
    GpuBlock { ops }
}

/// Whether every scalar the producer's program reads by name (its copies' addresses and
/// masks recompute everything else: tiles and the loop body's values) is defined in it.
fn producer_defines_its_reads(f: &Function, producer: &GpuBlock, loop_op: OpId) -> bool {
    let defs = super::remat::defining_ops(f);
    let in_body = super::remat::defined_in(f, &f.op(loop_op).regions[0]);
    let mut defined: BTreeSet<ValueId> = f.params.iter().map(|p| p.value).collect();
    let mut reads = BTreeSet::new();
    super::program::walk_block(producer, &mut |op| match op {
        GpuOp::AsyncCopy(c) => {
            for &v in &f.op(c.load).operands {
                walk_recomputation(f, &defs, &in_body, v, &mut BTreeSet::new(), &mut |r| {
                    if let Recomputed::Named(x) = r {
                        reads.insert(x);
                    }
                });
            }
        }
        GpuOp::Tile(o)
        | GpuOp::For { op: o, .. }
        | GpuOp::If { op: o, .. }
        | GpuOp::While { op: o, .. } => {
            let t = f.op(*o);
            // A loop's carried values and the producer's yields are the consumers' (its
            // loops carry nothing): only the bounds and conditions are read.
            let read = match t.kind {
                OpKind::For => &t.operands[..3],
                OpKind::Yield => &[],
                _ => &t.operands[..],
            };
            reads.extend(read.iter().copied());
            defined.extend(t.results.iter().copied());
            for r in &t.regions {
                defined.extend(r.args.iter().copied());
            }
        }
        _ => {}
    });
    reads.is_subset(&defined)
}

/// The operands of op `o` and of every op in its regions.
pub(crate) fn region_operands(f: &Function, o: OpId, out: &mut Vec<ValueId>) {
    let op = f.op(o);
    out.extend(op.operands.iter().copied());
    for r in &op.regions {
        for &inner in &r.ops {
            region_operands(f, inner, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::two_blocks_fit;

    /// One warpgroup plus the producer (256 threads) keeps two blocks up to a 64-register
    /// accumulator (P0's 64 × 128); P3's 64 × 256 (128) and two consumer warpgroups over a
    /// 64-register accumulator (384 threads: 85 registers a thread at two blocks) do not.
    #[test]
    fn two_blocks_need_twice_the_accumulator_in_launch_registers() {
        assert!(two_blocks_fit(256, 64));
        assert!(!two_blocks_fit(256, 65));
        assert!(!two_blocks_fit(256, 128));
        assert!(!two_blocks_fit(384, 64));
        assert!(two_blocks_fit(384, 32));
    }
}
