//! PV one tile behind (`passes::pv_behind`, `ATTN_CODEGEN_ENABLE=pv_behind` while opt-in):
//! the loop runs one iteration more and carries the probabilities, PV of the previous tile
//! issues with the scores, and the emitted CUDA (warp-specialized, copies landing late)
//! matches the CPU executor running the kernel as written — including the tile past the
//! loop's end (guarded) and the first iteration's PV of zeros (its V load masked off).

mod codegen_common;

use attn_dsl::codegen::emit_cuda;
use attn_dsl::ir::{Function, OpKind, ScalarType};
use codegen_common::flash_fwd;
use codegen_common::sim_check::{check, flash_args, paged_args};

/// PV behind (the feature list is read once per process), copies landing late.
fn setup() {
    std::env::set_var("ATTN_CODEGEN_ENABLE", "pv_behind");
    std::env::set_var("ATTN_SIM_LANDING_DELAY_US", "300");
}

/// The carried values of every `for` holding a dot.
fn dot_loops(f: &Function) -> Vec<usize> {
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

/// PV behind: the loop carries one more value (the probabilities), runs to `hi + step`
/// (its bound is an op before it), keeps both dots in the body and verifies.
#[test]
fn the_loop_carries_the_probabilities() {
    setup();
    let f = flash_fwd(64, 128, true);
    let before = dot_loops(&f);
    let mut g = f.clone();
    assert!(attn_dsl::passes::pv_behind::run(&mut g));
    assert_eq!(dot_loops(&g), vec![before[0] + 1], "p carried");
    let dots_outside = g
        .body
        .ops
        .iter()
        .filter(|&&o| g.op(o).kind == OpKind::Dot)
        .count();
    assert_eq!(dots_outside, 0, "no dot peeled out of the loop");
    attn_dsl::ir::verify::verify(&g).expect("IR verifies");
}

/// Dense flash attention (D 64 and 128, causal): the kernel with PV behind matches
/// the executor; the scores are waited for with PV still in flight.
#[test]
fn flash_attention_with_pv_behind_matches_the_executor() {
    setup();
    for d in [64, 128] {
        let f = flash_fwd(64, d, true);
        let src = emit_cuda(&f).expect("emit").source;
        assert!(src.contains("ATTN_WARP_SPECIALIZED"), "split as well");
        let one = src
            .find("attn_wgmma_wait<1>();")
            .expect("the scores waited for with PV in flight");
        let zero = src[one..].find("attn_wgmma_wait<0>();");
        assert!(zero.is_some(), "then PV, at the yield");
        let args = flash_args(ScalarType::Bf16, 2, 150, d as usize, 95);
        check(&format!("PV behind D{d}"), &f, [3, 2, 1], args, 2e-2);
    }
}

/// Keys gathered through a block table: the tile past the loop's end is read inside the
/// kernel's masks and changes nothing.
#[test]
fn paged_flash_attention_runs_with_pv_behind() {
    setup();
    let f = codegen_common::paged_fwd(64, 64, 16);
    check(
        "PV behind paged N64 D64 page 16",
        &f,
        [2, 2, 1],
        paged_args(2, 100, 64, 16, 96),
        2e-2,
    );
}

/// Keys `[lo, hi)` selected by the loop's bounds alone: the tile after the last holds keys
/// the mask allows, so its running max and sum must not be kept (the guard), and a range
/// without tiles keeps the entry values. A tile fully inside,
/// one straddling the end, a range that ends inside a tile, and an empty one.
#[test]
fn a_range_narrower_than_the_mask_counts_only_its_tiles() {
    use codegen_common::sim_check::{i32s, input, output};
    setup();
    let consts = [
        ("BLOCK_M", attn_dsl::ConstValue::Int(64)),
        ("BLOCK_N", attn_dsl::ConstValue::Int(64)),
        ("HEAD_DIM", attn_dsl::ConstValue::Int(64)),
    ];
    let f = codegen_common::specialize(
        include_str!("kernels/bounded_attention.rs.txt"),
        "bounded_fwd",
        &consts,
        true,
    );
    let mut g = f.clone();
    assert!(attn_dsl::passes::pv_behind::run(&mut g), "PV behind");
    let (heads, seq, d) = (2, 200, 64);
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
            codegen_common::cpu_sim::SimArg::Scalar(attn_dsl::kernel::ScalarArg::F32(0.125)),
        ];
        check(&format!("keys [{lo}, {hi})"), &f, [4, 2, 1], args, 2e-2);
    }
}
