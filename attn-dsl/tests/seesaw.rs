//! The seesaw rewrite (`passes::seesaw`): a two-warpgroup attention loop unrolled by two,
//! each half's scores chain on its own warpgroup, handoffs where values cross. The rewritten
//! program computes exactly what the loop did (executor against executor), its emitted
//! CUDA matches the executor on the simulator (odd and even tile counts, a partial last
//! tile), and each half's scores run in its warpgroup's region.

mod codegen_common;

use attn_dsl::codegen::emit_cuda;
use attn_dsl::ir::{verify::verify, Function, OpKind, ScalarType};
use attn_dsl::passes::seesaw;
use codegen_common::cpu_sim::{run_interp, SimArg};
use codegen_common::sim_check::{check, flash_args};

/// The test attention program's arguments: one head of `seq` rows of width `d`.
fn args(seq: usize, d: usize, seed: u64) -> Vec<SimArg> {
    flash_args(ScalarType::Bf16, 1, seq, d, seed)
}

/// The test attention program (64 query rows, two warpgroups) and its seesaw form.
fn programs(bn: usize, d: usize) -> (Function, Function) {
    let f = codegen_common::attention(64, bn, d, 8);
    let g = seesaw::apply(&f).expect("the attention loop takes the seesaw");
    (f, g)
}

fn handoffs_in(f: &Function, b: &attn_dsl::ir::Block) -> usize {
    b.ops
        .iter()
        .map(|&o| {
            let op = f.op(o);
            usize::from(op.kind == OpKind::Handoff)
                + op.regions.iter().map(|r| handoffs_in(f, r)).sum::<usize>()
        })
        .sum()
}

fn handoffs(f: &Function) -> usize {
    let mut n = 0;
    f.walk(&mut |_, op| n += usize::from(op.kind == OpKind::Handoff));
    n
}

#[test]
fn the_rewrite_owns_each_halfs_scores_and_hands_values_over() {
    let (_, g) = programs(64, 128);
    verify(&g).expect("verifies");
    let mut dots = Vec::new();
    g.walk(&mut |_, op| {
        if op.kind == OpKind::Dot {
            dots.push(g.ty(op.results[0]).layout.owner());
        }
    });
    // The scores of both tiles (each on its warpgroup, the second issued right after the
    // first), then PV of each on every warp.
    assert_eq!(dots, [Some(0), Some(1), None, None], "{dots:?}");
    // In the loop: each half takes m and l from the other warpgroup and gives P and the
    // rescale factor to every warp (the guard's choice of the first half's m and l reuses
    // the second half's handoff of them). Around it: the queries to each warpgroup once,
    // the row sums to every warp after.
    let loops: Vec<&attn_dsl::ir::Block> = g
        .body
        .ops
        .iter()
        .filter(|&&o| g.op(o).kind == OpKind::For)
        .map(|&o| &g.op(o).regions[0])
        .collect();
    let in_loop: usize = loops.iter().map(|b| handoffs_in(&g, b)).sum();
    assert_eq!((in_loop, handoffs(&g) - in_loop), (8, 3));
    // Gathered into runs that each meet behind one barrier: the running max and sum to
    // warpgroup 0; the factor and P to every warp before PV; the new max and sum to
    // warpgroup 1 after it (a handoff is not moved above a dot); the second half's factor
    // and P.
    let runs: Vec<Vec<usize>> = loops.iter().map(|b| handoff_runs(&g, b)).collect();
    assert_eq!(runs, [[2, 2, 2, 2]], "{runs:?}");
}

/// The lengths of the runs of consecutive handoffs in `b`.
fn handoff_runs(f: &Function, b: &attn_dsl::ir::Block) -> Vec<usize> {
    let mut runs = Vec::new();
    let mut n = 0;
    for &o in &b.ops {
        if f.op(o).kind == OpKind::Handoff {
            n += 1;
        } else if n > 0 {
            runs.push(std::mem::take(&mut n));
        }
    }
    runs.extend((n > 0).then_some(n));
    runs
}

