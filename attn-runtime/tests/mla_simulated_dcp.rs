//! The whole MLA-DCP decode step on D simulated ranks (spec §9.5) against the dense f64
//! reference: full causal absorbed attention over all S_b keys, then per-head W_UV. Each rank's
//! `[T, N·128]` must equal the reference's slice for heads `[r·N, (r+1)·N)`.

mod mla_support;

use attn_dsl::interp::HostBuffer;
use attn_dsl::ir::ScalarType;
use attn_runtime::ops::mla_dcp::cpu::{finish, run_combine_v_up, simulate_until_combine};
use attn_runtime::ops::mla_dcp::plan::LATENT;
use attn_runtime::ops::unified_attention::config::MmaKind;
use mla_support::{check_case, check_outputs, planned_for, Case, Inputs};

/// Ragged batch with mixed q_len {1, 2, 4}: one long request, one shorter than D·I for the
/// larger geometries (empty shards), one with no history at all.
fn ragged(d: u32, i: u32, b: u32) -> Case {
    Case::new(d, i, b, 2, &[260, 7, 2], &[1, 4, 2])
}

#[test]
fn d1_d2_block64_all_interleaves() {
    for d in [1, 2] {
        for i in [1, 8, 64] {
            check_case(&ragged(d, i, 64), u64::from(d * 100 + i));
        }
    }
}

#[test]
fn d4_block64_all_interleaves() {
    for i in [1, 8, 64] {
        check_case(&ragged(4, i, 64), u64::from(400 + i));
    }
}

#[test]
fn d8_block64_all_interleaves() {
    for i in [1, 8, 64] {
        check_case(&ragged(8, i, 64), u64::from(800 + i));
    }
}

#[test]
fn block16_all_dcp_sizes() {
    for (d, i) in [(1, 16), (2, 1), (4, 8), (8, 16)] {
        check_case(&ragged(d, i, 16), u64::from(1600 + d * 10 + i));
    }
}

#[test]
fn empty_shards_and_zero_history() {
    // S_b < D·I everywhere: most ranks hold nothing; request 1 is all current chunk.
    check_case(&Case::new(8, 8, 64, 1, &[5, 4, 12], &[1, 4, 2]), 7);
    check_case(&Case::new(4, 64, 64, 3, &[3, 70], &[2, 1]), 8);
    // N = 16 heads per rank (DSV3 at TP8), one rank.
    check_case(&Case::new(1, 1, 16, 16, &[40], &[2]), 9);
}

#[test]
fn forced_splits_and_heuristic() {
    let mut c = Case::new(2, 8, 16, 2, &[300, 40], &[2, 1]);
    c.splits = Some(3);
    check_case(&c, 9);
    let mut c = Case::new(1, 1, 16, 2, &[300, 40], &[2, 1]);
    c.num_sms = 132;
    assert!(
        c.plan().num_splits > 1,
        "the heuristic must split a 298-key history on 132 SMs"
    );
    check_case(&c, 10);
}

/// The warpgroup-MMA plan (sm_90a): whole 64-head tiles on the two warpgroups' 4 × 2 grid
/// (`mla_history` at `BLOCK_H` 64, 64-key tiles where the page allows), on one rank and on
/// two, with a ragged last head tile (80 gathered heads: rows past the last head masked)
/// and a forced split count.
#[test]
fn warpgroup_plan_takes_whole_head_tiles() {
    let cases = [
        (Case::new(1, 1, 64, 80, &[150, 3], &[1, 2]), None),
        (Case::new(2, 8, 32, 40, &[90, 70], &[2, 1]), Some(2)),
    ];
    for (i, (c, splits)) in cases.into_iter().enumerate() {
        let c = planned_for(c, MmaKind::Warpgroup, splits);
        let plan = c.plan();
        assert_eq!(plan.history.kernel, "mla_history", "case {i}");
        let gathered = c.d * c.heads;
        assert_eq!(
            plan.history.grid[0] as usize,
            plan.num_tokens * gathered.div_ceil(64) as usize,
            "case {i}"
        );
        check_case(&c, 600 + i as u64);
    }
}

