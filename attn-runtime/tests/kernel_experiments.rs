//! The edits of `bench/experiments/*.txt` (what `scripts/kernel-experiment` times on the GPU:
//! docs/gpu_ir.md, "What bounds P0") and its source rewrites (`*.py`) still find what they
//! edit in the source the launch table's P0 plan generates for sm_90a: a code generator
//! change that moves it fails here, not as a silent no-op edit in a device call.

mod experiment_support;
mod unified_plans;

use attn_runtime::ops::unified_attention::config::{AttentionProblem, MmaKind};
use attn_runtime::ops::unified_attention::gpu::emit_launch;
use attn_runtime::ops::unified_attention::plan::PathChoice;
use unified_plans::{d1, p0, p1, plan};

/// (variant name, pattern) of every substitution of an experiments file (one variant a
/// line, `NAME=PATTERN=>REPLACEMENT`, substitutions joined by ` ;; `, `#` comments).
fn substitutions(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .flat_map(|l| {
            let (name, spec) = l.split_once('=').expect("NAME=...");
            spec.split(" ;; ").map(move |sub| {
                let (pattern, _) = sub.split_once("=>").expect("PATTERN=>REPLACEMENT");
                (name.to_string(), pattern.to_string())
            })
        })
        .collect()
}

/// The experiments edit P0's loop as written, before `gpu_ir::previous_stage` (the
/// scripts build that schedule by hand; the feature list is read once per process).
fn setup() {
    std::env::set_var("ATTN_CODEGEN_DISABLE", "previous_stage");
}

/// The source the launch table's warpgroup (sm_90a) plan of `problem` over `tokens` emits,
/// under the experiments' feature list ([`setup`]).
fn warpgroup_source(problem: AttentionProblem, tokens: usize) -> String {
    setup();
    let problem = AttentionProblem {
        mma: MmaKind::Warpgroup,
        ..problem
    };
    let launch = plan(&problem, tokens, PathChoice::Heuristic);
    emit_launch(&launch.attention).expect("emit").source
}

#[test]
fn p0_bounds_edits_match_the_generated_p0() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../bench/experiments/p0_bounds.txt"
    );
    let text = std::fs::read_to_string(path).expect("the experiments file");
    let src = warpgroup_source(p0(), 16384);
    let subs = substitutions(&text);
    assert!(subs.len() >= 6, "the file's variants: {subs:?}");
    for (name, pattern) in subs {
        let re = regex::Regex::new(&pattern)
            .unwrap_or_else(|e| panic!("{name}: `{pattern}` is not a regex: {e}"));
        assert!(
            re.is_match(&src),
            "{name}: `{pattern}` no longer matches P0's generated source"
        );
    }
}

