//! The shipped prefill specializations on Hopper's warpgroup MMA, checked without a GPU: the
//! plan an sm_90a device gets (the launch table's warpgroup entries) carries a `wgmma` path
//! beside its `mma.sync` one, and NVRTC compiles it for sm_90a without spills or local
//! memory, the KV-tile loop issuing warpgroup MMAs (HGMMA) and no `mma.sync` (HMMA) or
//! `ldmatrix`.

mod sass_support;
mod unified_plans;

use attn_runtime::jit::CudaSource;
use attn_runtime::ops::unified_attention::config::{AttentionProblem, MmRangeEncoding};
use attn_runtime::ops::unified_attention::gpu::emit_launch;
use attn_runtime::ops::unified_attention::plan::{LaunchPlan, PathChoice};
use unified_plans::{p0, p1, p3, plan, warpgroup};

/// The sm_90a cubin of the plan's kernel, compiled spill-free (no spill stores or loads, no
/// stack frame: every kernel, P0 included since its masked scores became one opaque `selp`,
/// see [`p0_full_tiles_copy_no_scores`]).
fn sm90a_cubin(label: &str, plan: &LaunchPlan) -> Vec<u8> {
    let cuda = emit_launch(&plan.attention).unwrap_or_else(|e| panic!("{label}: {e}"));
    assert!(
        cuda.source.contains("__CUDA_ARCH_FEAT_SM90_ALL")
            && cuda.source.contains("wgmma.mma_async"),
        "{label}: no warpgroup MMA path in the source"
    );
    if let Ok(dir) = std::env::var("ATTN_DUMP_DIR") {
        let _ = std::fs::write(format!("{dir}/{label}-wgmma.cu"), &cuda.source);
    }
    let bytes = sass_support::sm90a_cubin(label, &CudaSource::from_kernel(&cuda));
    if let Ok(dir) = std::env::var("ATTN_DUMP_DIR") {
        let _ = std::fs::write(format!("{dir}/{label}-wgmma.cubin"), &bytes);
    }
    bytes
}

/// The loop's SASS counts of the plan's kernel compiled for sm_90a ([`sm90a_cubin`]).
fn sm90a_loop(
    label: &str,
    plan: &LaunchPlan,
) -> (String, std::collections::BTreeMap<String, usize>) {
    let (line, counts) = sass_support::main_loop(label, &sm90a_cubin(label, plan));
    println!("{label} sm_90a SASS {line}");
    (line, counts)
}

/// Pinned per-KV-tile counts of the loop: warpgroup MMAs only (no `mma.sync`, no
/// `ldmatrix`: A is read through a descriptor or built from the scores in registers),
/// `bars` barriers (one of the whole program, none once warp-specialized: the consumers
/// wait on the stage's mbarrier), no local memory. Two-warpgroup programs take turns
/// issuing their two dots: a named-barrier sync before and an arrive after each (between
/// the two warpgroups only), `turn_bars` = 4 more `BAR`s.
/// Barriers of a [`epilogues_store_whole_lines`] store: before the fragments are written to
/// shared memory and before the rows are read back.
const STAGED_STORE_BARS: usize = 2;

fn check(
    label: &str,
    c: &std::collections::BTreeMap<String, usize>,
    line: &str,
    hgmma: usize,
    (bars, turn_bars): (usize, usize),
) {
    let n = |k: &str| sass_support::count(c, k);
    assert_eq!(
        n("HGMMA"),
        hgmma,
        "{label}: warpgroup MMAs per tile: {line}"
    );
    assert_eq!(
        (n("HMMA"), n("LDSM")),
        (0, 0),
        "{label}: mma.sync or ldmatrix left: {line}"
    );
    // The loop the SASS reader finds spans the consumers' whole path, so it also holds the
    // two barriers of the output's store through shared memory, once a program.
    assert_eq!(
        n("BAR"),
        bars + turn_bars + STAGED_STORE_BARS,
        "{label}: barriers per tile: {line}"
    );
    assert_eq!(
        (n("LDL"), n("STL")),
        (0, 0),
        "{label}: local memory: {line}"
    );
}

