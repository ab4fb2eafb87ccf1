//! MLA-DCP host pieces (spec `mla_dcp.md`): the DSV3 softmax scale, the DCP sharding
//! metadata (§2.2–§2.3), the N-way LSE merge (§3.2) and the dense absorbed-MLA reference
//! with its history/current split (§1.3, §4) and V-up (§6.1).

use attn_runtime::ops::mla_dcp::merge::{
    merge_partial_rows, merge_partials, MergeShapeError, Partial,
};
use attn_runtime::ops::mla_dcp::metadata::{
    decode_metadata, history_len, DcpLayout, DcpLayoutError,
};
use attn_runtime::problem::SplitMix64;
use attn_runtime::reference::mla::*;
use proptest::prelude::*;

// ------------------------------------------------------------------------------------------
// Scale (§1.2)
// ------------------------------------------------------------------------------------------

#[test]
fn deepseek_v3_softmax_scale() {
    let cfg = MlaConfig::deepseek_v3();
    assert!(
        (cfg.yarn_mscale() - 1.368888).abs() < 1e-6,
        "{}",
        cfg.yarn_mscale()
    );
    assert!(
        (cfg.softmax_scale() - 0.1352338).abs() < 5e-7,
        "{}",
        cfg.softmax_scale()
    );
    assert_eq!(cfg.latent_key_dim(), 576);
}

#[test]
fn no_yarn_scale_is_inverse_sqrt_head_dim() {
    let cfg = MlaConfig {
        rope_scaling: None,
        ..MlaConfig::deepseek_v3()
    };
    assert!((cfg.softmax_scale() - 192f64.powf(-0.5)).abs() < 1e-15);
}

// ------------------------------------------------------------------------------------------
// Metadata (§2.2–§2.3)
// ------------------------------------------------------------------------------------------

#[test]
fn worked_example_of_section_2_3() {
    let layout = DcpLayout::new(2, 4, 8).unwrap();
    assert_eq!((layout.n_local(20, 0), layout.n_local(20, 1)), (12, 8));
    assert_eq!(history_len(20, 4), 16);
    assert_eq!(layout.n_local(16, 0), 8);
    let meta = decode_metadata(&layout, 0, &[20], &[4], 2).unwrap();
    assert_eq!(meta.history_seq_lens, vec![8, 0]);
    assert_eq!(meta.local_seq_lens, vec![12, 0]);
    let meta2 = decode_metadata(&layout, 1, &[20, 9], &[4, 4], 2).unwrap();
    assert_eq!(meta2.actual_seq_lengths_q, vec![4, 8]);
}

#[test]
fn history_len_saturates() {
    assert_eq!(history_len(3, 4), 0);
}

#[test]
fn layout_rejects_bad_geometry() {
    assert_eq!(DcpLayout::new(0, 1, 64), Err(DcpLayoutError::DcpSize(0)));
    assert_eq!(
        DcpLayout::new(2, 24, 64),
        Err(DcpLayoutError::Interleave {
            interleave: 24,
            block_size: 64
        })
    );
    let l = DcpLayout::new(2, 8, 64).unwrap();
    assert_eq!(
        l.slot_for(0, 2, &[0]),
        Err(DcpLayoutError::Rank {
            rank: 2,
            dcp_size: 2
        })
    );
    assert!(matches!(
        l.slot_for(200, 1, &[0]),
        Err(DcpLayoutError::Length { .. })
    ));
    assert!(matches!(
        decode_metadata(&l, 0, &[1, 2], &[1], 2),
        Err(DcpLayoutError::Length { .. })
    ));
}

