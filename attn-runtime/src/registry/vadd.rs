//! Built-in `vadd`: `out = x + y` over `N` f32 elements with a tail mask, one element per
//! thread. Hand-written CUDA (with its own prelude) and the equivalent IR built with
//! `ir::Builder`, so `attn emit/compile/run/bench` work before the DSL front end does.
//!
//! The DSL program it stands for (line numbers match the `// L<n>:` markers):
//! ```text
//! 1 #[kernel] fn vadd<const BLOCK: i32>(x: *const f32, y: *const f32, out: *mut f32, n: i32) {
//! 2     let offs = program_id(0) * BLOCK + arange::<BLOCK>();
//! 3     let mask = offs < n;
//! 4     let s = load(x + offs, mask, 0.0) + load(y + offs, mask, 0.0);
//! 5     store(out + offs, s, mask);
//! 6 }
//! ```

use super::bindings::int_binding;
use super::{BuiltKernel, KernelEntry};
use crate::launch::Grid;
use crate::parity::Tolerance;
use crate::problem::{HostBuffer, Problem, ProblemArg, SplitMix64};
use attn_dsl::codegen::CudaKernel;
use attn_dsl::ir::{BinaryOp, Builder, CmpPred, Function, Loc, ParamKind, ScalarType};
use attn_dsl::kernel::ScalarArg;
use attn_dsl::{Binding, ConstValue};

/// The prelude the hand-written source includes (under the compiler's prelude name).
pub const VADD_PRELUDE: &str = "#pragma once\n__device__ __forceinline__ float attn_add_f32(float a, float b) { return a + b; }\n";

pub(super) fn entry() -> KernelEntry {
    KernelEntry {
        name: "vadd",
        summary: "out = x + y over N f32 elements (hand-written CUDA; built-in smoke kernel)",
        default_bindings: || {
            vec![
                Binding::new("BLOCK", ConstValue::Int(256)),
                Binding::new("N", ConstValue::Int(1_000_003)),
            ]
        },
        build,
        problem,
        reference,
        // f32 add of f32 inputs is exact to half an ulp of the sum.
        tolerance: Tolerance::new(0.0, 1.2e-7),
        cases: &["N=1", "N=255", "N=256", "N=257"],
    }
}

fn block(bindings: &[Binding]) -> Result<u32, String> {
    let b = int_binding(bindings, "BLOCK")?;
    if !(32..=1024).contains(&b) || (b as u64).count_ones() != 1 {
        return Err(format!(
            "BLOCK = {b}: must be a power of two in 32..=1024 (one element per thread)"
        ));
    }
    Ok(b as u32)
}

fn build(bindings: &[Binding]) -> Result<BuiltKernel, String> {
    let block = block(bindings)?;
    let entry = format!("vadd_f32_b{block}");
    let source = format!(
        r#"#include "attn_prelude.cuh"
extern "C" __global__ void __launch_bounds__({block}) {entry}(const float* __restrict__ x, const float* __restrict__ y, float* __restrict__ out, int n) {{
  // L2: offs = program_id(0) * BLOCK + arange::<BLOCK>()
  const int offs = (int)blockIdx.x * {block} + (int)threadIdx.x;
  // L3: mask = offs < n
  const bool mask = offs < n;
  // L4: s = load(x + offs, mask, 0.0) + load(y + offs, mask, 0.0)
  const float s = attn_add_f32(mask ? x[offs] : 0.0f, mask ? y[offs] : 0.0f);
  // L5: store(out + offs, s, mask)
  if (mask) {{ out[offs] = s; }}
}}
"#
    );
    let ir = build_ir(&entry, block as usize).map_err(|e| format!("building vadd IR: {e}"))?;
    let hash = blake3::hash(format!("{source}\0{VADD_PRELUDE}").as_bytes())
        .to_hex()
        .to_string();
    let cuda = CudaKernel {
        entry,
        source,
        hash,
        params: ir.params.clone(),
        block_threads: block,
        shared_bytes: 0,
        assumed_divisible: Vec::new(),
        assumed_i32: Vec::new(),
        tensor_maps: Vec::new(),
    };
    Ok(BuiltKernel {
        key: format!("vadd<BLOCK={block}>"),
        cuda,
        prelude: Some(VADD_PRELUDE.to_string()),
        ir: Some(ir),
    })
}

