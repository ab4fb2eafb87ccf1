//! PV from the previous stage (`gpu_ir::previous_stage`, shipped; `ATTN_CODEGEN_DISABLE=
//! previous_stage` turns it off): on a split loop of three stages or more and a PV of 128
//! columns or more, PV runs one tile behind the scores (`passes::pv_behind`), a stage holds
//! one tile's K and V, the consumers' PV reads V from the stage of the iteration before (the
//! current one in the first, where P is zeros) and releases that stage once PV completed.
//! Here with K and V on one ring (`ATTN_CODEGEN_DISABLE=split_ring`; split by default,
//! `tests/split_ring.rs`). The emitted CUDA (split, copies landing late) matches the CPU
//! executor running the kernel as written.

mod codegen_common;

use attn_dsl::gpu_ir::{self, GpuBlock, GpuOp, OperandSource, Stage, StageSync};
use codegen_common::{flash_fwd, overlap_cases};

/// The default features but one ring for K and V (read once per process), copies landing late.
fn setup() {
    overlap_cases::setup("");
    std::env::set_var("ATTN_CODEGEN_DISABLE", "split_ring");
}

fn mma_stages(b: &GpuBlock) -> Vec<Stage> {
    let mut out = Vec::new();
    gpu_ir::walk_block(b, &mut |op| {
        if let GpuOp::Mma {
            b: OperandSource::Shared { stage, .. },
            ..
        } = op
        {
            out.push(*stage);
        }
    });
    out
}

/// The consumers' scores read the current stage and PV the previous one, which they release
/// right after PV's wait (nothing released at the end of the body); the producer's V copies
/// move their own iteration's tile; the unsplit program keeps V at `j − step`.
#[test]
fn pv_reads_and_releases_the_previous_stage() {
    setup();
    let (f, p, text) = overlap_cases::previous_stage_program();
    let ws = p.specialization.as_ref().expect("split");
    assert!(ws.copies_arrive, "the copies arrive on their stages");
    assert_eq!(
        mma_stages(&p.body),
        [Stage::Current, Stage::Previous],
        "{text}"
    );
    assert!(!mma_stages(&ws.unsplit).contains(&Stage::Previous));
    // Released right after PV's wait, or after the accumulator's rescale whose arms took
    // the wait (`gpu_ir::wait_in_scale`).
    let mut after_wait = Vec::new();
    let mut last: Vec<GpuOp> = Vec::new();
    gpu_ir::walk_block(&p.body, &mut |op| {
        if let GpuOp::Stage(StageSync::Release { stage, .. }) = op {
            let waited = match last.as_slice() {
                [.., GpuOp::MmaWait { in_scale: None, .. }] => true,
                [.., GpuOp::MmaWait {
                    in_scale: Some(s), ..
                }, GpuOp::Tile(t)] => s == t,
                _ => false,
            };
            after_wait.push((*stage, waited));
        }
        last.push(op.clone());
    });
    assert_eq!(after_wait, [(Stage::Previous, true)], "{text}");
    // The consumers' PV completes in the arms of the accumulator's rescale, so the softmax
    // before it is one basic block ptxas cannot hoist the wait into.
    let placed = text.contains(" in the arms of %");
    assert!(placed, "PV's wait in the rescale's arms:\n{text}");
    let src = attn_dsl::codegen::emit_cuda(&f).expect("emit").source;
    let vote = src.find("if (attn_warp_any(").expect("the rescale's vote");
    let arms = &src[vote..];
    let waits = arms[..arms.find("attn_ws_bar").unwrap_or(arms.len())]
        .matches("attn_wgmma_wait<0>();")
        .count();
    assert_eq!(waits, 2, "PV's wait heads both arms:\n{arms}");
    let mut behind = 0;
    gpu_ir::walk_block(&ws.producer, &mut |op| {
        if let GpuOp::AsyncCopy(c) = op {
            behind += usize::from(c.behind.is_some());
        }
    });
    assert_eq!(behind, 3, "two prologue fills and the loop's: {text}");
}

/// Two stages keep no tile in flight with the stage held one iteration longer, and a PV of
/// 64 columns hides too little of the softmax: both keep the loop as written.
#[test]
fn two_stages_and_narrow_pvs_are_left_alone() {
    setup();
    for (d, stages) in [(128, 2), (64, 3)] {
        let mut f = flash_fwd(64, d, true);
        f.num_stages = stages;
        let mut g = f.clone();
        assert!(attn_dsl::passes::pv_behind::run(&mut g));
        let p = gpu_ir::compile(&g).expect("gpu ir");
        assert!(!mma_stages(&p.body).contains(&Stage::Previous));
        let src = attn_dsl::codegen::emit_cuda(&f).expect("emit").source;
        assert!(
            !src.contains("(&attn_a)"),
            "D{d}, {stages} stages: as written"
        );
    }
}

/// The producer computes K's and V's addresses of a stage once (V's the same row pointers
/// but for the base), and the consumers pick the previous stage but in the first iteration.
#[test]
fn one_address_computation_per_stage() {
    setup();
    let mut f = flash_fwd(64, 128, true);
    f.num_stages = 3;
    let src = attn_dsl::codegen::emit_cuda(&f).expect("emit").source;
    let producer = overlap_cases::producer_source(&src);
    let shared = producer.matches("+ (attn_src - ").count();
    assert_eq!(shared, 3, "V beside K in every fill:\n{producer}");
    assert!(src.contains(" ? attn_stage"), "the first iteration's stage");
    assert!(
        src.contains("(&attn_a)[4][1][4] = attn_pa"),
        "P packed before the turn"
    );
}

#[test]
fn flash_attention_matches_the_executor() {
    setup();
    overlap_cases::dense_flash("PV from the previous stage", 3, &[128]);
}

#[test]
fn paged_flash_attention_matches_the_executor() {
    setup();
    overlap_cases::paged("PV from the previous stage", 3, 128);
}

#[test]
fn a_range_narrower_than_the_mask_counts_only_its_tiles() {
    setup();
    overlap_cases::bounded_ranges(attn_dsl::passes::pv_behind::run, 3, 128);
}
