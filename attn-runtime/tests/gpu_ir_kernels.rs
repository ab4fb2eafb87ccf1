//! The shipped unified-attention specializations at the GPU level, checked without a GPU:
//! for the benchmark shapes (P0, P1, P3, D1) the plan's attention kernel is lowered to the
//! GPU IR, and the test pins which operand loads became async copies, how many barriers the
//! KV-tile loop holds, and that NVRTC compiles it for sm_90 without spills or local memory.
//! A regression of the schedule fails here, in CI, before any GPU time is spent.

mod sass_support;
mod unified_plans;

use attn_dsl::gpu_ir::{self, printer::print_program, GpuOp};
use attn_runtime::jit::{compile, Arch, CudaSource, JitOptions};
use attn_runtime::ops::unified_attention::config::AttentionProblem;
use attn_runtime::ops::unified_attention::gpu::{emit_launch, launch_key};
use attn_runtime::ops::unified_attention::plan::{LaunchPlan, PathChoice};
use unified_plans::{d1, lowered_ir, p0, p1, p3, plan};

/// (copies, barriers in the first loop body, pipelined) of the plan's attention kernel.
fn schedule(label: &str, plan: &LaunchPlan) -> (usize, usize, bool) {
    let cuda = emit_launch(&plan.attention).unwrap_or_else(|e| panic!("{label}: {e}"));
    let key = launch_key(&plan.attention);
    if let Ok(dir) = std::env::var("ATTN_DUMP_DIR") {
        let _ = std::fs::write(format!("{dir}/{label}.cu"), &cuda.source);
    }
    let f = lowered_ir(plan);
    let p = gpu_ir::compile(&f).unwrap_or_else(|e| panic!("{label}: {e}"));
    println!("{label} ({key}):\n{}", print_program(&f, &p));
    let mut copies = 0;
    gpu_ir::walk_block(&p.body, &mut |o| {
        if matches!(o, GpuOp::AsyncCopy(_)) {
            copies += 1;
        }
    });
    let (barriers, pipelined) = first_loop(&p.body).unwrap_or((0, false));
    let m = compile(
        &CudaSource::from_kernel(&cuda),
        &JitOptions::new(Arch::from_compute_capability(9, 0)),
    )
    .unwrap_or_else(|e| panic!("{label}: NVRTC: {e}"));
    let stats = m.entry_stats();
    println!("{label}: {stats:?}");
    if let attn_runtime::jit::ModuleImage::Cubin(bytes) = &m.image {
        if let Ok(dir) = std::env::var("ATTN_DUMP_DIR") {
            let _ = std::fs::write(format!("{dir}/{label}.cubin"), bytes);
        }
        check_sass(label, bytes);
    }
    if let Some(s) = stats {
        assert_eq!(
            (s.spill_store_bytes, s.spill_load_bytes, s.stack_frame_bytes),
            (0, 0, 0),
            "{label}: spills or local memory: {s:?}"
        );
    }
    (copies, barriers, pipelined)
}

/// Per-KV-tile SASS counts of a pinned kernel's main loop (the largest loop).
struct PinnedSass {
    label: &'static str,
    ldsm: usize,
    hmma: usize,
    /// Every chunk of the K and V copies issued in the loop itself (copies fully unrolled).
    ldgsts: usize,
    /// Global loads per tile at most: one block-table entry per copied row a thread holds,
    /// never one per chunk.
    max_ldg: usize,
}

