//! The `short_last` launch order (`plan::short_last`, shipped in session 28): a
//! sliding-window grid's short first q-blocks of every KV head launched last, heads
//! fastest. Its own binary, since the feature list is read once per process from the
//! environment (`setup`), and `heads_fastest` (which the order gives way to) must stay off
//! here.
//!
//! The order is a permutation of the programs: a program mapped twice leaves another's rows
//! unwritten (poisoned NaN in the output), one mapped out of range writes rows that are not
//! its own (the f64 reference disagrees). So CPU-executor parity over batches whose first
//! q-blocks are short (a window the sequence's start clips), with q-blocks fewer than the
//! short count, and with GQA spill rows, checks the mapping whole.

mod sass_support;
mod unified_common;
mod unified_plans;

use attn_runtime::jit::{Arch, CudaSource};
use attn_runtime::ops::unified_attention::cpu::CpuOptions;
use attn_runtime::ops::unified_attention::gpu::emit_launch;
use attn_runtime::ops::unified_attention::plan;
use attn_runtime::reference::unified_attention::AttentionOptions;
use unified_common::run::check_case;
use unified_common::{Geometry, PagedData};

fn setup() {
    std::env::set_var("ATTN_CODEGEN_ENABLE", "short_last");
}

#[test]
fn short_blocks_last_matches_the_reference() {
    setup();
    // One long prefill (the P1 shape in small), a mixed batch, and a sequence with fewer
    // q-blocks than the window clips.
    let batches: [(&str, &[(usize, usize)]); 3] = [
        ("prefill", &[(230, 230)]),
        ("mixed", &[(120, 120), (1, 300), (70, 90)]),
        ("short", &[(20, 20), (9, 40)]),
    ];
    for (heads, seed) in [((8, 2), 31), ((5, 1), 32), ((4, 4), 33)] {
        for (set, seqs) in batches {
            let data = PagedData::random(&Geometry::new(seqs, heads, 64), seed);
            let options = AttentionOptions {
                sliding_window: 48,
                ..Default::default()
            };
            let name = format!("{set} heads {heads:?}");
            let (run, _) = check_case(&name, &data, options, CpuOptions::default());
            let cfg = &run.plan.config;
            assert!(plan::short_last(cfg), "{name}: the order applies");
            let key = format!("{:?}", run.plan.attention.bindings);
            assert!(key.contains("SHORT_LAST"), "{name}: bound in the key");
            // Two axes, as without the order: q-blocks on x, KV heads on y.
            assert_eq!(
                run.plan.attention.grid[1], heads.1 as u32,
                "{name}: heads on y"
            );
        }
    }
}

#[test]
fn no_window_keeps_the_launch_order() {
    setup();
    let data = PagedData::random(&Geometry::new(&[(60, 60)], (4, 2), 64), 34);
    let (run, _) = check_case(
        "causal",
        &data,
        AttentionOptions::default(),
        CpuOptions::default(),
    );
    assert!(!plan::short_last(&run.plan.config));
    let key = format!("{:?}", run.plan.attention.bindings);
    assert!(!key.contains("SHORT_LAST"), "unbound without a window");
}

/// P1's and P3's sm_90a kernels (warp-specialized: the producer recomputes the program's
/// q-block and head too) take the order and still compile spill-free, their warpgroup MMAs
/// pipelined.
#[test]
fn p1_and_p3_take_the_order_spill_free() {
    setup();
    for (label, problem) in [("P1", unified_plans::p1()), ("P3", unified_plans::p3())] {
        let launch = unified_plans::warpgroup_launch(problem, 8192);
        assert!(
            format!("{:?}", launch.bindings).contains("SHORT_LAST"),
            "{label}: the order applies"
        );
        let cuda = emit_launch(&launch).expect("emit");
        let arch: Arch = "sm_90a".parse().expect("arch");
        let m = sass_support::compile_spill_free(label, &CudaSource::from_kernel(&cuda), arch);
        assert!(
            !m.log.contains("C751"),
            "{label}: wgmma serialized: {}",
            m.log
        );
    }
}
