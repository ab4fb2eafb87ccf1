//! GPU fuzz of the MLA-DCP decode op (issue 13; feature `gpu`): 1 200 argument sets for D ∈ {1,
//! 2, 4} ranks simulated on one GPU (D contexts sharing one main stream, `simulated_decode`),
//! built from the host fuzz's generators: a valid random batch, then 0–3 mutations (bad page
//! ids, short or mismatched tables, lengths near u32/i32 limits, empty batch, short buffers on
//! one rank, calls over the context's capacity, one-page caches). Every set becomes real device
//! buffers; the independent oracle of the host fuzz judges each rank and the call is valid only
//! when every rank is. Malformed calls must come back as validation errors, valid ones must
//! launch and match the dense f64 reference (spec §9.5); both streams of every rank are
//! synchronized after each call so that a fault is counted as a CUDA error, not hidden. The run
//! ends with one valid call through the same contexts proving the CUDA context is healthy.
//!
//! Run on the GPU host: `bash .device/run.sh tests gpu_fuzz_mla -- --nocapture`.
#![cfg(feature = "gpu")]

mod fuzz_support;
mod mla_op_support;
mod mla_support;

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use attn_dsl::ir::ScalarType;
use attn_runtime::launch::CudaDevice;
use attn_runtime::ops::mla_dcp::cpu::{
    exchange, finish, run_current, run_history, to_buffer, CpuKernels, RankShard, SimulatedStep,
};
use attn_runtime::ops::mla_dcp::metadata::DcpLayout;
use attn_runtime::ops::mla_dcp::op::{
    compile_launches, simulated_decode, ExchangeMode, MlaDcpConfig, MlaDcpContext,
    MlaDcpDecodeArgs, MlaError, VupPath,
};
use attn_runtime::ops::mla_dcp::plan::{DecodeStep, LATENT, QK_WIDTH, V_HEAD};
use attn_runtime::reference::Dtype;
use attn_runtime::split_mix64::SplitMix64;
use cudarc::driver::{CudaSlice, CudaStream};
use fuzz_support::mla_case::{mla_mutate, mla_valid_base, MlaCase, MLA_MUTATIONS};
use fuzz_support::mla_oracle::mla_check;
use fuzz_support::outcome::{Outcome, Tally};
use half::bf16;
use mla_op_support::{check_vs_reference, from_elems, Outputs};
use mla_support::{dsv3_scale, Case, Inputs};

const CASES: u64 = 3_600;
/// The token bucket of every context: the generator's valid batches carry at most 12 tokens
/// and 4 requests, `grow` pushes past both limits about half the time.
const MAX_TOKENS: usize = 16;
const MAX_BATCH: usize = 8;
/// Mutations of one rank's own buffers (`cache`, `q_loc`, `w_uv`); the others change what all
/// ranks share (lengths, table, `q_all`, `cur_kv`).
const PER_RANK: [usize; 3] = [8, 9, 11];
/// The host fuzz's capacity mutations lower the context's bucket; on the GPU the contexts are
/// built once per geometry, so those two kinds grow the call instead ([`grow`]).
const GROW: [usize; 2] = [13, 14];
/// Context variants, so the fuzz crosses every V-up path and a forced split count larger than
/// many local histories (empty splits must merge to the right answer).
const VARIANTS: [(VupPath, Option<u32>); 4] = [
    (VupPath::Cublas, None),
    (VupPath::DslKernel, Some(5)),
    (VupPath::HandWritten, None),
    (VupPath::Fused, Some(3)),
];

/// One simulated step: `ranks[r]` is rank r's view (shared fields identical across ranks, the
/// per-rank buffer lengths possibly not).
#[derive(Clone, Debug)]
struct GpuCase {
    ranks: Vec<MlaCase>,
    variant: usize,
    mutations: Vec<usize>,
}

impl GpuCase {
    fn shared(&self) -> &MlaCase {
        &self.ranks[0]
    }

    fn key(&self) -> Key {
        let c = self.shared();
        (
            c.dcp_size,
            c.interleave,
            c.block_size,
            c.heads,
            self.variant,
        )
    }