#[test]
fn other_programs_are_left_alone() {
    // One warpgroup, or no key loop: nothing to take turns over.
    assert!(seesaw::apply(&codegen_common::attention(64, 64, 64, 4)).is_none());
    assert!(seesaw::apply(&codegen_common::softmax(16, 128, 8)).is_none());
}

#[test]
fn the_rewrite_computes_what_the_loop_did() {
    for seq in [40usize, 64, 150, 200] {
        let (f, g) = programs(32, 64);
        let grid = [seq.div_ceil(64) as u32, 1, 1];
        let (mut want, mut got) = (args(seq, 64, 5), args(seq, 64, 5));
        run_interp(&f, grid, &mut want).expect("loop");
        run_interp(&g, grid, &mut got).expect("seesaw");
        let (SimArg::Buf(w), SimArg::Buf(o)) = (&want[3], &got[3]) else {
            unreachable!()
        };
        let (w, o) = (w.to_f64s(), o.to_f64s());
        assert!(w.iter().all(|x| x.is_finite()));
        assert_eq!(w, o, "seq {seq}");
    }
}

#[test]
fn the_seesaw_runs_on_the_simulator() {
    // 150 keys in 32-key tiles: five tiles, the last partial; the pairs' second half runs
    // twice and is skipped once.
    for (seq, bn, d) in [(150usize, 32usize, 64usize), (128, 64, 128)] {
        let (_, g) = programs(bn, d);
        let src = emit_cuda(&g).expect("emit").source;
        assert!(
            src.contains("if (attn_warp_uniform(tid >> 7) == 0)"),
            "{src}"
        );
        assert!(
            src.contains("if (attn_warp_uniform(tid >> 7) == 1)"),
            "{src}"
        );
        // The warpgroups' scratch slices start after the whole program's: a warpgroup
        // leaving a conversion both ran must not overwrite what the other still reads.
        let base = src
            .lines()
            .find_map(|l| l.strip_prefix("#define ATTN_OWNED_BASE "))
            .and_then(|n| n.trim().parse::<usize>().ok())
            .expect("ATTN_OWNED_BASE");
        assert!(base > 0, "the slices overlap the program's scratch");
        let grid = [seq.div_ceil(64) as u32, 1, 1];
        check(
            &format!("seesaw {seq}x{bn}x{d}"),
            &g,
            grid,
            args(seq, d, 9),
            2e-2,
        );
    }
}

#[test]
fn chained_scores_take_the_seesaw_on_both_targets() {
    // MLA's scores shape: two chained dots (the second accumulates into the first); the
    // warpgroup target runs PV (every warp, `[4, 2]`) as warpgroup MMAs.
    for (reuse, warpgroups) in [(false, false), (true, false), (false, true)] {
        let mut f = codegen_common::split_scores(reuse, warpgroups);
        f.num_warps = 8;
        let g = seesaw::apply(&f).expect("the split loop takes the seesaw");
        let mut owners = Vec::new();
        g.walk(&mut |_, op| {
            if op.kind == OpKind::Dot {
                owners.push(g.ty(op.results[0]).layout.owner());
            }
        });
        assert_eq!(owners, [Some(0), Some(0), Some(1), Some(1), None, None]);
        let (heads, seq, d) = (2usize, 150usize, 128usize);
        let args = flash_args(ScalarType::Bf16, heads, seq, d, 31);
        let grid = [seq.div_ceil(64) as u32, heads as u32, 1];
        let label = format!("seesaw split scores reuse={reuse} warpgroups={warpgroups}");
        check(&label, &g, grid, args, 2e-2);
    }
}

