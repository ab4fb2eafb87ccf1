//! TMA copies (warpgroup targets): which pipelined copies move as 2D boxes, the tensor
//! maps the launcher must encode for them, where their stages land, and that both branches
//! of the same source compute the kernel on the simulator (the `cp.async` one, and the sm_90a
//! one with its boxes, `sim_tma.h`), with `ATTN_CODEGEN_ENABLE=tma`: a warp-specialized
//! program's producer issues them, an unsplit program's math warps do. GPU parity covers
//! the TMA branch on the device (`gpu_unified`, `gpu_mla_op` with the feature on).

mod codegen_common;

use attn_dsl::codegen::{emit_cuda, RowStride};
use attn_dsl::gpu_ir::{self, CopyAt, CopyEngine, GpuOp, Landing, Stage, StageSync, TmaStride};
use attn_dsl::ir::Function;
use attn_dsl::ConstValue;
use codegen_common::sim_check::{check, flash_args, paged_args};
use codegen_common::{flash_fwd, specialize};

/// Every test of this binary runs with the feature on (read once per process).
fn tma_on() {
    std::env::set_var("ATTN_CODEGEN_ENABLE", "tma");
}

fn paged(block_n: i64, d: i64, page: i64) -> Function {
    codegen_common::paged_fwd(block_n, d, page)
}

/// The (stage, group rows) of every TMA copy, in program order (a split program's are its
/// producer's).
fn tma_copies(p: &gpu_ir::GpuProgram) -> Vec<(CopyAt, usize)> {
    let mut out = Vec::new();
    for b in p.copying_blocks() {
        gpu_ir::walk_block(b, &mut |op| {
            if let GpuOp::AsyncCopy(c) = op {
                if let CopyEngine::Tma { group_rows, .. } = c.engine {
                    out.push((c.at, group_rows));
                }
            }
        });
    }
    out
}

/// The ops of the first pipelined loop's body in `b`.
fn loop_body(b: &gpu_ir::GpuBlock) -> Vec<GpuOp> {
    let mut body = None;
    gpu_ir::walk_block(b, &mut |op| {
        if let GpuOp::For {
            body: b,
            pipelined: true,
            ..
        } = op
        {
            body.get_or_insert_with(|| b.ops.clone());
        }
    });
    body.expect("a pipelined loop")
}

/// The positions of the `tma_landed` ops of the current stage in `body`.
fn landings(body: &[GpuOp]) -> Vec<usize> {
    body.iter()
        .enumerate()
        .filter(|(_, o)| {
            matches!(
                o,
                GpuOp::TmaLanded {
                    stage: Stage::Current,
                    ..
                }
            )
        })
        .map(|(i, _)| i)
        .collect()
}

