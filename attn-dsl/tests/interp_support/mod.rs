//! Shared helpers of the `interp_*` integration tests: a seeded RNG and shorthand for
//! building kernels with `ir::Builder`.
#![allow(dead_code)] // each test binary uses a different subset

use attn_dsl::ir::{Builder, Function, IrResult, Loc, ParamKind, ScalarType, ValueId};

/// SplitMix64: deterministic, dependency-free random inputs.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn vec(&mut self, n: usize, lo: f64, hi: f64) -> Vec<f64> {
        (0..n).map(|_| self.uniform(lo, hi)).collect()
    }
}

pub fn ptr_in(elem: ScalarType) -> ParamKind {
    ParamKind::Ptr {
        elem,
        mutable: false,
    }
}

pub fn ptr_out(elem: ScalarType) -> ParamKind {
    ParamKind::Ptr {
        elem,
        mutable: true,
    }
}

pub fn at(b: &mut Builder<'_>, line: u32) {
    b.loc = Loc { line, col: 5 };
}

/// Builds a kernel: declares `params`, then runs `body` with their values.
pub fn kernel(
    name: &str,
    params: &[(&str, ParamKind)],
    body: impl FnOnce(&mut Builder<'_>, &[ValueId]) -> IrResult<()>,
) -> Function {
    let mut f = Function::new(name, 4);
    let vals: Vec<ValueId> = params.iter().map(|(n, k)| f.add_param(n, *k)).collect();
    let mut b = Builder::new(&mut f);
    body(&mut b, &vals).expect("test kernel is well typed");
    b.finish();
    f
}

/// Row-major offsets `rows[:, None] * stride + cols[None, :]` of an `r × c` tile.
pub fn offsets_2d(b: &mut Builder<'_>, r: usize, c: usize, stride: i64) -> IrResult<ValueId> {
    use attn_dsl::ir::BinaryOp;
    let rows = b.arange(r)?;
    let rows = b.expand_dims(rows, 1)?;
    let s = b.const_i32(stride);
    let rows = b.binary(BinaryOp::Mul, rows, s)?;
    let cols = b.arange(c)?;
    let cols = b.expand_dims(cols, 0)?;
    b.binary(BinaryOp::Add, rows, cols)
}
