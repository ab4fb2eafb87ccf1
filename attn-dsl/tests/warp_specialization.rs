//! Warp specialization (warpgroup targets; `ATTN_CODEGEN_DISABLE=ws` turns it off): which programs split,
//! what the producer's and the consumers' programs hold, and the split itself run by the
//! simulator of emitted CUDA (producer threads copying, consumer threads on `mma.sync` and on
//! the sm_90a branch's warpgroup MMAs, the stage handshake on simulated mbarriers) against
//! the CPU executor. GPU parity covers the hardware (`gpu_unified`, `gpu_parity`).

mod codegen_common;

use attn_dsl::codegen::emit_cuda;
use attn_dsl::gpu_ir::{self, CopyAt, GpuBlock, GpuOp, StageSync};
use attn_dsl::ir::ScalarType;
use codegen_common::flash_fwd;
use codegen_common::sim_check::{check, flash_args, paged_args};

/// The simulator lands copies late in every test of this binary, so a consumer that did
/// not wait for its stage reads stale bytes and fails.
fn late_landing() {
    std::env::set_var("ATTN_SIM_LANDING_DELAY_US", "300");
}

fn copies(b: &GpuBlock) -> Vec<CopyAt> {
    let mut out = Vec::new();
    gpu_ir::walk_block(b, &mut |op| {
        if let GpuOp::AsyncCopy(c) = op {
            out.push(c.at);
        }
    });
    out
}

fn stage_syncs(b: &GpuBlock) -> Vec<StageSync> {
    let mut out = Vec::new();
    gpu_ir::walk_block(b, &mut |op| {
        if let GpuOp::Stage(s) = op {
            out.push(*s);
        }
    });
    out
}

fn barriers(b: &GpuBlock) -> usize {
    let mut n = 0;
    gpu_ir::walk_block(b, &mut |op| {
        n += usize::from(matches!(op, GpuOp::Barrier { .. }))
    });
    n
}

/// The producer moves K and V (the prologue's tile and each next one), acquiring each
/// stage before it fills it and marking it filled at the top of every iteration; the
/// consumers keep only Q's copy, wait for the full stage and release it, and have no
/// barrier left in the loop. The block gains one warpgroup.
#[test]
fn flash_attention_splits_into_producer_and_consumers() {
    late_landing();
    for (block_n, d) in [(64, 64), (64, 128)] {
        let f = flash_fwd(block_n, d, true);
        let p = gpu_ir::compile(&f).expect("gpu ir");
        let text = gpu_ir::printer::print_program(&f, &p);
        let ws = p.specialization.as_ref().expect(&text);
        assert_eq!(
            copies(&ws.producer),
            [
                CopyAt::Prologue(0),
                CopyAt::Prologue(0),
                CopyAt::Ahead(1),
                CopyAt::Ahead(1)
            ],
            "{text}"
        );
        assert_eq!(copies(&p.body), [CopyAt::InPlace], "Q only: {text}");
        let acquire = |at| StageSync::Acquire {
            stage: match at {
                CopyAt::Prologue(k) => gpu_ir::Stage::Fixed(k),
                _ => gpu_ir::Stage::Next,
            },
            at,
            part: 0,
        };
        assert_eq!(
            stage_syncs(&ws.producer),
            [
                acquire(CopyAt::Prologue(0)),
                StageSync::Filled,
                acquire(CopyAt::Ahead(1))
            ],
            "{text}"
        );
        assert_eq!(
            stage_syncs(&p.body),
            [
                StageSync::Wait {
                    part: 0,
                    when: gpu_ir::Iterations::All,
                    by: None,
                },
                StageSync::Release {
                    stage: attn_dsl::gpu_ir::Stage::Current,
                    part: 0
                }
            ],
            "{text}"
        );
        let mut in_loop = None;
        gpu_ir::walk_block(&p.body, &mut |op| {
            if let GpuOp::For {
                body,
                pipelined: true,
                ..
            } = op
            {
                in_loop = Some(barriers(body));
            }
        });
        assert_eq!(in_loop, Some(0), "{text}");
        assert_eq!(
            copies(&ws.unsplit).len(),
            5,
            "the unsplit program keeps every copy"
        );

        let k = emit_cuda(&f).expect("emit");
        assert_eq!(k.block_threads, 128 + 128);
        for piece in [
            "__launch_bounds__(256, ",
            "#if ATTN_WARP_SPECIALIZED",
            "attn_setmaxnreg_dec<ATTN_WS_PRODUCER_REGS>();",
            "attn_setmaxnreg_inc<ATTN_WS_CONSUMER_REGS>();",
            "attn_mbar_arrive(&attn_ws_bar[",
            "const int tid = (int)threadIdx.x - 128;",
        ] {
            assert!(k.source.contains(piece), "{piece} missing:\n{}", k.source);
        }
        check(
            &format!("ws flash N{block_n} D{d}"),
            &f,
            [4, 2, 1],
            flash_args(attn_dsl::ir::ScalarType::Bf16, 2, 203, d as usize, 91),
            2e-2,
        );
    }
}

/// A paged cache: the producer's copies gather through the block table (its loads are
/// the producer's), and the tail page's masked rows arrive as zeros.
#[test]
fn paged_flash_attention_runs_split() {
    late_landing();
    let f = codegen_common::paged_fwd(64, 64, 16);
    let p = gpu_ir::compile(&f).expect("gpu ir");
    assert!(p.specialization.is_some());
    check(
        "ws paged N64 D64 page 16",
        &f,
        [2, 2, 1],
        paged_args(2, 100, 64, 16, 92),
        2e-2,
    );
}

/// Without the warpgroup target nothing splits, nor does a one-warpgroup program whose
/// accumulators (64 × 256: 128 registers a thread) would cost it its second block per SM.
#[test]
fn untargeted_and_wide_kernels_do_not_split() {
    late_landing();
    for (f, why) in [
        (flash_fwd(64, 64, false), "no warpgroup target"),
        (
            flash_fwd(64, 256, true),
            "a 64 x 256 accumulator on one warpgroup",
        ),
    ] {
        let p = gpu_ir::compile(&f).expect("gpu ir");
        assert!(p.specialization.is_none(), "{why}");
        let k = emit_cuda(&f).expect("emit");
        assert_eq!(k.block_threads, 128, "{why}");
        assert!(!k.source.contains("ATTN_WARP_SPECIALIZED"), "{why}");
    }
}

/// A loop whose scores are two chained dots (MLA's latent and rope parts: the second
/// continues the first's MMAs, and its wait completes both) splits like one dot, and runs
/// split against the executor with the copies landing late.
#[test]
fn chained_scores_split() {
    late_landing();
    let f = codegen_common::split_scores(false, true);
    let p = gpu_ir::compile(&f).expect("gpu ir");
    let text = gpu_ir::printer::print_program(&f, &p);
    assert!(text.contains(", continues %"), "{text}");
    assert!(p.specialization.is_some(), "{text}");
    let args = flash_args(ScalarType::Bf16, 2, 75, 128, 92);
    check("ws chained scores", &f, [2, 2, 1], args, 2e-2);
}
