//! Emitted CUDA run on the CPU (g++ and `codegen_common/sim_prelude.h`: one std::thread per
//! CUDA thread) against the CPU executor, on random inputs with NaN-poisoned outputs. This
//! checks the emitter's data movement (layouts, shared memory, barriers, shuffles, mma
//! fragments) without a GPU. Skipped when g++ is missing.

mod codegen_common;

use attn_dsl::codegen::emit_cuda;
use attn_dsl::interp::HostBuffer;
use attn_dsl::ir::ScalarType;
use attn_dsl::kernel::ScalarArg;
use codegen_common::cpu_sim::SimArg;
use codegen_common::sim_check::{
    check, check_each, flash_args, i32s, input, latent_args, output, paged_args,
};

#[test]
fn attention_matches_the_executor() {
    // (64, 32, 64) on 2 warps: two 16-row slabs per warp, each B fragment feeding both.
    for (bm, bn, d, seq, warps) in [
        (16, 32, 64, 50, 4),
        (64, 64, 64, 70, 4),
        (64, 32, 64, 70, 2),
    ] {
        let f = codegen_common::attention(bm, bn, d, warps);
        let n = seq * d;
        let args = vec![
            input(ScalarType::Bf16, n, 1),
            input(ScalarType::Bf16, n, 2),
            input(ScalarType::Bf16, n, 3),
            output(ScalarType::Bf16, n),
            i32s(seq as i32),
            SimArg::Scalar(ScalarArg::F32(0.125)),
        ];
        let grid = [seq.div_ceil(bm) as u32, 1, 1];
        check(
            &format!("attention {bm}x{bn}x{d} on {warps} warps"),
            &f,
            grid,
            args,
            2e-2,
        );
    }
}

/// Decode-shaped attention (16 query rows, 4 warps): the warps split the key columns of the
/// scores and the head columns of the accumulator (`Mma [1, 4]`), so the row max/sum take the
/// cross-warp step and the P·V dot stages P; the loop carries the accumulator.
#[test]
fn small_m_column_split_attention_matches_the_executor() {
    for (bn, d, seq) in [(32, 64, 50), (64, 32, 90), (128, 64, 150), (512, 32, 600)] {
        let f = codegen_common::attention(16, bn, d, 4);
        let src = emit_cuda(&f).expect("emit").source;
        assert!(
            src.contains("attn_red"),
            "no cross-warp row reduction:\n{src}"
        );
        let n = seq * d;
        let args = vec![
            input(ScalarType::Bf16, n, 31),
            input(ScalarType::Bf16, n, 32),
            input(ScalarType::Bf16, n, 33),
            output(ScalarType::Bf16, n),
            i32s(seq as i32),
            SimArg::Scalar(ScalarArg::F32(0.125)),
        ];
        let grid = [seq.div_ceil(16) as u32, 1, 1];
        check(
            &format!("split attention 16x{bn}x{d}"),
            &f,
            grid,
            args,
            2e-2,
        );
    }
}

/// Attention whose mask and V guard come from a loop over ranges (see
/// `kernels/range_attention.rs.txt`): the V guard is the range part alone, so a copy that
/// ignored it, or recomputed the loop wrong, would add (or drop) V rows the executor zeroes
/// (or keeps). The recomputed loop (V copied; with scores that see the ranges, with the loop
/// only the copy runs, or with a key-vector loop the copy evaluates per row) and the staged
/// fallback (`mix`).
#[test]
fn range_masked_attention_matches_the_executor() {
    for (mix, score_ranges, key_ranges) in [
        (false, true, false),
        (false, false, false),
        (false, true, true),
        (true, true, false),
    ] {
        let f = codegen_common::range_attention(mix, score_ranges, key_ranges);
        let src = emit_cuda(&f).expect("emit").source;
        if !mix {
            assert!(
                src.matches("attn_cp_async16(").count() >= 4,
                "K and V copies (prologue and prefetch):\n{src}"
            );
        }
        let (heads, seq, d) = (2usize, 150usize, 64usize);
        let n = heads * seq * d;
        let args = vec![
            input(ScalarType::Bf16, n, 41),
            input(ScalarType::Bf16, n, 42),
            input(ScalarType::Bf16, n, 43),
            output(ScalarType::Bf16, n),
            SimArg::Buf(HostBuffer::I32(codegen_common::RANGES.to_vec())),
            i32s(seq as i32),
            SimArg::Scalar(ScalarArg::F32(0.125)),
        ];
        let grid = [seq.div_ceil(64) as u32, heads as u32, 1];
        let label = format!("range attention mix={mix} scores={score_ranges} keys={key_ranges}");
        check(&label, &f, grid, args, 2e-2);
    }
}