/// A positive scale is applied in the history's exponent, after the row max
/// (`SCALE_AFTER_MAX`: `max(s·c) = c·max(s)` needs `c > 0`); a negative one scales the
/// scores first. Both match the reference, on both targets' plans.
#[test]
fn scale_signs_pick_where_the_scores_are_scaled() {
    use attn_dsl::ConstValue;
    for (i, (scale, mma)) in [
        (0.9, MmaKind::Sync),
        (-0.2, MmaKind::Sync),
        (0.9, MmaKind::Warpgroup),
        (-0.2, MmaKind::Warpgroup),
    ]
    .into_iter()
    .enumerate()
    {
        let mut c = Case::new(2, 8, 16, 2, &[150, 3], &[2, 1]);
        c.scale = scale;
        c.mma = mma;
        let flag = c
            .plan()
            .history
            .constexprs
            .iter()
            .find(|(n, _)| *n == "SCALE_AFTER_MAX")
            .map(|(_, v)| v.clone());
        assert_eq!(flag, Some(ConstValue::Bool(scale > 0.0)), "scale {scale}");
        check_case(&c, 700 + i as u64);
    }
}

#[test]
fn f16_activations() {
    let mut c = Case::new(4, 8, 16, 2, &[150, 3], &[2, 1]);
    c.dtype = ScalarType::F16;
    check_case(&c, 11);
}

/// NaN and ±∞ written into received partials of ranks with *empty* shards (whose true LSE is
/// −∞, so any value there must contribute nothing) never reach the output.
#[test]
fn nan_and_inf_in_empty_partials_never_leak() {
    let case = Case::new(4, 8, 16, 2, &[20, 3], &[1, 2]);
    let inputs = Inputs::random(&case, 12);
    let plan = case.plan();
    let mut sim = simulate_until_combine(&plan, &inputs.sim()).expect("simulate");
    let ex = plan.exchange;
    let (n, t) = (2, plan.num_tokens);
    let mut tampered = 0;
    for recv in sim.recv.iter_mut() {
        let mut lse = recv.lse.to_f64s();
        let mut out = recv.out.to_f64s();
        for src in 0..4 {
            for h in 0..n {
                for tok in 0..t {
                    let at = ex.lse_index(src, h, tok);
                    if lse[at] == f64::NEG_INFINITY {
                        lse[at] = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY][tampered % 3];
                        for l in 0..LATENT {
                            out[ex.out_index(src, h, tok, l)] =
                                if l % 2 == 0 { f64::NAN } else { f64::INFINITY };
                        }
                        tampered += 1;
                    }
                }
            }
        }
        recv.lse = HostBuffer::from_f64s(ScalarType::F32, &lse);
        recv.out = HostBuffer::from_f64s(case.dtype, &out);
    }
    assert!(tampered > 0, "the case must have empty-shard partials");
    let outs = finish(&plan, &sim).expect("finish");
    check_outputs(&case, &inputs, &outs);
}

