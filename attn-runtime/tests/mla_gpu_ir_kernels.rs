//! The shipped MLA history specializations at the GPU level, checked without a GPU: for the
//! benchmark rows (L1, L2, the long single request) the plan's `mla_history` is lowered to
//! the GPU IR, and the test pins that the latent tile is copied once into shared memory and
//! read by both dots, that the queries come from shared memory, and that NVRTC compiles it
//! for sm_90 without spills or local memory.

mod sass_support;

use attn_dsl::gpu_ir::{self, printer::print_program, CopyEngine, GpuOp, OperandSource};
use attn_dsl::ConstValue;
use attn_runtime::jit::{compile, Arch, CudaSource, JitOptions, ModuleImage};
use attn_runtime::ops::mla_dcp::metadata::DcpLayout;
use attn_runtime::ops::mla_dcp::plan::{
    fused_tile, DecodePlan, DecodeStep, FusedTile, KernelLaunch, PlanError,
};
use attn_runtime::ops::unified_attention::config::MmaKind;
use attn_runtime::reference::mla::MlaConfig;
use std::collections::BTreeMap;

/// The decode step of `batch` requests of `ctx` tokens, `heads` query heads over `dcp` ranks
/// (page 64, q_len 1), as the MLA benchmark builds it.
fn step(batch: usize, ctx: u32, heads: u32, dcp: u32) -> DecodeStep {
    let layout = DcpLayout::new(dcp, 1, 64).expect("layout");
    let scale = MlaConfig::deepseek_v3().softmax_scale() as f32;
    DecodeStep::uniform_decode(batch, ctx, heads / dcp, layout, scale, 132)
}

/// L1's step (128 requests of 4096 tokens, 128 heads) over `dcp` ranks, planned for `mma`.
fn l1_plan(mma: MmaKind, dcp: u32) -> DecodePlan {
    step(128, 4096, 128, dcp)
        .plan_tuned(mma, None, None, None)
        .expect("plan")
}

/// [`l1_plan`] for warpgroup MMAs (an sm_90a device).
fn l1_warpgroup_plan(dcp: u32) -> DecodePlan {
    l1_plan(MmaKind::Warpgroup, dcp)
}

fn set(l: &mut KernelLaunch, name: &str, v: i64) {
    set_const(l, name, ConstValue::Int(v));
}

fn set_const(l: &mut KernelLaunch, name: &str, v: ConstValue) {
    let slot = l.constexprs.iter_mut().find(|(n, _)| *n == name);
    slot.unwrap_or_else(|| panic!("no constexpr {name}")).1 = v;
}

fn constexpr(l: &KernelLaunch, name: &str) -> ConstValue {
    let slot = l.constexprs.iter().find(|(n, _)| *n == name);
    slot.unwrap_or_else(|| panic!("no constexpr {name}"))
        .1
        .clone()
}

/// What the history kernel's GPU program and machine code look like.
struct Schedule {
    copies: usize,
    /// Of those, the copies issued as TMA boxes.
    tma_copies: usize,
    mmas_from_shared_b: usize,
    shared_a: usize,
    /// MMAs that continue the previous dot's in flight (`mma_chain`).
    chained: usize,
    /// k-steps of A held in registers across the loop (`hold_a`).
    held_a: usize,
    registers: u32,
    spills: (u32, u32, u32),
    /// SASS counts of the KV-tile loop.
    sass: std::collections::BTreeMap<String, usize>,
    /// The sm_90a or sm_90 image, for counts beyond the loop's.
    cubin: Vec<u8>,
}

fn schedule(label: &str, l: &KernelLaunch) -> Schedule {
    schedule_for(label, l, Arch::from_compute_capability(9, 0))
}

