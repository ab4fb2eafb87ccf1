//! Host-side input validation of unified attention: a valid baseline, then one test per
//! error variant.

use attn_dsl::ir::ScalarType;
use attn_runtime::ops::unified_attention::validate::{
    validate_inputs, InputError, TensorMeta, UnifiedAttentionInputs,
};

const BF: ScalarType = ScalarType::Bf16;

/// Owns the metadata of a valid two-sequence batch: qlens [3, 2], seq_lens [20, 2],
/// block 16, 4 cache blocks, Hq 4, Hkv 2, D 8.
struct Batch {
    cu: Vec<i32>,
    seq_lens: Vec<i32>,
    block_table: Vec<i32>,
    ranges: Vec<i32>,
    query_ranges: Vec<i32>,
    prefix: Vec<i32>,
}

fn batch() -> Batch {
    Batch {
        cu: vec![0, 3, 5],
        seq_lens: vec![20, 2],
        block_table: vec![3, 1, 2, 0],
        ranges: vec![2, 5, 8, 18, 0, 0, 0, 0],
        // seq 0 tokens at positions 17, 18, 19; seq 1 at 0, 1.
        query_ranges: vec![8, 18, 8, 18, -1, -1, -1, -1, -1, -1],
        prefix: vec![4, 0],
    }
}

fn inputs(b: &Batch) -> UnifiedAttentionInputs<'_> {
    UnifiedAttentionInputs {
        q: TensorMeta::contiguous([5, 4, 8], BF),
        k: TensorMeta::contiguous([4, 16, 2, 8], BF),
        v: TensorMeta::contiguous([4, 16, 2, 8], BF),
        out: TensorMeta::contiguous([5, 4, 8], BF),
        cu_seqlens_q: &b.cu,
        seq_lens: &b.seq_lens,
        block_table: &b.block_table,
        block_table_shape: [2, 2],
        block_table_stride: 2,
        mm_prefix_range: Some((&b.ranges, [2, 2, 2])),
        mm_prefix_query_range: Some((&b.query_ranges, [5, 2])),
        per_seq_causal_len: Some(2),
        rswa_prefix_lens: Some(&b.prefix),
        sinks_len: Some(4),
        alibi_slopes_len: Some(4),
        qq_bias_shape: Some([3, 3]),
    }
}