/// The plan an sm_90a device gets for `problem` over `seq` tokens, its `(BLOCK_M,
/// TILE_SIZE)` asserted, and its loop checked with `hgmma` warpgroup MMAs a tile and the
/// turns' four barriers beyond one (see [`check`]).
fn table_plan(
    label: &str,
    problem: AttentionProblem,
    seq: usize,
    tiling: (i32, i32),
    hgmma: usize,
) -> LaunchPlan {
    let p = plan(&warpgroup(problem), seq, PathChoice::Heuristic);
    assert_eq!(
        (p.config.block_m, p.config.tile_size),
        tiling,
        "{label}: the launch table's warpgroup tiling"
    );
    let (line, c) = sm90a_loop(label, &p);
    check(label, &c, &line, hgmma, (1, turn_bars(label)));
    p
}

/// The turns' barriers a tile: a take and a pass per dot, or one turn for both where PV of
/// the previous tile issues with the scores (P0: `gpu_ir::previous_stage`).
fn turn_bars(label: &str) -> usize {
    match label {
        "P0" => 2,
        _ => 4,
    }
}

/// The turns of a two-warpgroup program: the first hands over before the loop, each dot
/// is taken and passed, the last pass is taken after it (in the consumers' program and in
/// the unsplit one).
fn assert_turns(label: &str, p: &LaunchPlan) {
    let src = emit_launch(&p.attention).expect("emit").source;
    let n = |step: &str| src.matches(&format!("// turn {step}")).count();
    // A take and a pass per turn of the loop, in the split program and the unsplit one.
    let turns = turn_bars(label);
    assert_eq!(
        (n("Begin"), n("Take"), n("Pass"), n("End")),
        (2, turns, turns, 2),
        "{label}: turns around the KV loop"
    );
}

/// P0 (D 128) on two warpgroups, 128 × 128, warp-specialized: QKᵀ 8 k-steps of two
/// m64n64k16 each (the key tile is as wide as the head, so the scores split their N) with
/// the queries' fragments held in registers, PV 8 of m64n128k16, the warpgroups taking
/// turns. (The loop the SASS reader finds runs from
/// the producer's loop into the consumers': its LDG, LDGSTS and one barrier are the
/// producer's.)
#[test]
fn p0_runs_both_dots_on_warpgroup_mmas() {
    let p = table_plan("P0", p0(), 16384, (128, 128), 24);
    assert_turns("P0", &p);
    let src = emit_launch(&p.attention).expect("emit").source;
    let n = |shape: &str| {
        src.matches(&format!("wgmma.mma_async.sync.aligned.{shape}."))
            .count()
    };
    // One line per instruction of a k-step, in the split program (the scores' with A from
    // registers and from shared memory) and in the whole one.
    assert_eq!(
        (n("m64n64k16"), n("m64n128k16")),
        (6, 2),
        "P0: the scores split into two m64n64k16, PV whole"
    );
    // The scores start from zero without reading it: a zeroed second column part made
    // ptxas wait for the first instruction before issuing the rest.
    assert!(
        src.contains("\"r\"((int)(ks != 0))"),
        "P0: the scores' first k-step reads its zero accumulator"
    );
    // Q's 8 k-steps are held whole in registers (`gpu_ir::hold_a`: a short A beside the
    // scores and the packed P), so the scores read only the keys from shared memory
    // (H200: 2.15 → 2.11 ms).
    assert!(
        src.contains("the first 8 k-steps of %") && src.contains("if (ks < 8) { asm"),
        "P0: Q's fragments not held in registers"
    );
}

/// A partial tile's mask is a branch around a masked fill of the scores. Written as a plain
/// `?:`, NVVM speculated the fill into fresh registers ahead of the test, so the branch's
/// result could not live in the scores' registers: every full tile paid one register move
/// per score (64 in P0's consumer loop, 107 `IMAD` in all) and the consumers spilled 24
/// bytes. `attn_fill_select` (one `selp` the C++ compiler cannot see through) leaves the
/// full tile's path without copies: 13 `IMAD` in the loop, 1,026 instructions against
/// 1,101 (NVRTC 13.0).
#[test]
fn p0_full_tiles_copy_no_scores() {
    let p = plan(&warpgroup(p0()), 16384, PathChoice::Heuristic);
    let (line, c) = sass_support::innermost_loop_with("P0", &sm90a_cubin("P0", &p), "HGMMA");
    assert!(
        sass_support::count(&c, "IMAD") < 32,
        "P0: the full tiles' scores copied out of the MMA's registers: {line}"
    );
}