/// Dense K and V: each tile's rows are `HEAD_DIM` elements apart end to end, so one box
/// per 64-column block covers the whole tile; the prologue's and the loop's copies both
/// move by TMA, Q (read once, not pipelined) by the threads.
/// - Split (64 rows at D 64 and 128): the producer issues the boxes and, at the top of its
///   loop, hands the current stage to the consumers (waiting for its boxes only to zero
///   masked chunks); the consumers copy nothing and wait on the boxes after the hand-over.
/// - Unsplit (D 256: a 128-register accumulator would cost the split its second block an
///   SM): the consumers issue them, and the loop waits for each stage's boxes after its
///   `cp.async` wait and before the barrier that publishes them.
#[test]
fn dense_tiles_move_as_whole_tile_boxes() {
    tma_on();
    for (block_n, d) in [(64, 64), (64, 128), (64, 256)] {
        let f = flash_fwd(block_n, d, true);
        let p = gpu_ir::compile(&f).expect("gpu ir");
        let text = gpu_ir::printer::print_program(&f, &p);
        let copies = tma_copies(&p);
        assert_eq!(
            copies,
            vec![
                (CopyAt::Prologue(0), block_n as usize),
                (CopyAt::Prologue(0), block_n as usize),
                (CopyAt::Ahead(1), block_n as usize),
                (CopyAt::Ahead(1), block_n as usize),
            ],
            "{text}"
        );
        assert_eq!(p.tensor_maps.len(), 2, "K and V: {text}");
        assert!(p
            .tensor_maps
            .iter()
            .all(|m| m.row_stride == TmaStride::Const(d) && m.box_cols == 64));
        match &p.specialization {
            Some(ws) => {
                assert!(d <= 128, "D {d} split: {text}");
                let body = loop_body(&ws.producer);
                assert_eq!(landings(&body), vec![0, 1], "first in the loop: {text}");
                assert!(
                    matches!(body[2], GpuOp::Stage(StageSync::Filled)),
                    "then handed over: {text}"
                );
                assert!(
                    body[..2].iter().all(|o| matches!(
                        o,
                        GpuOp::TmaLanded {
                            by: Landing::Zeroers,
                            ..
                        }
                    )),
                    "the producer waits only to zero masked chunks: {text}"
                );
                let mut consumer_copies = false;
                gpu_ir::walk_block(&p.body, &mut |o| {
                    consumer_copies |=
                        matches!(o, GpuOp::AsyncCopy(c) if c.engine != CopyEngine::Threads)
                });
                assert!(!consumer_copies, "the consumers' program: {text}");
                let consumer = loop_body(&p.body);
                assert!(
                    matches!(consumer[0], GpuOp::Stage(StageSync::Wait { .. })),
                    "{text}"
                );
                assert!(
                    consumer[1..3].iter().all(|o| matches!(
                        o,
                        GpuOp::TmaLanded {
                            by: Landing::Consumers,
                            ..
                        }
                    )),
                    "the consumers wait on the boxes after the hand-over: {text}"
                );
            }
            None => {
                assert_eq!(d, 256, "D {d} unsplit: {text}");
                let body = loop_body(&p.body);
                assert_eq!(landings(&body), vec![1, 2], "after the wait: {text}");
                assert!(matches!(body[0], GpuOp::Wait { .. }), "{text}");
                assert!(matches!(body[3], GpuOp::Barrier { .. }), "{text}");
            }
        }

        let k = emit_cuda(&f).expect("emit");
        let names: Vec<&str> = f.params.iter().map(|p| p.name.as_str()).collect();
        let bases: Vec<&str> = k.tensor_maps.iter().map(|m| names[m.base_param]).collect();
        assert_eq!(bases, ["k", "v"]);
        assert!(k.tensor_maps.iter().all(|m| m.row_stride
            == RowStride {
                param: None,
                coeff: d
            }
            && m.box_rows as i64 == block_n));
        for piece in [
            "const __grid_constant__ attn_tensor_map attn_tmap0",
            "attn_tma_load_2d(",
            "attn_mbar_expect_tx(",
            "attn_mbar_wait(",
            "attn_cp_async16(",
        ] {
            assert!(k.source.contains(piece), "{piece} missing");
        }
        check(
            &format!("tma flash N{block_n} D{d}"),
            &f,
            [2, 2, 1],
            flash_args(attn_dsl::ir::ScalarType::Bf16, 2, 75, d as usize, 81),
            2e-2,
        );
    }
}

/// A paged cache: the block is constant over a page's rows and the slot steps by one, so a
/// 64-key tile is four 16-row boxes per column block; a page of 4 rows is under a swizzle
/// atom and stays with the threads.
#[test]
fn paged_tiles_move_a_page_per_box() {
    tma_on();
    let f = paged(64, 64, 16);
    let p = gpu_ir::compile(&f).expect("gpu ir");
    let text = gpu_ir::printer::print_program(&f, &p);
    assert_eq!(
        tma_copies(&p).iter().map(|c| c.1).collect::<Vec<_>>(),
        [16; 4],
        "{text}"
    );
    let k = emit_cuda(&f).expect("emit");
    assert!(k.tensor_maps.iter().all(|m| m.box_rows == 16));
    check(
        "tma paged N64 D64 page 16",
        &f,
        [2, 2, 1],
        paged_args(2, 100, 64, 16, 82),
        2e-2,
    );

    let small = paged(64, 64, 4);
    let p = gpu_ir::compile(&small).expect("gpu ir");
    assert!(tma_copies(&p).is_empty(), "4-row pages");
    assert!(p.tensor_maps.is_empty());
}

