//! The opt-in swizzled allocs (`ATTN_CODEGEN_ENABLE=swizzle`, set for this whole test binary):
//! unpadded rows whose 16-byte chunk `c` sits at `c ^ (row % 8)`, written by 8-lane copies and
//! read by `ldmatrix` in every orientation, simulated against the CPU executor. A wrong chunk
//! position on either side reads another chunk's data.

mod codegen_common;

use attn_dsl::codegen::emit_cuda;
use attn_dsl::gpu_ir;
use attn_dsl::ir::{Function, ScalarType};
use attn_dsl::{Binding, ConstValue};
use codegen_common::sim_check::{check, flash_args, latent_args, paged_args};

const FLASH: &str = include_str!("kernels/flash_attention.rs.txt");

/// `kernel` of the flash-attention test module on `binds`, compiled with swizzling on; checks
/// that its GPU program swizzles `swizzled` allocs.
fn compile(kernel: &str, binds: &[(&str, ConstValue)], swizzled: usize) -> Function {
    std::env::set_var("ATTN_CODEGEN_ENABLE", "swizzle");
    let module = attn_dsl::frontend::parse_module_str(FLASH).expect("parse");
    let binds: Vec<Binding> = binds
        .iter()
        .map(|(n, v)| Binding::new(*n, v.clone()))
        .collect();
    let c = attn_dsl::driver::compile(&module, kernel, &binds).expect("compile");
    let f = c.specialized.ir;
    let p = gpu_ir::compile(&f).expect("gpu ir");
    let text = gpu_ir::printer::print_program(&f, &p);
    assert_eq!(
        p.allocs.iter().filter(|a| a.swizzled).count(),
        swizzled,
        "{kernel}:\n{text}"
    );
    assert!(p.allocs.iter().all(|a| !a.swizzled || a.pad == 0), "{text}");
    f
}

fn bf16() -> ConstValue {
    ConstValue::Dtype(ScalarType::Bf16)
}

/// Q (A from shared memory past K = 128 only, so here in registers), K read as B, V read
/// transposed as B: both K/V allocs swizzled (64 columns), prologue and prefetch copies.
#[test]
fn flash_attention_with_swizzled_rings_matches_the_executor() {
    let f = compile(
        "flash_fwd",
        &[
            ("T", bf16()),
            ("BLOCK_M", ConstValue::Int(64)),
            ("BLOCK_N", ConstValue::Int(32)),
            ("HEAD_DIM", ConstValue::Int(64)),
            ("CAUSAL", ConstValue::Bool(true)),
        ],
        2,
    );
    assert!(emit_cuda(&f).expect("emit").source.contains("& 7)"));
    let args = flash_args(ScalarType::Bf16, 2, 75, 64, 80);
    check("swizzled flash", &f, [2, 2, 1], args, 2e-2);
}

/// One latent tile read both ways (`ldmatrix` and `ldmatrix.trans`) on the 2 × 2 warp grid.
#[test]
fn latent_tile_swizzled_and_read_both_ways_matches_the_executor() {
    let f = compile(
        "latent_fwd",
        &[
            ("T", bf16()),
            ("BLOCK_M", ConstValue::Int(32)),
            ("BLOCK_N", ConstValue::Int(32)),
            ("HEAD_DIM", ConstValue::Int(64)),
        ],
        1,
    );
    check(
        "swizzled latent",
        &f,
        [3, 2, 1],
        latent_args(2, 75, 64, 83),
        2e-2,
    );
}

/// Rows gathered through a block table into swizzled rings.
#[test]
fn paged_gathers_into_swizzled_rings_match_the_executor() {
    let (d, page, heads, seq) = (64usize, 16usize, 2usize, 75usize);
    let f = compile(
        "paged_fwd",
        &[
            ("T", bf16()),
            ("BLOCK_M", ConstValue::Int(64)),
            ("BLOCK_N", ConstValue::Int(16)),
            ("HEAD_DIM", ConstValue::Int(d as i64)),
            ("PAGE", ConstValue::Int(page as i64)),
        ],
        2,
    );
    let args = paged_args(heads, seq, d, page, 85);
    check("swizzled paged", &f, [2, heads as u32, 1], args, 2e-2);
}
