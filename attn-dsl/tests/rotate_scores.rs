//! Scores one tile ahead (`passes::rotate_scores`, `ATTN_CODEGEN_ENABLE=rotate` while
//! opt-in): the rotated loop carries the next tile's scores, the scores of its first tile
//! are computed before it, and the emitted CUDA (warp-specialized, copies landing late)
//! matches the CPU executor running the kernel as written.

mod codegen_common;

use attn_dsl::codegen::emit_cuda;
use attn_dsl::ir::{Function, OpKind, ScalarType};
use codegen_common::flash_fwd;
use codegen_common::sim_check::{check, flash_args, paged_args};

/// Rotation on (the feature list is read once per process), copies landing late.
fn setup() {
    std::env::set_var("ATTN_CODEGEN_ENABLE", "rotate");
    std::env::set_var("ATTN_SIM_LANDING_DELAY_US", "300");
}

/// The (loop op, its carried values) of every `for` holding a dot.
fn dot_loops(f: &Function) -> Vec<usize> {
    let mut out = Vec::new();
    f.walk(&mut |_, op| {
        if op.kind == OpKind::For {
            let mut dots = false;
            for r in &op.regions {
                for &o in &r.ops {
                    dots |= f.op(o).kind == OpKind::Dot;
                }
            }
            if dots {
                out.push(op.operands.len() - 3);
            }
        }
    });
    out
}

/// Flash attention's loop gains one carried value (the scores), its first scores are a
/// dot before the loop, and the loop's first dot reads the next tile's keys; the split
/// kernel with the rotated loop matches the executor (dense, D 64 and 128).
#[test]
fn flash_attention_carries_the_next_scores() {
    setup();
    for d in [64, 128] {
        let f = flash_fwd(64, d, true);
        let before = dot_loops(&f);
        let mut rotated = f.clone();
        assert!(attn_dsl::passes::rotate_scores::run(&mut rotated));
        assert_eq!(
            dot_loops(&rotated),
            vec![before[0] + 1],
            "one more carried value"
        );
        let dots_outside = rotated
            .body
            .ops
            .iter()
            .filter(|&&o| rotated.op(o).kind == OpKind::Dot)
            .count();
        assert_eq!(dots_outside, 1, "the first tile's scores before the loop");
        attn_dsl::ir::verify::verify(&rotated).expect("rotated IR verifies");
        let src = emit_cuda(&f).expect("emit").source;
        assert!(src.contains("ATTN_WARP_SPECIALIZED"), "split as well");
        let args = flash_args(ScalarType::Bf16, 2, 150, d as usize, 93);
        check(&format!("rotated D{d}"), &f, [3, 2, 1], args, 2e-2);
    }
}

/// The keys gathered through a block table (the table read masked by the kernel's own
/// mask): one tile past the loop's end stays inside the masks.
#[test]
fn paged_flash_attention_runs_rotated() {
    setup();
    let f = codegen_common::paged_fwd(64, 64, 16);
    let mut rotated = f.clone();
    assert!(attn_dsl::passes::rotate_scores::run(&mut rotated));
    check(
        "rotated paged N64 D64 page 16",
        &f,
        [2, 2, 1],
        paged_args(2, 100, 64, 16, 94),
        2e-2,
    );
}

/// Without the warpgroup target the emitted kernel is the loop as written.
#[test]
fn untargeted_kernels_are_not_rotated() {
    setup();
    let f = flash_fwd(64, 64, false);
    let src = emit_cuda(&f).expect("emit").source;
    let mut rotated = f.clone();
    attn_dsl::passes::rotate_scores::run(&mut rotated);
    assert_eq!(
        src,
        emit_cuda(&f).expect("emit").source,
        "emission is deterministic"
    );
    assert!(!src.contains("wgmma"), "no warpgroup MMAs");
}

/// In the rotated loop's GPU program the next tile's scores are issued without a wait and
/// waited for just before the `yield` (`mma_defer`), as is PV (inline or at the yield).
#[test]
fn the_next_scores_are_waited_for_at_the_yield() {
    use attn_dsl::gpu_ir::{self, GpuOp};
    setup();
    let mut f = flash_fwd(64, 128, true);
    assert!(attn_dsl::passes::rotate_scores::run(&mut f));
    let p = gpu_ir::compile(&f).expect("gpu ir");
    let text = gpu_ir::printer::print_program(&f, &p);
    // Unsplit or the consumers' program: the loop body is where the MMAs are.
    let mut bodies = Vec::new();
    gpu_ir::walk_block(&p.body, &mut |op| {
        if let GpuOp::For {
            body,
            pipelined: true,
            ..
        } = op
        {
            bodies.push(body.clone());
        }
    });
    let body = bodies.first().expect(&text);
    let mmas: Vec<(attn_dsl::ir::OpId, bool)> = body
        .ops
        .iter()
        .filter_map(|op| match op {
            GpuOp::Mma {
                dot, inline_wait, ..
            } => Some((*dot, *inline_wait)),
            _ => None,
        })
        .collect();
    assert_eq!(mmas.len(), 2, "{text}");
    let ((scores, scores_wait), (pv, pv_wait)) = (mmas[0], mmas[1]);
    assert!(!scores_wait, "{text}");
    let n = body.ops.len();
    let waited_late = |d| {
        body.ops[..n - 1]
            .iter()
            .rev()
            .take(3)
            .any(|op| matches!(op, GpuOp::MmaWait { dot, .. } if *dot == d))
    };
    assert!(
        waited_late(scores),
        "the scores' wait sits at the yield: {text}"
    );
    assert!(
        pv_wait || waited_late(pv),
        "PV waited for by the yield: {text}"
    );
}

/// Scores that are not warpgroup-shaped (16 rows: `mma.sync` even on a warpgroup target)
/// gain nothing from running ahead and are left as written (rotated, this shape had failed
/// to emit: a value used before its definition).
#[test]
fn sixteen_row_scores_are_not_rotated() {
    setup();
    let consts = [
        ("BLOCK_M", attn_dsl::ConstValue::Int(16)),
        ("BLOCK_N", attn_dsl::ConstValue::Int(32)),
        ("HEAD_DIM", attn_dsl::ConstValue::Int(128)),
        ("CAUSAL", attn_dsl::ConstValue::Bool(true)),
    ];
    let f = codegen_common::specialize(
        include_str!("kernels/flash_attention.rs.txt"),
        "flash_fwd",
        &consts,
        true,
    );
    let mut rotated = f.clone();
    assert!(!attn_dsl::passes::rotate_scores::run(&mut rotated));
    emit_cuda(&f).expect("emits as written");
}
