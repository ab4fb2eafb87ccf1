//! Properties of the emitted source that need no compiler: determinism, content hash,
//! readability (DSL parameter names, line comments) and the shared-memory report.

mod codegen_common;

use attn_dsl::codegen::{content_hash, emit_cuda, CodegenError};
use attn_dsl::ir::ScalarType::{Bf16, F16, F32};
use attn_dsl::ir::{Function, OpKind, Scalar};

#[test]
fn emission_is_deterministic() {
    for (label, f) in codegen_common::all_programs() {
        let a = emit_cuda(&f).expect("emit");
        let b = emit_cuda(&f.clone()).expect("emit");
        assert_eq!(a.source, b.source, "{label}: two emissions differ");
        assert_eq!(a.hash, b.hash, "{label}");
        assert_eq!(
            a.hash,
            content_hash(&a.source),
            "{label}: hash is not the content hash"
        );
        assert_eq!(a.hash.len(), 64, "{label}: hash is not hex blake3");
    }
}

#[test]
fn hash_changes_when_the_ir_changes() {
    let base = emit_cuda(&codegen_common::vec_add(128, 4)).expect("emit");
    let wider = emit_cuda(&codegen_common::vec_add(256, 4)).expect("emit");
    assert_ne!(base.hash, wider.hash);
    // Same shapes, one constant changed.
    let mut f = codegen_common::vec_add(128, 4);
    let c = f
        .ops
        .iter_mut()
        .find(|o| matches!(o.kind, OpKind::Const(Scalar::Int(128, _))))
        .expect("block size constant");
    c.kind = OpKind::Const(Scalar::Int(127, attn_dsl::ir::ScalarType::I32));
    let changed = emit_cuda(&f).expect("emit");
    assert_ne!(base.hash, changed.hash);
    assert_ne!(base.source, changed.source);
    // Warps change the launch shape and the code.
    let warps = emit_cuda(&codegen_common::vec_add(128, 2)).expect("emit");
    assert_ne!(base.hash, warps.hash);
}

#[test]
fn source_keeps_parameter_names_and_line_comments() {
    let k = emit_cuda(&codegen_common::attention(16, 32, 64, 4)).expect("emit");
    assert_eq!(k.entry, "attention_16x32x64");
    assert_eq!(k.block_threads, 128);
    for needle in [
        "#include \"attn_prelude.cuh\"",
        "extern \"C\" __global__ void __launch_bounds__(128) attention_16x32x64(",
        "const bf16* __restrict__ q,",
        "bf16* __restrict__ o,",
        "int seq_len,",
        "float softmax_scale",
        "// L80: ",
        "// L84: ",
        "// L88: ",
        "attn_mma_bf16_16816(",
        "acc_",
        "m_i_",
    ] {
        assert!(
            k.source.contains(needle),
            "missing `{needle}` in:\n{}",
            k.source
        );
    }
    assert!(
        !k.source.contains("#include <"),
        "no system includes allowed"
    );
    assert_eq!(k.params.len(), 6);
    assert_eq!(k.params[0].name, "q");
}

#[test]
fn no_shared_memory_without_data_exchange() {
    let k = emit_cuda(&codegen_common::vec_add(1024, 4)).expect("emit");
    assert_eq!(k.shared_bytes, 0);
    assert!(!k.source.contains("__syncthreads"));
}

/// Bytes the tensor-core dot stages: A as [M16][K16 + 8] and Bᵀ as [N8][K16 + 8] 16-bit
/// values (B at a 16-byte boundary). With a 16-row slab for each of the `warps` warps the
/// accumulator stays in registers (`Mma` fragments); otherwise it also passes through the
/// scratch buffer as f32 [M][N].
fn mma_scratch(m: usize, k: usize, n: usize, warps: usize) -> usize {
    let pad = |x: usize, to: usize| x.div_ceil(to) * to;
    let a = pad(pad(m, 16) * (pad(k, 16) + 8) * 2, 16);
    let b = pad(n, 8) * (pad(k, 16) + 8) * 2;
    if m.div_ceil(16) >= warps {
        a + b
    } else {
        (a + b).max(m * n * 4)
    }
}