    /// Valid iff every rank's view is (the op checks each rank before it enqueues anything of
    /// that rank).
    fn verdict(&self) -> Result<(), &'static str> {
        self.ranks.iter().try_for_each(mla_check)
    }
}

/// (D, I, B, heads per rank, variant): what a set of D contexts is built for.
type Key = (u32, u32, u32, u32, usize);

/// Appends 1–6 requests that are valid on their own (their table rows name real blocks, every
/// buffer grows with them), so that only the context's capacity (16 tokens, 8 requests) can
/// make the call malformed.
fn grow(c: &mut MlaCase, rng: &mut SplitMix64) {
    let per_vblock = c.block_size as usize * c.dcp_size as usize;
    let blocks = c.cache_len / (c.block_size as usize * QK_WIDTH);
    // A stride mutated to 0 or near usize::MAX has no row to append.
    if c.stride == 0 || c.stride > 1 << 10 || blocks == 0 {
        return;
    }
    let (d, n) = (c.dcp_size as usize, c.heads as usize);
    for _ in 0..1 + rng.below(6) {
        let q = 1 + rng.below(3) as u32;
        let room = (c.stride * per_vblock).min(400) - q as usize;
        let s = q + rng.below(room + 1) as u32;
        c.query_lens.push(q);
        c.seq_lens.push(s);
        c.table
            .extend((0..c.stride).map(|_| rng.below(blocks) as i32));
        c.table_device_len += c.stride;
        let q = q as usize;
        c.q_loc_len += q * n * QK_WIDTH;
        c.cur_kv_len += q * QK_WIDTH;
        if let Some(all) = c.q_all_len.as_mut() {
            *all += d * q * n * QK_WIDTH;
        }
    }
}