#[test]
fn matmul_matches_the_executor() {
    for t in [ScalarType::Bf16, ScalarType::F32] {
        let (m, n, k) = (70usize, 50usize, 40usize);
        let f = codegen_common::matmul(t, 32, 32, 16, 4);
        let args = vec![
            input(t, m * k, 4),
            input(t, k * n, 5),
            output(ScalarType::F32, m * n),
            i32s(m as i32),
            i32s(n as i32),
            i32s(k as i32),
        ];
        let grid = [m.div_ceil(32) as u32, n.div_ceil(32) as u32, 1];
        check(&format!("matmul {t}"), &f, grid, args, 1e-5);
    }
}

#[test]
fn softmax_and_reductions_match_the_executor() {
    let (rows, cols) = (37usize, 100usize);
    let f = codegen_common::softmax(16, 128, 4);
    let args = vec![
        input(ScalarType::Bf16, rows * cols, 6),
        output(ScalarType::Bf16, rows * cols),
        i32s(rows as i32),
        i32s(cols as i32),
    ];
    check("softmax", &f, [rows.div_ceil(16) as u32, 1, 1], args, 1e-2);
    for (m, n, w) in [(16usize, 32usize, 4u32), (8, 4, 2)] {
        let f = codegen_common::reduce_trans(m, n, w);
        let args = vec![
            input(ScalarType::F32, m * n, 7),
            output(ScalarType::F32, n),
            output(ScalarType::F32, 1),
        ];
        check(&format!("reduce_trans {m}x{n}"), &f, [1, 1, 1], args, 1e-6);
    }
}

#[test]
fn control_flow_and_vec_add_match_the_executor() {
    let f = codegen_common::control_flow(64, 2);
    let args = vec![output(ScalarType::I32, 64), i32s(5)];
    check("control_flow", &f, [1, 1, 1], args, 0.0);
    let f = codegen_common::vec_add(64, 1);
    let args = vec![
        input(ScalarType::F32, 100, 8),
        input(ScalarType::F32, 100, 9),
        output(ScalarType::F32, 100),
        i32s(100),
    ];
    check("vec_add", &f, [2, 1, 1], args, 0.0);
}

#[test]
fn dsl_flash_attention_matches_the_executor() {
    use attn_dsl::{Binding, ConstValue};
    const FLASH: &str = include_str!("kernels/flash_attention.rs.txt");
    let module = attn_dsl::frontend::parse_module_str(FLASH).expect("parse");
    for (t, bm, bn, d, causal) in [
        (ScalarType::Bf16, 64, 64, 64, true),
        (ScalarType::Bf16, 16, 32, 64, false),
        (ScalarType::F16, 32, 16, 32, true),
    ] {
        let binds = [
            Binding::new("T", ConstValue::Dtype(t)),
            Binding::new("BLOCK_M", ConstValue::Int(bm)),
            Binding::new("BLOCK_N", ConstValue::Int(bn)),
            Binding::new("HEAD_DIM", ConstValue::Int(d)),
            Binding::new("CAUSAL", ConstValue::Bool(causal)),
        ];
        let c = attn_dsl::driver::compile(&module, "flash_fwd", &binds).expect("compile");
        // A 64-wide accumulator is 32 slots per thread: its rescale skips the multiplies
        // where the warp's row factors are all 1, and the result must not change.
        assert_eq!(
            c.cuda.source.contains("attn_warp_any"),
            bm * d / 128 >= 32,
            "row-scale skip on {bm}x{d}"
        );
        let (heads, seq) = (2usize, 75usize);
        let args = flash_args(t, heads, seq, d as usize, 10);
        let grid = [seq.div_ceil(bm as usize) as u32, heads as u32, 1];
        let label = format!("flash_fwd {t} {bm}x{bn}x{d} causal={causal}");
        check(&label, &c.specialized.ir, grid, args, 2e-2);
    }
}

/// Three- and four-stage rings against the executor, on sequences of fewer key tiles than
/// stages (the prologue's guards), as many, and more (the ring wraps).
#[test]
fn deeper_pipelines_match_the_executor() {
    use attn_dsl::{Binding, ConstValue};
    const FLASH: &str = include_str!("kernels/flash_attention.rs.txt");
    let module = attn_dsl::frontend::parse_module_str(FLASH).expect("parse");
    let binds = [
        Binding::new("T", ConstValue::Dtype(ScalarType::Bf16)),
        Binding::new("BLOCK_M", ConstValue::Int(64)),
        Binding::new("BLOCK_N", ConstValue::Int(16)),
        Binding::new("HEAD_DIM", ConstValue::Int(32)),
        Binding::new("CAUSAL", ConstValue::Bool(false)),
    ];
    let base = attn_dsl::driver::compile(&module, "flash_fwd", &binds).expect("compile");
    for (stages, seq) in [(3, 20usize), (3, 75), (4, 40), (4, 130)] {
        let mut f = base.specialized.ir.clone();
        f.num_stages = stages;
        let src = emit_cuda(&f).expect("emit").source;
        assert!(
            src.contains(&format!("attn_cp_wait<{}>();", stages - 2)),
            "{stages} stages"
        );
        let heads = 2usize;
        let args = flash_args(ScalarType::Bf16, heads, seq, 32, 50);
        let grid = [seq.div_ceil(64) as u32, heads as u32, 1];
        check(
            &format!("flash {stages} stages, seq {seq}"),
            &f,
            grid,
            args,
            2e-2,
        );
    }
}

