//! A loop-invariant A operand partly held in registers: the first k-steps of a warpgroup
//! MMA whose A is copied once before the loop (MLA's 576-wide latent queries) are read
//! into fragment registers there, and every iteration's MMAs of those k-steps take A from
//! them (`wgmma`'s register form) instead of from shared memory.
//!
//! Why: a warpgroup `m64nNk16` whose A and B both come from shared memory reads
//! `64 + N` rows a k-step, and at MLA's `N = 32` (each warpgroup half of a 64-key tile)
//! two thirds of it is A. The history's scores are bound by those reads (~85 B a cycle on
//! the H200, docs/gpu_ir.md, "Where L1's history time goes, by phase"), so each held
//! k-step takes 2 KB a warpgroup off every tile. Where A is not the larger operand
//! (`N = 64`, P1's and P3's scores over D 256) a held k-step still takes a third of its
//! reads: H200, one call, two rounds, 4 of their 16 k-steps held against none: P1 0.2948 /
//! 0.2949 against 0.2962 / 0.2968 ms, P3 0.3325 / 0.3325 against 0.3344 / 0.3343, P3
//! without the clamp 0.3366 / 0.3369 against 0.3374 / 0.3396, P1 with softcap unchanged
//! (0.482); `gpu_unified` 18/18 with them held.
//!
//! How many: what a consumer thread has after `setmaxnreg` ([`register_split`]: 232 in
//! one block an SM of two consumer warpgroups and a producer) less the loop's largest
//! accumulator, twice this dot's (the scores and what the softmax makes of them) and a
//! reserve for addresses and the softmax's temporaries, four registers a k-step. The
//! reserve is calibrated on MLA's history (NVRTC 13.0, sm_90a): 12 held k-steps compile
//! spill-free, 16 spill (32 bytes) and serialize every `wgmma`. P1 gets 4 of 16 (8 held
//! measured 0.329 ms: its 128-register accumulator leaves too few), P3 3 (a loop nested in
//! its loop keeps more live).
//!
//! A short A (at most 8 k-steps: P0's 128-column queries) is held whole in a loop that
//! carries its P packed (PV from the previous stage: P0) where the registers leave room
//! for all of it beside the scores and P: P0's scores then read only the keys from shared
//! memory. H200, one call, two rounds (2026-12-04): P0 2.148 / 2.154 ms as before, 2.126 /
//! 2.125 with 4 of its 8 k-steps held, 2.112 / 2.111 with all 8. P0 at D 64 (4 k-steps, no
//! P carried) lost with them held: 1.665 → 1.730 ms.

use super::program::{nested_mut, GpuBlock, GpuOp, GpuProgram, OperandSource, Stage};
use super::warp_specialize::{
    largest_accumulator, register_split, two_blocks_fit, PRODUCER_THREADS,
};
use crate::ir::{Function, OpId};

/// Registers kept for addresses, masks and the softmax's temporaries (see the module note).
const RESERVE_REGS: usize = 24;
/// Registers a loop nested in the held loop keeps live besides the reserve: its bounds and
/// carried values (P3's scan of the image ranges for a full tile). With 4 of its 16 k-steps
/// held P3's consumers spilled 12 bytes once its producer's addresses changed
/// (`run_rows`); 3 held leave them spill-free (NVRTC 13.0, sm_90a).
const NESTED_LOOP_REGS: usize = 4;
/// Halves of the scores' registers a long dot's loop keeps live where it carries P packed
/// (PV from the previous stage): the scores and their softmax's copy, and P's fragments,
/// which PV reads while it runs under that softmax. P1's consumers (16 k-steps at D 256)
/// with the four held k-steps the plain count leaves them spilled 8 bytes in the loop
/// (NVRTC 13.0, sm_90a; one or two held spilled more); none held, they compile clean.
const CARRIED_P_HALVES: usize = 5;
/// Held k-steps need a reduction longer than this many (a 128-column head fits the
/// shared-memory reads of the unified kernels' scores).
const MIN_STEPS: usize = 8;

/// Holds the first k-steps of the warp-specialized loop's qualifying dot
/// (`ATTN_CODEGEN_DISABLE=hold_a` leaves A in shared memory).
pub fn run(f: &Function, p: &mut GpuProgram) {
    if !f.warpgroup_mma || !crate::features::on("hold_a") {
        return;
    }
    let Some(loop_op) = p.specialization.as_ref().map(|s| s.loop_op) else {
        return;
    };
    insert_before_loop(f, &mut p.body, loop_op);
}