fn schedule_for(label: &str, l: &KernelLaunch, arch: Arch) -> Schedule {
    let c = l.compile().unwrap_or_else(|e| panic!("{label}: {e}"));
    let f = &c.specialized.ir;
    let p = gpu_ir::compile(f).unwrap_or_else(|e| panic!("{label}: {e}"));
    println!("{label} ({}):\n{}", l.key(), print_program(f, &p));
    let (mut copies, mut mmas_from_shared_b, mut shared_a, mut chained, mut held_a) =
        (0, 0, 0, 0, 0);
    let mut tma_copies = 0;
    // A warp-specialized program's ring copies are its producer's.
    if let Some(ws) = &p.specialization {
        gpu_ir::walk_block(&ws.producer, &mut |o| {
            if let GpuOp::AsyncCopy(c) = o {
                copies += 1;
                tma_copies += usize::from(matches!(c.engine, CopyEngine::Tma { .. }));
            }
        });
    }
    gpu_ir::walk_block(&p.body, &mut |o| match o {
        GpuOp::AsyncCopy(_) => copies += 1,
        GpuOp::Mma {
            a, b, chained_from, ..
        } => {
            chained += usize::from(chained_from.is_some());
            mmas_from_shared_b += usize::from(matches!(b, OperandSource::Shared { .. }));
            shared_a += usize::from(matches!(a, OperandSource::Shared { .. }));
        }
        GpuOp::HoldA { steps, .. } => held_a += steps,
        _ => {}
    });
    if let Ok(dir) = std::env::var("ATTN_DUMP_DIR") {
        let _ = std::fs::write(format!("{dir}/{label}.cu"), &c.cuda.source);
    }
    let m = compile(&CudaSource::from_kernel(&c.cuda), &JitOptions::new(arch))
        .unwrap_or_else(|e| panic!("{label}: NVRTC: {e}"));
    let ModuleImage::Cubin(bytes) = &m.image else {
        panic!("{label}: NVRTC gave no cubin");
    };
    if let Ok(dir) = std::env::var("ATTN_DUMP_DIR") {
        let _ = std::fs::write(format!("{dir}/{label}.cubin"), bytes);
    }
    // Split, the consumers' loop is the one that runs the MMAs (see `sass_support`).
    let (line, sass) = if p.specialization.is_some() && arch.arch_specific {
        sass_support::innermost_loop_with(label, bytes, "HGMMA")
    } else {
        sass_support::main_loop(label, bytes)
    };
    println!("{label} SASS {line}");
    let s = m.entry_stats().expect("ptxas statistics");
    println!("{label}: {s:?}, shared {} B", c.cuda.shared_bytes);
    Schedule {
        copies,
        tma_copies,
        mmas_from_shared_b,
        shared_a,
        chained,
        held_a,
        registers: s.registers,
        spills: (s.spill_store_bytes, s.spill_load_bytes, s.stack_frame_bytes),
        sass,
        cubin: bytes.clone(),
    }
}

/// The loop's (LDSM, HMMA, LDGSTS, BAR, LDL + STL) per KV tile.
fn tile_counts(s: &Schedule) -> (usize, usize, usize, usize, usize) {
    let c = |k: &str| sass_support::count(&s.sass, k);
    (
        c("LDSM"),
        c("HMMA"),
        c("LDGSTS"),
        c("BAR"),
        c("LDL") + c("STL"),
    )
}

/// The MLA benchmark rows: (label, batch, context, heads, dcp).
const ROWS: &[(&str, usize, u32, u32, u32)] = &[
    ("L1", 128, 4096, 128, 1),
    ("L1-dcp2", 128, 4096, 128, 2),
    ("L2", 128, 32768, 16, 1),
    ("long", 1, 32768, 128, 1),
];

