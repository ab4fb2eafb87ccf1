//! PV's wait one iteration behind (`gpu_ir::pv_wait_behind`, opt-in): a two-warpgroup loop
//! that issues PV after its softmax accumulates it in place into the carried accumulator
//! and waits for it in the next iteration (after the scores' wait, where the previous stage
//! is released) and once after the loop. The emitted CUDA (copies landing late) matches
//! the CPU executor running the kernel as written.

mod codegen_common;

use attn_dsl::gpu_ir::{self, GpuOp, Stage, StageSync};
use attn_dsl::ir::Function;
use attn_dsl::ConstValue;
use codegen_common::overlap_cases;
use codegen_common::sim_check::check_flash;

/// The test module's `flash_fwd` at 128 query rows on two warpgroups (a warp per 16 rows,
/// taking turns), 64-key tiles, head size `d`, two stages, for a warpgroup target.
fn flash128(d: i64) -> Function {
    let src = include_str!("kernels/flash_attention.rs.txt");
    let two = src.replacen("num_warps = 4,", "num_warps = BLOCK_M / 16,", 1);
    assert_ne!(two, src, "the fixture's attribute moved");
    let consts = [
        ("BLOCK_M", ConstValue::Int(128)),
        ("BLOCK_N", ConstValue::Int(64)),
        ("HEAD_DIM", ConstValue::Int(d)),
        ("CAUSAL", ConstValue::Bool(true)),
    ];
    let mut f = codegen_common::specialize(&two, "flash_fwd", &consts, true);
    f.num_stages = 2;
    f
}

/// The opt-in on, copies landing late.
fn setup() {
    overlap_cases::setup("pv_wait_behind");
}

/// PV issued without its wait, the carried wait and the previous stage's release right
/// after the scores' wait, no release of the current stage, and one wait after the loop.
#[test]
fn pv_is_waited_for_in_the_next_iteration() {
    setup();
    let f = flash128(64);
    let p = gpu_ir::compile(&f).expect("gpu ir");
    let text = gpu_ir::printer::print_program(&f, &p);
    let ws = p.specialization.as_ref().expect("split");
    let mut found = None;
    gpu_ir::walk_block(&p.body, &mut |o| {
        if let GpuOp::For { op, body, .. } = o {
            if *op == ws.loop_op {
                found = Some(body.clone());
            }
        }
    });
    let body = found.expect("the ring loop");
    let at = |pred: &dyn Fn(&GpuOp) -> bool| body.ops.iter().position(pred);
    let carried = at(&|o| matches!(o, GpuOp::MmaWaitCarried { .. }));
    let carried = carried.unwrap_or_else(|| panic!("{text}"));
    let released = at(&|o| {
        *o == GpuOp::Stage(StageSync::Release {
            stage: Stage::Previous,
            part: 0,
        })
    });
    assert_eq!(released, Some(carried + 1), "{text}");
    assert!(
        at(&|o| matches!(
            o,
            GpuOp::Stage(StageSync::Release {
                stage: Stage::Current,
                ..
            })
        ))
        .is_none(),
        "{text}"
    );
    let mut waits = 0;
    gpu_ir::walk_block(&p.body, &mut |o| {
        waits += usize::from(matches!(o, GpuOp::MmaWaitCarried { .. }));
    });
    assert_eq!(waits, 2, "in the loop and after it: {text}");
}

/// The emitted CUDA with copies landing late (the simulator retires each warpgroup's MMA
/// groups at its own waits and checks accumulators untouched in flight) against the
/// executor: 150 queries (a partial second block), D 64 and 128.
#[test]
fn flash_attention_matches_the_executor() {
    setup();
    for d in [64, 128] {
        let f = flash128(d);
        let src = attn_dsl::codegen::emit_cuda(&f).expect("emit").source;
        assert_eq!(
            src.matches("issued before complete here").count(),
            2,
            "D{d}"
        );
        check_flash(
            &format!("PV waited one iteration behind D{d}"),
            &f,
            [2, 2, 1],
            d,
        );
    }
}
