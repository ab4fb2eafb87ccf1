//! The GPU IR on the proof kernels: which loads become async copies, which loops are
//! pipelined, how many barriers each loop body holds, that the verifier rejects a program
//! whose accesses are not ordered, and that the simulator of emitted CUDA notices a missing
//! wait (so the parity tests of `codegen_sim` can fail on a scheduling bug).

mod codegen_common;

use attn_dsl::gpu_ir::{self, printer::print_program, GpuOp, GpuProgram, Stage};
use attn_dsl::ir::{Function, ScalarType};
use attn_dsl::{Binding, ConstValue};
use codegen_common::cpu_sim::{self, SimArg};

fn flash(d: i64, bm: i64, bn: i64, causal: bool) -> Function {
    const FLASH: &str = include_str!("kernels/flash_attention.rs.txt");
    let module = attn_dsl::frontend::parse_module_str(FLASH).expect("parse");
    let binds = [
        Binding::new("T", ConstValue::Dtype(ScalarType::Bf16)),
        Binding::new("BLOCK_M", ConstValue::Int(bm)),
        Binding::new("BLOCK_N", ConstValue::Int(bn)),
        Binding::new("HEAD_DIM", ConstValue::Int(d)),
        Binding::new("CAUSAL", ConstValue::Bool(causal)),
    ];
    attn_dsl::driver::compile(&module, "flash_fwd", &binds)
        .expect("compile")
        .specialized
        .ir
}

/// The GPU program of `range_attention(..)` and its text, its tile loop pipelined.
fn pipelined_range_attention(a: bool, b: bool, c: bool) -> (GpuProgram, String) {
    let f = codegen_common::range_attention(a, b, c);
    let p = gpu_ir::compile(&f).expect("gpu ir");
    let text = print_program(&f, &p);
    assert!(first_loop(&p).1, "tile loop not pipelined:\n{text}");
    (p, text)
}

/// Copies of a loop body that fill the prefetch stage.
fn prefetched(body: &gpu_ir::GpuBlock) -> usize {
    body.ops
        .iter()
        .filter(|o| matches!(o, GpuOp::AsyncCopy(c) if c.stage == Stage::Next))
        .count()
}

/// The first `for` of the program and its body.
fn first_loop(p: &GpuProgram) -> (&gpu_ir::GpuBlock, bool) {
    p.body
        .ops
        .iter()
        .find_map(|o| match o {
            GpuOp::For {
                body, pipelined, ..
            } => Some((body, *pipelined)),
            _ => None,
        })
        .expect("a loop")
}

#[test]
fn flash_attention_k_and_v_are_pipelined_with_one_barrier_per_tile() {
    let f = flash(128, 64, 64, true);
    let p = gpu_ir::compile(&f).expect("gpu ir");
    let text = print_program(&f, &p);
    assert_eq!(p.operand_allocs().len(), 2, "{text}");
    for a in p.operand_allocs() {
        assert_eq!((a.rows, a.cols, a.stages), (64, 128, 2), "{text}");
    }
    let (body, pipelined) = first_loop(&p);
    assert!(pipelined, "{text}");
    assert_eq!(gpu_ir::verify::barriers_in(body), 1, "{text}");
    let next_copies = prefetched(body);
    assert_eq!(next_copies, 2, "{text}");
    // K is contiguous along D (its rows in shared memory are keys), V along D too but it is
    // the B operand [keys, D]: read transposed.
    assert!(text.contains("b: ldmatrix %a0[cur]"), "{text}");
    assert!(text.contains("b: ldmatrix.trans %a1[cur]"), "{text}");
    // Stages: 2 × 64 rows × 128 × 2 bytes each (streaming copies of 64 rows are swizzled,
    // unpadded), K and V alive together.
    assert!(
        p.operand_allocs().iter().all(|a| a.swizzled && a.pad == 0),
        "{text}"
    );
    // The output's staging buffer (64 × (128 + 8)) lies over the rings, dead by then.
    assert_eq!(p.alloc_bytes, 2 * 2 * 64 * 128 * 2, "{text}");
}