/// Finds the loop in `b` (at any depth) and puts the `HoldA` right before it.
fn insert_before_loop(f: &Function, b: &mut GpuBlock, loop_op: OpId) -> bool {
    for i in 0..b.ops.len() {
        if let GpuOp::For { op, body, .. } = &b.ops[i] {
            if *op == loop_op {
                if let Some(hold) = choose(f, body) {
                    b.ops.insert(i, hold);
                }
                return true;
            }
        }
        if nested_mut(&mut b.ops[i])
            .into_iter()
            .any(|inner| insert_before_loop(f, inner, loop_op))
        {
            return true;
        }
    }
    false
}

/// The loop body's dot with the most k-steps among those that qualify, and how many of
/// its k-steps the registers hold.
fn choose(f: &Function, body: &GpuBlock) -> Option<GpuOp> {
    let packs_p = body.ops.iter().any(|op| matches!(op, GpuOp::PackA { .. }));
    let mut best: Option<(usize, OpId, OperandSource)> = None;
    for op in &body.ops {
        let GpuOp::Mma { dot, a, .. } = op else {
            continue;
        };
        // A dot one warpgroup owns (the seesaw's `m64n64` scores, whose A is a third of
        // their reads, not two) keeps its registers for the scores of a whole tile: with
        // MLA's 12 held k-steps its consumers spilled 4 KB (NVRTC 13.0, sm_90a).
        if f.ty(f.op(*dot).results[0]).layout.owner().is_some() {
            continue;
        }
        let OperandSource::Shared {
            stage: Stage::Only,
            trans: false,
            ..
        } = a
        else {
            continue;
        };
        let steps = k_steps(f, *dot);
        let long = steps > MIN_STEPS;
        // Only where the softmax's P is carried packed (PV from the previous stage: half the
        // scores' registers, not a second f32 copy of them); P0 at D 64, which carries no P,
        // measured slower with its 4 k-steps held (1.665 → 1.730 ms).
        let whole = packs_p && steps <= MIN_STEPS && 8 * steps <= spare_registers(f, *dot, 3);
        if (long || whole) && best.as_ref().is_none_or(|b| steps > b.0) {
            best = Some((steps, *dot, a.clone()));
        }
    }
    let (steps, dot, a) = best?;
    let held = if steps > MIN_STEPS {
        let halves = if packs_p { CARRIED_P_HALVES } else { 4 };
        (spare_registers(f, dot, halves).saturating_sub(2 * NESTED_LOOP_REGS * nested_loops(body))
            / 8)
        .min(steps)
    } else {
        steps
    };
    (held > 0).then_some(GpuOp::HoldA {
        dot,
        a,
        steps: held,
    })
}

/// The loops nested in `body` (at any depth).
fn nested_loops(body: &GpuBlock) -> usize {
    let mut n = 0;
    super::program::walk_block(body, &mut |op| {
        n += usize::from(matches!(op, GpuOp::For { .. } | GpuOp::While { .. }));
    });
    n
}

/// The dot's reduction in 16-wide k-steps.
fn k_steps(f: &Function, dot: OpId) -> usize {
    let a = f.op(dot).operands[0];
    f.ty(a).shape.get(1).map_or(0, |k| k.div_ceil(16))
}

/// Twice the registers a consumer thread has for held fragments: its budget after
/// `setmaxnreg` less the loop's largest accumulator, `halves` halves of this dot's result
/// (the scores, and what the softmax makes of them while they live: 4 for two f32 copies,
/// 3 where P is carried packed) and the reserve (see the module note). Two blocks an SM
/// where their registers would allow it (shared memory is not allocated yet: assuming two
/// leaves fewer registers, never more).
fn spare_registers(f: &Function, dot: OpId, halves: usize) -> usize {
    let threads = 32 * f.num_warps as usize;
    let largest = largest_accumulator(f);
    let blocks = if two_blocks_fit(threads + PRODUCER_THREADS, largest) {
        2
    } else {
        1
    };
    let consumer = register_split(threads, PRODUCER_THREADS, blocks).consumer;
    let own = f.ty(f.op(dot).results[0]).num_elements() / threads.max(1);
    (2 * consumer).saturating_sub(2 * (largest + RESERVE_REGS) + halves * own)
}