fn err_of(edit: impl FnOnce(&mut UnifiedAttentionInputs<'_>)) -> InputError {
    let b = batch();
    let mut inp = inputs(&b);
    edit(&mut inp);
    validate_inputs(&inp).expect_err("must be rejected")
}

fn err_with(edit_batch: impl FnOnce(&mut Batch)) -> InputError {
    let mut b = batch();
    edit_batch(&mut b);
    validate_inputs(&inputs(&b)).expect_err("must be rejected")
}

#[test]
fn valid_batch_passes() {
    let b = batch();
    validate_inputs(&inputs(&b)).expect("valid");
}

#[test]
fn shape_mismatch_of_k_head_dim() {
    let e = err_of(|i| i.k = TensorMeta::contiguous([4, 16, 2, 16], BF));
    assert!(matches!(e, InputError::Shape { tensor: "k", .. }), "{e}");
}

#[test]
fn shape_mismatch_of_v() {
    let e = err_of(|i| i.v = TensorMeta::contiguous([4, 16, 1, 8], BF));
    assert!(matches!(e, InputError::Shape { tensor: "v", .. }), "{e}");
}

#[test]
fn shape_mismatch_of_out() {
    let e = err_of(|i| i.out = TensorMeta::contiguous([5, 4, 4], BF));
    assert!(matches!(e, InputError::Shape { tensor: "out", .. }), "{e}");
}

#[test]
fn head_dim_stride_must_be_one() {
    let e = err_of(|i| i.q.strides = [64, 16, 2]);
    assert_eq!(
        e,
        InputError::HeadDimStride {
            tensor: "q",
            stride: 2
        }
    );
}

#[test]
fn overlapping_strides() {
    let e = err_of(|i| i.k.strides = [256, 8, 8, 1]);
    assert!(
        matches!(e, InputError::OverlappingStrides { tensor: "k", .. }),
        "{e}"
    );
}

#[test]
fn padded_strides_are_fine() {
    let b = batch();
    let mut i = inputs(&b);
    i.q.strides = [4 * 128, 128, 1];
    validate_inputs(&i).expect("padded row strides are legal");
}

#[test]
fn non_float_dtype() {
    let e = err_of(|i| i.q.dtype = ScalarType::I32);
    assert!(matches!(e, InputError::Dtype { tensor: "q", .. }), "{e}");
}

#[test]
fn kv_dtype_must_match_q() {
    let e = err_of(|i| i.v.dtype = ScalarType::F16);
    assert!(matches!(e, InputError::Dtype { tensor: "v", .. }), "{e}");
}

#[test]
fn heads_not_divisible() {
    let e = err_of(|i| {
        i.k = TensorMeta::contiguous([4, 16, 3, 8], BF);
        i.v = i.k;
    });
    assert_eq!(e, InputError::HeadsNotDivisible { hq: 4, hkv: 3 });
}

#[test]
fn cu_seqlens_empty() {
    let e = err_of(|i| i.cu_seqlens_q = &[]);
    assert_eq!(e, InputError::CuSeqlensEmpty);
}

#[test]
fn cu_seqlens_start() {
    let e = err_with(|b| b.cu = vec![1, 3, 5]);
    assert_eq!(e, InputError::CuSeqlensStart { got: 1 });
}

#[test]
fn cu_seqlens_monotone() {
    let e = err_with(|b| b.cu = vec![0, 6, 5]);
    assert_eq!(
        e,
        InputError::CuSeqlensNotMonotone {
            index: 2,
            prev: 6,
            next: 5
        }
    );
}

#[test]
fn cu_seqlens_end() {
    let e = err_with(|b| b.cu = vec![0, 3, 4]);
    assert_eq!(
        e,
        InputError::CuSeqlensEnd {
            got: 4,
            num_tokens: 5
        }
    );
}

#[test]
fn seq_lens_length() {
    let e = err_with(|b| b.seq_lens = vec![20]);
    assert!(
        matches!(
            e,
            InputError::Length {
                what: "seq_lens",
                got: 1,
                expected: 2,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn seq_len_below_query_len() {
    let e = err_with(|b| b.seq_lens = vec![20, 1]);
    assert_eq!(
        e,
        InputError::SeqLenBelowQueryLen {
            seq: 1,
            seq_len: 1,
            query_len: 2
        }
    );
}

#[test]
fn block_table_buffer_too_small() {
    let e = err_with(|b| b.block_table = vec![3, 1, 2]);
    assert!(
        matches!(e, InputError::BlockTableBuffer { len: 3, .. }),
        "{e}"
    );
}

#[test]
fn block_table_row_too_short() {
    let e = err_with(|b| b.seq_lens = vec![40, 2]);
    assert_eq!(
        e,
        InputError::BlockTableRowTooShort {
            seq: 0,
            cols: 2,
            seq_len: 40,
            block_size: 16,
            needed: 3
        }
    );
}

#[test]
fn block_id_out_of_range() {
    let e = err_with(|b| b.block_table = vec![3, 4, 2, 0]);
    assert_eq!(
        e,
        InputError::BlockIdOutOfRange {
            seq: 0,
            block: 1,
            got: 4,
            num_blocks: 4
        }
    );
}

#[test]
fn unused_block_table_entries_are_not_checked() {
    let mut b = batch();
    b.block_table = vec![3, 1, 2, -1];
    validate_inputs(&inputs(&b)).expect("seq 1 uses one block only");
}

#[test]
fn mm_range_shape() {
    let e = err_of(|i| i.mm_prefix_range = Some((&[0, 0, 0, 0], [1, 2, 2])));
    assert!(
        matches!(
            e,
            InputError::Shape {
                tensor: "mm_prefix_range",
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn mm_range_reversed() {
    let e = err_with(|b| b.ranges = vec![5, 2, 8, 18, 0, 0, 0, 0]);
    assert!(
        matches!(
            e,
            InputError::RangeOutsideSequence {
                seq: 0,
                start: 5,
                end: 2,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn mm_range_past_sequence() {
    let e = err_with(|b| b.ranges = vec![2, 5, 8, 20, 0, 0, 0, 0]);
    assert!(
        matches!(
            e,
            InputError::RangeOutsideSequence {
                seq: 0,
                end: 20,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn mm_ranges_overlap() {
    let e = err_with(|b| b.ranges = vec![2, 8, 8, 18, 0, 0, 0, 0]);
    assert_eq!(
        e,
        InputError::RangesOverlap {
            seq: 0,
            a0: 2,
            a1: 8,
            b0: 8,
            b1: 18
        }
    );
}

#[test]
fn mm_ranges_unsorted() {
    let e = err_with(|b| b.ranges = vec![8, 18, 2, 5, 0, 0, 0, 0]);
    assert!(matches!(e, InputError::RangesOverlap { seq: 0, .. }), "{e}");
}

#[test]
fn query_range_shape() {
    let e = err_of(|i| i.mm_prefix_query_range = Some((&[-1, -1], [1, 2])));
    assert!(
        matches!(
            e,
            InputError::Shape {
                tensor: "mm_prefix_query_range",
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn query_range_must_contain_token() {
    let e = err_with(|b| b.query_ranges[4] = 8);
    // token 2 (position 19) with [8, 18]: does not contain 19.
    let e2 = err_with(|b| {
        b.query_ranges[4] = 8;
        b.query_ranges[5] = 18;
    });
    assert!(
        matches!(e, InputError::QueryRangeRow { token: 2, .. }),
        "{e}"
    );
    assert_eq!(
        e2,
        InputError::QueryRangeRow {
            token: 2,
            start: 8,
            end: 18,
            position: 19
        }
    );
}

#[test]
fn query_ranges_overlap() {
    let e = err_with(|b| {
        b.query_ranges[2] = 10;
        b.query_ranges[3] = 18;
    });
    assert!(matches!(e, InputError::RangesOverlap { seq: 0, .. }), "{e}");
}

#[test]
fn per_seq_causal_len() {
    let e = err_of(|i| i.per_seq_causal_len = Some(3));
    assert!(
        matches!(
            e,
            InputError::Length {
                got: 3,
                expected: 2,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn rswa_prefix_negative() {
    let e = err_with(|b| b.prefix = vec![4, -1]);
    assert_eq!(e, InputError::NegativePrefixLen { seq: 1, got: -1 });
}

#[test]
fn sinks_len() {
    let e = err_of(|i| i.sinks_len = Some(2));
    assert!(
        matches!(
            e,
            InputError::Length {
                what: "sinks",
                got: 2,
                expected: 4,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn alibi_len() {
    let e = err_of(|i| i.alibi_slopes_len = Some(5));
    assert!(
        matches!(
            e,
            InputError::Length {
                what: "alibi_slopes",
                got: 5,
                expected: 4,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn qq_bias_shape() {
    let e = err_of(|i| i.qq_bias_shape = Some([2, 2]));
    assert_eq!(
        e,
        InputError::QqBiasShape {
            rows: 2,
            cols: 2,
            max_query_len: 3
        }
    );
}

#[test]
fn messages_name_the_value() {
    let e = err_with(|b| b.seq_lens = vec![20, 1]);
    assert_eq!(
        e.to_string(),
        "seq_lens[1] = 1 is below the query length 2 of that sequence"
    );
}
