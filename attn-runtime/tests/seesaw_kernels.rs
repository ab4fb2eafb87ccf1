//! L1's history (the sm_90a plan, its tiles by `cp.async`) with the seesaw switched on
//! (`ATTN_CODEGEN_ENABLE=seesaw`), compiled with NVRTC: the schedule is placed, not
//! dropped for the loop as written. Its two 64-key tiles an iteration fit beside the
//! queries as one buffer a half (`gpu_ir::seesaw_ring`: 216 KB of tiles, where a ring a
//! half took 360 KB), its handoffs share the program's scratch, and each warpgroup runs a
//! loop of its own (`codegen::warpgroup_loops`), so its registers hold its own tile's
//! scores and one accumulator: in one loop it spilled 1.4 KB a thread, with the guard
//! keeping both halves' accumulators 5.8 KB. The feature list is read once per process:
//! every test of this binary sets the same one first.

mod experiment_support;
mod sass_support;

use attn_dsl::ConstValue;
use attn_runtime::jit::{compile, CudaSource, JitOptions, ModuleImage};
use attn_runtime::ops::mla_dcp::metadata::DcpLayout;
use attn_runtime::ops::mla_dcp::plan::DecodeStep;
use attn_runtime::ops::unified_attention::config::MmaKind;
use attn_runtime::reference::mla::MlaConfig;

/// Dynamic shared memory one block may take on sm_90.
const MAX_SHARED_BYTES: u32 = 232_448;

/// L1's history as the sm_90a plan gives it, its tiles by `cp.async`, under the seesaw (the
/// feature list is read once per process: every test of this binary sets the same one).
fn l1_seesaw_history() -> attn_dsl::driver::Compiled {
    std::env::set_var("ATTN_CODEGEN_ENABLE", "seesaw");
    let layout = DcpLayout::new(1, 1, 64).expect("layout");
    let scale = MlaConfig::deepseek_v3().softmax_scale() as f32;
    let step = DecodeStep::uniform_decode(128, 4096, 128, layout, scale, 132);
    let mut l = step
        .plan_tuned(MmaKind::Warpgroup, None, None, None)
        .expect("plan")
        .history;
    let tma = l.constexprs.iter_mut().find(|(n, _)| *n == "TMA");
    tma.expect("the history's TMA constexpr").1 = ConstValue::Bool(false);
    l.compile().expect("compile")
}

#[test]
fn l1_history_takes_the_seesaw_within_shared_memory_and_registers() {
    let c = l1_seesaw_history();
    let src = &c.cuda.source;
    // Each copy meets the other warpgroup at four barriers a pair of tiles, one a run of
    // handoffs: the seesaw gathers its eight handoffs into four runs (the running max and
    // sum at the top; the factor and P before PV; the new max and sum after it; the second
    // half's factor and P), each run's writes meet behind one barrier, the ledger drops
    // every leading barrier (each buffer past the bytes read since the last one; the
    // loop's first, from the body's end computed by a probe emission), and P reaches PV
    // staged by its handoff (twenty before session 29: two a handoff, and PV staging P
    // again between two more; eight after it, one a handoff).
    let copies = barriers_by_copy(src);
    assert_copies_meet_alike(&copies);
    assert_eq!(copies[0].len(), 4, "{copies:?}");
    for w in 0..2 {
        let copy = format!("the loop, warpgroup {w}'s copy");
        assert!(src.contains(&copy), "no {copy}: the seesaw was not placed");
    }
    assert!(
        c.cuda.shared_bytes <= MAX_SHARED_BYTES,
        "{} bytes of shared memory",
        c.cuda.shared_bytes
    );
    let arch = "sm_90a".parse().expect("arch");
    let m = compile(&CudaSource::from_kernel(&c.cuda), &JitOptions::new(arch)).expect("NVRTC");
    let s = m.entry_stats().expect("ptxas statistics");
    assert!(
        s.spill_store_bytes <= 32 && s.stack_frame_bytes <= 32,
        "{s:?}: spills beyond a few scalars"
    );
    let ModuleImage::Cubin(bytes) = &m.image else {
        panic!("NVRTC gave no cubin");
    };
    // Each warpgroup's loop: its tile's scores (32 latent and 4 rope k-steps of
    // `m64n64k16`) and both PVs (4 k-steps of `m64n256k16` each).
    let whole = sass_support::whole_kernel("l1-seesaw", bytes);
    assert_eq!(sass_support::count(&whole, "HGMMA"), 2 * (36 + 4 + 4));
}

/// `bench/experiments/mla_seesaw_meetings.py` (what the seesaw's handoff meetings cost,
/// timed by `mla_seesaw_ab.sh`) still finds handoff barriers in L1's seesaw history:
/// `halfmeet` drops the leading ones the ledger left (none in the loop now), `nomeet` the
/// warpgroup pair's as well, the same from each warpgroup's loop (a barrier one warpgroup
/// still meets and the other no longer does would hang the GPU, not time it), and both
/// still compile.
#[test]
fn handoff_meeting_edits_apply_to_l1s_seesaw_history() {
    let c = l1_seesaw_history();
    let dir = std::env::temp_dir().join(format!("attn-seesaw-meetings-{}", std::process::id()));
    let input = dir.join("generated");
    std::fs::create_dir_all(&input).expect("temp dir");
    std::fs::write(input.join("h.cu"), &c.cuda.source).expect("write");
    let before = barriers_by_copy(&c.cuda.source);
    let arch = "sm_90a".parse().expect("arch");
    for variant in ["halfmeet", "nomeet"] {
        let out = dir.join(variant);
        experiment_support::rewrite("mla_seesaw_meetings.py", &input, &out, &[variant]);
        let edited = std::fs::read_to_string(out.join("h.cu")).expect("the rewrite");
        let after = barriers_by_copy(&edited);
        // The generator drops the loop's leading barriers itself now: `halfmeet` finds
        // them only after the loop; `nomeet` still drops the pair's.
        let dropped = before[0].len() - after[0].len();
        assert_eq!(
            dropped > 0,
            variant == "nomeet",
            "{variant}: {before:?} → {after:?}"
        );
        assert_copies_meet_alike(&after);
        compile(
            &CudaSource::new(&c.cuda.entry, &edited),
            &JitOptions::new(arch),
        )
        .unwrap_or_else(|e| panic!("{variant} does not compile: {e}"));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The barriers over both warpgroups (256 threads: not a warpgroup's own) in each
/// warpgroup's copy of the loop, in order, up to the next copy: the named barrier each
/// `attn_bar_sync` names.
fn barriers_by_copy(src: &str) -> Vec<Vec<u32>> {
    src.split("the loop, warpgroup ")
        .skip(1)
        .map(|copy| {
            copy.split("attn_bar_sync(")
                .skip(1)
                .filter_map(|rest| {
                    let (id, count) = rest.split_once(')')?.0.split_once(", ")?;
                    (count == "256").then(|| id.parse().expect("a barrier id"))
                })
                .collect()
        })
        .collect()
}

/// Each warpgroup's copy of the loop meets the same barriers in the same order (the second
/// copy's run on into the code after the loop): one barrier more in either copy would
/// hang the GPU, not fail a test.
fn assert_copies_meet_alike(copies: &[Vec<u32>]) {
    assert!(copies.len() >= 2, "{copies:?}");
    assert!(
        copies[1].starts_with(&copies[0]),
        "the copies' barriers differ: {copies:?}"
    );
}