/// Brute force over every token: n_local equals the owned count, the owner's local
/// positions are exactly 0, 1, 2, … in token order (so the first n_local(H, r) local
/// slots are the tokens < H), and slots of one rank are distinct.
#[test]
fn local_slots_are_a_prefix_in_token_order() {
    for d in [1u32, 2, 4, 8] {
        for i in [1u32, 8, 64] {
            let layout = DcpLayout::new(d, i, 64).unwrap();
            let s = 3 * 64 * u64::from(d) + 37;
            let row: Vec<i32> = (0..layout.max_blocks_per_request(s) as i32)
                .map(|b| 100 - 7 * b)
                .collect();
            for r in 0..d {
                let mut next_local = 0;
                let mut slots = std::collections::BTreeSet::new();
                for p in 0..s {
                    let pl = layout.place(p);
                    if pl.owner != r {
                        assert_eq!(layout.slot_for(p, r, &row).unwrap(), None);
                        continue;
                    }
                    assert_eq!(pl.local_position(64), next_local, "D={d} I={i} r={r} p={p}");
                    next_local += 1;
                    assert_eq!(
                        layout.n_local(p + 1, r),
                        next_local,
                        "prefix count at p={p}"
                    );
                    let slot = layout.slot_for(p, r, &row).unwrap().expect("owner writes");
                    assert_eq!(
                        slot,
                        i64::from(row[pl.virtual_block as usize]) * 64 + pl.local_offset as i64
                    );
                    assert!(slots.insert(slot), "duplicate slot {slot}");
                }
                assert_eq!(layout.n_local(s, r), next_local);
            }
        }
    }
}

#[test]
fn striping_i1_is_p_mod_d_and_i_eq_b_is_whole_blocks() {
    let l1 = DcpLayout::new(4, 1, 16).unwrap();
    assert!((0..200).all(|p| l1.place(p).owner == (p % 4) as u32));
    let lb = DcpLayout::new(4, 16, 16).unwrap();
    assert!((0..200).all(|p| lb.place(p).owner == ((p / 16) % 4) as u32));
}

proptest! {
    #[test]
    fn n_local_sums_to_s(d in 1u32..=8, i_pow in 0u32..7, s in 0u64..20_000) {
        let i = 1u32 << i_pow;
        let layout = DcpLayout::new(d, i, 64).unwrap();
        let total: u64 = (0..d).map(|r| layout.n_local(s, r)).sum();
        prop_assert_eq!(total, s);
    }

    #[test]
    fn n_local_matches_owner_count(d in 1u32..=8, i_pow in 0u32..7, s in 0u64..1500) {
        let i = 1u32 << i_pow;
        let layout = DcpLayout::new(d, i, 64).unwrap();
        for r in 0..d {
            let count = (0..s).filter(|&p| layout.place(p).owner == r).count() as u64;
            prop_assert_eq!(layout.n_local(s, r), count);
        }
    }
}

// ------------------------------------------------------------------------------------------
// Merge (§3.2)
// ------------------------------------------------------------------------------------------

/// Softmax attention of `scores` over `values` rows (width w) restricted to `keys`,
/// computed directly: `(o, ℓ)`, `(0, −∞)` when empty.
fn direct_attention(scores: &[f64], values: &[f64], w: usize, keys: &[usize]) -> (Vec<f64>, f64) {
    if keys.is_empty() {
        return (vec![0.0; w], f64::NEG_INFINITY);
    }
    let m = keys
        .iter()
        .map(|&k| scores[k])
        .fold(f64::NEG_INFINITY, f64::max);
    let z: f64 = keys.iter().map(|&k| (scores[k] - m).exp()).sum();
    let mut o = vec![0.0; w];
    for &k in keys {
        let p = (scores[k] - m).exp() / z;
        for (x, &v) in o.iter_mut().zip(&values[k * w..(k + 1) * w]) {
            *x += p * v;
        }
    }
    (o, m + z.ln())
}

