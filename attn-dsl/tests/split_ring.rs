//! K and V as rings of their own under the previous stage (`gpu_ir::split_ring`, shipped;
//! `ATTN_CODEGEN_DISABLE=split_ring` keeps one ring): the producer fills each part of a stage on its own
//! acquire, the consumers release K's part once the scores completed and V's once PV did.
//! The emitted CUDA (split, copies landing late) matches the CPU executor running the
//! kernel as written.

mod codegen_common;

use attn_dsl::gpu_ir::{self, GpuOp, Stage, StageSync};
use codegen_common::overlap_cases;

/// The default features and the opt-in two-stage form (read once per process: it changes
/// no kernel of three stages), copies landing late.
fn setup() {
    overlap_cases::setup("two_stage_overlap");
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

/// Rings of three stages and of two (the opt-in `two_stage_overlap`, below).
const STAGES: [u32; 2] = [3, 2];

#[test]
fn flash_attention_matches_the_executor() {
    setup();
    for stages in STAGES {
        let label = format!("K and V rings of their own, {stages} stages");
        overlap_cases::dense_flash(&label, stages, &[128]);
    }
}

#[test]
fn paged_flash_attention_matches_the_executor() {
    setup();
    for stages in STAGES {
        overlap_cases::paged(
            &format!("K and V rings of their own, {stages} stages"),
            stages,
            128,
        );
    }
}

/// Two stages (P1's D 256 tiles, where a third does not fit beside the queries; opt-in,
/// `two_stage_overlap`): PV reads the previous stage only because the ring splits, K's part
/// freed at the scores' wait; the code generator keeps the form (the kernel's source reads
/// V's previous stage).
#[test]
fn two_stages_take_the_previous_stage_once_split() {
    setup();
    let (_, p, text) = overlap_cases::previous_stage_program_at(2, 128);
    let ws = p.specialization.as_ref().expect("split");
    assert_eq!((ws.stages, ws.parts), (2, 2), "{text}");
    assert!(gpu_ir::previous_stage::reads_previous_stage(&p), "{text}");
    let mut plain = codegen_common::flash_fwd(64, 128, true);
    plain.num_stages = 2;
    let src = attn_dsl::codegen::emit_cuda(&plain).expect("emit").source;
    assert!(src.contains(": (attn_stage__ ^ 1)) * "), "{src}");
}
