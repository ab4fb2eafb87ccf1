//! `attn run` / `attn bench` of the unified-attention presets, through the CLI's own
//! function (no subprocess): the CPU executor on P1 at `SEQ=256` against the dense f64
//! reference, the knob errors, and `bench` refusing to run without a GPU.

use attn_runtime::bench::unified::Row;
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
    });
    let e = r.expect_err("a constexpr is not a preset knob");
    assert!(e.contains("SEQ=<sequence length>"), "{e}");
    assert!(e.contains("attn emit unified_attention_p0"), "{e}");
    let (r, _) = cli(Command::Run {
        kernel: "unified_attention".into(),
        bindings: vec!["SEQ=0".into()],
        set: vec![],
        cpu: true,
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
    });
    assert!(r.expect_err("no GPU").contains("needs a GPU"));
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