proptest! {
    /// Splitting the keys into random (possibly empty) parts and merging the partials
    /// reproduces attention over all keys, for score offsets up to ±1e5.
    #[test]
    fn merge_of_split_keys_equals_full_attention(seed in any::<u64>(), n in 1usize..60, parts in 1usize..9, offset in -1e5f64..1e5) {
        let mut rng = SplitMix64(seed);
        let w = 5;
        let scores: Vec<f64> = (0..n).map(|_| offset + 8.0 * rng.uniform(-1.0, 1.0)).collect();
        let values: Vec<f64> = (0..n * w).map(|_| rng.uniform(-1.0, 1.0)).collect();
        let mut sets = vec![Vec::new(); parts];
        for k in 0..n {
            sets[rng.below(parts)].push(k);
        }
        let partials: Vec<(Vec<f64>, f64)> = sets.iter().map(|s| direct_attention(&scores, &values, w, s)).collect();
        let refs: Vec<Partial<'_>> = partials.iter().map(|(o, l)| Partial { out: o, lse: *l }).collect();
        let mut out = vec![f64::NAN; w];
        let lse = merge_partials(&refs, &mut out).unwrap();
        let all: Vec<usize> = (0..n).collect();
        let (want, want_lse) = direct_attention(&scores, &values, w, &all);
        prop_assert!((lse - want_lse).abs() <= 1e-9 * (1.0 + want_lse.abs()), "{} vs {}", lse, want_lse);
        // ℓ_i carries the offset, so its rounding (ulp ~ |offset|·2⁻⁵²) bounds the error.
        let tol = 1e-12 + 1e-15 * offset.abs();
        for (a, b) in out.iter().zip(&want) {
            prop_assert!((a - b).abs() < tol, "{} vs {}", a, b);
        }
    }
}

#[test]
fn invalid_partials_never_leak() {
    let good = [0.5, -0.25];
    let nan_out = [f64::NAN, f64::INFINITY];
    for bad_lse in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let parts = [
            Partial {
                out: &good,
                lse: 1.5,
            },
            Partial {
                out: &nan_out,
                lse: bad_lse,
            },
            Partial {
                out: &nan_out,
                lse: f64::NAN,
            },
        ];
        let mut out = [f64::NAN; 2];
        let lse = merge_partials(&parts, &mut out).unwrap();
        assert_eq!(out, good, "lse {bad_lse}");
        assert_eq!(lse, 1.5);
    }
}

#[test]
fn all_invalid_row_is_zero_with_neg_inf_lse() {
    let nan_out = [f64::NAN; 3];
    let parts = [
        Partial {
            out: &nan_out,
            lse: f64::NEG_INFINITY,
        },
        Partial {
            out: &nan_out,
            lse: f64::NAN,
        },
        Partial {
            out: &nan_out,
            lse: f64::INFINITY,
        },
    ];
    let mut out = [f64::NAN; 3];
    assert_eq!(merge_partials(&parts, &mut out).unwrap(), f64::NEG_INFINITY);
    assert_eq!(out, [0.0; 3]);
    assert_eq!(merge_partials(&[], &mut out).unwrap(), f64::NEG_INFINITY);
}

#[test]
fn extreme_lse_magnitudes() {
    let (a, b) = ([1.0], [5.0]);
    // |ℓ| beyond the fp16 range; at 1e6 the ulp is ~1e-10, hence the tolerance.
    for base in [7e4, -7e4, 1e6, -1e6] {
        let parts = [
            Partial { out: &a, lse: base },
            Partial {
                out: &b,
                lse: base - 3f64.ln(),
            },
        ];
        let mut out = [0.0];
        let lse = merge_partials(&parts, &mut out).unwrap();
        assert!((out[0] - 2.0).abs() < 1e-9, "base {base}: {}", out[0]); // (3·1 + 1·5) / 4
        assert!((lse - (base + (4.0f64 / 3.0).ln())).abs() <= 1e-15 * (1.0 + base.abs()));
    }
    // A partial 1e5 below the others underflows to weight 0 without harm.
    let parts = [
        Partial { out: &a, lse: 0.0 },
        Partial { out: &b, lse: -1e5 },
    ];
    let mut out = [0.0];
    merge_partials(&parts, &mut out).unwrap();
    assert_eq!(out, [1.0]);
}