/// The fused merge reads the own part from the send buffer when told to (the GPU op's A2A and
/// loopback exchanges then leave it out of the receive buffer): with the own chunk of the
/// receive buffer poisoned (NaN rows under finite LSEs, so they weigh in), `y` still matches
/// the reference, and without the own-part argument the poison reaches `y`.
#[test]
fn fused_merge_reads_the_own_part_from_the_send_buffer() {
    for (d, seed) in [(1, 31), (2, 32)] {
        let case = Case::new(d, 8, 16, 2, &[40, 90], &[1, 2]);
        let inputs = Inputs::random(&case, seed);
        let plan = case.plan();
        let sim = simulate_until_combine(&plan, &inputs.sim()).expect("simulate");
        let kernels = &sim.kernels;
        assert!(kernels.combine_v_up().is_some(), "dcp 1 and 2 fuse");
        let ex = plan.exchange;
        let (n, t) = (2, plan.num_tokens);
        let mut outs = finish(&plan, &sim).expect("finish");
        for (rank, out) in outs.iter_mut().enumerate() {
            let send = &sim.recv[rank];
            let mut lse = send.lse.to_f64s();
            let mut rows = send.out.to_f64s();
            for h in 0..n {
                for tok in 0..t {
                    lse[ex.lse_index(rank, h, tok)] = 0.0;
                    for l in 0..LATENT {
                        rows[ex.out_index(rank, h, tok, l)] = f64::NAN;
                    }
                }
            }
            let poisoned = attn_runtime::ops::mla_dcp::cpu::ExchangeBuffer {
                out: HostBuffer::from_f64s(case.dtype, &rows),
                lse: HostBuffer::from_f64s(ScalarType::F32, &lse),
            };
            let (cur, w) = (&sim.current[rank], &sim.w_uv[rank]);
            let run = |own| run_combine_v_up(&plan, kernels, &poisoned, own, cur, w).expect("run");
            let leaked = run(None).to_f64s();
            assert!(
                leaked.iter().any(|v| v.is_nan()),
                "the poison must reach y unread from send"
            );
            out.fused_y = Some(run(Some((send, rank as u32))));
        }
        check_outputs(&case, &inputs, &outs);
    }
}

/// One-token chunks merged by the fused combine + V-up: the current part writes only its LSE
/// and the merge reads the current rows from `cur_kv` (`read_single_key_chunks_from_kv`).
/// Its `y` is the one of the rows written and read back, bit for bit, and the reference's
/// (the unwritten rows stay poisoned, so a merge still reading them would show NaN).
#[test]
fn one_token_chunks_read_the_current_rows_from_the_keys() {
    for (d, seed) in [(1, 31), (2, 32)] {
        let case = Case::new(d, 8, 16, 2, &[40, 90, 3], &[1, 1, 1]);
        let inputs = Inputs::random(&case, seed);
        let plan = case.plan();
        let mut kv_plan = plan.clone();
        assert!(kv_plan.read_single_key_chunks_from_kv(), "dcp {d}");
        assert!(kv_plan.current_rows_from_kv() && !plan.current_rows_from_kv());
        let sim = simulate_until_combine(&plan, &inputs.sim()).expect("simulate");
        let kv_sim = simulate_until_combine(&kv_plan, &inputs.sim()).expect("simulate");
        let outs = finish(&plan, &sim).expect("finish");
        let kernels = &kv_sim.kernels;
        assert!(kernels.combine_v_up().is_some(), "dcp 1 and 2 fuse");
        for (rank, out) in outs.iter().enumerate() {
            let (cur, kv_cur) = (&sim.current[rank], &kv_sim.current[rank]);
            assert_eq!(kv_cur.lse, cur.lse, "rank {rank}: the same LSE");
            assert!(
                kv_cur.out.to_f64s().iter().all(|v| v.is_nan()),
                "rank {rank}: LSE_ONLY writes no rows"
            );
            let y = run_combine_v_up(
                &kv_plan,
                kernels,
                &kv_sim.recv[rank],
                None,
                kv_cur,
                &kv_sim.w_uv[rank],
            )
            .expect("the merge reading cur_kv");
            assert_eq!(Some(&y), out.fused_y.as_ref(), "rank {rank}: bit for bit");
        }
        check_outputs(&case, &inputs, &outs);
    }
    // Chunks of several tokens, and groups the fused merge does not take, keep their rows.
    let mut mixed = Case::new(1, 8, 16, 2, &[40, 90], &[1, 2]).plan();
    assert!(!mixed.read_single_key_chunks_from_kv());
    let mut wide = Case::new(4, 8, 16, 2, &[40, 90], &[1, 1]).plan();
    assert!(!wide.read_single_key_chunks_from_kv());
}