#[test]
fn history_reads_the_latent_tile_once_for_both_dots_without_spills() {
    for &(label, batch, ctx, heads, dcp) in ROWS {
        let l = step(batch, ctx, heads, dcp).plan().expect("plan").history;
        assert!(
            l.promises.divisible.contains(&"cache_stride_block"),
            "{label}: latent rows not promised 16-byte aligned"
        );
        let s = schedule(label, &l);
        // Q latent (read per k-step by QKᵀ), and the latent and rope key tiles (prologue +
        // prefetch each); Q rope (64 wide) is held in registers.
        assert_eq!(s.copies, 5, "{label}: copies");
        // QKᵀ over the rope, QKᵀ over the latent, PV over the same latent alloc transposed.
        assert_eq!(
            s.mmas_from_shared_b, 3,
            "{label}: mmas reading B from shared"
        );
        assert_eq!(
            s.shared_a, 1,
            "{label}: the latent query from shared memory"
        );
        assert_eq!(s.spills, (0, 0, 0), "{label}: spills or local memory");
        assert!(s.registers <= 255, "{label}: {} registers", s.registers);
        // Per 32-key tile, per warp. 16 heads (L2: one slab, the 4 warps split the keys of
        // QKᵀ and the columns of PV): QKᵀ 36 k-steps, one B `ldmatrix` and one mma each,
        // plus an A `ldmatrix` on the 32 latent ones (the rope query is held): 68; PV 2
        // k-steps x 8 `ldmatrix.trans` B pairs (16 LDSM) feeding 32 mma, and P's staged A
        // fragments one `ldmatrix` per k-step (2): 86. 32 heads (a 2 x 2
        // warp grid: one slab, half the keys of QKᵀ and half the columns of PV per warp):
        // QKᵀ 36 k-steps of one B pair `ldmatrix` feeding 2 mma, plus the 32 latent A ones;
        // PV 2 k-steps x 16 B pairs feeding 64 mma, and P (staged: the warp holds half its
        // columns) one A `ldmatrix` per k-step: 102 LDSM for 136 mma.
        // The latent and rope key tiles: 32 rows x 72 chunks over 128 threads, 18 chunks each.
        // Barriers: the pipeline's, one for the cross-warp max (its two alternating slots
        // need none before the writes), one for staging P (the max's barrier already
        // ordered the last reads of its bytes: `scratch_ledger`); the row sum stays per
        // lane and warp until the loop ends.
        let want = if heads / dcp * dcp >= 32 {
            (102, 136, 18, 3, 0)
        } else {
            (86, 68, 18, 3, 0)
        };
        assert_eq!(
            tile_counts(&s),
            want,
            "{label}: (LDSM, HMMA, LDGSTS, BAR, local) per tile"
        );
    }
}

/// The 64-head tiling a plan can be forced to (the `bh64` sweep row): 8 warps on a 4 × 2
/// grid, each with the 32-head tiling's per-warp work, and half its copy work per thread.
#[test]
fn history_at_64_heads_runs_8_warps_without_spills() {
    let l = step(128, 4096, 128, 1)
        .plan_with(None, Some(64))
        .expect("plan")
        .history;
    let s = schedule("L1-bh64", &l);
    assert_eq!(s.spills, (0, 0, 0), "spills or local memory");
    assert_eq!(
        tile_counts(&s),
        (102, 136, 9, 3, 0),
        "(LDSM, HMMA, LDGSTS, BAR, local) per tile"
    );
    let err = step(128, 4096, 128, 1).plan_with(None, Some(48)).err();
    assert!(
        matches!(
            err,
            Some(attn_runtime::ops::mla_dcp::plan::PlanError::HistoryHeads { got: 48 })
        ),
        "{err:?}"
    );
}

/// L1's history as the launch table plans it for an sm_90a device.
fn l1_warpgroup_history() -> KernelLaunch {
    l1_warpgroup_plan(1).history
}

