//! The producer's address cuts, all opt-in and on together here as the next A/B times them
//! (`ATTN_CODEGEN_ENABLE=page_pointer,byte_rows,mask_bound,split_row_step`): V's copy reads
//! the byte offsets K's copy kept (`byte_rows`), each row tested against the tile's uniform
//! bound (`mask_bound`), a split ring's later passes writing at a constant from the first
//! row pointer (`split_row_step`). The emitted CUDA (split, copies landing late) matches
//! the CPU executor running the kernel as written, so an offset in the wrong unit, a bound
//! off by the tile's start or a pass at the wrong row fails.

mod codegen_common;

use attn_dsl::codegen::emit_cuda;
use codegen_common::overlap_cases;

/// The features on (read once per process), copies landing late.
fn setup() {
    overlap_cases::setup("page_pointer,byte_rows,mask_bound,split_row_step");
}

/// The split ring's producer takes all three: K's rows kept in bytes and read back so by
/// V's copy, every row's mask a compare of the row against a uniform bound, and every
/// copy's rows at a constant from its first pass's.
#[test]
fn the_split_rings_producer_takes_each_cut() {
    setup();
    let (f, _, _) = overlap_cases::previous_stage_program();
    let src = emit_cuda(&f).expect("emit").source;
    let producer = overlap_cases::producer_source(&src);
    let kept = producer
        .matches("[p] = (const char*)(attn_src) - (const char*)(")
        .count();
    let reused = producer.matches("reinterpret_cast<decltype(+").count();
    assert_eq!((kept, reused), (3, 3), "{producer}");
    assert!(
        producer.contains("(attn_row < attn_wsub("),
        "rows against the tile's bound: {producer}"
    );
    assert!(
        !producer.contains(", attn_row) <"),
        "no row's key added before its compare: {producer}"
    );
    assert!(
        producer.matches("attn_dst_first").count() >= 6,
        "later passes at a constant from the first: {producer}"
    );
    // The consumers' own copies (the queries) keep their masks as written.
    let consumers = &src[src.find("attn_setmaxnreg_inc").expect("consumers")..];
    assert!(!consumers.contains("(attn_row < attn_wsub("), "{consumers}");
}

#[test]
fn flash_attention_matches_the_executor() {
    setup();
    overlap_cases::dense_flash("the producer's address cuts", 3, &[128]);
}

#[test]
fn paged_flash_attention_matches_the_executor() {
    setup();
    overlap_cases::paged("the producer's address cuts", 3, 64);
    overlap_cases::paged("the producer's address cuts", 2, 128);
}
