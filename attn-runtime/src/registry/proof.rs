//! Registry entries of the proof kernels (`kernels::proof`): softmax, matmul and flash
//! attention, each with deterministic random bf16 inputs at odd sizes, an independent f64
//! reference written from the math (not from the kernel), and a tolerance that says why.
//!
//! Bindings mix the kernel's constexprs with problem sizes (upper-case names that are not
//! constexprs, like `ROWS`); [`build`] passes only the constexprs to the template.

use super::bindings::int_binding;
use super::{BuiltKernel, KernelEntry};
use crate::kernels::proof::proof;
use crate::launch::Grid;
use crate::parity::Tolerance;
use crate::problem::{HostBuffer, Problem, ProblemArg, SplitMix64};
use attn_dsl::ir::ScalarType;
use attn_dsl::kernel::ScalarArg;
use attn_dsl::template::Template;
use attn_dsl::{Binding, ConstValue};

/// The proof kernels' registry entries.
pub(super) fn entries() -> Vec<KernelEntry> {
    vec![softmax_entry(), matmul_entry(), flash_entry()]
}

fn bind(name: &str, v: ConstValue) -> Binding {
    Binding::new(name, v)
}

fn bf16_t() -> Binding {
    bind("T", ConstValue::Dtype(ScalarType::Bf16))
}

/// Specializes `template` on the bindings named in `constexprs` (the rest are sizes).
fn build(
    template: &Template,
    constexprs: &[&str],
    bindings: &[Binding],
) -> Result<BuiltKernel, String> {
    build_for(template, constexprs, bindings, false)
}

/// [`build`] with the dots that fit a warpgroup also emitted as warpgroup MMAs
/// (`warpgroup`): the source then carries both paths, `wgmma` where NVRTC compiles for
/// sm_90a (the JIT's arch on an H100/H200) and `mma.sync` everywhere else, so one entry is
/// the kernel each device runs. `ATTN_CODEGEN_DISABLE=wgmma` keeps `mma.sync` only.
fn build_for(
    template: &Template,
    constexprs: &[&str],
    bindings: &[Binding],
    warpgroup: bool,
) -> Result<BuiltKernel, String> {
    let consts: Vec<(&str, ConstValue)> = bindings
        .iter()
        .filter(|b| constexprs.contains(&b.name.as_str()))
        .map(|b| (b.name.as_str(), b.value.clone()))
        .collect();
    let compiled = template
        .specialize_with(&consts, |f| {
            f.warpgroup_mma = warpgroup && attn_dsl::features::warpgroup_mma();
            Ok(())
        })
        .map_err(|e| e.to_string())?;
    Ok(BuiltKernel {
        key: compiled.specialized.key(),
        cuda: compiled.cuda,
        prelude: None,
        ir: Some(compiled.specialized.ir),
    })
}

fn size(bindings: &[Binding], name: &str, max: i64) -> Result<usize, String> {
    let v = int_binding(bindings, name)?;
    if !(1..=max).contains(&v) {
        return Err(format!("{name} = {v}: must be in 1..={max}"));
    }
    Ok(v as usize)
}

/// Uniform random values in [lo, hi) rounded to `dtype` (the kernel's `T`).
fn random(dtype: ScalarType, seed: u64, len: usize, lo: f64, hi: f64) -> HostBuffer {
    let mut rng = SplitMix64(seed);
    let v: Vec<f64> = (0..len).map(|_| rng.uniform(lo, hi)).collect();
    HostBuffer::from_f64s(dtype, &v)
}

/// The element type bound to `T` (bf16 or f16).
fn dtype(bindings: &[Binding]) -> Result<ScalarType, String> {
    match bindings.iter().find(|b| b.name == "T").map(|b| &b.value) {
        Some(ConstValue::Dtype(t @ (ScalarType::Bf16 | ScalarType::F16))) => Ok(*t),
        other => Err(format!("T must be bf16 or f16, got {other:?}")),
    }
}

