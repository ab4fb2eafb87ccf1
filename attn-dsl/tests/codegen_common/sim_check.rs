//! Running one program both ways (the simulator of its emitted CUDA and the CPU executor)
//! and comparing every buffer, with the inputs the simulation tests use.

use super::cpu_sim::{self, Branch, SimArg};
use attn_dsl::codegen::emit_cuda;
use attn_dsl::interp::HostBuffer;
use attn_dsl::ir::{Function, ScalarType};
use attn_dsl::kernel::ScalarArg;

/// Deterministic uniform values in `[lo, hi)` (SplitMix64).
pub fn random(n: usize, seed: u64, lo: f64, hi: f64) -> Vec<f64> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            lo + (hi - lo) * ((z >> 11) as f64 / (1u64 << 53) as f64)
        })
        .collect()
}

pub fn input(t: ScalarType, n: usize, seed: u64) -> SimArg {
    SimArg::Buf(HostBuffer::from_f64s(t, &random(n, seed, -2.0, 2.0)))
}

pub fn output(t: ScalarType, n: usize) -> SimArg {
    SimArg::Buf(HostBuffer::poisoned(t, n))
}

/// The test module's dense flash kernel `f` (head size `d`) on 2 heads of 150 bf16 queries,
/// keys and values: simulated on `grid` and compared with the executor (tolerance 2e-2).
pub fn check_flash(label: &str, f: &Function, grid: [u32; 3], d: i64) {
    let args = flash_args(ScalarType::Bf16, 2, 150, d as usize, 95);
    check(label, f, grid, args, 2e-2);
}

/// Runs `f` both ways and compares every buffer: `|got - want| <= tol * (1 + |want|)`,
/// NaN never equal to anything (poisoned outputs must be written by both).
pub fn check(label: &str, f: &Function, grid: [u32; 3], args: Vec<SimArg>, tol: f64) {
    check_each(label, f, grid, args, |_| tol);
}

/// [`check`] with a tolerance per argument index; returns the simulator's buffers (or
/// nothing when g++ is missing).
pub fn check_each(
    label: &str,
    f: &Function,
    grid: [u32; 3],
    args: Vec<SimArg>,
    tol: impl Fn(usize) -> f64,
) -> Option<Vec<Vec<f64>>> {
    if !cpu_sim::have_gxx() {
        eprintln!("skipping {label}: no g++");
        return None;
    }
    let k = emit_cuda(f).unwrap_or_else(|e| panic!("{label}: emit: {e}"));
    let mut want = args.clone();
    cpu_sim::run_interp(f, grid, &mut want).unwrap_or_else(|e| panic!("{label}: interp: {e}"));
    let mut first = None;
    for branch in [Branch::MmaSync, Branch::Wgmma] {
        if !branch.present(&k.source) {
            continue;
        }
        let label = format!("{label} ({branch:?})");
        let mut got = args.clone();
        cpu_sim::run_branch(&k, grid, &mut got, branch, None)
            .unwrap_or_else(|e| panic!("{label}: sim: {e}"));
        compare(&label, &got, &want, &args, &tol);
        first.get_or_insert(got);
    }
    first.map(|got| {
        got.iter()
            .map(|a| match a {
                SimArg::Buf(b) => b.to_f64s(),
                SimArg::Scalar(_) => vec![],
            })
            .collect()
    })
}

/// Every buffer of the simulator's run `got` against the executor's `want`, inputs `args`.
fn compare(
    label: &str,
    got: &[SimArg],
    want: &[SimArg],
    args: &[SimArg],
    tol: impl Fn(usize) -> f64,
) {
    if let Some(m) = mismatch(got, want, args, tol) {
        panic!("{label}: {m}");
    }
}

/// The first element where `got` and `want` differ beyond `tol` (NaN never equal).
fn mismatch(
    got: &[SimArg],
    want: &[SimArg],
    args: &[SimArg],
    tol: impl Fn(usize) -> f64,
) -> Option<String> {
    for (i, ((g, w), o)) in got.iter().zip(want).zip(args).enumerate() {
        let (SimArg::Buf(g), SimArg::Buf(w), SimArg::Buf(o)) = (g, w, o) else {
            continue;
        };
        let (g, w, o) = (g.to_f64s(), w.to_f64s(), o.to_f64s());
        assert_eq!(g.len(), w.len());
        for (j, ((a, b), before)) in g.iter().zip(&w).zip(&o).enumerate() {
            // An infinite input (a poisoned slot no load may read) left as it was by both.
            let untouched = before.is_infinite() && a == before && b == before;
            if !(untouched || (a - b).abs() <= tol(i) * (1.0 + b.abs())) {
                return Some(format!("argument {i} element {j}: sim {a}, executor {b}"));
            }
        }
    }
    None
}