/// §4.4 ASC-TEST numbers: a (pre-merged) history partial `o = 1, ℓ = ln D` and the
/// current part `o = 3, ℓ = 0` give `(D·1 + 3) / (D + 1)`; so do D separate history
/// partials with `ℓ = 0` each. (D partials *each* at `ℓ = ln D` would weigh `D²`.)
#[test]
fn asc_test_combine_numbers() {
    let ones = [1.0; 4];
    let threes = [3.0; 4];
    for d in [1usize, 2, 4, 8] {
        let want = (d as f64 + 3.0) / (d as f64 + 1.0);
        let two_way = [
            Partial {
                out: &ones,
                lse: (d as f64).ln(),
            },
            Partial {
                out: &threes,
                lse: 0.0,
            },
        ];
        let mut out = [0.0; 4];
        merge_partials(&two_way, &mut out).unwrap();
        assert!(out.iter().all(|&x| (x - want).abs() < 1e-12), "2-way D={d}");
        let mut parts: Vec<Partial<'_>> = (0..d)
            .map(|_| Partial {
                out: &ones,
                lse: 0.0,
            })
            .collect();
        parts.push(Partial {
            out: &threes,
            lse: 0.0,
        });
        merge_partials(&parts, &mut out).unwrap();
        assert!(out.iter().all(|&x| (x - want).abs() < 1e-12), "N-way D={d}");
    }
    let nan = [f64::NAN; 4];
    let parts = [
        Partial {
            out: &nan,
            lse: f64::NEG_INFINITY,
        },
        Partial {
            out: &nan,
            lse: f64::NAN,
        },
        Partial {
            out: &threes,
            lse: f64::INFINITY,
        },
    ];
    let mut out = [1.0; 4];
    merge_partials(&parts, &mut out).unwrap();
    assert_eq!(out, [0.0; 4]);
}

#[test]
fn merge_shape_errors() {
    let a = [1.0, 2.0];
    let b = [1.0];
    let mut out = [0.0; 2];
    let err = merge_partials(
        &[Partial { out: &a, lse: 0.0 }, Partial { out: &b, lse: 0.0 }],
        &mut out,
    )
    .unwrap_err();
    assert_eq!(
        err,
        MergeShapeError {
            index: 1,
            got: 1,
            expected: 2
        }
    );
}

#[test]
fn merge_rows_matches_row_merge() {
    let o1 = [1.0, 2.0, 3.0, 4.0];
    let o2 = [5.0, 6.0, f64::NAN, f64::NAN];
    let (out, lse) =
        merge_partial_rows(&[&o1, &o2], &[&[0.0, 0.0], &[0.0, f64::NAN]], 2, 2).unwrap();
    assert_eq!(out, vec![3.0, 4.0, 3.0, 4.0]);
    assert!((lse[0] - 2f64.ln()).abs() < 1e-15 && lse[1] == 0.0);
}

// ------------------------------------------------------------------------------------------
// Dense absorbed MLA, DCP split, V-up (§1.3, §4, §6.1)
// ------------------------------------------------------------------------------------------

fn small_config() -> MlaConfig {
    MlaConfig {
        num_heads: 3,
        kv_lora_rank: 32,
        qk_rope_head_dim: 8,
        qk_nope_head_dim: 16,
        v_head_dim: 8,
        rope_scaling: None,
    }
}

struct MlaData {
    q_nope: Vec<f32>,
    q_pe: Vec<f32>,
    w_uk_t: Vec<f32>,
    w_uv: Vec<f32>,
    latents: Vec<Vec<f32>>,
    query_lens: Vec<usize>,
}

fn random_vec(rng: &mut SplitMix64, n: usize, amp: f64) -> Vec<f32> {
    (0..n)
        .map(|_| (amp * rng.uniform(-1.0, 1.0)) as f32)
        .collect()
}

