//! K and V as rings of their own under the previous stage (`gpu_ir::split_ring`, shipped;
//! `ATTN_CODEGEN_DISABLE=split_ring` keeps one ring): the producer fills each part of a stage on its own
//! acquire, the consumers release K's part once the scores completed and V's once PV did.
//! The emitted CUDA (split, copies landing late) matches the CPU executor running the
//! kernel as written.

mod codegen_common;

use attn_dsl::gpu_ir::{self, GpuOp, Stage, StageSync};
use codegen_common::overlap_cases;

/// The default features (read once per process), copies landing late.
fn setup() {
    overlap_cases::setup("");
}

/// Two parts; the consumers release K's current part right after the scores' wait and V's
/// previous part after PV's; the producer acquires and arrives on each part (V's empty
/// barriers follow K's full and empty ones: index 9 and on at three stages), and computes
/// each row's address once for both.
#[test]
fn keys_and_values_fill_and_release_their_own_parts() {
    setup();
    let (f, p, text) = overlap_cases::previous_stage_program();
    let ws = p.specialization.as_ref().expect("split");
    assert_eq!(ws.parts, 2, "{text}");
    let mut releases = Vec::new();
    gpu_ir::walk_block(&p.body, &mut |op| {
        if let GpuOp::Stage(StageSync::Release { stage, part }) = op {
            releases.push((*stage, *part));
        }
    });
    assert_eq!(
        releases,
        [(Stage::Current, 0), (Stage::Previous, 1)],
        "{text}"
    );
    let src = attn_dsl::codegen::emit_cuda(&f).expect("emit").source;
    let producer = overlap_cases::producer_source(&src);
    let v_acquires = producer.matches("attn_mbar_wait(&attn_ws_bar[9 + ").count();
    let v_arrivals = producer
        .matches("attn_cp_mbar_arrive(&attn_ws_bar[6 + ")
        .count();
    assert_eq!((v_acquires, v_arrivals), (3, 3), "{producer}");
    // V's copy of each tile (two in the prologue, one in the loop) reads the row offsets
    // K's copy of that tile kept, instead of computing every row's address again.
    let kept = producer.matches("[p] = attn_src - ").count();
    let reused = producer.matches("[p];\n").count();
    assert_eq!((kept, reused), (3, 3), "{producer}");
}

#[test]
fn flash_attention_matches_the_executor() {
    setup();
    overlap_cases::dense_flash("K and V rings of their own", 3, &[128]);
}

#[test]
fn paged_flash_attention_matches_the_executor() {
    setup();
    overlap_cases::paged("K and V rings of their own", 3, 128);
}