/// The source rewrites of `bench/experiments/*.py` (the intra-warpgroup overlap by hand and
/// the producer's copies arriving on their stage: docs/gpu_ir.md, "PV one tile behind")
/// still find the shape they rewrite in the generated P0, and produce what they promise:
/// `wgmma.wait_group 1` with PV in flight, `cp.async.mbarrier.arrive.noinc` in the producer.
#[test]
fn source_rewrites_apply_to_the_generated_p0() {
    let src = warpgroup_source(p0(), 16384);
    let dir = std::env::temp_dir().join(format!("attn-rewrites-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let generated = dir.join("p0.cu");
    std::fs::write(&generated, &src).expect("write");
    let run = |script: &str, input: &std::path::Path, out: &str| {
        let out = dir.join(out);
        experiment_support::rewrite(script, input, &out, &[]);
        std::fs::read_to_string(&out).expect("the rewrite")
    };
    let arrive = run("copy_arrive.py", &generated, "ca.cu");
    assert!(arrive.contains("cp.async.mbarrier.arrive.noinc"));
    assert!(!arrive.contains("// this thread's copies of the stage landed"));
    let both = run("intra_wg_overlap.py", &dir.join("ca.cu"), "ca_fa3.cu");
    let one = both
        .find("attn_wgmma_wait<1>();")
        .expect("scores waited with PV in flight");
    assert!(both[one..].contains("attn_wgmma_wait<0>();"), "then PV");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The rewrites of `bench/experiments/mla_history.py` (docs/gpu_ir.md, "Where L1's history
/// time goes") still find what they edit in the sm_90a history the launch table gives L1,
/// and the current-part rewrite in the step's current kernel: each variant changes the
/// source (the script leaves a source it cannot edit unchanged).
#[test]
fn mla_history_rewrites_apply_to_the_generated_history() {
    // The feature list is read once per process: set it here too, whichever test runs first.
    setup();
    use attn_runtime::ops::mla_dcp::metadata::DcpLayout;
    use attn_runtime::ops::mla_dcp::plan::DecodeStep;
    use attn_runtime::reference::mla::MlaConfig;
    let layout = DcpLayout::new(1, 1, 64).expect("layout");
    let scale = MlaConfig::deepseek_v3().softmax_scale() as f32;
    let plan = DecodeStep::uniform_decode(128, 4096, 128, layout, scale, 132)
        .plan_tuned(MmaKind::Warpgroup, None, None, None)
        .expect("plan");
    let source = |l: &attn_runtime::ops::mla_dcp::plan::KernelLaunch| {
        l.compile().expect("compile").cuda.source
    };
    let dir = std::env::temp_dir().join(format!("attn-mla-rewrites-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../bench/experiments/mla_history.py"
    );
    // The history rewrites edit the `cp.async` form (the producer's copies a thread), the
    // one the plan ships; the TMA form (`mla_seesaw.py fine tma`, below) is forced.
    let mut by_threads = plan.history.clone();
    by_threads
        .constexprs
        .iter_mut()
        .filter(|(n, _)| *n == "TMA")
        .for_each(|(_, v)| *v = attn_dsl::ConstValue::Bool(false));
    let (history, current) = (source(&by_threads), source(&plan.current));
    let mut boxes = plan.clone();
    boxes.set_history_tma(true);
    let boxed = source(&boxes.history);
    assert!(boxed.contains("attn_tma_load_2d(") && !history.contains("attn_tma_load_2d("));
    let cases = [
        ("chains2", &history),
        ("n64", &history),
        ("splitk", &history),
        ("stamps", &history),
        ("splitk,stamps", &history),
        ("qregs12", &history),
        ("nocopy", &history),
        ("prefetch2", &history),
        ("nocurrent", &current),
    ];
    for (variant, src) in cases {
        let (input, output) = (dir.join("in.cu"), dir.join("out.cu"));
        std::fs::write(&input, src).expect("write");
        let status = std::process::Command::new("python3")
            .args([script, variant])
            .arg(&input)
            .arg(&output)
            .status()
            .expect("python3 runs");
        assert!(status.success(), "{variant} failed");
        let edited = std::fs::read_to_string(&output).expect("the rewrite");
        assert_ne!(
            &edited, src,
            "{variant} left the generated source unchanged"
        );
    }
    // FlashMLA's schedule (`mla_seesaw.py`) replaces the consumers' loop, reading the
    // generated names from the text: it must still find all of them.
    let seesaw = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../bench/experiments/mla_seesaw.py"
    );
    let (input, output) = (dir.join("in.cu"), dir.join("seesaw.cu"));
    std::fs::write(&input, &history).expect("write");
    let rewrite = |script: &str, mode: &[&str]| {
        let run = std::process::Command::new("python3")
            .arg(script)
            .arg(&input)
            .arg(&output)
            .args(mode)
            .output()
            .expect("python3 runs");
        assert!(run.status.success() && run.stderr.is_empty(), "{run:?}");
        std::fs::read_to_string(&output).expect("the rewrite")
    };
    let split_scores = |s: &str| s.matches("m64n32k16").count();
    for mode in [
        &[][..],
        &["fine"],
        &["fine", "nocopy"],
        &["fine", "prefetch"],
    ] {
        let edited = rewrite(seesaw, mode);
        assert!(edited.contains("// ---- seesaw (bench/experiments/mla_seesaw.py)"));
        assert!(
            split_scores(&edited) < split_scores(&history),
            "the warp-specialized loop's split scores are gone"
        );
        // The fine ring replaces the generated producer's loop (its per-stage waits); without
        // copies it keeps its arrivals.
        let fine = !mode.is_empty();
        let copies = !mode.contains(&"nocopy");
        assert_eq!(
            edited.contains("attn_cp_async16(dst, src, ok)"),
            fine && copies,
            "{mode:?}"
        );
        assert_eq!(
            edited.contains("cp.async.bulk.prefetch.L2"),
            mode.contains(&"prefetch"),
            "{mode:?}"
        );
        assert!(!edited.contains("@PREFETCH@"), "{mode:?}");
        assert_eq!(
            edited.contains("ss_cp_arrive(&ss_fine_bar"),
            fine,
            "{mode:?}"
        );
        assert_eq!(
            edited.contains("attn_mbar_wait(&attn_ws_bar[2 + "),
            !fine,
            "{mode:?}"
        );
    }
    // `fine tma` / `tma_ef` (FlashMLA's copies: a box a 64-column block, each on its own
    // block's mbarrier) take the TMA form the plan gives L1, and refuse the other.
    std::fs::write(&input, &boxed).expect("write");
    for copies in ["tma", "tma_ef"] {
        let edited = rewrite(seesaw, &["fine", copies]);
        assert!(edited.contains("// ---- seesaw (bench/experiments/mla_seesaw.py)"));
        assert!(edited.contains("ss_tma_box(dst, &attn_tmap0"), "{copies}");
        assert_eq!(edited.contains(".L2::cache_hint"), copies == "tma_ef");
        assert!(split_scores(&edited) < split_scores(&boxed), "{copies}");
    }
    std::fs::write(&input, &history).expect("write");
    let run = std::process::Command::new("python3")
        .arg(seesaw)
        .arg(&input)
        .arg(&output)
        .args(["fine", "tma"])
        .output()
        .expect("python3 runs");
    let said = String::from_utf8_lossy(&run.stderr);
    assert!(
        said.contains("tma needs a history whose tiles move as TMA boxes"),
        "{said}"
    );
    // The current part looping over its items on a few programs
    // (`mla_current_persistent.py`) finds both program ids.
    let persistent = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../bench/experiments/mla_current_persistent.py"
    );
    std::fs::write(&input, &current).expect("write");
    let edited = rewrite(persistent, &["16"]);
    assert!(edited.contains("attn_item += 16"));
    assert!(!edited.contains("(int)blockIdx.y;"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `scripts/grid-timeline` stamps a warp-specialized kernel where these anchors are: the
/// consumers' entry, their first turn, the end turn (and the `#endif` after its barrier), the
/// consumers' block closing right before the unsplit program's `#else`, and the kernel's
/// first statement. A code generator change that moves one fails here.
#[test]
fn grid_timeline_anchors_match_the_generated_p1() {
    let src = warpgroup_source(p1(), 8192);
    let (split, _) = src
        .split_once("\n    #else\n")
        .expect("the split program, then `#else`");
    let (_, consumers) = split
        .split_once("attn_setmaxnreg_inc<ATTN_WS_CONSUMER_REGS>();")
        .expect("the consumers' entry");
    assert!(consumers.contains("#if defined(__CUDA_ARCH_FEAT_SM90_ALL) // turn Begin"));
    let end_turn =
        regex::Regex::new(r"#if defined\(__CUDA_ARCH_FEAT_SM90_ALL\) // turn End\n.*\n\s*#endif\n")
            .expect("regex");
    assert!(end_turn.is_match(consumers), "the end turn's barrier");
    assert!(
        split.ends_with("\n        }\n    }"),
        "the consumers' block before `#else`"
    );
    let entry = regex::Regex::new(r"\) \{\n\s*unsigned char\* const attn_scratch").expect("regex");
    assert!(entry.is_match(&src), "the kernel's first statement");
}

/// `scripts/racecheck-probe` adds a block barrier before the stage flip at the end of each
/// KV loop (`attn_stage_ ^= 1;` alone on its line) of the decode kernels that read their
/// stages with `ldmatrix`: the decode plan's source has both, once a loop. In the
/// warp-specialized form (the sm_90a plan) it makes every producer thread arrive on the full
/// barrier instead: the barrier's count of 4 (one lane a producer warp) and the lane-0 arrival
/// are there once each.
#[test]
fn racecheck_probe_anchor_matches_the_generated_decode() {
    let launch = plan(&d1(), 64, PathChoice::Heuristic).attention;
    let src = emit_launch(&launch).expect("emit").source;
    assert!(
        src.contains("attn_ldsm_x4("),
        "D1 reads its stages with ldmatrix"
    );
    let flip = regex::Regex::new(r"(?m)^ *attn_stage_ \^= 1;$").expect("regex");
    assert_eq!(
        flip.find_iter(&src).count(),
        1,
        "one KV loop, one stage flip"
    );
    let ws = warpgroup_source(d1(), 64);
    assert!(
        ws.contains("attn_ldsm_x4("),
        "the sm_90a D1 reads its stages with ldmatrix"
    );
    for anchor in [
        "attn_mbar_init(&attn_ws_bar[s], 4u);",
        "if ((tid & 31) == 0) attn_mbar_arrive(&attn_ws_bar[attn_stage_]);",
    ] {
        assert_eq!(ws.matches(anchor).count(), 1, "{anchor}");
    }
}

/// The supply edits (`bench/experiments/p0_p1_supply.txt`: docs/gpu_ir.md, "What bounds P0
/// and P1 now") find the K/V copies of P0's and P1's producers, and
/// `producer_address_first.py` moves each fill's block-table loads ahead of the wait for
/// its stage (or, with `identity_pages`, drops them).
#[test]
fn supply_edits_apply_to_p0_and_p1() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../bench/experiments/p0_p1_supply.txt"
    );
    let text = std::fs::read_to_string(path).expect("the experiments file");
    let dir = std::env::temp_dir().join(format!("attn-supply-{}", std::process::id()));
    for (label, src) in [
        ("P0", warpgroup_source(p0(), 16384)),
        ("P1", warpgroup_source(p1(), 8192)),
    ] {
        for (name, pattern) in substitutions(&text) {
            let re = regex::Regex::new(&pattern).expect("regex");
            assert!(re.is_match(&src), "{name}: `{pattern}` misses {label}");
        }
        let input = dir.join(label);
        std::fs::create_dir_all(&input).expect("temp dir");
        std::fs::write(input.join("k.cu"), &src).expect("write");
        for (mode, promise) in [
            ("address_first", "attn_pages[p] = "),
            ("identity_pages", ""),
        ] {
            let out = dir.join(format!("{label}-{mode}"));
            experiment_support::rewrite("producer_address_first.py", &input, &out, &[mode]);
            let edited = std::fs::read_to_string(out.join("k.cu")).expect("the rewrite");
            assert_ne!(edited, src, "{mode} left {label} unchanged");
            let loads = edited.matches("attn_ld((bt_row").count();
            if mode == "identity_pages" {
                assert_eq!(loads, 0, "{label}: block-table loads left");
                continue;
            }
            // Each rewritten fill loads its pages, then waits, then copies.
            let first = edited.find(promise).expect("pages loaded");
            let wait = first + edited[first..].find("attn_mbar_wait").expect("the wait");
            assert!(edited[wait..].contains("attn_pages[p] : "), "{label}");
        }
    }
    // `kv_reverse.py` reverses P0's tile indices where they scale to keys: the producer's
    // two prologue fills and its loop's, and the consumers' scores.
    let out = dir.join("P0-reversed");
    experiment_support::rewrite("kv_reverse.py", &dir.join("P0"), &out, &[]);
    let edited = std::fs::read_to_string(out.join("k.cu")).expect("the rewrite");
    let reversed = edited.matches("attn_wmul(attn_max(num_tiles_").count();
    assert!(reversed >= 4, "{reversed} tile indices reversed in P0");
    let _ = std::fs::remove_dir_all(&dir);
}