/// Without the warpgroup target (sm_80 devices) nothing moves by TMA, and the kernel takes
/// no tensor maps.
#[test]
fn untargeted_kernels_take_no_tensor_maps() {
    tma_on();
    let f = flash_fwd(64, 64, false);
    let p = gpu_ir::compile(&f).expect("gpu ir");
    assert!(tma_copies(&p).is_empty());
    let k = emit_cuda(&f).expect("emit");
    assert!(k.tensor_maps.is_empty());
    assert!(!k.source.contains("attn_tma_load_2d"));
}

/// Paged kernels that differ from `paged_fwd` in what the row analysis must prove: the
/// first key block comes from a parameter (`FIRST` of `first`, clamped at 0 or not), and
/// the block-table read is masked by the copy's own mask or by another one.
const PAGED_VARIANTS: &str = r#"
mod paged_variants {
    #[kernel(num_warps = 4)]
    pub fn paged_from<T, const BLOCK_N: i32, const HEAD_DIM: i32, const PAGE: i32, const CLAMP: bool, const OWN_MASK: bool>(
        q: *const T, k_cache: *const T, v_cache: *const T, bt: *const i32, out: *mut f32,
        seq_len: i32, max_pages: i32, first: i32,
    ) {
        let pid_m = program_id(0);
        let offs_m = pid_m * 64 + arange::<64>();
        let offs_d = arange::<HEAD_DIM>();
        let row_ok = offs_m.unsqueeze(1) < seq_len;
        let q_tile = load(q + offs_m.unsqueeze(1) * HEAD_DIM + offs_d.unsqueeze(0), row_ok, 0.0);
        let mut acc = zeros::<f32>([64, HEAD_DIM]);
        let mut lo = first * BLOCK_N;
        if CLAMP {
            lo = max(first, 0) * BLOCK_N;
        }
        for start_n in (lo..seq_len).step_by(BLOCK_N) {
            let cols = start_n + arange::<BLOCK_N>();
            let col_ok = cols < seq_len;
            let mut table_ok = col_ok;
            if !OWN_MASK {
                table_ok = cols < max_pages * PAGE;
            }
            let page = load(bt + cols / PAGE, table_ok, 0);
            let row = (page * PAGE + cols % PAGE) * HEAD_DIM;
            let k_tile = load(k_cache + row.unsqueeze(0) + offs_d.unsqueeze(1), col_ok.unsqueeze(0), 0.0);
            let p = dot(q_tile, k_tile);
            let v_tile = load(v_cache + row.unsqueeze(1) + offs_d.unsqueeze(0), col_ok.unsqueeze(1), 0.0);
            acc = dot(p.cast::<T>(), v_tile, acc);
        }
        store(out + offs_m.unsqueeze(1) * HEAD_DIM + offs_d.unsqueeze(0), acc, row_ok);
    }
}
"#;

fn paged_from(clamp: bool, own_mask: bool) -> Function {
    let consts = [
        ("BLOCK_N", ConstValue::Int(64)),
        ("HEAD_DIM", ConstValue::Int(64)),
        ("PAGE", ConstValue::Int(16)),
        ("CLAMP", ConstValue::Bool(clamp)),
        ("OWN_MASK", ConstValue::Bool(own_mask)),
    ];
    specialize(PAGED_VARIANTS, "paged_from", &consts, true)
}

