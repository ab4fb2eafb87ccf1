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
    overlap_cases::setup("page_pointer,byte_rows,mask_bound,split_row_step,page_row");
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

/// `page_row`: a row split at its page's 64-bit term (a stride argument promised in `int`'s
/// range) is one `attn_page_row` on the thread's base, V's on the page K's copy kept. Paged
/// cache, shuffled table, copies landing late; a page times the stride in the wrong unit, or
/// V on another page, fails.
#[test]
fn page_rows_match_the_executor() {
    setup();
    for (stages, d) in [(3u32, 64usize), (2, 128)] {
        let consts = [
            ("BLOCK_M", attn_dsl::ConstValue::Int(64)),
            ("BLOCK_N", attn_dsl::ConstValue::Int(64)),
            ("HEAD_DIM", attn_dsl::ConstValue::Int(d as i64)),
            ("PAGE", attn_dsl::ConstValue::Int(16)),
        ];
        let mut f = codegen_common::specialize(
            include_str!("kernels/flash_attention.rs.txt"),
            "paged_strided_fwd",
            &consts,
            true,
        );
        f.num_stages = stages;
        attn_dsl::passes::assume::divisible(&mut f, &["page_stride"]).expect("promise");
        attn_dsl::passes::assume::fits_i32(&mut f, &["page_stride"]).expect("promise");
        let src = emit_cuda(&f).expect("emit").source;
        assert!(
            src.contains("attn_page_row("),
            "rows split at the page: {src}"
        );
        let mut args = codegen_common::sim_check::paged_args(2, 100, d, 16, 96);
        args.push(codegen_common::cpu_sim::SimArg::Scalar(
            attn_dsl::kernel::ScalarArg::I64(16 * d as i64),
        ));
        codegen_common::sim_check::check(
            &format!("page rows, {stages} stages, D{d}"),
            &f,
            [2, 2, 1],
            args,
            2e-2,
        );
    }
}