/// Runs `k` (an emitted kernel of `f`, edited or not) on `branch` against the executor
/// running `f`: `Err` with what the simulator stopped on or the first mismatch. For tests
/// that show a check fails on a broken kernel.
pub fn outcome(
    f: &Function,
    k: &attn_dsl::codegen::CudaKernel,
    branch: Branch,
    grid: [u32; 3],
    args: Vec<SimArg>,
    tol: f64,
) -> Result<(), String> {
    let mut want = args.clone();
    cpu_sim::run_interp(f, grid, &mut want)?;
    let mut got = args.clone();
    cpu_sim::run_branch(k, grid, &mut got, branch, None)?;
    mismatch(&got, &want, &args, |_| tol).map_or(Ok(()), Err)
}

pub fn i32s(v: i32) -> SimArg {
    SimArg::Scalar(ScalarArg::I32(v))
}

/// The scale every attention test kernel runs with.
const SM_SCALE: f32 = 0.125;

/// `flash_fwd`'s arguments (q, k, v, out, seq_len, sm_scale) for `heads` heads of `seq` rows
/// of width `d` in `t`, inputs seeded from `seed`.
pub fn flash_args(t: ScalarType, heads: usize, seq: usize, d: usize, seed: u64) -> Vec<SimArg> {
    let n = heads * seq * d;
    vec![
        input(t, n, seed),
        input(t, n, seed + 1),
        input(t, n, seed + 2),
        output(t, n),
        i32s(seq as i32),
        SimArg::Scalar(ScalarArg::F32(SM_SCALE)),
    ]
}

/// `latent_fwd`'s arguments (q, kv, f32 out, seq_len, sm_scale), bf16 inputs.
pub fn latent_args(heads: usize, seq: usize, d: usize, seed: u64) -> Vec<SimArg> {
    let n = heads * seq * d;
    vec![
        input(ScalarType::Bf16, n, seed),
        input(ScalarType::Bf16, n, seed + 1),
        output(ScalarType::F32, n),
        i32s(seq as i32),
        SimArg::Scalar(ScalarArg::F32(SM_SCALE)),
    ]
}

/// `paged_fwd`'s arguments (q, k_cache, v_cache, block table, f32 out, seq_len, max_pages,
/// sm_scale): pages of `page` rows, the block table a random permutation of the cache's
/// pages (spread over it, none shared, three spare), bf16 inputs. Every cache slot no key
/// of the sequence lives in (the last page's rest, each head's spare table entry, the
/// spare pages) holds +inf: a copy whose mask lets one through puts `0 · inf` into PV.
pub fn paged_args(heads: usize, seq: usize, d: usize, page: usize, seed: u64) -> Vec<SimArg> {
    let max_pages = seq.div_ceil(page) + 1;
    let pages = heads * max_pages + 3;
    let mut order: Vec<i32> = (0..pages as i32).collect();
    let keys = random(pages, seed + 10, 0.0, 1.0);
    order.sort_by(|a, b| keys[*a as usize].total_cmp(&keys[*b as usize]));
    let cache = pages * page * d;
    let n = heads * seq * d;
    let mut live = vec![false; pages * page];
    for h in 0..heads {
        for key in 0..seq {
            live[order[h * max_pages + key / page] as usize * page + key % page] = true;
        }
    }
    let poisoned = |seed: u64| {
        let mut v = random(cache, seed, -2.0, 2.0);
        for (slot, _) in live.iter().enumerate().filter(|(_, l)| !**l) {
            v[slot * d..(slot + 1) * d].fill(f64::INFINITY);
        }
        SimArg::Buf(HostBuffer::from_f64s(ScalarType::Bf16, &v))
    };
    vec![
        input(ScalarType::Bf16, n, seed),
        poisoned(seed + 1),
        poisoned(seed + 2),
        SimArg::Buf(HostBuffer::I32(order[..heads * max_pages].to_vec())),
        output(ScalarType::F32, n),
        i32s(seq as i32),
        i32s(max_pages as i32),
        SimArg::Scalar(ScalarArg::F32(SM_SCALE)),
    ]
}
