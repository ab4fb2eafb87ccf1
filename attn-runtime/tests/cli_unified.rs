//! `attn run` / `attn bench` of the unified-attention presets, through the CLI's own
//! function (no subprocess): the CPU executor on P1 at `SEQ=256` against the dense f64
//! reference, the knob errors, and `bench` refusing to run without a GPU. With
//! `--variant FILE`: a user variant read from a file against the dense reference of its
//! own DSL mask, with a pass, a wrong-bounds failure and the flag errors.

use attn_runtime::bench::unified::Row;
use attn_runtime::cli::unified_variant::VariantSelection;
use attn_runtime::cli::variant_file::VariantFns;
use attn_runtime::cli::{run, CliContext, Command};
use attn_runtime::launch::CudaDevice;
use attn_runtime::parity::interp_executor;
use attn_runtime::registry::Registry;

fn ctx() -> CliContext {
    CliContext {
        registry: Registry::with_cli_kernels(),
        cpu: Some(interp_executor()),
    }
}

fn cli(cmd: Command) -> (Result<(), String>, String) {
    let mut out = Vec::new();
    let r = run(&cmd, &ctx(), &mut out).map_err(|e| e.to_string());
    (r, String::from_utf8(out).expect("utf-8 output"))
}

/// `attn run unified_attention --cpu --set SEQ=256`.
#[test]
fn run_p1_on_the_cpu_executor_at_seq_256() {
    let (r, out) = cli(Command::Run {
        kernel: "unified_attention".into(),
        bindings: vec![],
        set: vec!["SEQ=256".into()],
        cpu: true,
        variant: VariantSelection::default(),
    });
    r.unwrap_or_else(|e| panic!("{e}\n{out}"));
    assert!(
        out.contains("P1 1 x (q 256, kv 256), Hq 16 / Hkv 8, D 256, W 1024"),
        "{out}"
    );
    assert!(out.contains("on the CPU executor"), "{out}");
    assert!(
        out.contains("PASS: all 1048576 elements within |err| <= atol"),
        "{out}"
    );
    assert!(out.contains("max abs err"), "{out}");
    assert!(!out.contains("MISMATCH"), "{out}");
}

#[test]
fn run_rejects_constexprs_and_names_the_knobs() {
    let (r, _) = cli(Command::Run {
        kernel: "unified_attention_p0".into(),
        bindings: vec!["TILE_SIZE=64".into()],
        set: vec![],
        cpu: true,
        variant: VariantSelection::default(),
    });
    let e = r.expect_err("a constexpr is not a preset knob");
    assert!(e.contains("SEQ=<sequence length>"), "{e}");
    assert!(e.contains("attn emit unified_attention_p0"), "{e}");
    let (r, _) = cli(Command::Run {
        kernel: "unified_attention".into(),
        bindings: vec!["SEQ=0".into()],
        set: vec![],
        cpu: true,
        variant: VariantSelection::default(),
    });
    assert!(r.expect_err("SEQ=0").contains("positive integer"));
}

#[test]
fn bench_needs_a_gpu() {
    if CudaDevice::is_available() {
        return;
    }
    let (r, _) = cli(Command::Bench {
        kernels: vec!["unified_attention".into()],
        bindings: vec!["SEQ=256".into()],
        runs: 3,
        warmup: 1,
        json: std::env::temp_dir().join("attn-cli-unified-bench.json"),
        variant: VariantSelection::default(),
    });
    assert!(r.expect_err("no GPU").contains("needs a GPU"));
    let (r, _) = cli(Command::Bench {
        kernels: vec![],
        bindings: vec!["SEQ=256".into()],
        runs: 3,
        warmup: 1,
        json: std::env::temp_dir().join("attn-cli-unified-bench.json"),
        variant: sink_window(2),
    });
    assert!(r.expect_err("no GPU").contains("needs a GPU"));
    let (r, _) = cli(Command::Bench {
        kernels: vec!["matmul".into()],
        bindings: vec![],
        runs: 3,
        warmup: 1,
        json: std::env::temp_dir().join("attn-cli-unified-bench.json"),
        variant: sink_window(2),
    });
    assert!(r.expect_err("not a preset").contains("name a preset"));
}