fn mla_data(cfg: &MlaConfig, reqs: &[(usize, usize)], seed: u64) -> MlaData {
    let mut rng = SplitMix64(seed);
    let n = cfg.num_heads;
    let t: usize = reqs.iter().map(|r| r.1).sum();
    MlaData {
        q_nope: random_vec(&mut rng, t * n * cfg.qk_nope_head_dim, 1.0),
        q_pe: random_vec(&mut rng, t * n * cfg.qk_rope_head_dim, 1.0),
        w_uk_t: random_vec(&mut rng, n * cfg.qk_nope_head_dim * cfg.kv_lora_rank, 0.3),
        w_uv: random_vec(&mut rng, n * cfg.kv_lora_rank * cfg.v_head_dim, 0.3),
        latents: reqs
            .iter()
            .map(|&(s, _)| random_vec(&mut rng, s * cfg.latent_key_dim(), 1.0))
            .collect(),
        query_lens: reqs.iter().map(|r| r.1).collect(),
    }
}

fn requests(d: &MlaData) -> Vec<MlaRequest<'_>> {
    d.latents
        .iter()
        .zip(&d.query_lens)
        .map(|(l, &q)| MlaRequest {
            latent: l,
            query_len: q,
        })
        .collect()
}

/// Non-absorbed MHA form: per-head keys `k_nope = W_UK_T[h]·kv_c`, values
/// `v = kv_c·W_UV[h]`, causal over history + chunk; output `[T, N·V]`.
fn non_absorbed(cfg: &MlaConfig, d: &MlaData, scale: f64) -> Vec<f64> {
    let (n, p, r, l, v) = (
        cfg.num_heads,
        cfg.qk_nope_head_dim,
        cfg.qk_rope_head_dim,
        cfg.kv_lora_rank,
        cfg.v_head_dim,
    );
    let width = l + r;
    let mut out = Vec::new();
    let mut t = 0;
    for (lat, &ql) in d.latents.iter().zip(&d.query_lens) {
        let s = lat.len() / width;
        for i in 0..ql {
            for h in 0..n {
                let visible = s - ql + i + 1;
                let scores: Vec<f64> = (0..visible)
                    .map(|j| {
                        let kv = &lat[j * width..][..width];
                        let mut dot = 0.0;
                        for a in 0..p {
                            let k_nope: f64 = (0..l)
                                .map(|c| {
                                    f64::from(d.w_uk_t[(h * p + a) * l + c]) * f64::from(kv[c])
                                })
                                .sum();
                            dot += f64::from(d.q_nope[(t * n + h) * p + a]) * k_nope;
                        }
                        dot += (0..r)
                            .map(|a| f64::from(d.q_pe[(t * n + h) * r + a]) * f64::from(kv[l + a]))
                            .sum::<f64>();
                        scale * dot
                    })
                    .collect();
                let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = scores.iter().map(|x| (x - m).exp()).sum();
                for c in 0..v {
                    let mut acc = 0.0;
                    for (j, sc) in scores.iter().enumerate() {
                        let kv = &lat[j * width..][..l];
                        let vj: f64 = (0..l)
                            .map(|a| f64::from(kv[a]) * f64::from(d.w_uv[(h * l + a) * v + c]))
                            .sum();
                        acc += (sc - m).exp() / z * vj;
                    }
                    out.push(acc);
                }
            }
            t += 1;
        }
    }
    out
}

/// The 3-head absorbed batch of `data`'s queries over `reqs`.
fn absorbed_batch<'a>(
    cfg: &MlaConfig,
    data: &MlaData,
    reqs: &'a [MlaRequest<'a>],
) -> AbsorbedBatch<'a> {
    AbsorbedBatch {
        config: *cfg,
        num_heads: 3,
        q_hat: absorb_queries(cfg, 3, &data.q_nope, &data.q_pe, &data.w_uk_t).unwrap(),
        requests: reqs,
    }
}

fn assert_close(a: &[f64], b: &[f64], tol: f64) {
    assert_eq!(a.len(), b.len());
    for (i, (&x, &y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= tol * (1.0 + y.abs()),
            "index {i}: {x} vs {y}"
        );
    }
}

