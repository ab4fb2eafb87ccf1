//! Shared helpers of the MLA-DCP tests: random inputs rounded to the activation dtype, the f64
//! reference of the whole step (spec §9.5: full causal absorbed attention over all S_b keys, then
//! per-head W_UV), and the per-rank comparison.

#![allow(dead_code)]

use attn_dsl::interp::HostBuffer;
use attn_dsl::ir::ScalarType;
use attn_runtime::ops::host_launch::HostLauncher;
use attn_runtime::ops::mla_dcp::cpu::{
    block_table, build_shards, simulate_decode_step, RankOutput, RankShard, SimulatedInputs,
};
use attn_runtime::ops::mla_dcp::metadata::DcpLayout;
use attn_runtime::ops::mla_dcp::plan::{DecodePlan, DecodeStep, LATENT, QK_WIDTH, V_HEAD};
use attn_runtime::ops::unified_attention::config::MmaKind;
use attn_runtime::parity::{compare, Tolerance};
use attn_runtime::problem::SplitMix64;
use attn_runtime::reference::mla::{dense_decode, v_up, AbsorbedBatch, MlaConfig, MlaRequest};
use attn_runtime::reference::Dtype;

/// DeepSeek-V3 softmax scale (§1.2).
pub fn dsv3_scale() -> f32 {
    MlaConfig::deepseek_v3().softmax_scale() as f32
}

/// A decode step to simulate.
#[derive(Clone, Debug)]
pub struct Case {
    pub d: u32,
    pub interleave: u32,
    pub block: u32,
    pub heads: u32,
    pub seq_lens: Vec<u32>,
    pub query_lens: Vec<u32>,
    pub dtype: ScalarType,
    /// Forced split count (None: the heuristic with `num_sms`).
    pub splits: Option<u32>,
    pub num_sms: u32,
    /// The target the plan is made for (its history tiling depends on it).
    pub mma: MmaKind,
    /// The softmax scale (DeepSeek-V3's unless a test says otherwise).
    pub scale: f32,
}

impl Case {
    pub fn new(
        d: u32,
        interleave: u32,
        block: u32,
        heads: u32,
        seq_lens: &[u32],
        query_lens: &[u32],
    ) -> Self {
        Case {
            d,
            interleave,
            block,
            heads,
            seq_lens: seq_lens.to_vec(),
            query_lens: query_lens.to_vec(),
            dtype: ScalarType::Bf16,
            splits: None,
            num_sms: 1,
            mma: MmaKind::Sync,
            scale: dsv3_scale(),
        }
    }

    pub fn step(&self) -> DecodeStep {
        let layout = DcpLayout::new(self.d, self.interleave, self.block).expect("layout");
        let max_s = self.seq_lens.iter().copied().max().unwrap_or(0);
        let stride = u64::from(max_s).div_ceil(u64::from(self.block * self.d)) as usize + 1;
        DecodeStep {
            query_lens: self.query_lens.clone(),
            seq_lens: self.seq_lens.clone(),
            layout,
            heads_per_rank: self.heads,
            dtype: self.dtype,
            softmax_scale: self.scale,
            block_table_stride: stride,
            num_sms: self.num_sms,
        }
    }

    pub fn plan(&self) -> DecodePlan {
        self.step()
            .plan_tuned(self.mma, self.splits, None, None)
            .expect("plan")
    }

    pub fn tokens(&self) -> usize {
        self.query_lens.iter().map(|&q| q as usize).sum()
    }
}

/// Random inputs, already rounded to the activation dtype (so the reference sees exactly
/// what the kernels load).
pub struct Inputs {
    pub latents: Vec<Vec<f32>>,
    pub queries: Vec<f32>,
    pub w_uv: Vec<f32>,
}

fn rounded(rng: &mut SplitMix64, dtype: Dtype, n: usize, lo: f64, hi: f64) -> Vec<f32> {
    (0..n)
        .map(|_| dtype.round(rng.uniform(lo, hi)) as f32)
        .collect()
}

impl Inputs {
    pub fn random(case: &Case, seed: u64) -> Self {
        let dt = Dtype::from_scalar_type(case.dtype).expect("float dtype");
        let mut rng = SplitMix64(seed);
        let latents = case
            .seq_lens
            .iter()
            .map(|&s| rounded(&mut rng, dt, s as usize * QK_WIDTH, -1.0, 1.0))
            .collect();
        let (d, n, t) = (case.d as usize, case.heads as usize, case.tokens());
        let queries = rounded(&mut rng, dt, d * t * n * QK_WIDTH, -1.0, 1.0);
        let w_uv = rounded(&mut rng, dt, d * n * LATENT * V_HEAD, -0.1, 0.1);
        Inputs {
            latents,
            queries,
            w_uv,
        }
    }