/// The pinned kernels, with exactly one barrier, no local memory and the counts below in
/// the loop. Counted by `../shared/tools/sass-counts` (nvdisasm, no GPU); a kernel not listed
/// here is only printed.
const PINNED_SASS: &[PinnedSass] = &[
    // QK: 2 slabs x 8 k-steps of A + 8 x 2 B pairs; PV: 2 x 8 B pairs. 2 x (32 + 32) mma.
    // K and V tiles 32 x 128 over 128 threads, 4 lanes per row: 4 chunks each, one row.
    PinnedSass {
        label: "P0",
        ldsm: 48,
        hmma: 128,
        ldgsts: 8,
        max_ldg: 2,
    },
    // QK: 16 k-steps of A (Q from shared) + 16 x 2 B pairs; PV: 2 x 16 B pairs. K and V
    // tiles 32 x 256 over 128 threads, 8 lanes (a line) per row: 2 rows of 4 chunks each.
    PinnedSass {
        label: "P1",
        ldsm: 80,
        hmma: 128,
        ldgsts: 16,
        max_ldg: 4,
    },
    // P1's tiles (LDSM, HMMA and LDGSTS as there). Global loads: P1's 4 block-table
    // entries, plus the two ends (s, e) of an image range per iteration of each loop over
    // the block's candidate ranges in the KV loop (not unrolled, so its 2 loads count once):
    // the score mask's, the V copy's guard, which runs its own once per copied row (2 rows),
    // and the full-tile predicate's (a tile inside one image is full), in the body and once
    // per V copy: 4 + 2 + 2 x 2 + 2 + 2 = 14 at most (12 seen).
    PinnedSass {
        label: "P3",
        ldsm: 80,
        hmma: 128,
        ldgsts: 16,
        max_ldg: 14,
    },
    // One warp, 16 rows, the launch table's 64-key tiles: QK 8 k-steps x 4 B pairs (Q held);
    // PV 4 x 8 B pairs. K and V tiles 64 x 128 over 32 threads, 8 lanes (a 128-byte line)
    // per row: 16 rows of 2 chunks each; a block-table load per row and copy.
    PinnedSass {
        label: "D1",
        ldsm: 64,
        hmma: 128,
        ldgsts: 64,
        max_ldg: 32,
    },
];

/// Runs the SASS counter on `cubin` and checks the pinned counts of its largest loop.
fn check_sass(label: &str, cubin: &[u8]) {
    let Some(pin) = PINNED_SASS.iter().find(|p| p.label == label) else {
        return;
    };
    let (line, counts) = sass_support::main_loop(label, cubin);
    println!("{label} SASS {line}");
    let count = |key: &str| sass_support::count(&counts, key);
    assert_eq!(count("BAR"), 1, "{label}: barriers per KV tile: {line}");
    assert_eq!(
        (count("LDL"), count("STL")),
        (0, 0),
        "{label}: local memory: {line}"
    );
    assert_eq!(
        (count("LDSM"), count("HMMA"), count("LDGSTS")),
        (pin.ldsm, pin.hmma, pin.ldgsts),
        "{label}: (LDSM, HMMA, LDGSTS) of the loop: {line}"
    );
    assert!(
        count("LDG") <= pin.max_ldg,
        "{label}: more than {} global loads per tile (addresses recomputed per chunk?): {line}",
        pin.max_ldg
    );
}

/// Barriers directly in the body of the KV-tile loop (the loop whose body holds an `mma`)
/// and whether it is pipelined.
fn first_loop(b: &gpu_ir::GpuBlock) -> Option<(usize, bool)> {
    for o in &b.ops {
        if let GpuOp::For {
            body, pipelined, ..
        } = o
        {
            if body.ops.iter().any(|x| matches!(x, GpuOp::Mma { .. })) {
                return Some((gpu_ir::verify::barriers_in(body), *pipelined));
            }
        }
        for inner in gpu_ir::nested(o) {
            if let Some(r) = first_loop(inner) {
                return Some(r);
            }
        }
    }
    None
}

#[test]
fn p1_sliding_prefill_streams_k_and_v_with_one_barrier_per_tile() {
    let (copies, barriers, pipelined) = schedule("P1", &plan(&p1(), 8192, PathChoice::Heuristic));
    // Q (D 256: read from shared memory per k-step), K and V (prologue + prefetch each).
    assert!(pipelined, "P1 loop not pipelined");
    assert_eq!(copies, 5, "P1 copies");
    assert_eq!(barriers, 1, "P1 barriers per KV tile");
}

#[test]
fn p0_dense_prefill_streams_k_and_v_with_one_barrier_per_tile() {
    let (copies, barriers, pipelined) = schedule("P0", &plan(&p0(), 16384, PathChoice::Heuristic));
    assert!(pipelined, "P0 loop not pipelined");
    // The launch table's 128 rows on 4 warps: Q (two slabs per warp) is read from shared
    // memory, K and V stream (prologue + prefetch).
    assert_eq!(copies, 5, "P0 copies");
    assert_eq!(barriers, 1, "P0 barriers per KV tile");
}

/// P3 (30 image ranges): the score mask is a loop over the ranges that carries the mask
/// tile, and the V guard (is any row allowed to see this key?) reads it. The loop is
/// elementwise, so the V copy recomputes it for the rows it copies (the ranges' loads and
/// tests once per copied row, not per element) and streams ahead like K; the score mask
/// runs only for tiles that are not full.
#[test]
fn p3_image_ranges_stream_k_and_v_with_one_barrier_per_tile() {
    let plan = plan(&p3(), 8192, PathChoice::Heuristic);
    let (copies, barriers, pipelined) = schedule("P3", &plan);
    assert!(pipelined, "P3 loop not pipelined");
    // Q (D 256: read from shared memory per k-step), K and V (prologue + prefetch each).
    assert_eq!(copies, 5, "P3 copies");
    assert_eq!(barriers, 1, "P3 barriers per KV tile");
}