fn build_ir(name: &str, block: usize) -> Result<Function, attn_dsl::ir::IrError> {
    let mut f = Function::new(name, (block / 32) as u32);
    let x = f.add_param(
        "x",
        ParamKind::Ptr {
            elem: ScalarType::F32,
            mutable: false,
        },
    );
    let y = f.add_param(
        "y",
        ParamKind::Ptr {
            elem: ScalarType::F32,
            mutable: false,
        },
    );
    let out = f.add_param(
        "out",
        ParamKind::Ptr {
            elem: ScalarType::F32,
            mutable: true,
        },
    );
    let n = f.add_param("n", ParamKind::Scalar(ScalarType::I32));
    let mut b = Builder::new(&mut f);
    b.loc = Loc { line: 2, col: 5 };
    let pid = b.program_id(0)?;
    let bs = b.const_i32(block as i64);
    let base = b.binary(BinaryOp::Mul, pid, bs)?;
    let base = b.splat(base, &[block])?;
    let lanes = b.arange(block)?;
    let offs = b.binary(BinaryOp::Add, base, lanes)?;
    b.loc = Loc { line: 3, col: 5 };
    let nt = b.splat(n, &[block])?;
    let mask = b.cmp(CmpPred::Lt, offs, nt)?;
    b.loc = Loc { line: 4, col: 5 };
    let px = b.add_ptr(x, offs)?;
    let xv = b.load(px, Some(mask), None)?;
    let py = b.add_ptr(y, offs)?;
    let yv = b.load(py, Some(mask), None)?;
    let s = b.binary(BinaryOp::Add, xv, yv)?;
    b.loc = Loc { line: 5, col: 5 };
    let po = b.add_ptr(out, offs)?;
    b.store(po, s, Some(mask))?;
    b.finish();
    Ok(f)
}

fn problem(bindings: &[Binding]) -> Result<Problem, String> {
    let block = block(bindings)?;
    let n = int_binding(bindings, "N")?;
    if !(1..=i32::MAX as i64).contains(&n) {
        return Err(format!("N = {n}: must be in 1..={}", i32::MAX));
    }
    let len = n as usize;
    let mut rng = SplitMix64(0x5eed_0001);
    let mut random = |len: usize| {
        (0..len)
            .map(|_| rng.uniform(-4.0, 4.0) as f32)
            .collect::<Vec<f32>>()
    };
    let (xs, ys) = (random(len), random(len));
    Ok(Problem {
        label: format!("n={n}"),
        grid: Grid::from((n as u64).div_ceil(block as u64) as u32),
        args: vec![
            ProblemArg::Input(HostBuffer::F32(xs)),
            ProblemArg::Input(HostBuffer::F32(ys)),
            ProblemArg::Output {
                elem: ScalarType::F32,
                len,
            },
            ProblemArg::Scalar(ScalarArg::I32(n as i32)),
        ],
        flops: n as f64,
        bytes: 12.0 * n as f64,
    })
}

fn reference(p: &Problem) -> Vec<Vec<f64>> {
    let input = |i: usize| match &p.args[i] {
        ProblemArg::Input(b) => b.to_f64s(),
        _ => Vec::new(),
    };
    let (x, y) = (input(0), input(1));
    vec![x.iter().zip(&y).map(|(a, b)| a + b).collect()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;

    #[test]
    fn builds_source_ir_and_problem_consistently() {
        let r = Registry::with_builtins();
        let e = r.get("vadd").expect("registered");
        let mut bindings = (e.default_bindings)();
        bindings[1].value = ConstValue::Int(1000);
        let k = (e.build)(&bindings).expect("build");
        assert_eq!(k.cuda.block_threads, 256);
        assert!(k.cuda.source.contains("// L4:"));
        let ir = k.ir.expect("IR for the CPU executor");
        assert_eq!(ir.params.len(), 4);
        assert_eq!(k.cuda.params, ir.params);
        let p = (e.problem)(&bindings).expect("problem");
        assert_eq!(p.grid, Grid([4, 1, 1]), "1000 elements in blocks of 256");
        let want = (e.reference)(&p);
        assert_eq!(want.len(), 1);
        assert_eq!(want[0].len(), 1000);
        assert!(want[0].iter().all(|v| v.is_finite()) && want[0].iter().any(|&v| v != 0.0));
    }

    #[test]
    fn rejects_bad_block() {
        let bindings = vec![
            Binding::new("BLOCK", ConstValue::Int(100)),
            Binding::new("N", ConstValue::Int(10)),
        ];
        let e = build(&bindings).expect_err("not a power of two");
        assert!(e.contains("BLOCK = 100"), "{e}");
    }
}
