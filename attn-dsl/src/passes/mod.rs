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
pub mod loop_rewrite;
pub mod pv_behind;
pub mod rotate_scores;
pub mod softmax_ahead;

use crate::ir::printer::print_function;
use crate::ir::verify::verify;
use crate::ir::Function;

/// A pass rewrites a function in place.
type Pass = fn(&mut Function);

/// The standard pipeline run on every specialization before execution or emission:
/// constant folding, CSE, DCE, arena compaction, layout assignment.
///
/// In debug builds the verifier runs on the input and after every pass, and a failure panics
/// naming the pass (an internal compiler error, never a user error).
pub fn optimize(f: &mut Function) {
    check(f, "the input of `optimize`");
    let pipeline: [(&str, Pass); 5] = [
        ("constant folding", const_fold::run),
        ("common subexpression elimination", cse::run),
        ("dead code elimination", dce::run),
        ("compaction", compact::run),
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