#[test]
fn absorbed_decode_with_v_up_equals_non_absorbed_attention() {
    let cfg = small_config();
    let data = mla_data(&cfg, &[(9, 1), (5, 2), (4, 4)], 17);
    let reqs = requests(&data);
    let batch = absorbed_batch(&cfg, &data, &reqs);
    let scale = cfg.softmax_scale();
    let lat = dense_decode(&batch, scale).unwrap();
    let y = v_up(&cfg, 3, &lat.out, &data.w_uv).unwrap();
    assert_close(&y, &non_absorbed(&cfg, &data, scale), 1e-11);
}

/// §9.5 single-host plan: D ∈ {1, 2, 4, 8}, I ∈ {1, 8, 64}, B = 64, q_len ∈ {1, 2, 4}
/// mixed, a zero-history request and shards left empty (S < D·I): the merged D history
/// partials + current partial equal the dense causal decode.
#[test]
fn dcp_split_and_merge_equals_dense_decode() {
    let cfg = small_config();
    let data = mla_data(&cfg, &[(130, 1), (3, 2), (4, 4), (70, 4), (1, 1)], 29);
    let reqs = requests(&data);
    let batch = absorbed_batch(&cfg, &data, &reqs);
    let scale = cfg.softmax_scale();
    let dense = dense_decode(&batch, scale).unwrap();
    for d in [1u32, 2, 4, 8] {
        for i in [1u32, 8, 64] {
            let layout = DcpLayout::new(d, i, 64).unwrap();
            let split = dcp_decode(&batch, scale, &layout).unwrap();
            assert_close(&split.out, &dense.out, 1e-12);
            assert_close(&split.lse, &dense.lse, 1e-12);
            // Empty shards really occur: some rank has no history for the short request.
            let h = history_partial(&batch, scale, &layout, d - 1).unwrap();
            if d > 1 {
                assert!(h.lse.contains(&f64::NEG_INFINITY), "D={d} I={i}");
            }
            assert!(h.out.iter().all(|x| x.is_finite()));
        }
    }
}

#[test]
fn current_part_is_causal_within_the_chunk() {
    let cfg = small_config();
    let data = mla_data(&cfg, &[(4, 4)], 3);
    let reqs = requests(&data);
    let batch = absorbed_batch(&cfg, &data, &reqs);
    let cur = current_partial(&batch, 0.1).unwrap();
    // Token 0 of the chunk sees only its own key: o = its latent, ℓ = its score.
    for h in 0..3 {
        let o = &cur.out[h * 32..(h + 1) * 32];
        let want: Vec<f64> = data.latents[0][..32]
            .iter()
            .map(|&x| f64::from(x))
            .collect();
        assert_close(o, &want, 1e-14);
    }
    // No history at all: history partials are empty on every rank.
    let layout = DcpLayout::new(2, 1, 64).unwrap();
    let h = history_partial(&batch, 0.1, &layout, 0).unwrap();
    assert!(h.lse.iter().all(|l| *l == f64::NEG_INFINITY) && h.out.iter().all(|&x| x == 0.0));
}

#[test]
fn v_up_per_head_loop() {
    let cfg = small_config();
    let mut rng = SplitMix64(5);
    let o_lat: Vec<f64> = (0..2 * 3 * 32).map(|_| rng.uniform(-1.0, 1.0)).collect();
    let w_uv = random_vec(&mut rng, 3 * 32 * 8, 1.0);
    let y = v_up(&cfg, 3, &o_lat, &w_uv).unwrap();
    let (t, n, c) = (1, 2, 5);
    let want: f64 = (0..32)
        .map(|a| o_lat[(t * 3 + n) * 32 + a] * f64::from(w_uv[(n * 32 + a) * 8 + c]))
        .sum();
    assert!((y[t * 24 + n * 8 + c] - want).abs() < 1e-14);
    assert!(matches!(
        v_up(&cfg, 3, &o_lat, &w_uv[1..]),
        Err(MlaReferenceError::Length { what: "w_uv", .. })
    ));
}
