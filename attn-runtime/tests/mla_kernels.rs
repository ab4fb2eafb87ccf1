//! Each MLA-DCP DSL kernel on the CPU executor against the independent f64 reference
//! (`reference::mla`, `ops::mla_dcp::merge`): history + reduce into the exchange layout, the
//! current chunk, the combine (with invalid partials), and the V-up fallback.

mod mla_support;

use attn_dsl::interp::HostBuffer;
use attn_dsl::ir::ScalarType;
use attn_runtime::ops::mla_dcp::cpu::{
    current_kv, poisoned, run_combine, run_current, run_history, run_history_splits, run_v_up,
    to_buffer, CpuKernels, CurrentPartial, ExchangeBuffer,
};
use attn_runtime::ops::mla_dcp::merge::{merge_partials, Partial};
use attn_runtime::ops::mla_dcp::plan::{BufferRole, DecodePlan, LATENT, QK_WIDTH, V_HEAD};
use attn_runtime::parity::{compare, Tolerance};
use attn_runtime::problem::SplitMix64;
use attn_runtime::reference::mla::{current_partial, history_partial, v_up};
use attn_runtime::reference::Dtype;
use mla_support::{
    batch, check_lse, dsv3_scale, gathered_q, requests, table_and_shards, Case, Inputs,
};

/// History + reduce of every rank vs `history_partial`, read back through the chunk layout.
fn check_history(case: &Case, seed: u64) {
    let inputs = Inputs::random(case, seed);
    let plan = case.plan();
    let kernels = CpuKernels::new(&plan).expect("kernels");
    let (table, shards) = table_and_shards(&plan, &inputs);
    let q_all = to_buffer(case.dtype, &inputs.queries);
    let reqs = requests(case, &inputs);
    let (d, n, t) = (case.d as usize, case.heads as usize, case.tokens());
    let b = batch(&reqs, d * n, gathered_q(case, &inputs.queries, 0..d * n));
    let ex = plan.exchange;
    for (r, shard) in shards.iter().enumerate() {
        let send = run_history(&plan, &kernels, shard, &table, r as u32, &q_all).expect("history");
        let want = history_partial(&b, f64::from(dsv3_scale()), &plan.step.layout, r as u32)
            .expect("reference");
        let (out, lse) = (send.out.to_f64s(), send.lse.to_f64s());
        let (mut got_o, mut want_o, mut got_l, mut want_l) = (vec![], vec![], vec![], vec![]);
        for p in 0..d {
            for h in 0..n {
                for tok in 0..t {
                    let g = p * n + h;
                    got_o.extend((0..LATENT).map(|l| out[ex.out_index(p, h, tok, l)]));
                    want_o.extend_from_slice(&want.out[(tok * d * n + g) * LATENT..][..LATENT]);
                    got_l.push(lse[ex.lse_index(p, h, tok)]);
                    want_l.push(want.lse[tok * d * n + g]);
                }
            }
        }
        // Empty rows: exactly 0 (not NaN); the reference writes 0 there too.
        compare(
            &format!("hist out rank {r}"),
            &got_o,
            &want_o,
            Tolerance::new(1e-2, 2e-2),
        )
        .unwrap_or_else(|e| panic!("{case:?}: {e}"));
        check_lse(&format!("hist lse rank {r}"), &got_l, &want_l, 2e-3);
    }
}

#[test]
fn history_matches_reference_one_split() {
    check_history(&Case::new(2, 8, 16, 2, &[70, 5, 40], &[2, 1, 4]), 11);
}

#[test]
fn history_matches_reference_forced_splits_and_empty_shards() {
    // 3 splits over few tiles: some splits are empty; request 1 has no history at all and
    // request 2's history (S − q = 3 < D·I) leaves ranks 1..3 empty.
    let mut c = Case::new(4, 1, 16, 1, &[150, 2, 5], &[1, 2, 2]);
    c.splits = Some(3);
    check_history(&c, 12);
    let mut c = Case::new(2, 16, 16, 3, &[90, 17], &[1, 1]);
    c.splits = Some(5);
    check_history(&c, 13);
}

#[test]
fn history_split_heuristic_gives_several_splits() {
    let mut c = Case::new(1, 1, 16, 2, &[600], &[1]);
    c.num_sms = 132;
    let plan = c.plan();
    assert!(plan.num_splits >= 2, "splits = {}", plan.num_splits);
    check_history(&c, 14);
}