/// P0's consumer loop, the loop P0 waits on, at its size as shipped: 968 instructions
/// (NVRTC 13.0). ptxas allocates the producer and the consumers as one function, so a change
/// to the producer alone can grow it: with `page_pointer` the consumers re-read `tid` in the
/// loop and moved uniform-datapath work to vector registers (971; 975 with every address
/// cut), and P0 ran 1–3 % slower with fewer producer instructions (docs/gpu_ir.md, "Timed in
/// session 20"). A change that grows it is to be timed, not assumed free.
#[test]
fn p0_consumer_loop_keeps_its_size() {
    let p = plan(&warpgroup(p0()), 16384, PathChoice::Heuristic);
    let (line, c) = sass_support::innermost_loop_with("P0", &sm90a_cubin("P0", &p), "HGMMA");
    assert!(
        sass_support::count(&c, "n") <= 970,
        "P0's consumer loop grew: {line}"
    );
}

/// P0's softmax runs while PV's warpgroup MMAs do (`gpu_ir::wait_in_scale`). ptxas hoists a
/// warpgroup wait to the top of its basic block: with PV's wait in the softmax's block, all
/// 66 `MUFU.EX2` of the consumer loop ran after it (the kernel's top stall on the H200);
/// at the head of the accumulator rescale's arms, the whole softmax stays ahead of it.
#[test]
fn p0_softmax_runs_under_pv() {
    let p = plan(&warpgroup(p0()), 16384, PathChoice::Heuristic);
    let sass = sass_support::instructions("P0", &sm90a_cubin("P0", &p));
    let pv = sass
        .iter()
        .position(|i| i.starts_with("HGMMA.64x128x16"))
        .expect("P0: PV's HGMMA");
    let wait = pv
        + sass[pv..]
            .iter()
            .position(|i| i.starts_with("WARPGROUP.DEPBAR.LE gsb0, 0x0"))
            .expect("P0: PV's wait");
    let under = sass[pv..wait]
        .iter()
        .filter(|i| i.starts_with("MUFU.EX2"))
        .count();
    assert!(
        under >= 64,
        "P0: {under} exponentials between PV's issue and its wait (64 scores a thread)"
    );
}

/// The output leaves through shared memory in 16-byte chunks (`gpu_ir::staged_store`): each
/// thread stores `rows × cols × 2 / (16 × 256)` chunks and nothing narrower, where storing
/// its fragment pairs straight took a 4-byte store per pair (64 at P1's 128 × 256: half
/// sectors of eight rows a warp access, 7 % of P1's time on the H200).
#[test]
fn epilogues_store_whole_lines() {
    for (label, problem, n, head) in [
        ("P0", p0(), 16384, 128),
        ("P1", p1(), 8192, 256),
        ("P3", p3(), 8192, 256),
    ] {
        let p = plan(&warpgroup(problem), n, PathChoice::Heuristic);
        let c = sass_support::whole_kernel(label, &sm90a_cubin(label, &p));
        let chunks = p.config.block_m as usize * head * 2 / (16 * 256);
        assert_eq!(
            sass_support::count(&c, "STG"),
            chunks,
            "{label}: the output's stores: {c:?}"
        );
    }
}

/// A consumer thread's accumulator and score elements of a two-warpgroup plan at head size
/// `head`.
fn elements_a_thread(p: &LaunchPlan, head: usize) -> (usize, usize) {
    let threads = 256;
    let acc = p.config.block_m as usize * head / threads;
    let scores = (p.config.block_m * p.config.tile_size) as usize / threads;
    (acc, scores)
}