fn input(p: &Problem, i: usize) -> Vec<f64> {
    match &p.args[i] {
        ProblemArg::Input(b) => b.to_f64s(),
        _ => Vec::new(),
    }
}

fn scalar_i32(p: &Problem, i: usize) -> usize {
    match p.args[i] {
        ProblemArg::Scalar(ScalarArg::I32(v)) => v.max(0) as usize,
        _ => 0,
    }
}

// ---- softmax ----

const SOFTMAX_CONSTS: &[&str] = &["T", "BLOCK"];

fn softmax_entry() -> KernelEntry {
    KernelEntry {
        name: "softmax",
        summary: "row softmax of a [ROWS, COLS] bf16 matrix, one program per row (BLOCK >= COLS)",
        default_bindings: || {
            vec![
                bf16_t(),
                bind("BLOCK", ConstValue::Int(1024)),
                bind("ROWS", ConstValue::Int(301)),
                bind("COLS", ConstValue::Int(1000)),
            ]
        },
        build: |b| build(&proof::SOFTMAX_TEMPLATE, SOFTMAX_CONSTS, b),
        problem: softmax_problem,
        reference: softmax_reference,
        // Output is bf16 (relative rounding 2^-9) of values <= 1; exp in f32 adds ~1e-7.
        tolerance: Tolerance::new(1e-4, 4e-3),
        cases: &[
            "ROWS=1 COLS=1",
            "ROWS=7 COLS=1024",
            "BLOCK=32 ROWS=33 COLS=31",
        ],
    }
}

fn softmax_problem(bindings: &[Binding]) -> Result<Problem, String> {
    let block = int_binding(bindings, "BLOCK")?;
    let rows = size(bindings, "ROWS", 1 << 20)?;
    let cols = size(bindings, "COLS", 1 << 20)?;
    if cols as i64 > block {
        return Err(format!(
            "COLS = {cols} exceeds BLOCK = {block}: one program holds a whole row, so the kernel \
             needs BLOCK >= COLS; set BLOCK={} (a power of two)",
            cols.next_power_of_two()
        ));
    }
    let len = rows * cols;
    let t = dtype(bindings)?;
    Ok(Problem {
        label: format!("{rows}x{cols}"),
        grid: Grid::from(rows as u32),
        args: vec![
            ProblemArg::Input(random(t, 0x50f7, len, -4.0, 4.0)),
            ProblemArg::Output { elem: t, len },
            ProblemArg::Scalar(ScalarArg::I32(cols as i32)),
            ProblemArg::Scalar(ScalarArg::I32(cols as i32)),
        ],
        flops: 4.0 * len as f64,
        bytes: 4.0 * len as f64,
    })
}

fn softmax_reference(p: &Problem) -> Vec<Vec<f64>> {
    let x = input(p, 0);
    let cols = scalar_i32(p, 2);
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks(cols.max(1)) {
        let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = row.iter().map(|v| (v - m).exp()).collect();
        let s: f64 = e.iter().sum();
        out.extend(e.iter().map(|v| v / s));
    }
    vec![out]
}

// ---- matmul ----

const MATMUL_CONSTS: &[&str] = &["T", "BLOCK_M", "BLOCK_N", "BLOCK_K"];

fn matmul_entry() -> KernelEntry {
    KernelEntry {
        name: "matmul",
        summary: "C[M,N] = A[M,K] · B[K,N], bf16 in, f32 accumulation and output, tails masked",
        default_bindings: || {
            vec![
                bf16_t(),
                bind("BLOCK_M", ConstValue::Int(64)),
                bind("BLOCK_N", ConstValue::Int(64)),
                bind("BLOCK_K", ConstValue::Int(32)),
                bind("M", ConstValue::Int(200)),
                bind("N", ConstValue::Int(136)),
                bind("K", ConstValue::Int(300)),
            ]
        },
        build: |b| build(&proof::MATMUL_TEMPLATE, MATMUL_CONSTS, b),
        problem: matmul_problem,
        reference: matmul_reference,
        // Exact products of bf16 inputs summed in f32: error <= K · 2^-24 · Σ|a·b| ≈ 1e-4 here.
        tolerance: Tolerance::new(2e-4, 1e-5),
        cases: &[
            "M=1 N=1 K=1",
            "M=65 N=63 K=33",
            "T=f16 M=17 N=80 K=48 BLOCK_M=16 BLOCK_N=32 BLOCK_K=16",
        ],
    }
}