/// The plan of an sm_90a device for L1 (a grid past one wave): `mla_history` on 64-head,
/// 64-key tiles, two warpgroups on the 4 × 2 warp grid, each one column half, in the
/// `cp.async` form its shorter programs ship (L1's own moves its tiles as TMA boxes: see
/// `long_history_programs_move_their_tiles_as_tma_boxes`). Its loop,
/// compiled for sm_90a, runs every dot as warpgroup MMAs: QKᵀ as 32 + 4 k-steps of
/// `m64n32k16` (Q's latent and rope parts through descriptors), PV as 4
/// k-steps of `m64n256k16` with P staged through shared memory (no `mma.sync`; P's A
/// fragments by four `ldmatrix.x4`), two barriers (after the scores' cross-warpgroup row
/// max, after P's staging: each the other's guard, `scratch_ledger`; the stage handshake is
/// on mbarriers: a producer warpgroup copies the key tiles), no local memory. The rope dot
/// continues the latent dot's MMAs in flight.
#[test]
fn l1_history_on_sm90a_runs_two_warpgroups() {
    let mut l = l1_warpgroup_history();
    assert_eq!((l.kernel, l.grid), ("mla_history", [256, 1, 1]));
    set_const(&mut l, "TMA", ConstValue::Bool(false));
    let s = schedule_for("l1-warpgroups", &l, "sm_90a".parse().expect("arch"));
    assert_eq!(s.spills, (0, 0, 0), "spills or local memory");
    // The rope part of the scores continues the latent part's MMAs (no wait between). Q's
    // latent and rope columns once (held in registers, the rope part was loaded element by
    // element: ~20 % of the 1 × 32768 history's stall samples on the H200), the key tile's
    // latent and rope columns in the prologue and a tile ahead.
    assert_eq!((s.chained, s.copies), (1, 6), "(chained MMAs, copies)");
    let c = |k: &str| sass_support::count(&s.sass, k);
    assert_eq!(
        (
            c("HGMMA"),
            c("HMMA"),
            c("LDSM"),
            c("BAR"),
            c("LDL") + c("STL")
        ),
        (40, 0, 4, 2, 0),
        "(HGMMA, HMMA, LDSM, BAR, local) per tile"
    );
    // The epilogue's 64 guarded stores a thread compute their addresses before their
    // guards: each row's division by `heads_per_rank` (an `I2F.RP`/`MUFU.RCP` sequence) is
    // done once, not once a store (91 MUFU, 5376 instructions; H200: the epilogue 20.5k →
    // 9.2k cycles a program, L1's history 346 → 338 µs). The output then leaves through
    // shared memory (`gpu_ir::staged_store`): 16 chunks of 16 bytes a thread and the two
    // log-sum-exp stores, each chunk's row divided again (34 MUFU instead of 26).
    let whole = sass_support::whole_kernel("l1-warpgroups", &s.cubin);
    let w = |k: &str| sass_support::count(&whole, k);
    assert_eq!((w("MUFU"), w("STG")), (34, 18), "(MUFU, STG) in the kernel");
    // The first 12 of the latent scores' 32 k-steps take Q from registers, loaded once
    // before the loop (12 LDSM beside P's 4); 16 held k-steps spilled (H200: L1's history
    // 339.3 → 333.5 / 333.7 µs, its dcp-2 rank 186.3 → 183.5 / 183.7).
    assert_eq!(
        (s.held_a, w("LDSM")),
        (12, 16),
        "(held k-steps, LDSM in the kernel)"
    );
    assert!(w("n") < 3000, "{} instructions in the kernel", w("n"));
    let err = step(1, 32768, 128, 1).plan_tuned(MmaKind::Warpgroup, None, None, Some(24));
    assert!(
        matches!(err, Err(PlanError::HistoryKvTile { got: 24, max: 64 })),
        "{err:?}"
    );
}