#[test]
fn current_matches_reference_causal_within_chunk() {
    for dtype in [ScalarType::Bf16, ScalarType::F16] {
        let mut case = Case::new(2, 1, 16, 3, &[9, 4, 1], &[4, 1, 1]);
        case.dtype = dtype;
        let inputs = Inputs::random(&case, 21);
        let plan = case.plan();
        let kernels = CpuKernels::new(&plan).expect("kernels");
        let cur_kv = to_buffer(dtype, &current_kv(&plan, &inputs.latents));
        let (n, t) = (case.heads as usize, case.tokens());
        let reqs = requests(&case, &inputs);
        for r in 0..case.d as usize {
            let q_loc = to_buffer(
                dtype,
                &inputs.queries[r * t * n * QK_WIDTH..(r + 1) * t * n * QK_WIDTH],
            );
            let got = run_current(&plan, &kernels, &q_loc, &cur_kv).expect("current");
            let b = batch(
                &reqs,
                n,
                gathered_q(&case, &inputs.queries, r * n..(r + 1) * n),
            );
            let want = current_partial(&b, f64::from(dsv3_scale())).expect("reference");
            compare(
                "cur out",
                &got.out.to_f64s(),
                &want.out,
                Tolerance::new(1e-2, 2e-2),
            )
            .unwrap_or_else(|e| panic!("{dtype}: {e}"));
            compare(
                "cur lse",
                &got.lse.to_f64s(),
                &want.lse,
                Tolerance::new(2e-3, 0.0),
            )
            .unwrap_or_else(|e| panic!("{dtype}: {e}"));
        }
    }
}

/// Random received partials and current partial for the combine, with `poison(src, row)`
/// choosing rows to corrupt; returns the buffers and their f64 reference merge.
fn combine_case(
    plan: &DecodePlan,
    seed: u64,
    lse_range: f64,
    poison: impl Fn(usize, usize) -> Option<(f64, f64)>,
) -> (ExchangeBuffer, CurrentPartial, Vec<f64>) {
    let dtype = plan.step.dtype;
    let dt = Dtype::from_scalar_type(dtype).expect("float");
    let (d, n, t) = (
        plan.step.layout.dcp_size as usize,
        plan.step.heads_per_rank as usize,
        plan.num_tokens,
    );
    let ex = plan.exchange;
    let mut rng = SplitMix64(seed);
    let mut out = vec![f64::NAN; plan.buffer_len(BufferRole::RecvOut).unwrap_or(0)];
    let mut lse = vec![f64::NAN; plan.buffer_len(BufferRole::RecvLse).unwrap_or(0)];
    let cur_o: Vec<f64> = (0..t * n * LATENT)
        .map(|_| dt.round(rng.uniform(-1.0, 1.0)))
        .collect();
    let cur_l: Vec<f64> = (0..t * n)
        .map(|_| (rng.uniform(-lse_range, lse_range) as f32) as f64)
        .collect();
    let mut want = vec![0.0; t * n * LATENT];
    for h in 0..n {
        for tok in 0..t {
            let mut parts_o = vec![];
            let mut parts_l = vec![];
            for src in 0..d {
                let (o_val, l_val) = match poison(src, h * t + tok) {
                    Some(p) => p,
                    None => (f64::NAN, (rng.uniform(-lse_range, lse_range) as f32) as f64),
                };
                let row: Vec<f64> = (0..LATENT)
                    .map(|_| {
                        if o_val.is_nan() {
                            dt.round(rng.uniform(-1.0, 1.0))
                        } else {
                            o_val
                        }
                    })
                    .collect();
                for (l, &x) in row.iter().enumerate() {
                    out[ex.out_index(src, h, tok, l)] = x;
                }
                lse[ex.lse_index(src, h, tok)] = l_val;
                parts_o.push(row);
                parts_l.push(l_val);
            }
            let cur_row = (tok * n + h) * LATENT;
            parts_o.push(cur_o[cur_row..cur_row + LATENT].to_vec());
            parts_l.push(cur_l[tok * n + h]);
            let parts: Vec<Partial<'_>> = parts_o
                .iter()
                .zip(&parts_l)
                .map(|(o, &l)| Partial { out: o, lse: l })
                .collect();
            merge_partials(&parts, &mut want[cur_row..cur_row + LATENT]).expect("merge");
        }
    }
    let recv = ExchangeBuffer {
        out: HostBuffer::from_f64s(dtype, &out),
        lse: HostBuffer::from_f64s(ScalarType::F32, &lse),
    };
    let cur = CurrentPartial {
        out: HostBuffer::from_f64s(dtype, &cur_o),
        lse: HostBuffer::from_f64s(ScalarType::F32, &cur_l),
        kv: None,
    };
    (recv, cur, want)
}