/// `num_stages = 3`: the prologue fills two buffers (one commit group each), the body waits
/// until one group is left in flight and still holds one barrier, and the rings have three
/// buffers.
#[test]
fn three_stages_prefetch_two_tiles_ahead_with_one_barrier_per_tile() {
    let mut f = flash(64, 64, 32, false);
    f.num_stages = 3;
    let p = gpu_ir::compile(&f).expect("gpu ir");
    let text = print_program(&f, &p);
    assert!(p.operand_allocs().iter().all(|a| a.stages == 3), "{text}");
    let prologue: Vec<Stage> = p
        .body
        .ops
        .iter()
        .filter_map(|o| match o {
            GpuOp::AsyncCopy(c) => Some(c.stage),
            _ => None,
        })
        .collect();
    let k_v = |k| [Stage::Fixed(k), Stage::Fixed(k)];
    assert!(prologue.ends_with(&[k_v(0), k_v(1)].concat()), "{text}");
    let (body, pipelined) = first_loop(&p);
    assert!(pipelined, "{text}");
    assert_eq!(
        body.ops.first(),
        Some(&GpuOp::Wait { pending: 1 }),
        "{text}"
    );
    assert_eq!(gpu_ir::verify::barriers_in(body), 1, "{text}");
    assert!(
        body.ops.iter().any(|o| matches!(o, GpuOp::AsyncCopy(c)
            if c.stage == Stage::Next && c.at == gpu_ir::CopyAt::Ahead(2))),
        "{text}"
    );
}

#[test]
fn verifier_rejects_a_loop_without_its_barrier() {
    let f = flash(64, 64, 64, false);
    let mut p = gpu_ir::compile(&f).expect("gpu ir");
    let body = p
        .body
        .ops
        .iter_mut()
        .find_map(|o| match o {
            GpuOp::For { body, .. } => Some(body),
            _ => None,
        })
        .expect("loop");
    body.ops.retain(|o| !matches!(o, GpuOp::Barrier { .. }));
    let e = gpu_ir::verify::verify(&f, &p).expect_err("unordered program accepted");
    // Both hazards of the missing barrier: the refill of the buffer the last iteration read,
    // and this iteration's reads of other threads' copies.
    let found = gpu_ir::sync::check(&p.body);
    assert!(
        found.iter().any(|u| u.what.contains("still being read")),
        "{e}"
    );
    assert!(found.iter().any(|u| u.what.contains("visible")), "{e}");
    body_without_wait(&mut p);
    let e = gpu_ir::verify::verify(&f, &p).expect_err("unordered program accepted");
    let found = gpu_ir::sync::check(&p.body);
    assert!(found.iter().any(|u| u.what.contains("waited")), "{e}");
}

fn body_without_wait(p: &mut GpuProgram) {
    for o in &mut p.body.ops {
        if let GpuOp::For { body, .. } = o {
            body.ops.retain(|o| !matches!(o, GpuOp::Wait { .. }));
        }
    }
}

#[test]
fn wide_loop_invariant_a_is_read_from_shared_memory() {
    // D = 256: Q (the A operand of QKᵀ, loaded before the loop) would take 64 registers as
    // fragments; it is copied once and read with ldmatrix per k-step instead.
    let f = flash(256, 64, 32, true);
    let p = gpu_ir::compile(&f).expect("gpu ir");
    let text = print_program(&f, &p);
    assert_eq!(p.operand_allocs().len(), 3, "{text}");
    assert!(text.contains("a: ldmatrix %a0"), "{text}");
    let q = &p.allocs[0];
    assert_eq!((q.rows, q.cols, q.stages), (64, 256, 1), "{text}");
}

/// A mask OR-ed over a runtime list of ranges (a loop carrying the mask tile, the shape of
/// attention's image ranges) guards V: the loop is elementwise, so the V copy recomputes it
/// and streams ahead like K, with the one barrier at the top of the tile loop (the range
/// loop nested in it swaps no stages). The score mask is read only by `if !full`, so the
/// range loop moves into that branch and a full tile skips it.
#[test]
fn a_v_guard_from_a_range_loop_is_pipelined() {
    let (p, text) = pipelined_range_attention(false, true, false);
    let (body, _) = first_loop(&p);
    assert_eq!(gpu_ir::verify::barriers_in(body), 1, "{text}");
    let next_copies = prefetched(body);
    assert_eq!(next_copies, 2, "K and V prefetched:\n{text}");
    let has_loop = |b: &gpu_ir::GpuBlock| b.ops.iter().any(|o| matches!(o, GpuOp::For { .. }));
    assert!(!has_loop(body), "range loop left in the tile loop:\n{text}");
    let in_branch = body.ops.iter().any(|o| match o {
        GpuOp::If { then_block, .. } => has_loop(then_block),
        _ => false,
    });
    assert!(in_branch, "range loop not in the `!full` branch:\n{text}");
}