/// K/V tiles gathered through a block table: each copied row's address goes through its
/// block-table entry (a load inside the copy's address); the pages are a random
/// permutation, and the sequences end mid-tile and mid-page.
#[test]
fn paged_gathers_match_the_executor() {
    use attn_dsl::{Binding, ConstValue};
    const FLASH: &str = include_str!("kernels/flash_attention.rs.txt");
    let module = attn_dsl::frontend::parse_module_str(FLASH).expect("parse");
    let (d, page, heads) = (32usize, 16usize, 2usize);
    for (bm, bn, stages, seq) in [(64, 16, 2, 75usize), (64, 32, 2, 40), (64, 16, 3, 130)] {
        let binds = [
            Binding::new("T", ConstValue::Dtype(ScalarType::Bf16)),
            Binding::new("BLOCK_M", ConstValue::Int(bm)),
            Binding::new("BLOCK_N", ConstValue::Int(bn)),
            Binding::new("HEAD_DIM", ConstValue::Int(d as i64)),
            Binding::new("PAGE", ConstValue::Int(page as i64)),
        ];
        let c = attn_dsl::driver::compile(&module, "paged_fwd", &binds).expect("compile");
        let mut f = c.specialized.ir.clone();
        f.num_stages = stages;
        let src = emit_cuda(&f).expect("emit").source;
        // K and V: one copy per prologue stage and one prefetch each, every row's source
        // address through its block-table entry.
        assert_eq!(
            src.matches("attn_cp_async16(").count(),
            2 * stages as usize,
            "K and V copied asynchronously:\n{src}"
        );
        assert!(
            src.contains("attn_ld(((bt"),
            "rows gathered through the block table:\n{src}"
        );
        let args = paged_args(heads, seq, d, page, 60 + seq as u64);
        let grid = [seq.div_ceil(bm as usize) as u32, heads as u32, 1];
        check(
            &format!("paged {bm}x{bn}, {stages} stages, seq {seq}"),
            &f,
            grid,
            args,
            2e-2,
        );
    }
}

/// One K tile read by both dots (QKᵀ as loaded, PV through `trans`): the GPU program copies
/// it once and each `mma` reads the alloc with its own `ldmatrix` orientation, in the
/// four-warp row layout, in the column split of 16-row tiles and on the 2 × 2 warp grid of
/// 32-row tiles.
#[test]
fn latent_tile_shared_by_both_dots_matches_the_executor() {
    use attn_dsl::gpu_ir::{self, GpuOp};
    use attn_dsl::{Binding, ConstValue};
    const FLASH: &str = include_str!("kernels/flash_attention.rs.txt");
    let module = attn_dsl::frontend::parse_module_str(FLASH).expect("parse");
    // (16, 32, 128): one 8-key column tile per warp over 8 k-steps, so QKᵀ alternates two
    // partial accumulators.
    for (bm, bn, d) in [
        (64, 32, 64),
        (16, 32, 64),
        (16, 64, 32),
        (32, 32, 64),
        (16, 32, 128),
    ] {
        let binds = [
            Binding::new("T", ConstValue::Dtype(ScalarType::Bf16)),
            Binding::new("BLOCK_M", ConstValue::Int(bm)),
            Binding::new("BLOCK_N", ConstValue::Int(bn)),
            Binding::new("HEAD_DIM", ConstValue::Int(d)),
        ];
        let c = attn_dsl::driver::compile(&module, "latent_fwd", &binds).expect("compile");
        let f = &c.specialized.ir;
        let p = gpu_ir::compile(f).expect("gpu ir");
        let mut shared_b = Vec::new();
        gpu_ir::walk_block(&p.body, &mut |o| {
            if let GpuOp::Mma {
                b: gpu_ir::OperandSource::Shared { alloc, trans, .. },
                ..
            } = o
            {
                shared_b.push((*alloc, *trans));
            }
        });
        let text = gpu_ir::printer::print_program(f, &p);
        assert_eq!(shared_b.len(), 2, "both dots read B from shared:\n{text}");
        assert_eq!(shared_b[0].0, shared_b[1].0, "one alloc:\n{text}");
        assert_ne!(shared_b[0].1, shared_b[1].1, "read both ways:\n{text}");
        let src = emit_cuda(f).expect("emit").source;
        assert_eq!(
            src.contains("attn_kpart"),
            d == 128,
            "{bm}x{bn}x{d}: partial accumulators"
        );
        assert!(
            src.contains("row sums kept per lane"),
            "{bm}x{bn}x{d}: deferred row sum:\n{src}"
        );
        let (heads, seq) = (2usize, 75usize);
        let args = latent_args(heads, seq, d as usize, 40);
        let grid = [seq.div_ceil(bm as usize) as u32, heads as u32, 1];
        check(&format!("latent_fwd {bm}x{bn}x{d}"), f, grid, args, 2e-2);
    }
}