/// The scores are scaled in the exponent (`SCALE_AFTER_MAX`): each is one FMA into `ex2`,
/// and the consumers' only multiplies a tile are the accumulator's rescale (one an element)
/// and a few a row. Scaled before the row max, each score took a multiply of its own (P0's
/// consumer loop 1,026 → 964 SASS instructions, P1's 978 → 948).
#[test]
fn scores_are_scaled_in_the_exponent() {
    for (label, problem, n, head) in [("P0", p0(), 16384, 128), ("P1", p1(), 8192, 256)] {
        let p = plan(&warpgroup(problem), n, PathChoice::Heuristic);
        let (line, c) = sass_support::innermost_loop_with(label, &sm90a_cubin(label, &p), "HGMMA");
        let (acc, scores) = elements_a_thread(&p, head);
        let fmul = sass_support::count(&c, "FMUL");
        assert!(
            fmul >= acc && fmul - acc < scores,
            "{label}: {fmul} FMUL for {acc} accumulator and {scores} score elements: {line}"
        );
    }
}

/// Gemma-2's softcap, `softcap · tanh(s·scale / softcap)`, costs a score one multiply into
/// `tanh.approx` (`scale / softcap` is computed once a program) and its factor `softcap` waits
/// for the exponent (`SCALE_AFTER_MAX`). Written as the quotient of the scaled score, each
/// score took an IEEE division (`MUFU.RCP`, its refinement and a slow-path check): P1's
/// consumer loop with softcap was 1,451 SASS instructions a tile and 98 `MUFU` (three a
/// score); 973 with the division a reciprocal's multiply (`attn_mul_rcp`), 924 with the scale
/// folded into it, 894 with the softcap in the exponent.
#[test]
fn softcap_takes_no_division_a_score() {
    let problem = AttentionProblem {
        softcap: 50.0,
        ..warpgroup(p1())
    };
    let p = plan(&problem, 8192, PathChoice::Heuristic);
    assert!(p.config.use_softcap, "P1 with softcap: {:?}", p.config);
    let label = "P1-softcap";
    let (line, c) = sass_support::innermost_loop_with(label, &sm90a_cubin(label, &p), "HGMMA");
    let (acc, scores) = elements_a_thread(&p, 256);
    let mufu = sass_support::count(&c, "MUFU");
    // A tanh and an exponential a score, and the rescale's row factors.
    assert!(
        mufu >= 2 * scores && mufu < 2 * scores + 8,
        "{label}: {mufu} MUFU for {scores} scores a thread: {line}"
    );
    let fmul = sass_support::count(&c, "FMUL");
    assert!(
        fmul >= acc && fmul - acc < 2 * scores,
        "{label}: {fmul} FMUL for {acc} accumulator and {scores} score elements: {line}"
    );
    assert!(sass_support::count(&c, "n") <= 900, "{label}: {line}");
}

/// vLLM's mask tests each score against one key interval per row (`key_interval`: the
/// causal part, the window and the image ranges holding the query are intervals around it),
/// so a masked tile of P3 costs a few compares a score, not its terms one by one (the
/// image ranges' four bounds and clamp a candidate): its consumer loop's `ISETP` and `LOP3`
/// were 698 for 32 scores a thread, 223 as intervals (1,652 → 845 SASS instructions). The
/// interval reads no key, so it is computed before the KV loop (loop-invariant code motion):
/// the loop reads no image range for it. Two loads a tile are left: the full-tile test's (a
/// candidate range's bounds against the tile's keys). Without the clamp the V guard is the
/// block's first key (`block_first_key`) and its keys one span, so it is split like P3: with
/// the mask's guard and two tile loops, it kept its copies, which re-ran the image-range
/// loop for every row they folded (22 loads a tile).
#[test]
fn masks_test_one_interval_a_row() {
    let unclamped = AttentionProblem {
        mm_prefix_clamp_sw: false,
        ..p3()
    };
    for (label, problem) in [("P3", p3()), ("P3 without the clamp", unclamped)] {
        let p = plan(&warpgroup(problem), 8192, PathChoice::Heuristic);
        let src = emit_launch(&p.attention).expect("emit").source;
        assert!(src.contains(": holds = and("), "{label}: no row interval");
        let (line, c) = sass_support::innermost_loop_with(label, &sm90a_cubin(label, &p), "HGMMA");
        let scores = (p.config.block_m * p.config.tile_size) as usize / 256;
        let logic = sass_support::count(&c, "ISETP") + sass_support::count(&c, "LOP3");
        assert!(
            logic < 8 * scores,
            "{label}: {logic} compares and logic ops for {scores} scores a thread: {line}"
        );
        let loads = sass_support::count(&c, "LDG");
        assert!(loads <= 2, "{label}: {loads} global loads a tile: {line}");
    }
}