/// The history's launcher moves the latent tiles by `cp.async` on every row (`plan::HIST_TMA`:
/// TMA boxes, chosen from 64 tiles a program when they measured faster, now measure 2.5 %
/// slower at L1), and the TMA form stays a choice (the kernel's `tma = TMA`). L1's TMA form:
/// each warp's lane 0 issues a tile's nine 64-column boxes between them (`UTMALDG`), the
/// consumers wait on the boxes' mbarriers, the loop's MMAs and barriers as in the
/// `cp.async` form, no spills.
#[test]
fn history_tiles_move_by_cp_async_and_the_tma_form_compiles() {
    let tma = |batch, ctx, heads, dcp| {
        let p = step(batch, ctx, heads, dcp).plan_tuned(MmaKind::Warpgroup, None, None, None);
        constexpr(&p.expect("plan").history, "TMA")
    };
    let off = ConstValue::Bool(false);
    assert_eq!(tma(128, 4096, 128, 1), off, "L1: 64 tiles a program");
    assert_eq!(
        tma(32, 8192, 128, 1),
        off,
        "32 x 8192: 2 splits of 64 tiles"
    );
    assert_eq!(tma(128, 4096, 128, 2), off, "L1's dcp-2 rank: 32 tiles");
    assert_eq!(
        tma(1, 32768, 128, 1),
        off,
        "1 x 32768: 64 splits of 8 tiles"
    );
    assert_eq!(tma(128, 32768, 16, 1), off, "L2: one warpgroup, 16 heads");
    let sync = step(128, 4096, 128, 1).plan_tuned(MmaKind::Sync, None, None, None);
    assert_eq!(
        constexpr(&sync.expect("plan").history, "TMA"),
        off,
        "mma.sync"
    );

    let mut l = l1_warpgroup_history();
    set_const(&mut l, "TMA", ConstValue::Bool(true));
    let s = schedule_for("l1-tma", &l, "sm_90a".parse().expect("arch"));
    assert_eq!(s.spills, (0, 0, 0), "spills or local memory");
    let c = |k: &str| sass_support::count(&s.sass, k);
    assert_eq!(
        (c("HGMMA"), c("LDSM"), c("BAR"), c("LDGSTS")),
        (40, 4, 2, 0),
        "(HGMMA, LDSM, BAR, LDGSTS) per tile"
    );
    // The key tile's copies (latent and rope, prologue and loop) are boxes; the queries'
    // (latent and rope, once) stay `cp.async`.
    assert_eq!(
        (s.copies, s.tma_copies),
        (6, 4),
        "(producer copies, as TMA boxes)"
    );
    let whole = sass_support::whole_kernel("l1-tma", &s.cubin);
    assert_eq!(
        sass_support::count(&whole, "LDGSTS"),
        18,
        "the queries' cp.async"
    );
}

/// The held query fragments are a read of the queries' alloc: the verifier refuses them
/// before the copies that fill it are waited for and visible (at the program's top).
#[test]
fn held_queries_are_read_after_their_copies() {
    let l = l1_warpgroup_history();
    let c = l.compile().expect("compile");
    let f = &c.specialized.ir;
    let mut p = gpu_ir::compile(f).expect("gpu ir");
    let at = p
        .body
        .ops
        .iter()
        .position(|o| matches!(o, GpuOp::HoldA { .. }))
        .expect("a HoldA before the loop");
    let hold = p.body.ops.remove(at);
    p.body.ops.insert(0, hold);
    let err = gpu_ir::verify::verify(f, &p).expect_err("held before the copies");
    assert!(err.contains("%a"), "{err}");
}

/// Tile shapes around the shipped one, printed for sweeps (`-- --ignored --nocapture`).
#[test]
#[ignore]
fn history_tilings() {
    for (bh, kv) in [(16, 16), (16, 32), (16, 64), (32, 32), (64, 32)] {
        let mut l = step(128, 4096, 128, 1).plan().expect("plan").history;
        set(&mut l, "BLOCK_H", bh);
        set(&mut l, "KV_TILE", kv);
        let s = schedule(&format!("L1-h{bh}-t{kv}"), &l);
        println!(
            "h{bh} t{kv}: copies {} registers {} spills {:?}",
            s.copies, s.registers, s.spills
        );
    }
}

/// L1's history, both copy forms: the row reductions' alternating slots (`scratch_ledger`:
/// the row maximum's exchange needs no barrier before its writes) fit the block's shared
/// memory beside the ring, the queries and the scratch (the kernel is emitted without them
/// where they would not).
#[test]
fn history_reduction_slots_fit_the_shared_memory() {
    for tma in [false, true] {
        let mut plan = l1_warpgroup_plan(1);
        plan.set_history_tma(tma);
        let l = &plan.history;
        let c = l.compile().unwrap_or_else(|e| panic!("{}: {e}", l.key()));
        assert!(c.cuda.source.contains("ATTN_RED_SLOT_AT"), "{}", l.key());
        assert!(
            c.cuda.shared_bytes <= 232_448,
            "{}: {}",
            l.key(),
            c.cuda.shared_bytes
        );
    }
}

