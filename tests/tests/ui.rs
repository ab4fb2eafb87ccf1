//! Compile-fail suite: every case in `tests/ui/*.rs` must fail to compile with exactly the
//! diagnostics pinned in its `.stderr` (regenerate with `TRYBUILD=overwrite`, then read them).
//! Also checks that a violated `require` reads the same at compile time and at run time.

use attn_dsl::ir::ScalarType;
use attn_dsl::ConstValue;

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("ui/*.rs");
}

/// `tests/ui/require_violated.rs` instantiates `attn_tests::vector::map` with these
/// bindings; its pinned compile error must carry the run-time message verbatim.
#[test]
fn require_message_is_identical_at_compile_time_and_run_time() {
    let err = attn_tests::vector::MAP_TEMPLATE
        .specialize(&[
            ("T", ConstValue::Dtype(ScalarType::F32)),
            ("BLOCK", ConstValue::Int(8)),
            ("F", ConstValue::Device("double".into())),
        ])
        .expect_err("BLOCK = 8 violates `BLOCK >= 16`");
    assert!(err.message.contains("BLOCK must be at least 16"), "{err}");
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/ui/require_violated.stderr");
    let stderr = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{path}: {e} (run the ui test first)"));
    // rustc indents the continuation lines of a message: compare line by line, trimmed.
    let message = format!("error: {}", err.message);
    let expected: Vec<&str> = message.lines().map(str::trim).collect();
    let pinned: Vec<&str> = stderr.lines().map(str::trim).collect();
    assert!(
        pinned
            .windows(expected.len())
            .any(|w| w == expected.as_slice()),
        "run-time message\n{}\nnot found in the compile-time diagnostics\n{stderr}",
        err.message
    );
}