#[test]
fn combine_matches_f64_merge() {
    for (d, dtype) in [
        (1, ScalarType::Bf16),
        (2, ScalarType::F16),
        (5, ScalarType::Bf16),
        (8, ScalarType::Bf16),
    ] {
        let mut case = Case::new(d, 1, 16, 2, &[40, 3], &[2, 1]);
        case.dtype = dtype;
        let plan = case.plan();
        let kernels = CpuKernels::new(&plan).expect("kernels");
        let (recv, cur, want) = combine_case(&plan, 31 + u64::from(d), 6.0, |_, _| None);
        let got = run_combine(&plan, &kernels, &recv, &cur).expect("combine");
        compare(
            &format!("combine D={d}"),
            &got.to_f64s(),
            &want,
            Tolerance::new(8e-3, 8e-3),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn combine_invalid_partials_never_leak() {
    let case = Case::new(4, 1, 16, 2, &[40, 3], &[2, 1]);
    let plan = case.plan();
    let kernels = CpuKernels::new(&plan).expect("kernels");
    let poison = |src: usize, row: usize| match (src + row) % 5 {
        0 => Some((f64::NAN, f64::NAN)),
        1 => Some((f64::NAN, f64::INFINITY)),
        2 => Some((f64::INFINITY, f64::NEG_INFINITY)),
        3 => Some((f64::NAN, f64::NEG_INFINITY)),
        _ => None,
    };
    let (recv, cur, want) = combine_case(&plan, 41, 4.0, poison);
    let got = run_combine(&plan, &kernels, &recv, &cur).expect("combine");
    compare(
        "combine with NaN/inf partials",
        &got.to_f64s(),
        &want,
        Tolerance::new(8e-3, 8e-3),
    )
    .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn combine_extreme_lse_beyond_f16_range() {
    let mut case = Case::new(3, 1, 16, 1, &[9], &[3]);
    case.dtype = ScalarType::F16;
    let plan = case.plan();
    let kernels = CpuKernels::new(&plan).expect("kernels");
    let (recv, mut cur, want) = combine_case(&plan, 51, 9e4, |_, _| None);
    let got = run_combine(&plan, &kernels, &recv, &cur).expect("combine");
    compare(
        "combine |lse| ~ 9e4",
        &got.to_f64s(),
        &want,
        Tolerance::new(2e-3, 2e-3),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    // Sanity: the current part dominates when its lse is far above every history lse.
    cur.lse = HostBuffer::F32(vec![2e5; plan.num_tokens]);
    let got = run_combine(&plan, &kernels, &recv, &cur).expect("combine");
    compare(
        "current dominates",
        &got.to_f64s(),
        &cur.out.to_f64s(),
        Tolerance::EXACT,
    )
    .unwrap_or_else(|e| panic!("{e}"));
}

/// §4.4 merge identity in its consistent form for the N-way combine: D history partials with
/// o = 1, ℓ = 0 and the current part o = 3, ℓ = 0 merge to (D + 3) / (D + 1); a row whose
/// history partials are all −∞/NaN and whose current LSE is +∞ merges to 0.
#[test]
fn combine_merge_identity() {
    for d in [1u32, 2, 4, 8] {
        let case = Case::new(d, 1, 16, 2, &[4, 2], &[1, 1]);
        let plan = case.plan();
        let kernels = CpuKernels::new(&plan).expect("kernels");
        let (n, t) = (2usize, plan.num_tokens);
        let ex = plan.exchange;
        let mut out = vec![f64::NAN; plan.buffer_len(BufferRole::RecvOut).unwrap_or(0)];
        let mut lse = vec![f64::NAN; plan.buffer_len(BufferRole::RecvLse).unwrap_or(0)];
        // Row (h = 1, t = 1) is the dead row.
        for src in 0..d as usize {
            for h in 0..n {
                for tok in 0..t {
                    let dead = h == 1 && tok == 1;
                    for l in 0..LATENT {
                        out[ex.out_index(src, h, tok, l)] = if dead { f64::NAN } else { 1.0 };
                    }
                    lse[ex.lse_index(src, h, tok)] = match (dead, src % 2) {
                        (false, _) => 0.0,
                        (true, 0) => f64::NEG_INFINITY,
                        (true, _) => f64::NAN,
                    };
                }
            }
        }
        let mut cur_l = vec![0.0; t * n];
        cur_l[n + 1] = f64::INFINITY;
        let recv = ExchangeBuffer {
            out: HostBuffer::from_f64s(ScalarType::Bf16, &out),
            lse: HostBuffer::from_f64s(ScalarType::F32, &lse),
        };
        let cur = CurrentPartial {
            out: HostBuffer::from_f64s(ScalarType::Bf16, &vec![3.0; t * n * LATENT]),
            lse: HostBuffer::from_f64s(ScalarType::F32, &cur_l),
            kv: None,
        };
        let got = run_combine(&plan, &kernels, &recv, &cur)
            .expect("combine")
            .to_f64s();
        let expect = Dtype::Bf16.round((f64::from(d) + 3.0) / (f64::from(d) + 1.0));
        for tok in 0..t {
            for h in 0..n {
                let want = if h == 1 && tok == 1 { 0.0 } else { expect };
                let row = &got[(tok * n + h) * LATENT..][..LATENT];
                assert!(
                    row.iter().all(|&x| x == want),
                    "D={d} t={tok} h={h}: {} != {want}",
                    row[0]
                );
            }
        }
    }
}

#[test]
fn v_up_matches_reference() {
    for dtype in [ScalarType::Bf16, ScalarType::F16] {
        // T = 19 > BLOCK_T: a masked tail tile.
        let q: Vec<u32> = vec![1; 19];
        let s: Vec<u32> = vec![3; 19];
        let mut case = Case::new(1, 1, 16, 3, &s, &q);
        case.dtype = dtype;
        let plan = case.plan();
        let kernels = CpuKernels::new(&plan).expect("kernels");
        let dt = Dtype::from_scalar_type(dtype).expect("float");
        let mut rng = SplitMix64(61);
        let (n, t) = (3usize, plan.num_tokens);
        let x: Vec<f64> = (0..t * n * LATENT)
            .map(|_| dt.round(rng.uniform(-1.0, 1.0)))
            .collect();
        let w: Vec<f32> = (0..n * LATENT * V_HEAD)
            .map(|_| dt.round(rng.uniform(-0.1, 0.1)) as f32)
            .collect();
        let got = run_v_up(
            &plan,
            &kernels,
            &HostBuffer::from_f64s(dtype, &x),
            &to_buffer(dtype, &w),
        )
        .expect("v_up");
        let mut cfg = attn_runtime::reference::mla::MlaConfig::deepseek_v3();
        cfg.num_heads = n;
        let want = v_up(&cfg, n, &x, &w).expect("reference");
        compare("v_up", &got.to_f64s(), &want, Tolerance::new(1e-2, 1e-2))
            .unwrap_or_else(|e| panic!("{dtype}: {e}"));
        assert!(poisoned(dtype, 1).to_f64s()[0].is_nan());
    }
}

/// Every split of the scratch is written, and an empty split (no keys: past the last tile,
/// or a rank with an empty shard) is exactly `o = 0, lse = −∞` (spec §3.2 rule 4), not NaN.
#[test]
fn history_empty_splits_write_zero_and_neg_inf() {
    let mut case = Case::new(4, 8, 16, 1, &[40, 3], &[1, 1]);
    case.splits = Some(4);
    let inputs = Inputs::random(&case, 15);
    let plan = case.plan();
    let kernels = CpuKernels::new(&plan).expect("kernels");
    let (table, shards) = table_and_shards(&plan, &inputs);
    let q_all = to_buffer(case.dtype, &inputs.queries);
    let mut empty = 0;
    for (r, shard) in shards.iter().enumerate() {
        let s =
            run_history_splits(&plan, &kernels, shard, &table, r as u32, &q_all).expect("history");
        let (out, lse) = (s.out.to_f64s(), s.lse.to_f64s());
        for (i, &l) in lse.iter().enumerate() {
            let row = &out[i * LATENT..(i + 1) * LATENT];
            assert!(
                !l.is_nan() && l != f64::INFINITY,
                "rank {r} split row {i}: lse {l}"
            );
            assert!(
                row.iter().all(|x| x.is_finite()),
                "rank {r} split row {i}: non-finite output"
            );
            if l == f64::NEG_INFINITY {
                empty += 1;
                assert!(
                    row.iter().all(|&x| x == 0.0),
                    "rank {r} split row {i}: empty split output not 0"
                );
            }
        }
    }
    assert!(empty > 0, "the case must contain empty splits");
}