#[test]
fn a_key_tile_both_dots_read_stays_in_shared_memory() {
    // MLA's shape: one K tile is the scores' B and, transposed, PV's B (`latent_fwd`). The
    // owned scores read it from the copy the every-warp PV reads: no warpgroup its own.
    use attn_dsl::ConstValue::Int;
    let consts = [
        ("BLOCK_M", Int(64)),
        ("BLOCK_N", Int(32)),
        ("HEAD_DIM", Int(64)),
    ];
    let src = include_str!("kernels/flash_attention.rs.txt");
    let mut f = codegen_common::specialize(src, "latent_fwd", &consts, false);
    f.num_warps = 8;
    let g = seesaw::apply(&f).expect("the latent loop takes the seesaw");
    let mut handed = Vec::new();
    g.walk(&mut |_, op| {
        if op.kind == OpKind::Handoff {
            handed.push(g.ty(op.operands[0]).shape.clone());
        }
    });
    // Tiles handed over: the queries to each warpgroup, each half's P to every warp (the
    // second half's rescale row as the column its PV's factor is made one from where the
    // tile is missing); never the `[32, 64]` key tile.
    let tiles: Vec<&Vec<usize>> = handed.iter().filter(|s| s.len() == 2).collect();
    assert_eq!(
        tiles,
        [
            &vec![64, 64],
            &vec![64, 64],
            &vec![64, 32],
            &vec![64, 1],
            &vec![64, 32]
        ]
    );
    let (heads, seq) = (2usize, 75usize);
    let args = codegen_common::sim_check::latent_args(heads, seq, 64, 41);
    check(
        "seesaw latent",
        &g,
        [seq.div_ceil(64) as u32, heads as u32, 1],
        args,
        2e-2,
    );
}

/// The stage handshakes of the consumers' loop of `p`'s split, in order.
fn consumer_stage_syncs(p: &attn_dsl::gpu_ir::GpuProgram) -> Vec<attn_dsl::gpu_ir::StageSync> {
    use attn_dsl::gpu_ir::{walk_block, GpuOp};
    let mut syncs = Vec::new();
    walk_block(&p.body, &mut |op| {
        if let GpuOp::Stage(s) = op {
            syncs.push(*s);
        }
    });
    syncs
}

#[test]
fn the_halves_tiles_take_one_buffer_each_on_the_warpgroup_target() {
    // The latent loop on sm_90a, split into producer and consumers: each half's tile is a
    // part of one ring whose stage is the tile (one buffer a half: two tiles, not two
    // rings of two), each warpgroup waits for a part before its own first read, and each
    // part is released once its PV completed.
    use attn_dsl::gpu_ir::{Iterations::All, Stage::Current, StageSync};
    // Copies land late, so a read that does not wait for its part reads the old tile.
    std::env::set_var("ATTN_SIM_LANDING_DELAY_US", "300");
    let f = codegen_common::latent_fwd_two_warpgroups(64, 128, true);
    let g = seesaw::apply(&f).expect("the latent loop takes the seesaw");
    let p = attn_dsl::gpu_ir::compile(&g).expect("GPU IR");
    let ws = p.specialization.as_ref().expect("split");
    assert_eq!((ws.parts, ws.stages, ws.copies_arrive), (2, 1, true));
    let keys: Vec<usize> = p
        .allocs
        .iter()
        .filter(|a| a.rows == 64 && a.name.starts_with('k'))
        .map(|a| a.stages)
        .collect();
    assert_eq!(keys, [1, 1], "{:?}", p.allocs);
    let wait = |part, by| StageSync::Wait {
        part,
        when: All,
        by: Some(by),
    };
    let release = |part| StageSync::Release {
        stage: Current,
        part,
    };
    assert_eq!(
        consumer_stage_syncs(&p),
        [
            wait(0, 0),
            wait(1, 1),
            wait(0, 1),
            release(0),
            wait(1, 0),
            release(1)
        ]
    );
    // Odd and even tile counts, a partial last tile; the split (sm_90a branch) and the
    // unsplit program, which copies each iteration's tiles in place.
    for (seq, seed) in [(150usize, 51u64), (256, 52), (40, 53)] {
        let heads = 2usize;
        let args = codegen_common::sim_check::latent_args(heads, seq, 128, seed);
        check(
            &format!("seesaw ring latent {seq}"),
            &g,
            [seq.div_ceil(64) as u32, heads as u32, 1],
            args,
            2e-2,
        );
    }
}