#[test]
fn presets_map_to_the_bench_rows() {
    for (name, id) in [
        ("unified_attention", "P1"),
        ("unified_attention_p0", "P0"),
        ("unified_attention_p3", "P3"),
        ("unified_attention_d1", "D1-2D"),
    ] {
        assert_eq!(Row::preset(name).map(|r| r.id), Some(id));
    }
    let p3 = Row::preset("unified_attention_p3")
        .expect("P3")
        .with_seq_len(1000);
    assert_eq!(p3.seqs, vec![(1000, 1000)]);
    // Ranges at 100 + 270·i: i = 0..=3 start before 999, the last one clipped to 999.
    assert_eq!(p3.mm_ranges.len(), 4);
    assert_eq!(p3.mm_ranges[3], [910, 999]);
    let d1 = Row::preset("unified_attention_d1")
        .expect("D1")
        .with_seq_len(512)
        .with_num_seqs(4);
    assert_eq!(d1.seqs, vec![(1, 512); 4]);
}

/// The per-KV-head reference `attn run` uses equals the one-call reference.
#[test]
fn reference_split_by_kv_head_is_the_reference() {
    use attn_runtime::cli::unified::reference_by_kv_head;
    use attn_runtime::reference::unified_attention::{unified_attention, AttentionOptions};
    use attn_runtime::testing::{Geometry, PagedData};
    let data = PagedData::random(&Geometry::new(&[(5, 40), (17, 17)], (8, 4), 16), 3);
    let p = data.problem(AttentionOptions {
        sliding_window: 8,
        ..AttentionOptions::default()
    });
    let want = unified_attention(&p).expect("reference");
    assert_eq!(reference_by_kv_head(&p).expect("split reference"), want);
}

/// An example variant file of this workspace.
fn example(file: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/src")
        .join(file)
}

fn selection(file: std::path::PathBuf, fns: VariantFns) -> VariantSelection {
    VariantSelection {
        file: Some(file),
        fns,
    }
}

fn sink_window(tile_ranges: i32) -> VariantSelection {
    selection(
        example("sink_window.rs"),
        VariantFns {
            module: Some("sink_window".into()),
            mask: Some("sink_window_mask".into()),
            bounds: Some("sink_window_bounds".into()),
            full_tile: None,
            tile_ranges: Some(tile_ranges),
            aux: None,
        },
    )
}

fn run_variant(
    kernel: &str,
    set: &[&str],
    variant: VariantSelection,
) -> (Result<(), String>, String) {
    cli(Command::Run {
        kernel: kernel.into(),
        bindings: vec![],
        set: set.iter().map(|s| s.to_string()).collect(),
        cpu: true,
        variant,
    })
}

/// `attn run unified_attention --cpu --variant examples/src/sink_window.rs ... --set SEQ=128`.
#[test]
fn run_a_variant_file_against_its_own_dsl_mask() {
    let (r, out) = run_variant(
        "unified_attention",
        &["SEQ=128", "SINK_WINDOW=40", "SINK_TOKENS=3"],
        sink_window(2),
    );
    r.unwrap_or_else(|e| panic!("{e}\n{out}"));
    // Query q sees min(q + 1, 40) window keys plus the sinks below its window.
    let pairs: u64 = (0..128i64)
        .map(|q| (0..=q).filter(|&k| k < 3 || q - k < 40).count() as u64)
        .sum();
    assert!(
        out.contains(&format!("{pairs} allowed (query, key) pairs")),
        "{pairs}: {out}"
    );
    assert!(out.contains("SINK_WINDOW=40"), "{out}");
    assert!(
        out.contains("P1 geometry: 1 x (q 128, kv 128), Hq 16 / Hkv 8, D 256"),
        "{out}"
    );
    assert!(out.contains("PASS: all 524288 elements"), "{out}");
}

/// Per-key aux data of the declared kind (`--aux ids`), random, on a two-sequence decode.
#[test]
fn run_a_variant_with_random_aux_ids() {
    let v = selection(
        example("packed_documents.rs"),
        VariantFns {
            module: Some("packed_documents".into()),
            mask: Some("packed_doc_mask".into()),
            bounds: Some("packed_doc_bounds".into()),
            full_tile: None,
            tile_ranges: None,
            aux: Some("ids".into()),
        },
    );
    let (r, out) = run_variant("unified_attention_d1", &["SEQ=300", "SEQS=3"], v);
    r.unwrap_or_else(|e| panic!("{e}\n{out}"));
    assert!(out.contains("aux Ids"), "{out}");
    assert!(out.contains("PASS"), "{out}");
}

/// Bounds that skip keys the mask allows (only the sink range of sinks + window) make the
/// op disagree with the reference of the mask: FAIL, an error (nonzero exit).
#[test]
fn a_variant_whose_bounds_drop_keys_fails() {
    let (r, out) = run_variant(
        "unified_attention",
        &["SEQ=128", "SINK_WINDOW=40"],
        sink_window(1),
    );
    let e = r.expect_err("the window range is never visited");
    assert!(e.contains("MISMATCH"), "{e}");
    assert!(out.contains("MISMATCH"), "{out}");
}

