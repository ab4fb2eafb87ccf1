//! IR passes: folding, CSE, DCE, layout assignment; a verifier runs after each in debug builds.
//!
//! Each pass is one file with its own tests. [`optimize`] is the standard pipeline every
//! specialization goes through before the CPU executor or the CUDA emitter sees it.

pub mod assume;
pub mod axis_info;
pub mod compact;
pub mod const_eval;
pub mod const_fold;
pub mod cse;
pub mod dce;
pub mod layout;
pub mod licm;
pub mod loop_rewrite;
pub mod pv_behind;
pub mod rotate_scores;
pub mod seesaw;
pub mod softmax_ahead;

use crate::ir::printer::print_function;
use crate::ir::verify::verify;
use crate::ir::Function;

/// A pass rewrites a function in place.
type Pass = fn(&mut Function);

/// The standard pipeline run on every specialization before execution or emission:
/// constant folding, CSE, loop-invariant code motion, DCE, arena compaction, layout
/// assignment.
///
/// In debug builds the verifier runs on the input and after every pass, and a failure panics
/// naming the pass (an internal compiler error, never a user error).
pub fn optimize(f: &mut Function) {
    check(f, "the input of `optimize`");
    let pipeline: [(&str, Pass); 6] = [
        // Literals and constexpr branches gone first: what is left is the kernel's real work.
        ("constant folding", const_fold::run),
        // One op per computed value, so a moved op leaves no twin behind in the loop.
        ("common subexpression elimination", cse::run),
        // Row data read inside a KV loop (a mask's image ranges) read once, before it.
        ("loop-invariant code motion", licm::run),
        // What folding and merging left unread, and loop values nothing reads.
        ("dead code elimination", dce::run),
        // Dense value and op arenas for the back ends' tables.
        ("compaction", compact::run),
        // Every tile gets its thread mapping, from its dots and its memory accesses.
        ("layout assignment", layout::run),
    ];
    for (name, pass) in pipeline {
        pass(f);
        check(f, &format!("pass `{name}`"));
    }
}

fn check(f: &Function, what: &str) {
    if cfg!(debug_assertions) {
        if let Err(e) = verify(f) {
            panic!(
                "internal compiler error: {what} produced invalid IR: {e}\n{}",
                print_function(f)
            );
        }
    }
}
