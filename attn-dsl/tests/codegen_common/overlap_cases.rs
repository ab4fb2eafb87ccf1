//! The cases every software-pipelined attention loop (`ATTN_CODEGEN_ENABLE=softmax_ahead`,
//! `pv_behind`) must pass against the CPU executor: the emitted CUDA, warp-specialized with
//! copies landing late, simulated. `rewrite` is the pass under test (to check it applies).

use super::sim_check::{check, check_flash, i32s, input, output, paged_args};
use attn_dsl::codegen::emit_cuda;
use attn_dsl::ir::{Function, OpKind, ScalarType};

/// Sets the feature list (read once per process) and makes copies land late.
pub fn setup(feature: &str) {
    std::env::set_var("ATTN_CODEGEN_ENABLE", feature);
    std::env::set_var("ATTN_SIM_LANDING_DELAY_US", "300");
}

/// Dense causal flash attention at head sizes `ds` matches the executor, the scores waited
/// for with PV still in flight (`wgmma.wait_group 1`), then PV; on rings of `stages` buffers.
pub fn dense_flash(label: &str, stages: u32, ds: &[i64]) {
    for &d in ds {
        let mut f = super::flash_fwd(64, d, true);
        f.num_stages = stages;
        let src = emit_cuda(&f).expect("emit").source;
        assert!(src.contains("ATTN_WARP_SPECIALIZED"), "split as well");
        let one = src
            .find("attn_wgmma_wait<1>();")
            .expect("the scores waited for with PV in flight");
        assert!(src[one..].contains("attn_wgmma_wait<0>();"), "then PV");
        check_flash(&format!("{label} D{d}"), &f, [3, 2, 1], d);
    }
}

/// Keys gathered through a block table (head size `d`, `stages` buffers): a tile outside the
/// loop's range is read inside the kernel's masks and changes nothing.
pub fn paged(label: &str, stages: u32, d: i64) {
    let mut f = super::paged_fwd(64, d, 16);
    f.num_stages = stages;
    let args = paged_args(2, 100, d as usize, 16, 96);
    check(
        &format!("{label} paged N64 D{d} page 16"),
        &f,
        [2, 2, 1],
        args,
        2e-2,
    );
}

/// Keys `[lo, hi)` selected by the loop's bounds alone (`kernels/bounded_attention.rs.txt`):
/// the tile after the last holds keys the mask allows, so its running max and sum must not
/// be kept, and a range without tiles keeps the entry values. A tile fully inside, one
/// straddling the end, a range ending inside a tile, an empty one.
pub fn bounded_ranges(rewrite: fn(&mut Function) -> bool, stages: u32, d: usize) {
    let consts = [
        ("BLOCK_M", attn_dsl::ConstValue::Int(64)),
        ("BLOCK_N", attn_dsl::ConstValue::Int(64)),
        ("HEAD_DIM", attn_dsl::ConstValue::Int(d as i64)),
    ];
    let mut f = super::specialize(
        include_str!("../kernels/bounded_attention.rs.txt"),
        "bounded_fwd",
        &consts,
        true,
    );
    f.num_stages = stages;
    assert!(rewrite(&mut f.clone()), "the rewrite applies");
    let (heads, seq) = (2, 200);
    let n = heads * seq * d;
    for (lo, hi) in [(0, 64), (64, 128), (0, 100), (64, 64), (128, 200)] {
        let args = vec![
            input(ScalarType::Bf16, n, 97),
            input(ScalarType::Bf16, n, 98),
            input(ScalarType::Bf16, n, 99),
            output(ScalarType::F32, n),
            i32s(seq as i32),
            i32s(lo),
            i32s(hi),
            super::cpu_sim::SimArg::Scalar(attn_dsl::kernel::ScalarArg::F32(0.125)),
        ];
        check(&format!("keys [{lo}, {hi})"), &f, [4, 2, 1], args, 2e-2);
    }
}

/// The carried values of every `for` holding a dot.
pub fn dot_loops(f: &Function) -> Vec<usize> {
    let mut out = Vec::new();
    f.walk(&mut |_, op| {
        if op.kind == OpKind::For {
            let dots = op
                .regions
                .iter()
                .any(|r| r.ops.iter().any(|&o| f.op(o).kind == OpKind::Dot));
            if dots {
                out.push(op.operands.len() - 3);
            }
        }
    });
    out
}

/// The 3-stage flash kernel (64 × 128, causal) with PV one tile behind: the loop the
/// previous stage (and the split ring on top of it) rewrites, its GPU program and printout.
pub fn previous_stage_program() -> (Function, attn_dsl::gpu_ir::GpuProgram, String) {
    previous_stage_program_at(3, 128)
}

/// [`previous_stage_program`] on a ring of `stages` buffers at head size `d`.
pub fn previous_stage_program_at(
    stages: u32,
    d: i64,
) -> (Function, attn_dsl::gpu_ir::GpuProgram, String) {
    let mut f = super::flash_fwd(64, d, true);
    f.num_stages = stages;
    assert!(attn_dsl::passes::pv_behind::run(&mut f));
    let p = attn_dsl::gpu_ir::compile(&f).expect("gpu ir");
    let text = attn_dsl::gpu_ir::printer::print_program(&f, &p);
    (f, p, text)
}

/// The producer warpgroup's part of a warp-specialized kernel's source.
pub fn producer_source(src: &str) -> &str {
    let producer = &src[src.find("attn_setmaxnreg_dec").expect("split")..];
    &producer[..producer.find("attn_setmaxnreg_inc").expect("consumers")]
}