#[test]
fn shared_bytes_of_a_dot_kernel_is_exact() {
    // Only the dot exchanges data in these (loads/stores are per element, except the
    // index broadcasts, which need at most m*n*4 bytes: below the dot's own need).
    for (m, k, n) in [(64, 64, 64), (32, 16, 64), (8, 4, 2), (16, 128, 32)] {
        let fb = codegen_common::small_dot(Bf16, m, k, n, 4);
        let bf = emit_cuda(&fb).expect("emit");
        // Operand tiles of 16-multiples with an accumulator in fragments are async-copied
        // into allocs instead: [rows][cols (+ 8)] along each one's contiguous axis.
        let staged_through_scratch = mma_scratch(m, k, n, 4);
        // Fewer slabs than warps: a warp grid whose columns split N (rows: the largest
        // divisor of the warp count not above the slab count).
        let slabs = m.div_ceil(16);
        let grid_cols = 4 / (1..=slabs).rev().find(|r| 4 % r == 0).unwrap_or(1);
        let in_fragments = slabs >= 4 || n % (8 * grid_cols) == 0;
        let copied = [m, k, n].iter().all(|d| d % 16 == 0) && in_fragments;
        // Streaming copies (fewer than 128 rows) of whole 64-column rows are swizzled,
        // unpadded; the others padded by one 16-byte chunk.
        // Swizzled allocs are whole 1024-byte atoms at 1024-byte offsets; A is placed first.
        let alloc = |rows: usize, cols: usize| {
            let swizzled = cols.is_multiple_of(64) && rows.is_multiple_of(8);
            let pad = if swizzled { 0 } else { 8 };
            let align = if swizzled { 1024 } else { 16 };
            ((rows * (cols + pad) * 2).next_multiple_of(align), align)
        };
        let ((a_bytes, _), (b_bytes, b_align)) = (alloc(m, k), alloc(k, n));
        let want = if copied {
            a_bytes.next_multiple_of(b_align) + b_bytes
        } else {
            staged_through_scratch
        };
        assert_eq!(bf.shared_bytes as usize, want, "bf16 {m}x{k}x{n}");
        let hf = emit_cuda(&codegen_common::small_dot(F16, m, k, n, 4)).expect("emit");
        assert_eq!(hf.shared_bytes, bf.shared_bytes, "f16 {m}x{k}x{n}");
        let f = emit_cuda(&codegen_common::small_dot(F32, m, k, n, 4)).expect("emit");
        assert_eq!(
            f.shared_bytes as usize,
            (m * k + k * n) * 4,
            "f32 {m}x{k}x{n}"
        );
    }
    // 64x64x64 bf16: A [64][64] and B [64][64] swizzled allocs of 2-byte elements.
    let k = emit_cuda(&codegen_common::small_dot(Bf16, 64, 64, 64, 4)).expect("emit");
    assert_eq!(k.shared_bytes, 16384);
}

#[test]
fn oversized_shared_memory_is_an_error() {
    let f: Function = codegen_common::small_dot(F32, 128, 256, 128, 4);
    match emit_cuda(&f) {
        Err(CodegenError::SharedMemory { needed, limit, .. }) => {
            assert_eq!(needed, (128 * 256 + 256 * 128) * 4);
            assert_eq!(limit, 227 * 1024);
        }
        other => panic!("expected a shared-memory error, got {other:?}"),
    }
}

#[test]
fn bad_warp_count_is_an_error() {
    let mut f = codegen_common::vec_add(128, 4);
    f.num_warps = 0;
    assert_eq!(emit_cuda(&f), Err(CodegenError::NumWarps(0)));
    f.num_warps = 33;
    assert_eq!(emit_cuda(&f), Err(CodegenError::NumWarps(33)));
}

