//! The softmax one tile ahead (`passes::softmax_ahead`, `ATTN_CODEGEN_ENABLE=softmax_ahead`
//! while opt-in): the rotated loop carries the probabilities and the rescale factor instead
//! of the scores, the first tile's softmax runs before the loop, and the emitted CUDA
//! (warp-specialized, copies landing late) matches the CPU executor running the kernel as
//! written — including the tile past the loop's end, whose running max and sum are
//! guarded.

mod codegen_common;

use attn_dsl::ir::OpKind;
use codegen_common::{flash_fwd, overlap_cases};

/// Rotation with the softmax ahead (the feature list is read once per process), copies
/// landing late.
fn setup() {
    overlap_cases::setup("softmax_ahead");
}

/// Rotated with the softmax ahead: the loop carries two more values than as written (the
/// probabilities and the rescale factor; not the scores), the first scores' dot and the
/// first softmax's exponentials sit before the loop, and the IR verifies.
#[test]
fn the_loop_carries_probabilities_not_scores() {
    setup();
    let f = flash_fwd(64, 128, true);
    let before = overlap_cases::dot_loops(&f);
    let mut g = f.clone();
    assert!(attn_dsl::passes::rotate_scores::run(&mut g));
    assert_eq!(
        overlap_cases::dot_loops(&g),
        vec![before[0] + 2],
        "p and alpha carried"
    );
    let outside =
        |kind: fn(&OpKind) -> bool| g.body.ops.iter().filter(|&&o| kind(&g.op(o).kind)).count();
    assert_eq!(outside(|k| *k == OpKind::Dot), 1, "the first scores");
    assert!(
        outside(|k| matches!(
            k,
            OpKind::Unary(attn_dsl::ir::UnaryOp::Exp | attn_dsl::ir::UnaryOp::Exp2)
        )) >= 1,
        "the first softmax before the loop"
    );
    attn_dsl::ir::verify::verify(&g).expect("IR verifies");
}

#[test]
fn flash_attention_matches_the_executor() {
    setup();
    overlap_cases::dense_flash("softmax ahead", 2, &[64, 128]);
}

#[test]
fn paged_flash_attention_matches_the_executor() {
    setup();
    overlap_cases::paged("softmax ahead", 2, 64);
}

#[test]
fn a_range_narrower_than_the_mask_counts_only_its_tiles() {
    setup();
    overlap_cases::bounded_ranges(attn_dsl::passes::rotate_scores::run, 2, 64);
}
