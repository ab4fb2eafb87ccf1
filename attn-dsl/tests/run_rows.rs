//! Copies whose source rows come in runs one stride apart (`run_rows`, shipped;
//! `ATTN_CODEGEN_DISABLE=run_rows` addresses every row on its own): each pass's row address is the address of its run's first row plus the
//! thread's offset in the run times the row stride, not each row's own address with its
//! page divided out. The emitted CUDA (pages of 16 keys, a dense tile as one run) matches
//! the CPU executor running the kernel as written.

mod codegen_common;

use attn_dsl::codegen::emit_cuda;
use codegen_common::sim_check::check_flash;
use codegen_common::{flash_fwd, overlap_cases, paged_fwd};

/// The default features (read once per process), copies landing late.
fn setup() {
    overlap_cases::setup("");
}

/// Pages of 16 keys, 16 rows a pass (128 threads, 8 a row): the pass's run is its page,
/// the thread's offset the same in every pass.
#[test]
fn paged_rows_start_from_their_page() {
    setup();
    let f = paged_fwd(64, 64, 16);
    let src = emit_cuda(&f).expect("emit").source;
    let offsets = src
        .matches("(long long)(p * 16 % 16 + tid / 8) * (")
        .count();
    assert!(offsets >= 2, "K's and V's rows from their page: {src}");
    assert!(
        src.contains("(p * 16 / 16) * 16"),
        "the page's first row: {src}"
    );
    // 16 rows a pass, two swizzle periods: later passes' rows at a constant from the first's.
    assert!(
        src.contains("attn_dst_row = attn_dst_first + p * 1024;"),
        "a pass's shared row at a constant: {src}"
    );
}

#[test]
fn paged_flash_attention_matches_the_executor() {
    setup();
    overlap_cases::paged("rows from their page's first", 3, 64);
    overlap_cases::paged("rows from their page's first", 2, 128);
}

/// A dense tile is one run (rows `HEAD_DIM` apart): the pass's rows start at its first.
#[test]
fn dense_flash_attention_matches_the_executor() {
    setup();
    for d in [64, 128] {
        let f = flash_fwd(64, d, true);
        let src = emit_cuda(&f).expect("emit").source;
        assert!(
            src.contains(" % 64 + tid / "),
            "rows from the tile's first: {src}"
        );
        check_flash(
            &format!("rows from the tile's first D{d}"),
            &f,
            [3, 2, 1],
            d,
        );
    }
}
