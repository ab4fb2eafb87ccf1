//! Tiles owned by one warpgroup (`Layout::Owned`): a program's ops on them run on that
//! warpgroup alone, in a region whose thread coordinates, barrier and scratch slice are the
//! warpgroup's. Checked by running 4-warp test programs moved onto one warpgroup of an
//! 8-warp program (and two programs side by side, one a warpgroup) on the simulator of the
//! emitted CUDA against the CPU executor, outputs poisoned; and by breaking the regions the
//! ways that matter (a block-wide barrier inside one deadlocks, a missing guard writes from
//! the wrong threads).

mod codegen_common;

use attn_dsl::codegen::emit_cuda;
use attn_dsl::ir::{verify::verify, ScalarType};
use codegen_common::cpu_sim::{have_gxx, Branch, SimArg};
use codegen_common::owned::{on_warpgroup, own, two_softmaxes};
use codegen_common::sim_check::{check, i32s, input, outcome, output};

/// `f`'s emitted CUDA with `edit` applied, run on `mma.sync`'s branch against the executor.
fn run_edited(
    f: &attn_dsl::ir::Function,
    edit: impl Fn(&str) -> String,
    grid: [u32; 3],
    args: Vec<SimArg>,
    tol: f64,
) -> Result<(), String> {
    let mut k = emit_cuda(f).expect("emit");
    k.source = edit(&k.source);
    outcome(f, &k, Branch::MmaSync, grid, args, tol)
}

/// `alternating_row_stats`'s arguments: a `rows x cols` f32 matrix, two row outputs.
fn row_stats_args(rows: usize, cols: usize, seed: u64) -> Vec<SimArg> {
    vec![
        input(ScalarType::F32, rows * cols, seed),
        output(ScalarType::F32, rows),
        output(ScalarType::F32, rows),
        i32s(rows as i32),
        i32s(cols as i32),
    ]
}

fn softmax_args(rows: usize, cols: usize, seed: u64) -> Vec<SimArg> {
    vec![
        input(ScalarType::Bf16, rows * cols, seed),
        output(ScalarType::Bf16, rows * cols),
        i32s(rows as i32),
        i32s(cols as i32),
    ]
}

fn attention_args(seq: usize, d: usize) -> Vec<SimArg> {
    codegen_common::sim_check::flash_args(ScalarType::Bf16, 1, seq, d, 11)
}

#[test]
fn owned_programs_verify_and_emit_guarded_regions() {
    let f = on_warpgroup(codegen_common::softmax(16, 128, 4), 1, 8);
    verify(&f).expect("verifies");
    let src = emit_cuda(&f).expect("emit").source;
    assert!(
        src.contains("if (attn_warp_uniform(tid >> 7) == 1)"),
        "{src}"
    );
    // The row reductions' barriers are the owner's named barrier, never the block's.
    assert!(src.contains("attn_bar_sync(6, 128);"), "{src}");
    assert!(!src.contains("__syncthreads()"), "{src}");
    assert!(src.contains("#define ATTN_OWNED_SCRATCH"), "{src}");
}

#[test]
fn a_program_on_one_warpgroup_matches_the_executor() {
    let (rows, cols) = (40usize, 100usize);
    for w in [0, 1] {
        let f = on_warpgroup(codegen_common::softmax(16, 128, 4), w, 8);
        let grid = [rows.div_ceil(16) as u32, 1, 1];
        check(
            &format!("softmax on warpgroup {w}"),
            &f,
            grid,
            softmax_args(rows, cols, 6),
            1e-2,
        );
    }
    let (m, n, k) = (70usize, 50usize, 40usize);
    let f = on_warpgroup(
        codegen_common::matmul(ScalarType::Bf16, 32, 32, 16, 4),
        1,
        8,
    );
    let args = vec![
        input(ScalarType::Bf16, m * k, 4),
        input(ScalarType::Bf16, k * n, 5),
        output(ScalarType::F32, m * n),
        i32s(m as i32),
        i32s(n as i32),
        i32s(k as i32),
    ];
    let grid = [m.div_ceil(32) as u32, n.div_ceil(32) as u32, 1];
    check("matmul on warpgroup 1", &f, grid, args, 1e-5);
}

#[test]
fn attention_on_one_warpgroup_matches_the_executor() {
    // mma.sync fragments, loop-carried row statistics and accumulator, all on warpgroup 1.
    let (seq, d) = (70usize, 64usize);
    let f = on_warpgroup(codegen_common::attention(64, 32, d, 4), 1, 8);
    let grid = [seq.div_ceil(64) as u32, 1, 1];
    check(
        "attention on warpgroup 1",
        &f,
        grid,
        attention_args(seq, d),
        2e-2,
    );
}

#[test]
fn two_warpgroups_run_their_own_tiles_side_by_side() {
    let f = two_softmaxes();
    verify(&f).expect("verifies");
    let src = emit_cuda(&f).expect("emit").source;
    assert!(src.contains("== 0)") && src.contains("== 1)"), "{src}");
    let (rows, cols) = (70usize, 100usize);
    let grid = [rows.div_ceil(32) as u32, 1, 1];
    check("two softmaxes", &f, grid, softmax_args(rows, cols, 7), 1e-2);
}

#[test]
fn a_block_barrier_inside_a_region_is_caught() {
    if !have_gxx() {
        return;
    }
    std::env::set_var("ATTN_SIM_TIMEOUT_S", "20");
    let f = two_softmaxes();
    let edit = |s: &str| {
        assert!(s.contains("attn_bar_sync(5, 128);"));
        s.replace("attn_bar_sync(5, 128);", "__syncthreads();")
    };
    let err = run_edited(&f, edit, [2, 1, 1], softmax_args(40, 100, 8), 1e-2)
        .expect_err("warpgroup 0 waits at a barrier warpgroup 1 never reaches");
    assert!(!err.is_empty());
}