    pub fn sim(&self) -> SimulatedInputs<'_> {
        SimulatedInputs {
            latents: &self.latents,
            queries: &self.queries,
            w_uv: &self.w_uv,
            launcher: None,
        }
    }
}

/// The shared block table and every rank's cache shard of `inputs` under `plan`.
pub fn table_and_shards(plan: &DecodePlan, inputs: &Inputs) -> (Vec<i32>, Vec<RankShard>) {
    let (table, num_blocks) = block_table(plan);
    let shards =
        build_shards(plan, &plan.step.layout, &inputs.latents, &table, num_blocks).expect("shards");
    (table, shards)
}

/// Reference of the whole step for all D·N heads: `(lat [T, D·N, 512], y [T, D·N·128])`.
pub fn reference(case: &Case, inputs: &Inputs) -> (Vec<f64>, Vec<f64>) {
    let (d, n, t) = (case.d as usize, case.heads as usize, case.tokens());
    let dn = d * n;
    // [D, T, N, 576] → [T, D·N, 576] with g = r·N + h (the all-gather head order).
    let mut q_hat = vec![0.0; t * dn * QK_WIDTH];
    for r in 0..d {
        for tok in 0..t {
            for h in 0..n {
                let src = ((r * t + tok) * n + h) * QK_WIDTH;
                let dst = (tok * dn + r * n + h) * QK_WIDTH;
                for c in 0..QK_WIDTH {
                    q_hat[dst + c] = f64::from(inputs.queries[src + c]);
                }
            }
        }
    }
    let requests: Vec<MlaRequest<'_>> = inputs
        .latents
        .iter()
        .zip(&case.query_lens)
        .map(|(l, &q)| MlaRequest {
            latent: l,
            query_len: q as usize,
        })
        .collect();
    let mut cfg = MlaConfig::deepseek_v3();
    cfg.num_heads = dn;
    let batch = AbsorbedBatch {
        config: cfg,
        num_heads: dn,
        q_hat,
        requests: &requests,
    };
    let lat = dense_decode(&batch, f64::from(case.scale)).expect("reference");
    let y = v_up(&cfg, dn, &lat.out, &inputs.w_uv).expect("v_up reference");
    (lat.out, y)
}

/// Rank r's slice `[T, N, width]` of a `[T, D·N, width]` array.
pub fn rank_slice(all: &[f64], case: &Case, r: usize, width: usize) -> Vec<f64> {
    let (d, n, t) = (case.d as usize, case.heads as usize, case.tokens());
    let mut v = Vec::with_capacity(t * n * width);
    for tok in 0..t {
        let at = (tok * d * n + r * n) * width;
        v.extend_from_slice(&all[at..at + n * width]);
    }
    v
}

/// Tolerances for activations rounded to bf16/f16: the latent output is a convex combination
/// of values in [-1, 1] (one rounding at the store plus the rounded P·V inputs), y sums 512
/// products of it.
pub fn tolerances(dtype: ScalarType) -> (Tolerance, Tolerance) {
    match dtype {
        ScalarType::F16 => (Tolerance::new(2e-3, 5e-3), Tolerance::new(4e-3, 1e-2)),
        _ => (Tolerance::new(1e-2, 2e-2), Tolerance::new(2e-2, 2e-2)),
    }
}

pub fn values(b: &HostBuffer) -> Vec<f64> {
    b.to_f64s()
}

/// `c` planned for `mma` on a 132-SM device with `splits` forced (or not).
pub fn planned_for(mut c: Case, mma: MmaKind, splits: Option<u32>) -> Case {
    c.mma = mma;
    c.splits = splits;
    c.num_sms = 132;
    c
}

/// The sm_90a history's simulated steps: 64 heads on one rank (L1's tiling: a request long
/// enough for several tiles and a ragged last one, a short one, a chunk of two queries),
/// and two ranks with 80 gathered heads (a ragged head tile), the history split in two.
pub fn sm90a_history_cases() -> [Case; 2] {
    [
        planned_for(
            Case::new(1, 1, 64, 64, &[300, 3], &[1, 2]),
            MmaKind::Warpgroup,
            None,
        ),
        planned_for(
            Case::new(2, 8, 32, 40, &[190, 70], &[2, 1]),
            MmaKind::Warpgroup,
            Some(2),
        ),
    ]
}