/// When only the V guard reads the range loop, the copy's recomputation is its only use: the
/// tile loop runs no range loop at all (the pure loop is dead once the guard is a copy's).
#[test]
fn a_range_loop_only_the_v_copy_reads_is_not_run() {
    let (p, text) = pipelined_range_attention(false, false, false);
    let (body, _) = first_loop(&p);
    let mut loops = 0;
    gpu_ir::walk_block(body, &mut |o| {
        loops += matches!(o, GpuOp::For { .. }) as usize
    });
    assert_eq!(loops, 0, "{text}");
    let next_copies = prefetched(body);
    assert_eq!(next_copies, 2, "K and V prefetched:\n{text}");
}

/// A V guard that is a loop's key vector (no reduction): the copy evaluates the loop at each
/// row it copies, and V still streams.
#[test]
fn a_v_guard_read_per_row_from_a_loop_is_pipelined() {
    let (p, text) = pipelined_range_attention(false, true, true);
    let (body, _) = first_loop(&p);
    assert_eq!(gpu_ir::verify::barriers_in(body), 1, "{text}");
    let next_copies = prefetched(body);
    assert_eq!(next_copies, 2, "K and V prefetched:\n{text}");
}

/// The same loop reading whole rows of the mask it carries is not elementwise: no copy can
/// recompute it per element, so V stays a tile load (K still streams).
#[test]
fn a_range_loop_reading_whole_rows_is_not_recomputed() {
    let (p, text) = pipelined_range_attention(true, true, false);
    let (body, _) = first_loop(&p);
    let copies: Vec<_> = body
        .ops
        .iter()
        .filter_map(|o| match o {
            GpuOp::AsyncCopy(c) => Some(c.dst),
            _ => None,
        })
        .collect();
    assert_eq!(copies.len(), 1, "only K is copied:\n{text}");
    assert_eq!(p.alloc(copies[0]).name, "k_tile", "{text}");
}

/// The emitted kernel without its waits reads shared memory before the copies land: the
/// simulator (which lands a copy only at its wait) must see different results.
#[test]
fn simulator_catches_a_missing_wait() {
    if !cpu_sim::have_gxx() {
        eprintln!("skipping: no g++");
        return;
    }
    let f = flash(64, 64, 64, false);
    let k = attn_dsl::codegen::emit_cuda(&f).expect("emit");
    assert!(k.source.contains("attn_cp_wait<0>();"));
    let mut broken = k.clone();
    broken.source = k.source.replace("attn_cp_wait<0>();", "");
    broken.hash = attn_dsl::codegen::content_hash(&broken.source);
    let (heads, seq, d) = (1usize, 128usize, 64usize);
    let n = heads * seq * d;
    let buf = |seed: u64| {
        let v: Vec<half::bf16> = (0..n)
            .map(|i| {
                half::bf16::from_f64(((i as u64 * 2654435761 + seed) % 1000) as f64 / 500.0 - 1.0)
            })
            .collect();
        SimArg::Buf(attn_dsl::interp::HostBuffer::Bf16(v))
    };
    let args = || {
        vec![
            buf(1),
            buf(2),
            buf(3),
            SimArg::Buf(attn_dsl::interp::HostBuffer::Bf16(vec![
                half::bf16::from_f32(
                    f32::NAN
                );
                n
            ])),
            SimArg::Scalar(attn_dsl::kernel::ScalarArg::I32(seq as i32)),
            SimArg::Scalar(attn_dsl::kernel::ScalarArg::F32(0.125)),
        ]
    };
    let grid = [2, heads as u32, 1];
    let (mut good, mut bad) = (args(), args());
    cpu_sim::run(&k, grid, &mut good).expect("sim");
    cpu_sim::run(&broken, grid, &mut bad).expect("sim");
    let out = |a: &[SimArg]| match &a[3] {
        SimArg::Buf(b) => b.to_f64s(),
        _ => unreachable!(),
    };
    let (g, b) = (out(&good), out(&bad));
    assert!(g.iter().all(|x| x.is_finite()), "every output written");
    assert!(
        g.iter().zip(&b).any(|(x, y)| x != y),
        "a kernel without waits gave the same result"
    );
}
