//! A page's block-table entry read at a constant from one pointer a tile
//! (`ATTN_CODEGEN_ENABLE=page_pointer`, opt-in): where a producer's copy addresses its rows
//! from their page's first (`run_rows`), `table + key / PAGE` splits into the tile's
//! `table + key(0) >> 4` and the pass's `first >> 4`. The emitted CUDA (pages of 16 keys
//! in a shuffled block table, copies landing late) matches the CPU executor running the
//! kernel as written, so a split at the wrong page fails.

mod codegen_common;

use attn_dsl::codegen::emit_cuda;
use codegen_common::{overlap_cases, paged_fwd};

/// The feature on (read once per process), copies landing late.
fn setup() {
    overlap_cases::setup("page_pointer");
}

/// Pages of 16 keys, 16 rows a pass: each pass's entry is the tile's pointer plus its page.
#[test]
fn page_entries_at_a_constant_from_the_tiles() {
    setup();
    let f = paged_fwd(64, 64, 16);
    let src = emit_cuda(&f).expect("emit").source;
    let split = src
        .matches(" >> 4)) + (((p * 16 / 16) * 16) >> 4)))")
        .count();
    assert!(
        split >= 2,
        "every fill's page entries split at the page: {src}"
    );
    assert!(
        !src.contains("(p * 16 / 16) * 16) / 16)"),
        "no page index divided at the run's first row: {src}"
    );
}

#[test]
fn paged_flash_attention_matches_the_executor() {
    setup();
    overlap_cases::paged("page entries from the tile's pointer", 3, 64);
    overlap_cases::paged("page entries from the tile's pointer", 2, 128);
}