/// `x[r * 64 + c]` copied through a 2-D pointer tile made by broadcasting `arange` rows and
/// columns: the index tiles are recomputed per element, so no data moves between threads.
#[test]
fn broadcast_of_an_index_tile_needs_no_barrier() {
    use attn_dsl::ir::{BinaryOp, Builder, Function};
    let mut f = Function::new("copy2d", 4);
    let x = f.add_param("x", codegen_common::ptr(F32));
    let y = f.add_param("y", codegen_common::out_ptr(F32));
    let mut b = Builder::new(&mut f);
    let r = b.arange(32).expect("arange");
    let c = b.arange(64).expect("arange");
    let r2 = b.expand_dims(r, 1).expect("unsqueeze");
    let c2 = b.expand_dims(c, 0).expect("unsqueeze");
    let r2 = b.broadcast(r2, &[32, 64]).expect("broadcast");
    let c2 = b.broadcast(c2, &[32, 64]).expect("broadcast");
    let w = b.const_i32(64);
    let rw = b.binary(BinaryOp::Mul, r2, w).expect("mul");
    let off = b.binary(BinaryOp::Add, rw, c2).expect("add");
    let px = b.add_ptr(x, off).expect("ptr");
    let py = b.add_ptr(y, off).expect("ptr");
    let v = b.load(px, None, None).expect("load");
    b.store(py, v, None).expect("store");
    b.finish();
    let k = emit_cuda(&f).expect("emit");
    assert!(!k.source.contains("__syncthreads"), "{}", k.source);
    assert_eq!(k.shared_bytes, 0);
    assert!(k.source.contains("recomputed where used"), "{}", k.source);
}

/// The test kernels' bf16 flash-attention specialization, with its label.
fn bf16_flash_kernel() -> (String, attn_dsl::codegen::CudaKernel) {
    codegen_common::dsl_kernels()
        .into_iter()
        .find(|(l, _)| l.starts_with("flash_fwd<T=Dtype(Bf16)"))
        .expect("bf16 flash kernel")
}

/// The flash-attention inner loop keeps scores, row statistics, probabilities and the
/// accumulator in mma fragments: K and V arrive by `cp.async` one iteration ahead and are
/// read with `ldmatrix` (one barrier per tile), Q is held as A fragments from before the
/// loop, P is repacked into A fragments in registers, row reductions are quad shuffles, and
/// nothing needs a layout conversion.
#[test]
fn attention_inner_loop_stays_in_registers() {
    let (label, k) = bf16_flash_kernel();
    let start = k.source.find("for (int start").expect("key loop");
    // The loop, up to the epilogue's store through shared memory (two barriers of its own).
    let epilogue = k.source.find("attn_staged").expect("the output staged");
    let body = &k.source[start..epilogue];
    let before = &k.source[..start];
    assert_eq!(body.matches("__syncthreads").count(), 1, "{label}:\n{body}");
    for needle in [
        "attn_cp_async16(",
        "attn_cp_wait<0>()",
        "attn_ldsm_x4(",
        "attn_ldsm_x4_trans(",
        "attn_shfl_xor(acc, 1)",
        "attn_shfl_xor(acc, 2)",
        "attn_pack_bf16(",
        "q_tile",
        "register read",
    ] {
        assert!(body.contains(needle), "{label}: no `{needle}` in:\n{body}");
    }
    assert!(before.contains("held as mma fragments"), "{label}");
    for absent in [
        "float* sx",
        "layout conversion",
        "sa[",
        "sb[",
        "float sum",
        "attn_ld(",
    ] {
        assert!(!body.contains(absent), "{label}: `{absent}` in:\n{body}");
    }
}

/// The flash kernel's bf16 output is packed straight from its f32 accumulator: packing
/// rounds to nearest even as the cast does, so the cast's own rounding converts (one a
/// element, before the pack's) would only repeat it.
#[test]
fn staged_output_packs_the_accumulator() {
    let (label, k) = bf16_flash_kernel();
    let cast = k
        .source
        .rfind("cast::<bf16>(acc)")
        .expect("the output's cast");
    let epilogue = &k.source[cast..];
    let acc = epilogue
        .split("attn_round_bf16(")
        .nth(1)
        .and_then(|s| s.split('[').next())
        .expect("the cast's operand");
    let pack = epilogue
        .lines()
        .find(|l| l.contains("attn_sts2("))
        .expect("the staged fragments");
    assert!(
        pack.contains(&format!("attn_pack_bf16({acc}[s], {acc}[(s + 1)])")),
        "{label}: the pack does not read `{acc}`:\n{pack}"
    );
}