/// The step's other kernels (the current part, the combine, the V-up fallback, the split
/// reduce) compile without spills or local memory in the plans of both targets (warpgroup
/// MMAs on sm_90a, `mma.sync` on sm_90), at L1's dcp 1 and dcp 2 and at 1 × 32768 (several
/// splits). (The current part at 64 heads on 4 warps had spilled 192 bytes.)
#[test]
fn small_kernels_compile_without_spills() {
    for arch in ["sm_90a", "sm_90"] {
        small_kernels_spill_free(arch.parse().expect("arch"));
    }
}

fn small_kernels_spill_free(arch: Arch) {
    for (label, s) in [
        ("l1", step(128, 4096, 128, 1)),
        ("l1-dcp2", step(128, 4096, 128, 2)),
        ("1x32768", step(1, 32768, 128, 1)),
    ] {
        let plan = s
            .plan_tuned(MmaKind::for_arch(arch), None, None, None)
            .expect("plan");
        for l in plan
            .launches()
            .into_iter()
            .filter(|l| l.kernel != "mla_history")
        {
            let name = format!("{label} {} {arch:?}", l.key());
            let c = l.compile().unwrap_or_else(|e| panic!("{name}: {e}"));
            if let Ok(dir) = std::env::var("ATTN_DUMP_DIR") {
                let _ = std::fs::write(format!("{dir}/{label}-{}.cu", l.kernel), &c.cuda.source);
            }
            sass_support::compile_spill_free(&name, &CudaSource::from_kernel(&c.cuda), arch);
        }
    }
}

/// The fused combine + V-up's tiles the bench sweeps (64 × 128 spills 8 bytes at dcp 2).
const FUSED_TILES: [(u32, u32, u32); 10] = [
    (16, 64, 2),
    (16, 128, 2),
    (16, 128, 3),
    (16, 128, 4),
    (32, 64, 2),
    (32, 64, 3),
    (32, 64, 4),
    (32, 128, 2),
    (64, 64, 2),
    (128, 64, 2),
];

/// Every tile the fused combine + V-up may be forced to (`MlaDcpConfig::forced_fused_tile`)
/// compiles without spills or local memory at dcp 1 and dcp 2 (two and three parts, an
/// `[BLOCK_T, BLOCK_V]` accumulator each, 128 or 64 output columns a program), on sm_90a: a warp per 8 tokens from 32 tokens on.
/// 128 tokens at dcp 2 (three accumulators on 16 warps: 128 registers a thread) spill and
/// are not offered.
#[test]
fn fused_combine_v_up_tiles_compile_without_spills() {
    let arch: Arch = "sm_90a".parse().expect("arch");
    for dcp in [1, 2] {
        let mut plan = l1_warpgroup_plan(dcp);
        let tiles = FUSED_TILES.iter().filter(|&&(t, _, _)| dcp == 1 || t < 128);
        let tiles = tiles.flat_map(|&t| [128, 64].map(|block_v| (t, block_v)));
        for ((block_t, lat_chunk, stages), block_v) in tiles {
            plan.retile_combine_v_up(FusedTile {
                block_t,
                lat_chunk,
                stages,
                block_v,
                warpgroups: false,
            });
            let l = &plan.combine_v_up;
            assert_eq!(l.grid[0], 128 / block_t, "{}", l.key());
            assert_eq!(l.grid[2], 128 / block_v, "{}", l.key());
            let c = l.compile().unwrap_or_else(|e| panic!("{}: {e}", l.key()));
            // An S-stage ring waits for all but the newest S − 2 commit groups.
            let wait = format!("attn_cp_wait<{}>", stages - 2);
            assert!(c.cuda.source.contains(&wait), "{}: no {wait}", l.key());
            sass_support::compile_spill_free(&l.key(), &CudaSource::from_kernel(&c.cuda), arch);
        }
    }
}

