//! Run-time templates (`<KERNEL>_TEMPLATE`): the embedded source keeps every token on its
//! line of this file, and run-time errors name this file's lines.

use attn_dsl::ir::ScalarType;
use attn_dsl::template::SpecializeError;
use attn_dsl::ConstValue;
use attn_dsl_macros::module;

#[module]
mod blocks {
    #[kernel(require(BLOCK <= 4096, "BLOCK must be at most 4096"))]
    pub fn fill<T, const BLOCK: i32>(out: *mut T, n: i32) {
        let offs = program_id(0) * BLOCK + arange::<BLOCK>();
        store(out + offs, full([BLOCK], 1).cast::<T>(), offs < n);
    }
}

/// This file's text, to find lines independently of the macros.
const THIS_FILE: &str = include_str!("macros_template.rs");

/// 1-based line of the first line of this file that contains `needle`.
fn line_of(needle: &str) -> u32 {
    let index = THIS_FILE.lines().position(|l| l.contains(needle));
    index.unwrap_or_else(|| panic!("`{needle}` not in this file")) as u32 + 1
}

fn fill(block: i64) -> Result<attn_dsl::driver::Compiled, SpecializeError> {
    let t = ConstValue::Dtype(ScalarType::F32);
    blocks::FILL_TEMPLATE.specialize(&[("T", t), ("BLOCK", ConstValue::Int(block))])
}

#[test]
fn template_records_kernel_file_and_first_line() {
    let t = blocks::FILL_TEMPLATE;
    assert_eq!(t.kernel(), "fill");
    assert!(t.file().ends_with("macros_template.rs"), "{}", t.file());
    assert_eq!(
        t.line_offset() + 1,
        line_of("mod blocks {"),
        "the module's first token is `mod`"
    );
}

#[test]
fn template_source_keeps_lines_and_columns() {
    let t = blocks::FILL_TEMPLATE;
    let file_lines: Vec<&str> = THIS_FILE.lines().collect();
    let source_lines: Vec<&str> = t.source().lines().collect();
    assert_eq!(
        source_lines.len(),
        7,
        "mod .. }} spans 7 lines:\n{}",
        t.source()
    );
    for (i, rendered) in source_lines.iter().enumerate() {
        let original = file_lines[t.line_offset() as usize + i];
        assert_eq!(
            *rendered,
            original,
            "line {} of the file",
            t.line_offset() as usize + i + 1
        );
    }
}

#[test]
fn run_time_body_error_points_at_the_dsl_line_of_this_file() {
    let err = fill(96).expect_err("96 is not a power of two");
    assert_eq!(
        err.message,
        "arange::<BLOCK>() needs a power of two, BLOCK = 96"
    );
    assert_eq!(err.line, line_of("+ arange::<BLOCK>()"));
    assert_eq!(err.kernel, "fill");
    let shown = err.to_string();
    assert!(shown.starts_with(&err.message), "{shown}");
    assert!(
        shown.contains(&format!("macros_template.rs:{}", err.line)),
        "{shown}"
    );
}

#[test]
fn run_time_binding_error_points_at_the_kernel_line() {
    let err = fill(8192).expect_err("8192 > 4096");
    assert!(
        err.message
            .starts_with("require failed: BLOCK must be at most 4096"),
        "{err}"
    );
    assert!(err.message.contains("BLOCK = 8192"), "{err}");
    assert_eq!(err.line, line_of("pub fn fill<"));
    let unknown = blocks::FILL_TEMPLATE
        .specialize(&[("BLOKC", ConstValue::Int(64))])
        .expect_err("unknown constexpr");
    assert!(unknown.message.contains("BLOKC"), "{unknown}");
}

#[test]
fn template_specializes_repeatedly_and_from_other_threads() {
    let first = fill(96).expect_err("not a power of two");
    assert_eq!(fill(96).expect_err("cached parse, same answer"), first);
    let from_threads: Vec<SpecializeError> = (0..3)
        .map(|_| std::thread::spawn(|| fill(96).expect_err("same error")))
        .map(|h| h.join().expect("thread finished"))
        .collect();
    assert!(from_threads.iter().all(|e| *e == first), "{from_threads:?}");
}

/// `specialize_with` refines the optimized IR before the one emission: a promise about an
/// integer argument shows in the emitted CUDA, and a refusal is reported at the kernel line.
#[test]
fn refined_specializations_emit_once_with_the_facts() {
    let t = ConstValue::Dtype(ScalarType::F32);
    let binds = [("T", t), ("BLOCK", ConstValue::Int(256))];
    let plain = blocks::FILL_TEMPLATE.specialize(&binds).expect("plain");
    let refined = blocks::FILL_TEMPLATE
        .specialize_with(&binds, |f| attn_dsl::passes::assume::divisible(f, &["n"]))
        .expect("refined");
    assert!(refined
        .specialized
        .ir
        .assumed_divisible
        .iter()
        .any(|(name, _)| name == "n"));
    assert!(plain.specialized.ir.assumed_divisible.is_empty());
    let err = blocks::FILL_TEMPLATE
        .specialize_with(&binds, |_| Err("no such promise".to_string()))
        .expect_err("refused");
    assert_eq!(err.message, "no such promise");
    assert_eq!(err.line, line_of("pub fn fill<T, const BLOCK: i32>"));
}
