//! Functions that target warpgroup MMAs (`Function::warpgroup_mma`, what the unified op sets on
//! an sm_90a device): their warpgroup-shaped dots read A from a swizzled shared alloc, their
//! K/V allocs are swizzled 64-column blocks (D = 128: two blocks per row), and the source
//! carries a `wgmma` branch beside `mma.sync`. The simulator runs both branches (the sm_90a
//! one's warpgroup MMAs through their descriptors, `sim_wgmma.h`), so this checks the layouts
//! each reads and writes; GPU parity covers the hardware.

mod codegen_common;

use attn_dsl::codegen::emit_cuda;
use attn_dsl::gpu_ir;
use attn_dsl::ir::{Function, ScalarType};
use codegen_common::sim_check::{check, flash_args};
use codegen_common::split_scores;

fn warpgroup_flash(block_n: i64, head_dim: i64) -> Function {
    codegen_common::flash_fwd(block_n, head_dim, true)
}

/// Q, K and V all swizzled (Q is A from shared memory, not held), both dots with a warpgroup
/// branch (K-major K, MN-major V), and the shared layouts simulate right.
#[test]
fn warpgroup_targeted_flash_attention_matches_the_executor() {
    for (block_n, d) in [(32, 64), (64, 64), (64, 128)] {
        let f = warpgroup_flash(block_n, d);
        let p = gpu_ir::compile(&f).expect("gpu ir");
        let text = gpu_ir::printer::print_program(&f, &p);
        let operands = p.operand_allocs();
        assert_eq!(operands.len(), 3, "Q, K and V allocs:\n{text}");
        assert!(operands.iter().all(|a| a.swizzled && a.pad == 0), "{text}");
        // The next tile's copies are issued while QK^T runs: its wait follows them (in the
        // unsplit program: split, a producer warpgroup issues them).
        let ws = p
            .specialization
            .clone()
            .expect("split: a producer warpgroup");
        let unsplit = gpu_ir::GpuProgram {
            body: ws.unsplit,
            specialization: None,
            ..p.clone()
        };
        let text = gpu_ir::printer::print_program(&f, &unsplit);
        let issue = text.find(", async").expect(&text);
        let copies = text[issue..].find("next iteration").expect(&text);
        let wait = text[issue..].find("mma_wait").expect(&text);
        assert!(copies < wait, "{text}");
        let src = emit_cuda(&f).expect("emit").source;
        for (what, piece) in [
            ("commit", "attn_wgmma_commit();"),
            ("wait", "attn_wgmma_wait<0>();"),
        ] {
            assert_eq!(
                src.matches(piece).count(),
                4,
                "two dots' {what}s, in the consumers' and the unsplit program"
            );
        }
        assert!(
            src.contains("p, 1, 1, 0, 0;"),
            "QK^T: A and B K-major descriptors"
        );
        assert!(
            src.contains("p, 1, 1, 1;"),
            "PV: P in registers, V MN-major"
        );
        assert!(src.contains("attn_fence_proxy_async();"));
        let args = flash_args(ScalarType::Bf16, 2, 75, d as usize, 80);
        check(
            &format!("warpgroup flash N{block_n} D{d}"),
            &f,
            [2, 2, 1],
            args,
            2e-2,
        );
    }
}

/// Without the target, the same kernel keeps Q in registers and emits no warpgroup branch.
#[test]
fn untargeted_functions_emit_no_warpgroup_branch() {
    let mut f = warpgroup_flash(32, 64);
    f.warpgroup_mma = false;
    let src = emit_cuda(&f).expect("emit").source;
    assert!(!src.contains("wgmma"), "{src}");
}

/// MMAs of `p` that continue the previous dot's (`mma_chain`).
fn chained_mmas(p: &gpu_ir::GpuProgram) -> usize {
    let mut n = 0;
    gpu_ir::walk_block(&p.body, &mut |o| {
        n += usize::from(matches!(
            o,
            gpu_ir::GpuOp::Mma {
                chained_from: Some(_),
                ..
            }
        ));
    });
    n
}

/// The second dot of the scores continues the first's warpgroup MMAs in the same
/// accumulator: no wait between them, one array in the source; the emitted CUDA (its
/// `mma.sync` branch, accumulating in place) matches the executor. It does not when the
/// first dot's result has another reader, nor on targets without warpgroup MMAs.
#[test]
fn chained_dots_share_their_accumulator() {
    let f = split_scores(false, true);
    let p = gpu_ir::compile(&f).expect("gpu ir");
    let text = gpu_ir::printer::print_program(&f, &p);
    assert_eq!(chained_mmas(&p), 1, "{text}");
    assert!(text.contains(", continues %"), "{text}");
    let src = emit_cuda(&f).expect("emit").source;
    // Without the chain the first dot's deferred wait sits between the two dots. Split,
    // the source holds the program twice: the consumers' and the unsplit one.
    let programs = 1 + usize::from(p.specialization.is_some());
    assert_eq!(
        src.matches("attn_wgmma_wait<0>();").count(),
        2 * programs,
        "the scores' one wait and PV's, per program"
    );
    let args = flash_args(ScalarType::Bf16, 2, 75, 128, 90);
    check("chained scores", &f, [2, 2, 1], args, 2e-2);

    let reused = split_scores(true, true);
    let p = gpu_ir::compile(&reused).expect("gpu ir");
    assert_eq!(chained_mmas(&p), 0, "a result read twice is not chained");
    let args = flash_args(ScalarType::Bf16, 2, 75, 128, 91);
    check("reused first dot", &reused, [2, 2, 1], args, 2e-2);

    let untargeted = split_scores(false, false);
    let p = gpu_ir::compile(&untargeted).expect("gpu ir");
    assert_eq!(chained_mmas(&p), 0, "only warpgroup targets chain");
}