/// Row reductions, row broadcasts and a layout conversion on `Mma` fragments with tails
/// (rows < 16 per slab, columns < 8, two slabs per warp, a warp without its second slab)
/// against the executor, and
/// the reductions against the simulator's own `s`: `max`/`min` and the i32 reductions must be
/// exact, the f32 sum (a tree over the quad instead of an ascending sum) close.
#[test]
fn mma_fragment_row_ops_match_the_executor() {
    for (t, m, k, n, w) in [
        (ScalarType::Bf16, 8, 2, 4, 1),
        (ScalarType::Bf16, 32, 32, 16, 2),
        (ScalarType::F16, 64, 16, 8, 2),
        (ScalarType::Bf16, 64, 16, 16, 3),
        (ScalarType::Bf16, 16, 16, 64, 1),
        // One slab, columns split over the warps (Mma [1, 4]), and a fallback (16 columns do
        // not split over 4 warps in 8-column tiles).
        (ScalarType::Bf16, 16, 16, 32, 4),
        (ScalarType::Bf16, 16, 16, 64, 4),
        (ScalarType::F16, 8, 16, 64, 2),
        (ScalarType::Bf16, 16, 16, 16, 4),
        // Fewer slabs than warps, more than one: warp grids [2, 2], [3, 2] (a grid row short
        // of its second slab), [2, 4] and [4, 2].
        (ScalarType::Bf16, 32, 32, 64, 4),
        (ScalarType::Bf16, 64, 16, 32, 6),
        (ScalarType::F16, 32, 16, 64, 8),
        (ScalarType::Bf16, 64, 16, 32, 8),
    ] {
        let f = codegen_common::mma_rows(t, m, k, n, w);
        let slabs = m.div_ceil(16);
        if slabs > 1 && slabs < w as usize {
            let src = emit_cuda(&f).expect("emit").source;
            assert!(
                src.contains("(attn_warp % "),
                "{m}x{n}/{w}: no warp grid:\n{src}"
            );
        }
        let args = vec![
            input(t, m * k, 20),
            input(t, k * n, 21),
            input(ScalarType::F32, m, 22),
            input(ScalarType::F32, m * n, 23),
            output(ScalarType::F32, m * n),
            output(ScalarType::F32, m),
            output(ScalarType::F32, m),
            output(ScalarType::F32, m),
            output(ScalarType::I32, m),
            output(ScalarType::I32, m),
            output(ScalarType::F32, m * n),
            output(ScalarType::F32, m * n),
        ];
        let label = format!("mma_rows {t} {m}x{k}x{n}/{w}w");
        // s (dot) 1e-5; the f32 row sum and the softmax 1e-5 (reduction order); y exact.
        let tol = |i: usize| if i == 11 { 0.0 } else { 1e-5 };
        let Some(got) = check_each(&label, &f, [1, 1, 1], args, tol) else {
            return;
        };
        let s = &got[4];
        for r in 0..m {
            let row = &s[r * n..(r + 1) * n];
            let max = row.iter().cloned().fold(f64::NAN, f64::max);
            let min = row.iter().cloned().fold(f64::NAN, f64::min);
            assert_eq!(got[5][r], max, "{label}: row {r} max");
            assert_eq!(got[6][r], min, "{label}: row {r} min");
            let q: Vec<i64> = row
                .iter()
                .map(|&x| (x as f32 * 8.0) as i32 as i64)
                .collect();
            assert_eq!(
                got[8][r] as i64,
                q.iter().sum::<i64>(),
                "{label}: row {r} isum"
            );
            assert_eq!(
                got[9][r] as i64,
                *q.iter().max().expect("row"),
                "{label}: row {r} imax"
            );
            let e: f64 = row.iter().map(|&x| ((x - max) as f32).exp() as f64).sum();
            assert!(
                (got[7][r] - e).abs() <= 1e-5 * e,
                "{label}: row {r} sum {} vs {e}",
                got[7][r]
            );
        }
    }
}