fn gpu_case(seed: u64) -> GpuCase {
    let mut rng = SplitMix64(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut base = mla_valid_base(&mut rng);
    let (d, n) = (base.dcp_size as usize, base.heads as usize);
    base.simulated = true;
    base.q_all_len = Some(d * base.tokens() * n * QK_WIDTH);
    base.max_tokens = MAX_TOKENS;
    base.max_batch = MAX_BATCH;
    let variant = rng.below(VARIANTS.len());
    let mutations: Vec<usize> = (0..rng.below(4))
        .map(|_| rng.below(MLA_MUTATIONS))
        .collect();
    // Shared mutations first (they change what every rank sees), then the per-rank ones on
    // one rank each: a bad buffer on rank 2 must stop the step as surely as one on rank 0.
    for &m in mutations.iter().filter(|m| !PER_RANK.contains(m)) {
        if GROW.contains(&m) {
            grow(&mut base, &mut rng);
        } else {
            mla_mutate(&mut base, m, &mut rng);
        }
    }
    let mut ranks: Vec<MlaCase> = (0..d)
        .map(|r| MlaCase {
            rank: r as u32,
            ..base.clone()
        })
        .collect();
    for &m in mutations.iter().filter(|m| PER_RANK.contains(m)) {
        let r = rng.below(d);
        mla_mutate(&mut ranks[r], m, &mut rng);
    }
    GpuCase {
        ranks,
        variant,
        mutations,
    }
}

fn config(key: Key, rank: u32) -> MlaDcpConfig {
    let (d, i, b, heads, variant) = key;
    let layout = DcpLayout::new(d, i, b).expect("generated layouts are valid");
    let mut c = MlaDcpConfig::new(layout, rank, heads, dsv3_scale(), MAX_TOKENS, MAX_BATCH);
    c.exchange = ExchangeMode::Simulated;
    (c.vup, c.forced_splits) = VARIANTS[variant];
    if c.check_vup().is_err() {
        // The fused merge takes groups of at most two ranks; larger ones are refused at
        // construction (a typed error, tested with the config), so they run cuBLAS here.
        c.vup = VupPath::Cublas;
    }
    c
}

/// The D contexts of every geometry met so far, all on one main stream: reusing them across
/// cases is what a serving loop does, so a call that leaves a context in a bad state shows up
/// in the following cases.
struct Contexts {
    dev: CudaDevice,
    main: Arc<CudaStream>,
    sets: BTreeMap<Key, Vec<MlaDcpContext<bf16>>>,
}

impl Contexts {
    fn new() -> Self {
        let dev = CudaDevice::new(0).expect("the gpu feature requires a GPU");
        let main = dev.new_stream().expect("stream");
        Contexts {
            dev,
            main,
            sets: BTreeMap::new(),
        }
    }

    fn set(&mut self, key: Key) -> &mut Vec<MlaDcpContext<bf16>> {
        let (dev, main) = (&self.dev, &self.main);
        self.sets.entry(key).or_insert_with(|| {
            (0..key.0)
                .map(|r| {
                    MlaDcpContext::new(dev, main.clone(), config(key, r), None)
                        .unwrap_or_else(|e| panic!("context {key:?} rank {r}: {e}"))
                })
                .collect()
        })
    }
}

/// Host values of a valid case, bf16-representable: every rank's cache, `q_all` (each rank's
/// `q_loc` is its slice of it, as the all-gather would make it), `cur_kv`, every rank's W_UV.
struct HostData {
    caches: Vec<Vec<f32>>,
    q_all: Vec<f32>,
    q_locs: Vec<Vec<f32>>,
    cur_kv: Vec<f32>,
    w_uvs: Vec<Vec<f32>>,
}

fn random_values(rng: &mut SplitMix64, n: usize, scale: f64) -> Vec<f32> {
    (0..n)
        .map(|_| Dtype::Bf16.round(rng.uniform(-scale, scale)) as f32)
        .collect()
}

/// `prefix` padded with random values to `len` (the tail of an oversized buffer is never read).
fn padded(prefix: &[f32], len: usize, rng: &mut SplitMix64) -> Vec<f32> {
    let mut v = prefix[..prefix.len().min(len)].to_vec();
    v.extend(random_values(rng, len - v.len(), 1.0));
    v
}

fn host_data(g: &GpuCase, seed: u64) -> HostData {
    let mut rng = SplitMix64(seed ^ 0x5A5A_5A5A);
    let c = g.shared();
    let tnq = c.tokens() * c.heads as usize * QK_WIDTH;
    let q_all = random_values(&mut rng, c.q_all_len.unwrap_or(0), 1.0);
    let q_locs = g
        .ranks
        .iter()
        .enumerate()
        .map(|(r, rc)| {
            let own = q_all.get(r * tnq..(r + 1) * tnq).unwrap_or(&[]);
            padded(own, rc.q_loc_len, &mut rng)
        })
        .collect();
    HostData {
        caches: g
            .ranks
            .iter()
            .map(|rc| random_values(&mut rng, rc.cache_len, 1.0))
            .collect(),
        q_all,
        q_locs,
        cur_kv: random_values(&mut rng, c.cur_kv_len, 1.0),
        w_uvs: g
            .ranks
            .iter()
            .map(|rc| random_values(&mut rng, rc.w_uv_len, 0.1))
            .collect(),
    }
}

/// Rank `r`'s `(owner, virtual block, offset in the owner's block)` of global position `p`,
/// from the sharding rule (§2.2) rather than the library: runs of I positions are dealt to the
/// ranks in turn inside each virtual block of B·D positions; the k-th run goes to rank k mod D
/// and is that rank's ⌊k / D⌋-th run of the block.
fn place(c: &MlaCase, p: usize) -> (usize, usize, usize) {
    let (b, d, i) = (
        c.block_size as usize,
        c.dcp_size as usize,
        c.interleave as usize,
    );
    let (vblock, off) = (p / (b * d), p % (b * d));
    let run = off / i;
    (run % d, vblock, (run / d) * i + off % i)
}

/// Each request's `[S_b, 576]` latent rows as the op must see them: history positions read
/// through the table from their owner's cache (so aliased pages are what they are), the
/// current chunk from `cur_kv`.
fn latents(g: &GpuCase, data: &HostData) -> Vec<Vec<f32>> {
    let c = g.shared();
    let b = c.block_size as usize;
    let mut first_token = 0;
    c.seq_lens
        .iter()
        .zip(&c.query_lens)
        .enumerate()
        .map(|(req, (&s, &q))| {
            let (s, q) = (s as usize, q as usize);
            let hist = s - q;
            let mut rows = Vec::with_capacity(s * QK_WIDTH);
            for p in 0..hist {
                let (owner, vblock, off) = place(c, p);
                let phys = c.table[req * c.stride + vblock] as usize;
                let at = (phys * b + off) * QK_WIDTH;
                rows.extend_from_slice(&data.caches[owner][at..at + QK_WIDTH]);
            }
            let at = first_token * QK_WIDTH;
            rows.extend_from_slice(&data.cur_kv[at..at + q * QK_WIDTH]);
            first_token += q;
            rows
        })
        .collect()
}

/// The reference's view of a valid case: the `Case`/`Inputs` of the MLA op tests.
fn reference_inputs(g: &GpuCase, data: &HostData) -> (Case, Inputs) {
    let c = g.shared();
    let case = Case::new(
        c.dcp_size,
        c.interleave,
        c.block_size,
        c.heads,
        &c.seq_lens,
        &c.query_lens,
    );
    let (d, n, t) = (c.dcp_size as usize, c.heads as usize, c.tokens());
    let w = n * LATENT * V_HEAD;
    let inputs = Inputs {
        latents: latents(g, data),
        queries: data.q_all[..d * t * n * QK_WIDTH].to_vec(),
        w_uv: data
            .w_uvs
            .iter()
            .flat_map(|v| v[..w].iter().copied())
            .collect(),
    };
    (case, inputs)
}

/// What one GPU call did.
enum Run {
    Called(Result<Outputs, MlaError>),
    CudaError(String),
}

/// A device buffer of `len` bf16 (the values when given, else zeros: a malformed call must be
/// refused before anything reads it). Zero-length views keep a one-element allocation.
fn device_bf16(s: &Arc<CudaStream>, len: usize, values: Option<&[f32]>) -> CudaSlice<bf16> {
    match values {
        Some(v) if !v.is_empty() => {
            let v: Vec<bf16> = v.iter().map(|&x| bf16::from_f32(x)).collect();
            s.clone_htod(&v).expect("upload")
        }
        _ => s.alloc_zeros(len.max(1)).expect("alloc"),
    }
}

fn run_on_gpu(ctxs: &mut Contexts, g: &GpuCase, data: Option<&HostData>) -> Run {
    let s = ctxs.main.clone();
    let c = g.shared();
    let q_all_len = c.q_all_len.unwrap_or(0);
    let q_all = device_bf16(&s, q_all_len, data.map(|h| h.q_all.as_slice()));
    let cur_kv = device_bf16(&s, c.cur_kv_len, data.map(|h| h.cur_kv.as_slice()));
    let per_rank = |len: fn(&MlaCase) -> usize, vals: fn(&HostData) -> &Vec<Vec<f32>>| {
        g.ranks
            .iter()
            .enumerate()
            .map(|(r, rc)| device_bf16(&s, len(rc), data.map(|h| vals(h)[r].as_slice())))
            .collect::<Vec<_>>()
    };
    let q_locs = per_rank(|rc| rc.q_loc_len, |h| &h.q_locs);
    let caches = per_rank(|rc| rc.cache_len, |h| &h.caches);
    let w_uvs = per_rank(|rc| rc.w_uv_len, |h| &h.w_uvs);
    // The device table holds `table_device_len` entries: the host copy, cut or zero-padded
    // (the mismatch itself is what mutations 1 and 2 test).
    let mut device_table = c.table.clone();
    device_table.resize(c.table_device_len, 0);
    let table = if device_table.is_empty() {
        s.alloc_zeros::<i32>(1).expect("alloc")
    } else {
        s.clone_htod(&device_table).expect("upload")
    };
    let args: Vec<MlaDcpDecodeArgs<'_, bf16>> = g
        .ranks
        .iter()
        .enumerate()
        .map(|(r, rc)| MlaDcpDecodeArgs {
            query_lens: &rc.query_lens,
            seq_lens: &rc.seq_lens,
            q_loc: q_locs[r].slice(0..rc.q_loc_len),
            q_all: rc.q_all_len.map(|n| q_all.slice(0..n)),
            cur_kv: cur_kv.slice(0..rc.cur_kv_len),
            cache: caches[r].slice(0..rc.cache_len),
            block_table: table.slice(0..rc.table_device_len),
            block_table_host: &rc.table,
            block_table_stride: rc.stride,
            w_uv: w_uvs[r].slice(0..rc.w_uv_len),
        })
        .collect();
    let set = ctxs.set(g.key());
    let called = simulated_decode(set, &args);
    // A rejected call may have enqueued the ranks before the bad one (both streams): a fault
    // there must surface too.
    let mut streams = vec![s.clone()];
    streams.extend(set.iter().map(|ctx| ctx.side_stream().clone()));
    for st in &streams {
        if let Err(e) = st.synchronize() {
            return Run::CudaError(e.to_string());
        }
    }
    Run::Called(called.map(|reports| {
        let get = |v| from_elems::<bf16>(&s.clone_dtoh(&v).expect("download"));
        Outputs {
            y: set.iter().map(|ctx| get(ctx.output())).collect(),
            // None when the step fuses V-up into the combine (the D = 1 default).
            lat: set
                .iter()
                .filter_map(|ctx| ctx.latent_output().map(get))
                .collect(),
            reports,
        }
    }))
}

/// Errors that say the arguments are wrong. Anything else (a launch, driver, NVRTC or cuBLAS
/// failure) is not a validation verdict and is counted as a CUDA error.
fn is_validation(e: &MlaError) -> bool {
    matches!(
        e,
        MlaError::OverCapacity { .. }
            | MlaError::NeedsQAll { .. }
            | MlaError::BufferTooSmall { .. }
            | MlaError::SizeOverflow { .. }
            | MlaError::HostDeviceMismatch { .. }
            | MlaError::BlockTableRowShort { .. }
            | MlaError::BlockIdOutOfRange { .. }
            | MlaError::CacheShape { .. }
            | MlaError::Plan(_)
    )
}

/// Compiles every specialization the valid cases will need once, in parallel NVRTC threads
/// (the contexts then only load modules).
fn precompile(ctxs: &Contexts, cases: &[GpuCase]) {
    let num_sms = ctxs.dev.limits().sm_count.max(1);
    let plans: Vec<_> = cases
        .iter()
        .filter(|g| g.verdict().is_ok())
        .filter_map(|g| {
            let c = g.shared();
            let step = DecodeStep {
                query_lens: c.query_lens.clone(),
                seq_lens: c.seq_lens.clone(),
                layout: DcpLayout::new(c.dcp_size, c.interleave, c.block_size).ok()?,
                heads_per_rank: c.heads,
                dtype: ScalarType::Bf16,
                softmax_scale: dsv3_scale(),
                block_table_stride: c.stride,
                num_sms,
            };
            step.plan_with_splits(VARIANTS[g.variant].1).ok()
        })
        .collect();
    compile_launches(&ctxs.dev, plans.iter().flat_map(|p| p.launches()))
        .expect("precompile the fuzz's specializations");
}

/// Compares the outputs of an accepted valid call with the dense reference; the worst y error.
fn check_accepted(g: &GpuCase, data: &HostData, out: &Outputs) -> Result<f64, String> {
    let (case, inputs) = reference_inputs(g, data);
    check_vs_reference("fuzz", &case, &inputs, out).map_err(|e| e.to_string())
}

#[test]
fn gpu_fuzz_mla_dcp() {
    let mut ctxs = Contexts::new();
    let cases: Vec<GpuCase> = (1..=CASES).map(gpu_case).collect();
    precompile(&ctxs, &cases);
    let mut tally = Tally::default();
    for (seed, g) in (1..=CASES).zip(&cases) {
        let verdict = g.verdict();
        let data = verdict.is_ok().then(|| host_data(g, seed));
        let ran = catch_unwind(AssertUnwindSafe(|| run_on_gpu(&mut ctxs, g, data.as_ref())));
        let result = match ran {
            Err(_) => {
                tally.add(Outcome::Panicked);
                eprintln!("seed {seed}: panicked; {g:?}");
                continue;
            }
            Ok(Run::CudaError(e)) => {
                tally.cuda_errors += 1;
                eprintln!("seed {seed}: CUDA error {e}; {g:?}");
                // The context is poisoned: every later call would fail for the same reason.
                break;
            }
            Ok(Run::Called(result)) => result,
        };
        if let Err(e) = &result {
            if !is_validation(e) {
                tally.cuda_errors += 1;
                eprintln!("seed {seed}: not a validation error: {e}; {g:?}");
                continue;
            }
        }
        let outcome = Outcome::of(
            Ok(result.as_ref().map(|_| ()).map_err(|_| ())),
            verdict.is_ok(),
        );
        tally.add(outcome);
        if !outcome.is_correct() {
            eprintln!(
                "seed {seed}: {outcome:?}, oracle {verdict:?}, op {:?}; {g:?}",
                result.as_ref().err().map(ToString::to_string)
            );
        }
        if let (Ok(out), Some(data), Outcome::Accepted) = (&result, &data, outcome) {
            if let Err(e) = check_accepted(g, data, out) {
                tally.wrong_results += 1;
                eprintln!("seed {seed}: wrong result: {e}; {g:?}");
            }
        }
    }
    println!(
        "GPU MLA-DCP fuzz: {tally} ({} context sets)",
        ctxs.sets.len()
    );
    // The context must still work: one valid call through contexts the fuzz used, with fresh
    // data, checked against the reference.
    let healthy = cases
        .iter()
        .find(|g| g.verdict().is_ok() && g.shared().dcp_size > 1)
        .expect("a valid multi-rank case");
    let data = host_data(healthy, 0xC0FFEE);
    match run_on_gpu(&mut ctxs, healthy, Some(&data)) {
        Run::Called(Ok(out)) => {
            let max_abs = check_accepted(healthy, &data, &out)
                .unwrap_or_else(|e| panic!("final call is wrong: {e}"));
            println!(
                "GPU MLA-DCP fuzz: final valid call (D={}) matches the reference \
                 (max_abs={max_abs:.3e}); context healthy",
                healthy.shared().dcp_size
            );
        }
        Run::Called(Err(e)) => panic!("final valid call rejected: {e}"),
        Run::CudaError(e) => panic!("context unhealthy after the fuzz: {e}"),
    }
    assert!(tally.clean(), "{tally}");
    assert!(tally.total() >= 1_000, "{tally}");
    assert!(
        tally.accepted >= 1_000 && tally.rejected >= 1_000,
        "the generator lost its mix of valid and malformed calls: {tally}"
    );
}

/// The generator itself: per-rank mutations really land on one rank only, growth keeps the
/// grown requests valid on their own, and the mix the GPU test's thresholds rely on exists.
/// Runs without a GPU under `--features gpu` (pure host code), so it fails on the build host.
#[test]
fn gpu_fuzz_mla_generator_mix() {
    let cases: Vec<GpuCase> = (1..=CASES).map(gpu_case).collect();
    let valid = cases.iter().filter(|g| g.verdict().is_ok()).count();
    assert!((750..=2700).contains(&valid), "{valid} valid of {CASES}");
    let mut rank_differs = 0;
    // Building reference inputs costs a random cache per rank; a few dozen cover every
    // geometry and keep the debug-build test short.
    let mut reference_checked = 0;
    for g in &cases {
        let base = g.shared();
        for rc in &g.ranks {
            assert_eq!(rc.query_lens, base.query_lens);
            assert_eq!(rc.table, base.table);
            assert_eq!(rc.q_all_len, base.q_all_len);
        }
        if g.ranks.iter().any(|rc| {
            (rc.q_loc_len, rc.cache_len, rc.w_uv_len)
                != (base.q_loc_len, base.cache_len, base.w_uv_len)
        }) {
            rank_differs += 1;
        }
        // Every valid case's reference inputs are buildable (the table names real blocks of
        // the owner's cache; the current rows exist).
        if g.verdict().is_ok() && reference_checked < 40 {
            reference_checked += 1;
            let data = host_data(g, 1);
            let (case, inputs) = reference_inputs(g, &data);
            assert_eq!(inputs.latents.len(), case.seq_lens.len());
        }
    }
    assert!(rank_differs >= 50, "{rank_differs} cases with one odd rank");
    let over_capacity = cases
        .iter()
        .filter(|g| {
            let c = g.shared();
            g.mutations.iter().any(|m| GROW.contains(m))
                && (c.tokens() > MAX_TOKENS || c.seq_lens.len() > MAX_BATCH)
        })
        .count();
    eprintln!("{valid} valid, {rank_differs} with one odd rank, {over_capacity} over capacity");
    assert!(over_capacity >= 20, "{over_capacity} calls over capacity");
}

/// The CPU executor (same plan, the DSL kernels interpreted) on a valid case's own buffers:
/// every rank's shard is the fuzz's random cache read through the fuzz's table.
fn cpu_outputs(g: &GpuCase, data: &HostData) -> Outputs {
    let c = g.shared();
    let step = DecodeStep {
        query_lens: c.query_lens.clone(),
        seq_lens: c.seq_lens.clone(),
        layout: DcpLayout::new(c.dcp_size, c.interleave, c.block_size).expect("layout"),
        heads_per_rank: c.heads,
        dtype: ScalarType::Bf16,
        softmax_scale: dsv3_scale(),
        block_table_stride: c.stride,
        num_sms: 1,
    };
    let plan = step
        .plan_with_splits(VARIANTS[g.variant].1)
        .expect("plan of a valid case");
    let kernels = CpuKernels::new(&plan).expect("CPU kernels");
    let (d, t, n) = (c.dcp_size as usize, c.tokens(), c.heads as usize);
    let tnq = t * n * QK_WIDTH;
    let bf = |v: &[f32]| to_buffer(ScalarType::Bf16, v);
    let q_all = bf(&data.q_all[..d * tnq]);
    let cur_kv = bf(&data.cur_kv[..t * QK_WIDTH]);
    let mut sends = Vec::with_capacity(d);
    let mut current = Vec::with_capacity(d);
    for (r, rc) in g.ranks.iter().enumerate() {
        let shard = RankShard {
            cache: bf(&data.caches[r]),
            num_blocks: rc.cache_len / (c.block_size as usize * QK_WIDTH),
        };
        let send = run_history(&plan, &kernels, &shard, &c.table, r as u32, &q_all);
        sends.push(send.expect("history"));
        let q_loc = bf(&data.q_locs[r][..tnq]);
        current.push(run_current(&plan, &kernels, &q_loc, &cur_kv).expect("current"));
    }
    let w = n * LATENT * V_HEAD;
    let sim = SimulatedStep {
        recv: exchange(&plan, &sends),
        current,
        w_uv: data.w_uvs.iter().map(|v| bf(&v[..w])).collect(),
        kernels,
    };
    let outs = finish(&plan, &sim).expect("combine and V-up");
    Outputs {
        y: outs.iter().map(|o| o.y.to_f64s()).collect(),
        lat: outs.iter().map(|o| o.lat_out.to_f64s()).collect(),
        reports: Vec::new(),
    }
}

/// The fuzz's reference plumbing (latent rows recovered through the table from the owners'
/// caches, the sharding rule restated) agrees with the CPU executor on the fuzz's own random
/// tables, aliased pages and one-page caches included: a mistake in it would show up as
/// "wrong results" on the GPU, so it is caught here, without one. Small valid cases of every
/// D, so the interpreter stays quick in a debug build.
#[test]
fn gpu_fuzz_mla_reference_matches_the_cpu_executor() {
    let mut seen = BTreeMap::new();
    for (seed, g) in (1..=CASES).map(|s| (s, gpu_case(s))) {
        let c = g.shared();
        let small = c.tokens() <= 3 && c.seq_lens.iter().all(|&s| s <= 200);
        let aliased = {
            let mut ids = c.table.clone();
            ids.sort_unstable();
            ids.windows(2).any(|w| w[0] == w[1])
        };
        let key = (c.dcp_size, aliased);
        if !small || g.verdict().is_err() || seen.contains_key(&key) {
            continue;
        }
        let data = host_data(&g, seed);
        let max_abs = check_accepted(&g, &data, &cpu_outputs(&g, &data))
            .unwrap_or_else(|e| panic!("seed {seed}: {e}; {g:?}"));
        seen.insert(key, max_abs);
        if seen.len() == 6 {
            break;
        }
    }
    println!("fuzz reference vs CPU executor (D, aliased pages) -> max_abs: {seen:?}");
    assert_eq!(
        seen.len(),
        6,
        "every D with and without aliased pages: {seen:?}"
    );
}