/// The launch table's 128 × 128 warpgroup tiling keeps three K/V stages, still split: the
/// producer fills the two stages ahead before its loop (a commit group each) and waits for
/// all but the newest group before it hands a stage over; six mbarriers (full and empty per
/// stage). At D 128 that is 224 KB of shared memory. Four stages (a forced tiling at D 64)
/// keep three tiles in flight the same way.
#[test]
fn p0_keeps_tiles_in_flight() {
    let d64 = AttentionProblem {
        head_size: 64,
        ..p0()
    };
    for (label, problem) in [("P0", p0()), ("P0 at D 64", d64)] {
        let p = plan(&warpgroup(problem), 16384, PathChoice::Heuristic);
        assert_eq!(p.config.num_stages, 3, "{label}: the table's ring depth");
        assert_ring(label, &p, 3);
    }
    let four = PathChoice::Force2dTiled {
        block_m: 128,
        tile_size: 128,
        slabs_per_warp: 1,
        num_stages: 4,
    };
    assert_ring(
        "P0 at D 64, 4 stages",
        &plan(&warpgroup(d64), 16384, four),
        4,
    );
}

/// A split program's ring of `stages`: the producer waits for all but the newest
/// `stages - 2` commit groups (never for all of them), an mbarrier pair per stage.
fn assert_ring(label: &str, p: &LaunchPlan, stages: usize) {
    let src = emit_launch(&p.attention).expect("emit").source;
    let producer = src
        .split("attn_setmaxnreg_dec")
        .nth(1)
        .and_then(|s| s.split("attn_setmaxnreg_inc").next())
        .unwrap_or_else(|| panic!("{label}: not warp-specialized"));
    // Either the producer waits for all but the newest groups before it hands a stage over,
    // or its copies arrive on the stage themselves and it waits for them only at its end.
    let handed_over = producer.contains(&format!("attn_cp_wait<{}>();", stages - 2))
        && !producer.contains("attn_cp_wait<0>();");
    let arriving =
        producer.contains("attn_cp_mbar_arrive(") && producer.matches("attn_cp_wait<").count() == 1;
    assert!(
        handed_over || arriving,
        "{label}: the producer hands a stage over with the next ones still in flight"
    );
    assert!(
        src.contains(&format!("// full[{stages}], empty[{stages}]")),
        "{label}: an mbarrier pair per stage"
    );
}

/// P0 at D 64 on the launch table's 128 × 128: QKᵀ 4 k-steps of m64n128k16 (the key tile is
/// twice the head: nothing to split), PV 8 of m64n64k16, spill-free.
#[test]
fn p0_at_d64_runs_on_128_key_tiles() {
    let d64 = AttentionProblem {
        head_size: 64,
        ..p0()
    };
    table_plan("P0-d64", d64, 16384, (128, 128), 12);
}

/// P1 (D 256) on two warpgroups, 128 × 64: QKᵀ 16 k-steps of m64n64k16, the first 4 with
/// the queries' fragments held in registers (`gpu_ir::hold_a`: as many as the registers
/// beside the 128-register accumulator allow; H200 0.296 → 0.295 ms), PV 4 of m64n256k16.
#[test]
fn p1_runs_both_dots_on_warpgroup_mmas() {
    let p = plan(&warpgroup(p1()), 8192, PathChoice::Heuristic);
    let (line, c) = sm90a_loop("P1", &p);
    // The loop the SASS reader finds spans the producer's loop and the consumers' (5220
    // instructions): its one barrier beyond the turns' is not in the consumers' loop.
    check("P1", &c, &line, 20, (1, 4));
    assert_turns("P1", &p);
    let src = emit_launch(&p.attention).expect("emit").source;
    assert!(
        src.contains("the first 4 k-steps of %") && src.contains("if (ks < 4) { asm"),
        "P1: the queries' first 4 k-steps not held in registers"
    );
}