/// The two-slabs-per-warp tiling of the launch-table sweep (FA2's 128 rows on 4 warps): Q is
/// read from shared memory (a warp's share, K × 2 slabs, is too wide to hold) and the kernel
/// still fits the register file.
#[test]
fn p0_two_slabs_per_warp_fits_the_register_file() {
    let path = PathChoice::Force2dTiled {
        block_m: 128,
        tile_size: 32,
        slabs_per_warp: 2,
        num_stages: 2,
    };
    let (copies, barriers, pipelined) = schedule("P0-m128t32s2", &plan(&p0(), 16384, path));
    assert!(pipelined);
    assert_eq!(copies, 5, "Q, and K and V (prologue + prefetch)");
    assert_eq!(barriers, 1);
}

#[test]
fn d1_decode_schedule() {
    let (copies, barriers, pipelined) = schedule("D1", &plan(&d1(), 64, PathChoice::Heuristic));
    println!("D1: {copies} copies, {barriers} barriers per tile, pipelined {pipelined}");
}

/// The copy reductions of an emitted kernel (`attn_red*`, the V guard's `any(allowed)`) and
/// their shuffles: `(declarations, shuffles)`. Every shuffle must sit deeper than the line
/// that declares its reduction: inside the masked-tile branch, so a full tile runs none of
/// them (H200, one binary, 2026-12-02: P1 0.400 → 0.393 ms, P3 0.563 → 0.552, D1 0.275 →
/// 0.270 against shuffling after the branch).
fn guard_reductions(label: &str, src: &str) -> (usize, usize) {
    let indent = |l: &str| l.len() - l.trim_start().len();
    let lines: Vec<&str> = src.lines().collect();
    let (mut reductions, mut shuffles) = (0, 0);
    for (i, decl) in lines.iter().enumerate() {
        let Some(name) = decl
            .trim_start()
            .strip_prefix("int ")
            .and_then(|r| r.split(' ').next())
            .filter(|n| n.starts_with("attn_red") && decl.ends_with("= (int)0;"))
        else {
            continue;
        };
        reductions += 1;
        let shuffle = format!("attn_shfl_xor({name},");
        for l in lines[i + 1..].iter().filter(|l| l.contains(&shuffle)) {
            assert!(
                indent(l) > indent(decl),
                "{label}: {name} shuffles outside its guard:\n{decl}\n{l}"
            );
            shuffles += 1;
        }
    }
    (reductions, shuffles)
}

/// The V guard of vLLM's mask is a bound on the key (`plan::first_key_v_guard`): the copies
/// of P1, P3 (with and without the clamp: an unclamped image range holding a query moves
/// the bound left) and D1 reduce nothing over the tile's rows. A mode whose guard is the mask
/// OR-ed over rows (R-SWA: a row's prefix and window need not meet) keeps the reduction, its
/// shuffles inside the masked-tile branch.
#[test]
fn v_guard_reduces_rows_only_where_the_mask_is_not_an_interval() {
    let emit = |label: &str, problem, tokens| {
        let launch = plan(&problem, tokens, PathChoice::Heuristic).attention;
        emit_launch(&launch)
            .unwrap_or_else(|e| panic!("{label}: {e}"))
            .source
    };
    let unclamped = AttentionProblem {
        mm_prefix_clamp_sw: false,
        ..p3()
    };
    for (label, problem, tokens) in [
        ("P1", p1(), 8192),
        ("P3", p3(), 8192),
        ("P3-noclamp", unclamped, 8192),
        ("D1", d1(), 64),
    ] {
        let (reductions, _) = guard_reductions(label, &emit(label, problem, tokens));
        assert_eq!(reductions, 0, "{label}: the V guard reduces over rows");
    }
    let rswa = AttentionProblem {
        sliding_window: 0,
        r_swa_window: Some(1024),
        ..p1()
    };
    let (reductions, shuffles) = guard_reductions("R-SWA", &emit("R-SWA", rswa, 8192));
    assert!(
        reductions > 0 && shuffles > 0,
        "R-SWA: no guarded copy reduction found"
    );
}