/// The fused combine + V-up's inner loop on its `mma.sync` tile (32 tokens × 64 latent
/// columns: L1's on an `mma.sync` plan, or on sm_90a with `ATTN_CODEGEN_DISABLE=merge_wgmma`),
/// compiled for sm_90a: every operand arrives by `cp.async` (no global load in the loop),
/// `W_UV`'s rows once for both parts, feeding `mma` through `ldmatrix`, one barrier a step,
/// nothing local.
#[test]
fn fused_combine_v_up_loop_streams_both_operands() {
    let mut plan = l1_warpgroup_plan(1);
    plan.retile_combine_v_up(fused_tile(128, 128, 2, 132));
    let l = &plan.combine_v_up;
    assert!(l.key().contains("BLOCK_T=32,LAT_CHUNK=64"), "{}", l.key());
    let c = l.compile().expect("specialize");
    let arch: Arch = "sm_90a".parse().expect("arch");
    let m = sass_support::compile_spill_free(&l.key(), &CudaSource::from_kernel(&c.cuda), arch);
    let ModuleImage::Cubin(bytes) = &m.image else {
        panic!("NVRTC gave no cubin");
    };
    let (line, sass) = sass_support::main_loop("fused_combine_v_up", bytes);
    println!("fused combine + V-up SASS {line}");
    let n = |k: &str| sass.get(k).copied().unwrap_or(0);
    assert_eq!(n("LDG"), 0, "{line}");
    // A thread's 16-byte copies a step: 2 of each part's [32, 64] rows, 8 of W's [64, 128]
    // (once for both parts); a warp's MMAs: its [16, 64] quarter of each part's product over
    // 64 columns (4 k-steps × 8, two parts).
    assert_eq!((n("LDGSTS"), n("HMMA"), n("BAR")), (12, 64, 1), "{line}");
    assert!(n("LDSM") > 0, "{line}");
    assert_eq!(n("LDL") + n("STL"), 0, "{line}");
}

/// The fused combine + V-up on warpgroup MMAs (`WARPGROUPS`, feature `merge_wgmma`) at
/// L1 and its dcp-2 rank, and its 128-token tile at L1 (opt-in `merge_t128`: four consumer
/// warpgroups): every product a `wgmma` whose operands the ring's descriptors give (no
/// `ldmatrix`, no `mma.sync`), copies by a producer warpgroup for two parts and by every
/// thread for three, nothing spilled (sm_90a). Another tile, and 128 tokens of three parts,
/// are typed errors when the kernel is specialized.
#[test]
fn fused_combine_v_up_on_warpgroup_mmas() {
    use attn_runtime::ops::mla_dcp::plan::{warpgroup_fused_tile, wide_warpgroup_fused_tile};
    let arch: Arch = "sm_90a".parse().expect("arch");
    let tiles = [
        (1, warpgroup_fused_tile()),
        (2, warpgroup_fused_tile()),
        (1, wide_warpgroup_fused_tile()),
    ];
    for (dcp, tile) in tiles {
        let mut plan = l1_warpgroup_plan(dcp);
        plan.retile_combine_v_up(tile);
        let l = &plan.combine_v_up;
        let c = l.compile().unwrap_or_else(|e| panic!("{}: {e}", l.key()));
        // A warpgroup per 64 tokens and 64 columns, and the producer's at dcp 1.
        let threads = 128 * (tile.block_t / 32 + u32::from(dcp == 1));
        assert_eq!(c.cuda.block_threads, threads, "{}", l.key());
        let split = c.cuda.source.contains("attn_setmaxnreg_inc");
        assert_eq!(split, dcp == 1, "{}: producer warpgroup", l.key());
        let src = CudaSource::from_kernel(&c.cuda);
        let m = sass_support::compile_spill_free(&l.key(), &src, arch);
        let ModuleImage::Cubin(bytes) = &m.image else {
            panic!("NVRTC gave no cubin");
        };
        let whole = sass_support::whole_kernel(&l.key(), bytes);
        let n = |k: &str| sass_support::count(&whole, k);
        println!("{}: {whole:?}", l.key());
        // A warpgroup's [64, 64] product of a part over a 64-column step: four k-steps.
        assert!(n("HGMMA") >= 4 * (dcp as usize + 1), "{}", l.key());
        assert_eq!((n("HMMA"), n("LDSM")), (0, 0), "{}", l.key());
        assert_eq!(n("LDL") + n("STL"), 0, "{}", l.key());
    }
    let mut plan = l1_warpgroup_plan(1);
    for (block_t, block_v) in [(32, 128), (64, 64)] {
        plan.retile_combine_v_up(FusedTile {
            block_t,
            block_v,
            ..warpgroup_fused_tile()
        });
        let err = plan
            .combine_v_up
            .compile()
            .expect_err("not a warpgroup tile");
        assert!(
            err.to_string().contains("WARPGROUPS takes 64 tokens"),
            "{err}"
        );
    }
    let mut plan = l1_warpgroup_plan(2);
    plan.retile_combine_v_up(wide_warpgroup_fused_tile());
    let err = plan.combine_v_up.compile().expect_err("three parts");
    assert!(
        err.to_string().contains("128 tokens at DCP_SIZE 1"),
        "{err}"
    );
}