#[test]
fn variant_flag_errors_name_the_flag() {
    let (r, _) = run_variant("unified_attention", &["SINK_WINDW=3"], sink_window(2));
    let e = r.expect_err("misspelt constexpr");
    assert!(e.contains("`--set SINK_WINDW=..`"), "{e}");
    assert!(e.contains("SINK_TOKENS, SINK_WINDOW"), "{e}");
    let (r, _) = run_variant("softmax", &[], sink_window(2));
    assert!(r.expect_err("not a preset").contains("name a preset"));
    let half = VariantSelection {
        file: None,
        ..sink_window(2)
    };
    let (r, _) = run_variant("unified_attention", &[], half);
    assert!(r.expect_err("no file").contains("add `--variant FILE`"));
    let mut no_bounds = sink_window(2);
    no_bounds.fns.bounds = None;
    let (r, _) = run_variant("unified_attention", &[], no_bounds);
    let e = r.expect_err("no --bounds");
    assert!(e.contains("needs `--bounds G`"), "{e}");
    let missing = selection(example("no_such_variant.rs"), sink_window(2).fns);
    let (r, _) = run_variant("unified_attention", &[], missing);
    assert!(r.expect_err("no file").contains("no_such_variant.rs"));
}

/// `--variant` on the command line: clap parses the flattened flags into the selection.
#[test]
fn variant_flags_parse() {
    use clap::Parser;
    let cli = attn_runtime::cli::Cli::try_parse_from([
        "attn",
        "run",
        "unified_attention",
        "--variant",
        "v.rs",
        "--module",
        "m",
        "--mask",
        "f",
        "--bounds",
        "g",
        "--full-tile",
        "h",
        "--tile-ranges",
        "2",
        "--set",
        "SEQ=64",
    ])
    .expect("parses");
    let Command::Run { variant, set, .. } = cli.command else {
        panic!("not run");
    };
    assert_eq!(set, vec!["SEQ=64".to_string()]);
    let fns = variant.fns;
    assert_eq!(variant.file.as_deref(), Some(std::path::Path::new("v.rs")));
    assert_eq!(
        (
            fns.mask.as_deref(),
            fns.full_tile.as_deref(),
            fns.tile_ranges
        ),
        (Some("f"), Some("h"), Some(2))
    );
    let plain = attn_runtime::cli::Cli::try_parse_from(["attn", "run", "unified_attention"])
        .expect("parses");
    let Command::Run { variant, .. } = plain.command else {
        panic!("not run");
    };
    assert_eq!(variant, VariantSelection::default());
}

fn forgetful(full_tile: &str) -> VariantSelection {
    selection(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/forgetful_full_tile.rs"),
        VariantFns {
            module: Some("forgetful".into()),
            mask: Some("w_mask".into()),
            bounds: Some("w_bounds".into()),
            full_tile: Some(full_tile.into()),
            tile_ranges: None,
            aux: None,
        },
    )
}

/// `--full-tile`: a sound predicate passes run and check-variant; one that declares tiles
/// outside the window full fails both (the kernel skips the mask there).
#[test]
fn full_tile_predicates_are_checked_by_run_and_check_variant() {
    use attn_runtime::cli::check_variant::CheckVariantArgs;
    let check = |v: VariantSelection| {
        cli(Command::CheckVariant(CheckVariantArgs {
            file: v.file.expect("file"),
            fns: v.fns,
            constexprs: vec![],
            cases: 40,
            seed: 7,
        }))
    };
    let (r, out) = check(forgetful("w_full_tile"));
    r.unwrap_or_else(|e| panic!("{e}\n{out}"));
    assert!(out.contains("0 unsound"), "{out}");
    assert!(
        !out.contains(" 0 full tile(s)"),
        "no tile declared full: {out}"
    );
    let (r, _) = check(forgetful("w_full_tile_forgetful"));
    let e = r.expect_err("unsound full tiles");
    assert!(e.contains("first unsound full tile"), "{e}");
    let (r, out) = run_variant("unified_attention", &["SEQ=96"], forgetful("w_full_tile"));
    r.unwrap_or_else(|e| panic!("{e}\n{out}"));
    let (r, _) = run_variant(
        "unified_attention",
        &["SEQ=96"],
        forgetful("w_full_tile_forgetful"),
    );
    assert!(r.expect_err("unsound").contains("MISMATCH"));
}
