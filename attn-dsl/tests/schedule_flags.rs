//! The warp schedule as kernel attributes (`warp_specialize = B`, `pingpong = B`): absent,
//! the compiler splits and pairs the programs it can; `false` keeps a program as written;
//! `true` requires the schedule on warpgroup targets, and a program it cannot take is an
//! error naming why, not a silently slower kernel.

mod codegen_common;

use attn_dsl::codegen::emit_cuda;
use attn_dsl::gpu_ir::{self, GpuOp, GpuProgram, Turn};
use attn_dsl::ir::Function;
use attn_dsl::ConstValue;

const FLASH: &str = include_str!("kernels/flash_attention.rs.txt");

/// `flash_fwd` at `block_m` query rows (a warp per 16) with `attrs` added to its
/// `#[kernel(...)]`, specialized for a warpgroup target (bf16, 64-key tiles, D 64, causal).
fn flash(block_m: i64, attrs: &str) -> Function {
    let src = FLASH.replacen(
        "num_warps = 4,",
        &format!("num_warps = BLOCK_M / 16, {attrs}"),
        1,
    );
    assert_ne!(src, FLASH, "the fixture's attribute moved");
    let consts = [
        ("BLOCK_M", ConstValue::Int(block_m)),
        ("BLOCK_N", ConstValue::Int(64)),
        ("HEAD_DIM", ConstValue::Int(64)),
        ("CAUSAL", ConstValue::Bool(true)),
    ];
    codegen_common::specialize(&src, "flash_fwd", &consts, true)
}

fn turns(p: &GpuProgram) -> usize {
    let mut n = 0;
    gpu_ir::walk_block(&p.body, &mut |op| {
        n += usize::from(matches!(op, GpuOp::Turn(Turn::Begin)))
    });
    n
}

#[test]
fn warp_specialize_false_keeps_the_copies_on_the_math_warps() {
    let auto = gpu_ir::compile(&flash(64, "")).expect("gpu ir");
    assert!(auto.specialization.is_some(), "the compiler splits it");
    let required = gpu_ir::compile(&flash(64, "warp_specialize = true,")).expect("gpu ir");
    assert!(required.specialization.is_some());
    let off = flash(64, "warp_specialize = false,");
    let p = gpu_ir::compile(&off).expect("gpu ir");
    assert!(p.specialization.is_none(), "no producer");
    let cuda = emit_cuda(&off).expect("cuda");
    assert!(!cuda.source.contains("ATTN_WARP_SPECIALIZED"));
}

#[test]
fn a_required_split_the_program_cannot_take_is_an_error() {
    let unpipelined = flash(64, "num_stages = 1, warp_specialize = true,");
    let e = gpu_ir::compile(&unpipelined).expect_err("one stage cannot split");
    assert!(
        e.contains("`warp_specialize = true`, but `flash_fwd_")
            && e.ends_with("cannot be split into a producer and consumers: its copies are not pipelined (`num_stages` is 1)"),
        "{e}"
    );
    assert!(
        emit_cuda(&unpipelined).is_err(),
        "the CUDA emitter refuses it too"
    );
    // Without the requirement the same program compiles unsplit.
    let auto = gpu_ir::compile(&flash(64, "num_stages = 1,")).expect("gpu ir");
    assert!(auto.specialization.is_none());
    // The requirement is the warpgroup targets': `mma.sync` programs have no producer.
    let mut sm80 = unpipelined;
    sm80.warpgroup_mma = false;
    assert!(gpu_ir::compile(&sm80).is_ok());
}

#[test]
fn pingpong_pairs_two_warpgroups_unless_the_kernel_says_no() {
    let auto = gpu_ir::compile(&flash(128, "")).expect("gpu ir");
    assert_eq!(turns(&auto), 1, "two warpgroups take turns");
    let off = gpu_ir::compile(&flash(128, "pingpong = false,")).expect("gpu ir");
    assert_eq!(turns(&off), 0);
    let required = gpu_ir::compile(&flash(128, "pingpong = true,")).expect("gpu ir");
    assert_eq!(turns(&required), 1);
    let e = gpu_ir::compile(&flash(64, "pingpong = true,")).expect_err("one warpgroup");
    assert!(
        e.starts_with("`pingpong = true`, but `flash_fwd_")
            && e.ends_with("runs 4 warps: turns need two warpgroups (num_warps = 8)"),
        "{e}"
    );
}