/// Plain decode as the op runs it with the fused merge (`read_single_key_chunks_from_kv`):
/// the current part stores only its LSE — no PV, none of the `[T, N, 512]` rows — and the
/// merge reads the rows from `cur_kv`; both compile without spills or local memory, on
/// sm_90a and sm_90 (the merge in the plan of each: its warpgroup tile on sm_90a).
#[test]
fn one_token_chunks_store_no_current_rows() {
    let plan = l1_warpgroup_plan(1);
    let mut kv = plan.clone();
    assert!(kv.read_single_key_chunks_from_kv());
    for arch in ["sm_90a", "sm_90"] {
        let arch: Arch = arch.parse().expect("arch");
        let counts = |label: &str, l: &KernelLaunch| {
            let c = l.compile().unwrap_or_else(|e| panic!("{label}: {e}"));
            let src = CudaSource::from_kernel(&c.cuda);
            let m = sass_support::compile_spill_free(label, &src, arch);
            let ModuleImage::Cubin(bytes) = &m.image else {
                panic!("{label}: NVRTC gave no cubin");
            };
            sass_support::whole_kernel(label, bytes)
        };
        let rows = counts("current, rows", &plan.current);
        let lse = counts("current, LSE only", &kv.current);
        let c = |k: &BTreeMap<String, usize>, op: &str| sass_support::count(k, op);
        println!("{arch:?}: rows {rows:?}\n  LSE only {lse:?}");
        // Two LSE stores a thread; the rows' 16 chunks of 16 bytes go with PV's 32 `HMMA`s.
        assert_eq!(
            (c(&lse, "STG"), c(&rows, "STG")),
            (2, 18),
            "(stores) LSE only against the rows"
        );
        assert_eq!(
            (c(&lse, "HMMA"), c(&rows, "HMMA")),
            (36, 68),
            "(HMMA) LSE only against the rows"
        );
        let mut merge = l1_plan(MmaKind::for_arch(arch), 1);
        assert!(merge.read_single_key_chunks_from_kv());
        counts("combine + V-up, rows from cur_kv", &merge.combine_v_up);
    }
}

/// L1's history splits each tile's scores by warpgroup (each its half of the key columns),
/// so B's descriptor depends on the warpgroup: written from a warp-uniform value
/// (`uniform_desc`) it stays in uniform registers, where each of the loop's 40 `wgmma` had
/// waited on an `R2UR` chain (43 between its warpgroup MMAs; consumer loop 617 → 554 SASS).
#[test]
fn l1_history_descriptors_stay_in_uniform_registers() {
    let label = "L1 history";
    let s = schedule_for(
        label,
        &l1_warpgroup_history(),
        "sm_90a".parse().expect("arch"),
    );
    assert_eq!(
        sass_support::descriptor_moves_among_mmas(label, &s.cubin),
        0,
        "{label}: R2UR between warpgroup MMAs"
    );
}