fn matmul_problem(bindings: &[Binding]) -> Result<Problem, String> {
    let (bm, bn) = (
        int_binding(bindings, "BLOCK_M")?,
        int_binding(bindings, "BLOCK_N")?,
    );
    let m = size(bindings, "M", 1 << 16)?;
    let n = size(bindings, "N", 1 << 16)?;
    let k = size(bindings, "K", 1 << 16)?;
    let t = dtype(bindings)?;
    let grid = (
        m.div_ceil(bm.max(1) as usize) as u32,
        n.div_ceil(bn.max(1) as usize) as u32,
    );
    Ok(Problem {
        label: format!("{m}x{n}x{k}"),
        grid: Grid::from(grid),
        args: vec![
            ProblemArg::Input(random(t, 0xa11a, m * k, -1.0, 1.0)),
            ProblemArg::Input(random(t, 0xb22b, k * n, -1.0, 1.0)),
            ProblemArg::Output {
                elem: ScalarType::F32,
                len: m * n,
            },
            ProblemArg::Scalar(ScalarArg::I32(m as i32)),
            ProblemArg::Scalar(ScalarArg::I32(n as i32)),
            ProblemArg::Scalar(ScalarArg::I32(k as i32)),
        ],
        flops: 2.0 * (m * n * k) as f64,
        bytes: (2 * (m * k + k * n) + 4 * m * n) as f64,
    })
}

fn matmul_reference(p: &Problem) -> Vec<Vec<f64>> {
    let (a, b) = (input(p, 0), input(p, 1));
    let (m, n, k) = (scalar_i32(p, 3), scalar_i32(p, 4), scalar_i32(p, 5));
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k).map(|l| a[i * k + l] * b[l * n + j]).sum();
        }
    }
    vec![c]
}

// ---- flash attention ----

const FLASH_CONSTS: &[&str] = &["T", "BLOCK_M", "BLOCK_N", "HEAD_DIM", "CAUSAL"];

fn flash_entry() -> KernelEntry {
    KernelEntry {
        name: "flash_attention",
        summary:
            "flash-attention forward [HEADS, Q_LEN/KV_LEN, HEAD_DIM] bf16, bottom-right causal \
                  (Q_LEN > KV_LEN leaves fully masked rows: they must be 0)",
        default_bindings: || {
            vec![
                bf16_t(),
                bind("BLOCK_M", ConstValue::Int(64)),
                bind("BLOCK_N", ConstValue::Int(64)),
                bind("HEAD_DIM", ConstValue::Int(64)),
                bind("CAUSAL", ConstValue::Bool(true)),
                bind("HEADS", ConstValue::Int(3)),
                bind("Q_LEN", ConstValue::Int(203)),
                bind("KV_LEN", ConstValue::Int(150)),
            ]
        },
        build: |b| build_for(&proof::FLASH_ATTENTION_TEMPLATE, FLASH_CONSTS, b, true),
        problem: flash_problem,
        reference: flash_reference,
        // P is rounded to bf16 before P·V (relative 2^-9 per weight) and the output is bf16.
        tolerance: Tolerance::new(1.5e-2, 1e-2),
        cases: &[
            "CAUSAL=false Q_LEN=65 KV_LEN=129",
            "HEAD_DIM=128 BLOCK_M=16 BLOCK_N=32 Q_LEN=100 KV_LEN=300",
            "T=f16 HEADS=2 Q_LEN=1 KV_LEN=77",
        ],
    }
}

