//! PV one tile behind (`passes::pv_behind`, `ATTN_CODEGEN_ENABLE=pv_behind` while opt-in):
//! the loop runs one iteration more and carries the probabilities, PV of the previous tile
//! issues with the scores, and the emitted CUDA (warp-specialized, copies landing late)
//! matches the CPU executor running the kernel as written — including the tile past the
//! loop's end (guarded) and the first iteration's PV of zeros (its V load masked off).

mod codegen_common;

use attn_dsl::ir::OpKind;
use codegen_common::{flash_fwd, overlap_cases};

/// PV behind (the feature list is read once per process), copies landing late.
fn setup() {
    overlap_cases::setup("pv_behind");
}

/// PV behind: the loop carries one more value (the probabilities), runs to `hi + step`
/// (its bound is an op before it), keeps both dots in the body and verifies.
#[test]
fn the_loop_carries_the_probabilities() {
    setup();
    let f = flash_fwd(64, 128, true);
    let before = overlap_cases::dot_loops(&f);
    let mut g = f.clone();
    assert!(attn_dsl::passes::pv_behind::run(&mut g));
    assert_eq!(
        overlap_cases::dot_loops(&g),
        vec![before[0] + 1],
        "p carried"
    );
    let dots_outside = g
        .body
        .ops
        .iter()
        .filter(|&&o| g.op(o).kind == OpKind::Dot)
        .count();
    assert_eq!(dots_outside, 0, "no dot peeled out of the loop");
    attn_dsl::ir::verify::verify(&g).expect("IR verifies");
}

#[test]
fn flash_attention_matches_the_executor() {
    setup();
    overlap_cases::dense_flash("PV behind", 2, &[64, 128]);
}

#[test]
fn paged_flash_attention_matches_the_executor() {
    setup();
    overlap_cases::paged("PV behind", 2, 64);
}

#[test]
fn a_range_narrower_than_the_mask_counts_only_its_tiles() {
    setup();
    overlap_cases::bounded_ranges(attn_dsl::passes::pv_behind::run, 2, 64);
}