#[test]
fn an_unguarded_region_is_caught() {
    if !have_gxx() {
        return;
    }
    // Every warpgroup runs warpgroup 1's region: warpgroup 0's threads, counted as its
    // threads, write the same rows from their own (other) registers and race on its scratch.
    let f = on_warpgroup(codegen_common::softmax(16, 128, 4), 1, 8);
    let edit = |s: &str| {
        s.replace("if (attn_warp_uniform(tid >> 7) == 1)", "if (true)")
            .replace("attn_bar_sync(6, 128);", "__syncthreads();")
    };
    let err = run_edited(&f, edit, [3, 1, 1], softmax_args(40, 100, 9), 1e-2);
    assert!(err.is_err(), "the unguarded region went unnoticed");
}

#[test]
fn mixed_owners_fail_to_verify() {
    let mut f = codegen_common::softmax(16, 128, 4);
    // Only the loaded tile on warpgroup 1: the cast that reads it runs on every warp.
    let loaded = f
        .ops
        .iter()
        .find(|op| matches!(op.kind, attn_dsl::ir::OpKind::Load { .. }))
        .map(|op| op.results[0].0 as usize)
        .expect("a load");
    own(&mut f, |i| (i == loaded).then_some(1));
    f.num_warps = 8;
    let e = verify(&f).expect_err("mixed owners");
    assert!(e.0.contains("different owners"), "{e}");
    // A warpgroup the program does not have.
    let f = on_warpgroup(codegen_common::softmax(16, 128, 4), 2, 8);
    let e = verify(&f).expect_err("warpgroup 2 of 8 warps");
    assert!(e.0.contains("does not have"), "{e}");
    // A scalar reduced from a tile one warpgroup holds (`reduce_trans`'s total).
    let f = on_warpgroup(codegen_common::reduce_trans(16, 32, 4), 1, 8);
    let e = verify(&f).expect_err("a scalar from an owned tile");
    assert!(e.0.contains("computes a scalar"), "{e}");
}

#[test]
fn slabs_on_any_mix_of_owners_match_the_executor() {
    // Four softmax slabs a program, each on warpgroup 0, 1 or every warp: every mix of
    // regions, block-wide ops and their barriers in one program (8 warps, 4 a slab).
    let (rows, cols) = (150usize, 100usize);
    for (k, mix) in [
        [Some(0), Some(1), None, Some(1)],
        [None, Some(0), Some(0), None],
    ]
    .into_iter()
    .enumerate()
    {
        let mut f = codegen_common::softmax_slabs(16, 128, 4, 4);
        let lines = codegen_common::owned::defining_lines(&f);
        own(&mut f, |i| lines[i].and_then(|l| mix[l as usize / 100]));
        f.num_warps = 8;
        verify(&f).expect("verifies");
        let grid = [rows.div_ceil(64) as u32, 1, 1];
        check(
            &format!("slab mix {k}"),
            &f,
            grid,
            softmax_args(rows, cols, 30 + k as u64),
            1e-2,
        );
    }
}

#[test]
fn the_flash_kernel_on_one_warpgroup_of_a_pipelined_program_matches_the_executor() {
    // The DSL's flash kernel (a software-pipelined key loop, `cp.async` ring, causal mask),
    // on warpgroup 1, for both targets' code paths.
    for warpgroups in [false, true] {
        let f = on_warpgroup(codegen_common::flash_fwd(64, 64, warpgroups), 1, 8);
        let args = codegen_common::sim_check::flash_args(ScalarType::Bf16, 2, 150, 64, 21);
        let label = format!("flash on warpgroup 1 (warpgroup target: {warpgroups})");
        check(&label, &f, [3, 2, 1], args, 2e-2);
    }
}

#[test]
fn warpgroups_hand_row_statistics_back_and_forth() {
    let f = codegen_common::owned::alternating_row_stats(16, 64);
    verify(&f).expect("verifies");
    let src = emit_cuda(&f).expect("emit").source;
    // The pair's named barrier (after the two warpgroups' own), and the block's for the
    // handoff to every warp.
    assert!(src.contains("attn_bar_sync(7, 256);"), "{src}");
    assert!(src.contains("#define ATTN_HANDOFF_BASE"), "{src}");
    for (rows, cols) in [(40usize, 300usize), (16, 64), (33, 129)] {
        let args = row_stats_args(rows, cols, 17);
        let grid = [rows.div_ceil(16) as u32, 1, 1];
        check(
            &format!("row statistics {rows}x{cols}"),
            &f,
            grid,
            args,
            1e-5,
        );
    }
}

#[test]
fn a_handoff_read_before_it_is_written_is_caught() {
    if !have_gxx() {
        return;
    }
    // Without the pair's barriers warpgroup 1, which skips warpgroup 0's fold, reads the
    // handoff buffer before warpgroup 0 has written it (and warpgroup 0 the other way).
    let f = codegen_common::owned::alternating_row_stats(16, 64);
    let edit = |s: &str| s.replace("attn_bar_sync(7, 256);", "");
    let err = run_edited(&f, edit, [3, 1, 1], row_stats_args(40, 300, 18), 1e-5)
        .expect_err("handoffs without barriers went unnoticed");
    // Wrong elements, or (`ATTN_SIM_RACECHECK=1`) the race itself.
    assert!(
        err.contains("element") || err.contains("ThreadSanitizer: data race"),
        "{err}"
    );
}