/// Query i (of `q_len`) sees key j (of `kv_len`) when causal iff `j <= i + kv_len - q_len`.
fn visible(causal: bool, i: usize, j: usize, q_len: usize, kv_len: usize) -> bool {
    !causal || (j as i64) <= i as i64 + kv_len as i64 - q_len as i64
}

fn flash_problem(bindings: &[Binding]) -> Result<Problem, String> {
    let d = int_binding(bindings, "HEAD_DIM")?.max(1) as usize;
    let bm = int_binding(bindings, "BLOCK_M")?.max(1) as usize;
    let causal = bindings
        .iter()
        .any(|b| b.name == "CAUSAL" && b.value == ConstValue::Bool(true));
    let heads = size(bindings, "HEADS", 1 << 12)?;
    let q_len = size(bindings, "Q_LEN", 1 << 20)?;
    let kv_len = size(bindings, "KV_LEN", 1 << 20)?;
    let pairs: usize = (0..q_len)
        .map(|i| {
            (0..kv_len)
                .filter(|&j| visible(causal, i, j, q_len, kv_len))
                .count()
        })
        .sum();
    let t = dtype(bindings)?;
    Ok(Problem {
        label: format!(
            "h{heads} q{q_len} kv{kv_len} d{d}{}",
            if causal { " causal" } else { "" }
        ),
        grid: Grid::from((q_len.div_ceil(bm) as u32, heads as u32)),
        args: vec![
            ProblemArg::Input(random(t, 0x9001, heads * q_len * d, -1.0, 1.0)),
            ProblemArg::Input(random(t, 0x9002, heads * kv_len * d, -1.0, 1.0)),
            ProblemArg::Input(random(t, 0x9003, heads * kv_len * d, -1.0, 1.0)),
            ProblemArg::Output {
                elem: t,
                len: heads * q_len * d,
            },
            ProblemArg::Scalar(ScalarArg::I32(q_len as i32)),
            ProblemArg::Scalar(ScalarArg::I32(kv_len as i32)),
            ProblemArg::Scalar(ScalarArg::F32(1.0 / (d as f32).sqrt())),
        ],
        flops: 4.0 * (heads * pairs * d) as f64,
        bytes: (2 * heads * d * (2 * q_len + 2 * kv_len)) as f64,
    })
}

/// The number after `tag` in a label word (`h3 q203 kv150 d64` → `d` = 64).
fn label_number(label: &str, tag: char) -> usize {
    label
        .split_whitespace()
        .find_map(|w| w.strip_prefix(tag).and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}

fn flash_reference(p: &Problem) -> Vec<Vec<f64>> {
    let (q, k, v) = (input(p, 0), input(p, 1), input(p, 2));
    let (q_len, kv_len) = (scalar_i32(p, 4), scalar_i32(p, 5));
    let scale = match p.args[6] {
        ProblemArg::Scalar(ScalarArg::F32(s)) => s as f64,
        _ => 1.0,
    };
    let causal = p.label.ends_with("causal");
    let d = label_number(&p.label, 'd');
    let heads = label_number(&p.label, 'h');
    let mut out = vec![0.0; q.len()];
    for h in 0..heads {
        for i in 0..q_len {
            let qi = &q[(h * q_len + i) * d..][..d];
            let keys: Vec<usize> = (0..kv_len)
                .filter(|&j| visible(causal, i, j, q_len, kv_len))
                .collect();
            let s: Vec<f64> = keys
                .iter()
                .map(|&j| {
                    scale
                        * qi.iter()
                            .zip(&k[(h * kv_len + j) * d..][..d])
                            .map(|(a, b)| a * b)
                            .sum::<f64>()
                })
                .collect();
            let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
            let z: f64 = w.iter().sum();
            let o = &mut out[(h * q_len + i) * d..][..d];
            for (&j, wj) in keys.iter().zip(&w) {
                for (oc, vc) in o.iter_mut().zip(&v[(h * kv_len + j) * d..][..d]) {
                    *oc += wj / z * vc;
                }
            }
        }
    }
    vec![out]
}