/// One warpgroup per program (P0 at 64 × 64, the `P0-m64t64` row): nothing to take turns
/// with.
#[test]
fn one_warpgroup_takes_no_turns() {
    let forced = PathChoice::Force2dTiled {
        block_m: 64,
        tile_size: 64,
        slabs_per_warp: 1,
        num_stages: 2,
    };
    let p = plan(&warpgroup(p0()), 16384, forced);
    let src = emit_launch(&p.attention).expect("emit").source;
    assert!(!src.contains("// turn"));
}

/// P3 (P1 plus 30 clamped image ranges) on P1's tiling, 128 × 64 on two warpgroups, the
/// launch table's choice: its V guard is a bound on the key
/// (`plan::first_key_v_guard`), so no copy runs the image-range loop and the program splits
/// like P1's: a producer warpgroup with both copies, the consumers' loop on 20 warpgroup
/// MMAs (QKᵀ 16 k-steps of m64n64k16, PV 4 of m64n256k16) taking turns, no spills. (With
/// the mask-derived guard the range loop kept P3 unsplit, and the table on 64 × 32.)
#[test]
fn p3_is_warp_specialized_on_two_warpgroups() {
    let p = table_plan("P3", p3(), 8192, (128, 64), 20);
    let src = emit_launch(&p.attention).expect("emit").source;
    assert!(
        src.contains("attn_setmaxnreg_dec<ATTN_WS_PRODUCER_REGS>()"),
        "P3: not warp-specialized"
    );
}

/// P3 with the clamp off and its ranges given per query: two tile ranges, so two KV loops
/// read one query tile. It is copied once into shared memory and both loops' scores read it
/// through a descriptor (with two readers it used to stay in registers, loaded element by
/// element: P3 with the clamp off, then on two loops too, ran 1.09 ms against 0.56 once
/// shared, H200, 2026-12-02).
#[test]
fn p3_without_clamp_shares_one_query_copy() {
    use attn_dsl::gpu_ir::{self, CopyAt, GpuOp, OperandSource};
    let problem = AttentionProblem {
        mm_prefix_clamp_sw: false,
        mm: MmRangeEncoding::PerQuery,
        ..p3()
    };
    let p = plan(&warpgroup(problem), 8192, PathChoice::Heuristic);
    let mut f = unified_plans::lowered_ir(&p);
    f.warpgroup_mma = true;
    let prog = gpu_ir::compile(&f).expect("gpu ir");
    let (mut in_place, mut mmas, mut a_shared) = (0, 0, 0);
    gpu_ir::walk_block(&prog.body, &mut |op| match op {
        GpuOp::AsyncCopy(c) if c.at == CopyAt::InPlace => in_place += 1,
        GpuOp::Mma { a, .. } => {
            mmas += 1;
            a_shared += usize::from(matches!(a, OperandSource::Shared { .. }));
        }
        _ => {}
    });
    assert_eq!(in_place, 1, "one copy of the query tile");
    assert_eq!(
        (mmas, a_shared),
        (4, 2),
        "two loops: QKᵀ with Q from shared memory, PV with P from registers"
    );
    let (line, c) = sm90a_loop("P3-noclamp", &p);
    assert_eq!(sass_support::count(&c, "LDL"), 0, "{line}");
}

/// The scores' descriptors whose A rows or B columns depend on the warpgroup (P1's and P3's
/// queries from shared memory at D 256) are computed from warp-uniform values
/// (`uniform_desc`), so each `wgmma` takes them from uniform registers: P1 had 13 `R2UR`
/// between its warpgroup MMAs (a chain each k-step waited on), P3 4.
#[test]
fn d256_descriptors_stay_in_uniform_registers() {
    for (label, problem) in [("P1", warpgroup(p1())), ("P3", warpgroup(p3()))] {
        let p = plan(&problem, 8192, PathChoice::Heuristic);
        let moves = sass_support::descriptor_moves_among_mmas(label, &sm90a_cubin(label, &p));
        assert_eq!(moves, 0, "{label}: R2UR between warpgroup MMAs");
    }
}