/// Runs the simulated step and compares every rank's `lat_out`, `y` and fused `y` with the
/// reference.
pub fn check_case(case: &Case, seed: u64) -> Vec<RankOutput> {
    check_case_launched(case, seed, None)
}

/// [`check_case`] with every launch run by `launcher` (the executor for `None`).
pub fn check_case_launched(
    case: &Case,
    seed: u64,
    launcher: Option<&'static dyn HostLauncher>,
) -> Vec<RankOutput> {
    check_plan_launched(case, &case.plan(), seed, launcher)
}

/// [`check_case_launched`] on `plan` (the case's, retiled by the test).
pub fn check_plan_launched(
    case: &Case,
    plan: &DecodePlan,
    seed: u64,
    launcher: Option<&'static dyn HostLauncher>,
) -> Vec<RankOutput> {
    let inputs = Inputs::random(case, seed);
    let sim = SimulatedInputs {
        launcher,
        ..inputs.sim()
    };
    let outs = simulate_decode_step(plan, &sim).unwrap_or_else(|e| panic!("{case:?}: {e}"));
    check_outputs(case, &inputs, &outs);
    outs
}

pub fn check_outputs(case: &Case, inputs: &Inputs, outs: &[RankOutput]) {
    let (lat_ref, y_ref) = reference(case, inputs);
    let (lat_tol, y_tol) = tolerances(case.dtype);
    assert_eq!(outs.len(), case.d as usize);
    for (r, o) in outs.iter().enumerate() {
        compare(
            &format!("lat_out rank {r}"),
            &values(&o.lat_out),
            &rank_slice(&lat_ref, case, r, LATENT),
            lat_tol,
        )
        .unwrap_or_else(|e| panic!("{case:?}: {e}"));
        // The fused merge runs where it takes the group (dcp ≤ 2), and only there.
        assert_eq!(o.fused_y.is_some(), case.d <= 2, "{case:?}");
        let fused = o.fused_y.as_ref().map(|y| ("fused y", y));
        for (what, y) in std::iter::once(("y", &o.y)).chain(fused) {
            compare(
                &format!("{what} rank {r}"),
                &values(y),
                &rank_slice(&y_ref, case, r, V_HEAD),
                y_tol,
            )
            .unwrap_or_else(|e| panic!("{case:?}: {e}"));
        }
    }
}

/// `q_hat [T, D·N, 576]` in f64 from rank-major queries `[D, T, N, 576]`, restricted to the
/// global heads `heads` (in order).
pub fn gathered_q(case: &Case, queries: &[f32], heads: std::ops::Range<usize>) -> Vec<f64> {
    let (n, t) = (case.heads as usize, case.tokens());
    let mut q = Vec::with_capacity(t * heads.len() * QK_WIDTH);
    for tok in 0..t {
        for g in heads.clone() {
            let (r, h) = (g / n, g % n);
            let src = ((r * t + tok) * n + h) * QK_WIDTH;
            q.extend(queries[src..src + QK_WIDTH].iter().map(|&x| f64::from(x)));
        }
    }
    q
}

/// The reference batch over `num_heads` heads with queries `q_hat`.
pub fn batch<'a>(
    requests: &'a [MlaRequest<'a>],
    num_heads: usize,
    q_hat: Vec<f64>,
) -> AbsorbedBatch<'a> {
    let mut cfg = MlaConfig::deepseek_v3();
    cfg.num_heads = num_heads;
    AbsorbedBatch {
        config: cfg,
        num_heads,
        q_hat,
        requests,
    }
}

pub fn requests<'a>(case: &Case, inputs: &'a Inputs) -> Vec<MlaRequest<'a>> {
    inputs
        .latents
        .iter()
        .zip(&case.query_lens)
        .map(|(l, &q)| MlaRequest {
            latent: l,
            query_len: q as usize,
        })
        .collect()
}

/// Compares partial LSEs: a reference `-inf` (no keys) must be exactly `-inf`; finite ones
/// within `tol`. NaN never passes.
pub fn check_lse(name: &str, got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{name}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = if w == f64::NEG_INFINITY {
            g == f64::NEG_INFINITY
        } else {
            (g - w).abs() <= tol
        };
        assert!(ok, "{name}: element {i}: got {g}, want {w}");
    }
}