/// `cols / PAGE` groups a page's rows only for non-negative keys (C division rounds toward
/// zero): a first block from a parameter is proved non-negative by a clamp, not without.
#[test]
fn page_runs_need_non_negative_keys() {
    tma_on();
    let copies = |f: &Function| tma_copies(&gpu_ir::compile(f).expect("gpu ir")).len();
    assert_eq!(
        copies(&paged_from(true, true)),
        4,
        "clamped: K and V, prologue and loop"
    );
    assert_eq!(copies(&paged_from(false, true)), 0, "unclamped");
}

/// The block-table read may be masked only by a conjunct of the copy's own mask: masked by
/// another bound, a row the copy reads could take the table's `other` (0) as its page.
#[test]
fn the_table_read_must_share_the_copys_mask() {
    tma_on();
    let p = gpu_ir::compile(&paged_from(true, false)).expect("gpu ir");
    assert!(tma_copies(&p).is_empty());
}

/// The verifier rejects a loop that reads a TMA-filled stage, or a producer loop that hands
/// one over, with no `tma_landed` before: the `cp.async` wait and the barrier alone do not
/// order boxes.
#[test]
fn verifier_rejects_a_stage_used_before_its_boxes_land() {
    tma_on();
    fn drop_landings(b: &mut gpu_ir::GpuBlock) {
        b.ops.retain(|o| !matches!(o, GpuOp::TmaLanded { .. }));
        for o in &mut b.ops {
            for inner in gpu_ir::nested_mut(o) {
                drop_landings(inner);
            }
        }
    }
    for (d, split) in [(64, true), (256, false)] {
        let f = flash_fwd(64, d, true);
        let mut p = gpu_ir::compile(&f).expect("gpu ir");
        assert_eq!(p.specialization.is_some(), split, "D {d}");
        match &mut p.specialization {
            Some(ws) => drop_landings(&mut ws.producer),
            None => drop_landings(&mut p.body),
        }
        let e = gpu_ir::verify::verify(&f, &p).expect_err("unordered TMA use accepted");
        assert!(e.contains("TMA boxes"), "D {d}: {e}");
    }
}

/// A three-stage ring takes TMA too, in the previous-stage form (PV reading V one stage
/// back, the stage announced by the producer once its boxes landed): K's and V's copies
/// both move as boxes (V's address, one tile behind as written, is its own iteration's
/// where the copy is emitted), and each alloc keeps the masked-chunk bits of every fill in
/// flight, two at three stages, shifted down at each landing. With one register of bits
/// the fill ahead overwrote the bits of the fill about to land (`gpu_unified` failed on the
/// H200; 18/18 with the bits per fill).
#[test]
fn three_stage_rings_keep_the_bits_of_every_fill_in_flight() {
    tma_on();
    let mut f = flash_fwd(64, 128, true);
    f.num_stages = 3;
    let src = emit_cuda(&f).expect("emit").source;
    assert!(src.contains(" ? attn_stage"), "PV reads the previous stage");
    let producer = codegen_common::overlap_cases::producer_source(&src);
    let boxes = producer.matches("attn_tma_load_2d(").count();
    assert!(boxes >= 6, "K and V by boxes in every fill: {boxes}");
    for a in ["attn_zb1", "attn_zb2"] {
        assert!(
            producer.contains(&format!("unsigned {a}_1 = 0u;"))
                && producer.contains(&format!("{a} = {a}_1;")),
            "{a}: a register of bits per fill in flight, shifted at each landing:\n{producer}"
        );
    }
}

/// The same form's `cp.async` branch (what the simulator compiles): the producer announces
/// a stage after its copies landed (`filled`), not by arrivals, and the previous-stage
/// loop still computes the kernel, dense and paged, copies landing late.
#[test]
fn three_stage_previous_stage_form_matches_the_executor() {
    tma_on();
    std::env::set_var("ATTN_SIM_LANDING_DELAY_US", "300");
    codegen_common::overlap_cases::dense_flash("TMA ring of three stages", 3, &[128]);
    codegen_common::overlap_cases::paged("TMA ring of three stages", 3, 128);
}
