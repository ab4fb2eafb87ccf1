//! The seesaw schedule (FlashMLA's decode loop) at the tile IR: a key loop whose two
//! warpgroups take its tiles in turn. Each warpgroup computes the scores and softmax of
//! every other tile on its own (its values [`crate::ir::Layout::Owned`] by it), so one
//! warpgroup's softmax runs while the other's scores are on the tensor cores; both compute
//! PV, each its column half of the accumulator, which stays the whole program's.
//!
//! ```text
//! for j in (lo..hi).step_by(2 step) carrying m, l, acc {         // m, l on warpgroup 1
//!     s0 = dot(q, K(j))                                           // warpgroup 0
//!     s1 = dot(q, K(j + step))                                    // warpgroup 1, ahead
//!     m', l', p, alpha = softmax(s0, m, l)                        // warpgroup 0
//!     acc' = dot(p, V(j), acc * alpha)                            // both
//!     m'', l'', p, alpha = softmax(s1, m', l')                    // warpgroup 1
//!     acc'' = dot(p, V(j + step), acc' * alpha)                   // both
//!     (m, l, acc) = j + step < hi ? (m'', l'', acc'') : (m', l', acc')
//! }
//! ```
//!
//! The rewrite unrolls the loop by two (`unroll`: the second tile's scores right after the
//! first's; the rest of the second half for every pair where its loads are masked, so the
//! tile past `hi` is read inside the kernel's masks, else under the guard), gives each
//! half's scores chain its warpgroup (`owners`: the scores, what is computed from them, and
//! what only they read, less the accumulator's chain), and puts a `handoff` wherever a
//! value crosses from one owner to another (`crossings`: the running max and sum from one
//! warpgroup to the other, P and the rescale factor to every warp for PV). Layouts
//! (`lay_out`): the owned values get what the layout pass gives a one-warpgroup program,
//! the rest what it gives the whole program. Handoffs are gathered into runs (`gather`:
//! each moved up to the one before where its tile is ready), which meet behind one barrier
//! a run. The executor runs the result exactly as the loop it came from (a handoff is the
//! identity).

mod crossings;
mod gather;
mod lay_out;
mod owners;
mod unroll;

use crate::ir::{Function, ValueId};
use crate::passes::loop_rewrite::rewrite_loops;
use crossings::{hoist_invariant_handoffs, place_crossings};
use gather::gather_handoffs;
use lay_out::lay_out;
use std::collections::BTreeMap;
use unroll::unroll;

/// Warps of the programs the seesaw applies to: two warpgroups.
const WARPS: u32 = 8;

/// `f` with its key loop rewritten for the seesaw and laid out; `None` when `f` has no
/// loop of that shape (two warpgroups, a loop whose first dot's result feeds its last
/// dot's A operand, which accumulates into a carried value).
pub fn apply(f: &Function) -> Option<Function> {
    if f.num_warps != WARPS {
        return None;
    }
    let mut g = f.clone();
    // Two tiles an iteration, each half's scores chain on its warpgroup.
    let mut owners = unroll_first_loop(&mut g)?;
    // Values that cross owners: handed off, or recomputed by the new owner (index tiles).
    place_crossings(&mut g, &mut owners);
    // Handoffs of what the loop does not change: once, before it.
    hoist_invariant_handoffs(&mut g);
    // Handoffs moved up to the one before where their tile is ready: one barrier a run.
    gather_handoffs(&mut g);
    // Owned values laid out for one warpgroup, the rest for the whole program.
    lay_out(&mut g, &owners);
    // The replaced loop body's values, which no layout reached, dropped.
    crate::passes::compact::run(&mut g);
    crate::ir::verify::verify(&g).ok()?;
    Some(g)
}

/// Unrolls the first loop of `g` that has the seesaw's shape; the owners it gave.
fn unroll_first_loop(g: &mut Function) -> Option<BTreeMap<ValueId, u32>> {
    let mut owners = BTreeMap::new();
    let mut done = false;
    rewrite_loops(g, &mut |f, lp| {
        if done {
            return None;
        }
        let before = unroll(f, lp, &mut owners)?;
        done = true;
        Some(before)
    });
    done.then_some(owners)
}
