//! Host-side validation of unified-attention op inputs (spec `unified_attention.md` §1.1,
//! §1.3, §3.5), run before any launch so a bad input is a typed error, never a kernel
//! that reads out of bounds.
//!
//! Works on plain shapes, strides and host copies of the small integer metadata
//! (`cu_seqlens_q`, `seq_lens`, `block_table`, ranges), so the GPU op and the CPU tests
//! share it.

#![deny(clippy::indexing_slicing, clippy::arithmetic_side_effects)]

use attn_dsl::ir::ScalarType;
use thiserror::Error;

use super::limits::{MAX_HEAD_SIZE, MAX_SEQ_LEN};

/// Shape, element strides and dtype of one tensor argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorMeta<const N: usize> {
    /// Size of each dim.
    pub shape: [usize; N],
    /// Stride of each dim, in elements.
    pub strides: [usize; N],
    /// Element dtype.
    pub dtype: ScalarType,
}

impl<const N: usize> TensorMeta<N> {
    /// A contiguous (row-major) tensor.
    pub fn contiguous(shape: [usize; N], dtype: ScalarType) -> Self {
        // Saturating: an unrepresentable size is caught by `tensor_extent`, not wrapped.
        let mut strides = [1usize; N];
        let mut step = 1usize;
        for (stride, &size) in strides.iter_mut().zip(&shape).rev() {
            *stride = step;
            step = step.saturating_mul(size);
        }
        TensorMeta {
            shape,
            strides,
            dtype,
        }
    }
}

/// Everything the op receives, as host-visible metadata.
#[derive(Clone, Copy, Debug)]
pub struct UnifiedAttentionInputs<'a> {
    /// `[T, Hq, D]`.
    pub q: TensorMeta<3>,
    /// `[num_blocks, BLOCK_SIZE, Hkv, D]`.
    pub k: TensorMeta<4>,
    /// `[num_blocks, BLOCK_SIZE, Hkv, D]`.
    pub v: TensorMeta<4>,
    /// `[T, Hq, D]`.
    pub out: TensorMeta<3>,
    /// `int32 [S + 1]`.
    pub cu_seqlens_q: &'a [i32],
    /// `int32 [S]`.
    pub seq_lens: &'a [i32],
    /// `int32 [S, max_blocks]`, row stride `block_table_stride`.
    pub block_table: &'a [i32],
    /// `[S, max_blocks]`: the block table's logical shape.
    pub block_table_shape: [usize; 2],
    /// Row stride of `block_table`, in entries.
    pub block_table_stride: usize,
    /// Per-sequence ranges `[S, R, 2]` (flat) with their shape.
    pub mm_prefix_range: Option<(&'a [i32], [usize; 3])>,
    /// Per-query ranges `[T, 2]` (flat) with their shape.
    pub mm_prefix_query_range: Option<(&'a [i32], [usize; 2])>,
    /// `bool [S]` per-sequence causal flags: only the length matters here.
    pub per_seq_causal_len: Option<usize>,
    /// `int32 [S]` R-SWA prefix lengths.
    pub rswa_prefix_lens: Option<&'a [i32]>,
    /// Length of `sinks` (one per query head), if given.
    pub sinks_len: Option<usize>,
    /// Length of `alibi_slopes` (one per query head), if given.
    pub alibi_slopes_len: Option<usize>,
    /// `[Qmax, Qmax]`.
    pub qq_bias_shape: Option<[usize; 2]>,
}

/// Why the op refuses its inputs; each message gives the bad value and what is allowed.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum InputError {
    /// A tensor's shape does not match the one the other inputs imply.
    #[error("{tensor} has shape {got:?}, expected {expected}")]
    Shape {
        /// Name of the tensor argument.
        tensor: &'static str,
        /// Its shape.
        got: Vec<usize>,
        /// The expected shape, in words.
        expected: String,
    },
    /// A tensor's last (head) dim is not contiguous.
    #[error("{tensor} has stride {stride} along the head dim; it must be 1 (contiguous D)")]
    HeadDimStride {
        /// Name of the tensor argument.
        tensor: &'static str,
        /// Its head-dim stride, in elements.
        stride: usize,
    },
    /// Two index tuples of a tensor map to the same element.
    #[error("{tensor} has strides {strides:?} that alias or overlap for shape {shape:?}")]
    OverlappingStrides {
        /// Name of the tensor argument.
        tensor: &'static str,
        /// Its shape.
        shape: Vec<usize>,
        /// Its element strides.
        strides: Vec<usize>,
    },
    /// A tensor's dtype is not one the op accepts there.
    #[error("{tensor} has dtype {got}, allowed: {allowed}")]
    Dtype {
        /// Name of the tensor argument.
        tensor: &'static str,
        /// Its dtype.
        got: ScalarType,
        /// The dtypes allowed, in words.
        allowed: String,
    },
    /// `Hq` is not a multiple of `Hkv` (GQA needs whole groups).
    #[error("num_query_heads {hq} is not a multiple of num_kv_heads {hkv}")]
    HeadsNotDivisible {
        /// Number of query heads `Hq`.
        hq: usize,
        /// Number of KV heads `Hkv`.
        hkv: usize,
    },
    /// `cu_seqlens_q` is empty.
    #[error("cu_seqlens_q must have at least one entry (S + 1 with S >= 0), got 0")]
    CuSeqlensEmpty,
    /// `cu_seqlens_q[0]` is not 0.
    #[error("cu_seqlens_q[0] = {got}, it must be 0")]
    CuSeqlensStart {
        /// The value of `cu_seqlens_q[0]`.
        got: i32,
    },
    /// `cu_seqlens_q` decreases somewhere.
    #[error("cu_seqlens_q decreases at index {index}: {prev} then {next}")]
    CuSeqlensNotMonotone {
        /// Index of the entry that is below its predecessor.
        index: usize,
        /// The entry before it.
        prev: i32,
        /// The entry at `index`.
        next: i32,
    },
    /// The last entry of `cu_seqlens_q` is not the token count `T`.
    #[error("cu_seqlens_q ends at {got}, it must end at the token count T = {num_tokens}")]
    CuSeqlensEnd {
        /// The last entry of `cu_seqlens_q`.
        got: i32,
        /// The token count `T` (`q.shape[0]`).
        num_tokens: usize,
    },
    /// A per-sequence or per-head argument has the wrong length.
    #[error("{what} has length {got}, expected {expected} (one per {per})")]
    Length {
        /// Name of the argument.
        what: &'static str,
        /// Its length.
        got: usize,
        /// The expected length.
        expected: usize,
        /// What there is one entry per (`"sequence"`, `"query head"`).
        per: &'static str,
    },
    /// A sequence's KV length is shorter than its query length.
    #[error("seq_lens[{seq}] = {seq_len} is below the query length {query_len} of that sequence")]
    SeqLenBelowQueryLen {
        /// Sequence index.
        seq: usize,
        /// Its `seq_lens` entry.
        seq_len: i32,
        /// Its query length (from `cu_seqlens_q`).
        query_len: i32,
    },
    /// The block table's shape and row stride reach past its buffer.
    #[error(
        "block_table is {rows}x{cols} with row stride {stride} but its buffer holds {len} entries"
    )]
    BlockTableBuffer {
        /// Rows of the block table (`S`).
        rows: usize,
        /// Columns of the block table (`max_blocks`).
        cols: usize,
        /// Row stride, in entries.
        stride: usize,
        /// Length of the buffer, in entries.
        len: usize,
    },
    /// A block-table row has fewer columns than its sequence needs blocks.
    #[error("block_table row {seq} has {cols} entries, sequence needs ceil({seq_len} / {block_size}) = {needed}")]
    BlockTableRowTooShort {
        /// Sequence index.
        seq: usize,
        /// Columns of the block table.
        cols: usize,
        /// The sequence's KV length.
        seq_len: i32,
        /// Tokens per cache block.
        block_size: usize,
        /// Blocks the sequence needs.
        needed: usize,
    },
    /// A block id the sequence uses is not a block of the cache.
    #[error("block_table[{seq}, {block}] = {got} is outside the cache's blocks [0, {num_blocks})")]
    BlockIdOutOfRange {
        /// Sequence index (row).
        seq: usize,
        /// Logical block index (column).
        block: usize,
        /// The block id found there.
        got: i32,
        /// Number of blocks in the KV cache.
        num_blocks: usize,
    },
    /// A per-sequence multimodal range is not inclusive and inside the sequence.
    #[error(
        "mm range [{start}, {end}] of sequence {seq} is not inclusive and inside [0, {seq_len})"
    )]
    RangeOutsideSequence {
        /// Sequence index.
        seq: usize,
        /// Range start (inclusive KV position).
        start: i32,
        /// Range end (inclusive KV position).
        end: i32,
        /// The sequence's KV length.
        seq_len: i32,
    },
    /// Two multimodal ranges of one sequence overlap (or are unsorted).
    #[error("mm ranges of sequence {seq} are unsorted or overlap: [{a0}, {a1}] then [{b0}, {b1}]")]
    RangesOverlap {
        /// Sequence index.
        seq: usize,
        /// Start of the first range.
        a0: i32,
        /// End of the first range.
        a1: i32,
        /// Start of the second range.
        b0: i32,
        /// End of the second range.
        b1: i32,
    },
    /// A per-query range row is neither `(-1, -1)` nor a valid range containing the token.
    #[error("per-query range row {token} = [{start}, {end}] must be (-1, -1) or contain the token's position {position}")]
    QueryRangeRow {
        /// Token index (row of `mm_prefix_query_range`).
        token: usize,
        /// Range start.
        start: i32,
        /// Range end.
        end: i32,
        /// The token's KV position in its sequence.
        position: i64,
    },
    /// An R-SWA prefix length is negative.
    #[error("rswa_prefix_lens[{seq}] = {got} is negative")]
    NegativePrefixLen {
        /// Sequence index.
        seq: usize,
        /// Its `rswa_prefix_lens` entry.
        got: i32,
    },
    /// A size or offset does not fit the integer type the kernels use for it.
    #[error("{what} does not fit in {limit}")]
    Overflow {
        /// The quantity (often a tensor name: its element offsets).
        what: &'static str,
        /// The integer type it must fit, in words.
        limit: &'static str,
    },
    /// A sequence is longer than [`MAX_SEQ_LEN`].
    #[error("seq_lens[{seq}] = {seq_len} exceeds the longest supported sequence {max}")]
    SeqLenTooLong {
        /// Sequence index.
        seq: usize,
        /// Its `seq_lens` entry.
        seq_len: i32,
        /// The longest supported sequence.
        max: i32,
    },
    /// A dimension is above its supported maximum (e.g. the head size, [`MAX_HEAD_SIZE`]).
    #[error("{what} = {got} exceeds the supported maximum {max}")]
    DimTooLarge {
        /// Name of the dimension.
        what: &'static str,
        /// Its value.
        got: usize,
        /// The supported maximum.
        max: usize,
    },
    /// `softmax_scale` is NaN or infinite.
    #[error("softmax_scale = {got}; it must be finite")]
    SoftmaxScale {
        /// The given scale.
        got: f32,
    },
    /// `softcap` is not finite and positive.
    #[error("softcap = {got}; it must be finite and > 0 (leave it None to turn softcap off)")]
    Softcap {
        /// The given softcap.
        got: f32,
    },
    /// With chunked attention (`chunk_lookback`), the sliding window exceeds [`MAX_SEQ_LEN`].
    #[error("sliding_window = {window} with chunk_lookback on exceeds the longest supported sequence {max}")]
    ChunkedWindowTooLarge {
        /// The sliding window.
        window: i32,
        /// The longest supported sequence.
        max: i32,
    },
    /// `qq_bias` is not square or has fewer rows than the longest query.
    #[error("qq_bias is {rows}x{cols}; it must be square with at least max query length {max_query_len} rows")]
    QqBiasShape {
        /// Rows of `qq_bias`.
        rows: usize,
        /// Columns of `qq_bias`.
        cols: usize,
        /// The longest query length in the batch.
        max_query_len: usize,
    },
}

const FLOAT_DTYPES: &str = "bf16, f16, f32";
/// Limit of every element offset the kernels form (`i64` pointer offsets).
const I64_OFFSETS: &str = "i64 element offsets (the kernels' pointer arithmetic)";
/// Limit of the integer metadata indices the kernels form in `i32`.
const I32_INDICES: &str = "i32 (the kernels' metadata indexing)";

/// Checks every input rule; the first violation is returned.
pub fn validate_inputs(inp: &UnifiedAttentionInputs<'_>) -> Result<(), InputError> {
    check_tensors(inp)?;
    let num_tokens = inp.q.shape[0];
    let query_lens = check_cu_seqlens(inp.cu_seqlens_q, num_tokens)?;
    check_seq_lens(inp.seq_lens, &query_lens)?;
    check_block_table(inp)?;
    if let Some((data, shape)) = inp.mm_prefix_range {
        check_sequence_ranges(data, shape, inp.seq_lens)?;
    }
    if let Some((data, shape)) = inp.mm_prefix_query_range {
        check_query_ranges(data, shape, inp.cu_seqlens_q, inp.seq_lens)?;
    }
    check_per_sequence_extras(inp)?;
    check_per_head_extras(inp)?;
    check_qq_bias(inp.qq_bias_shape, &query_lens)
}

fn overflow(what: &'static str, limit: &'static str) -> InputError {
    InputError::Overflow { what, limit }
}

fn shape_err(tensor: &'static str, got: &[usize], expected: String) -> InputError {
    InputError::Shape {
        tensor,
        got: got.to_vec(),
        expected,
    }
}

fn len_check(
    what: &'static str,
    got: usize,
    expected: usize,
    per: &'static str,
) -> Result<(), InputError> {
    if got == expected {
        Ok(())
    } else {
        Err(InputError::Length {
            what,
            got,
            expected,
            per,
        })
    }
}

/// One past the largest element offset `t` reaches, if it fits the kernels' `i64` offsets
/// (0 for an empty tensor, which the kernels never index).
pub fn tensor_extent<const N: usize>(
    tensor: &'static str,
    t: &TensorMeta<N>,
) -> Result<usize, InputError> {
    if t.shape.contains(&0) {
        return Ok(0);
    }
    let mut last = 0usize;
    for (&d, &s) in t.shape.iter().zip(&t.strides) {
        let span = d.saturating_sub(1).checked_mul(s);
        last = span
            .and_then(|x| last.checked_add(x))
            .ok_or_else(|| overflow(tensor, I64_OFFSETS))?;
    }
    let end = last
        .checked_add(1)
        .filter(|&e| i64::try_from(e).is_ok())
        .ok_or_else(|| overflow(tensor, I64_OFFSETS))?;
    Ok(end)
}

/// The last dim (D) must be contiguous and no two index tuples may share an address
/// (checked by sorting non-unit dims by stride: each stride must exceed the extent below it).
fn check_strides<const N: usize>(
    tensor: &'static str,
    t: &TensorMeta<N>,
) -> Result<(), InputError> {
    tensor_extent(tensor, t)?;
    if let (Some(&d), Some(&stride)) = (t.shape.last(), t.strides.last()) {
        if d > 1 && stride != 1 {
            return Err(InputError::HeadDimStride { tensor, stride });
        }
    }
    let mut dims: Vec<(usize, usize)> = t
        .shape
        .iter()
        .zip(&t.strides)
        .filter(|(&size, _)| size > 1)
        .map(|(&size, &stride)| (stride, size))
        .collect();
    dims.sort_unstable();
    let mut extent = 1usize;
    for (stride, size) in dims {
        if stride < extent {
            return Err(InputError::OverlappingStrides {
                tensor,
                shape: t.shape.to_vec(),
                strides: t.strides.to_vec(),
            });
        }
        extent = stride.saturating_mul(size);
    }
    Ok(())
}

fn check_float_dtype(tensor: &'static str, got: ScalarType) -> Result<(), InputError> {
    if got.is_float() {
        Ok(())
    } else {
        Err(InputError::Dtype {
            tensor,
            got,
            allowed: FLOAT_DTYPES.into(),
        })
    }
}

fn check_same_dtype(
    tensor: &'static str,
    got: ScalarType,
    want: ScalarType,
) -> Result<(), InputError> {
    if got == want {
        Ok(())
    } else {
        Err(InputError::Dtype {
            tensor,
            got,
            allowed: format!("{want} (the q dtype)"),
        })
    }
}

fn dim_limit(what: &'static str, got: usize, max: usize) -> Result<(), InputError> {
    if got <= max {
        Ok(())
    } else {
        Err(InputError::DimTooLarge { what, got, max })
    }
}

/// Head counts, head size and block size become `i32` constexprs and scalars.
fn check_dims(hq: usize, hkv: usize, d: usize, bs: usize) -> Result<(), InputError> {
    let i32_max = i32::MAX.unsigned_abs() as usize;
    dim_limit("num_query_heads", hq, i32_max)?;
    dim_limit("num_kv_heads", hkv, i32_max)?;
    dim_limit("head_size", d, MAX_HEAD_SIZE)?;
    dim_limit("block_size", bs, i32_max)
}

/// q/k/v/out shapes agree (§1.1), dtypes are one float type, D is contiguous, Hq % Hkv,
/// every extent fits the kernels' offsets.
fn check_tensors(inp: &UnifiedAttentionInputs<'_>) -> Result<(), InputError> {
    let [_, hq, d] = inp.q.shape;
    let [nb, bs, hkv, kd] = inp.k.shape;
    if kd != d || hkv == 0 {
        return Err(shape_err(
            "k",
            &inp.k.shape,
            format!("[num_blocks, block_size, Hkv >= 1, D = {d}]"),
        ));
    }
    if inp.v.shape != inp.k.shape {
        return Err(shape_err(
            "v",
            &inp.v.shape,
            format!("{:?} (the k shape)", inp.k.shape),
        ));
    }
    if inp.out.shape != inp.q.shape {
        return Err(shape_err(
            "out",
            &inp.out.shape,
            format!("{:?} (the q shape)", inp.q.shape),
        ));
    }
    if nb == 0 || bs == 0 {
        return Err(shape_err(
            "k",
            &inp.k.shape,
            "num_blocks >= 1 and block_size >= 1".into(),
        ));
    }
    if !hq.is_multiple_of(hkv) {
        return Err(InputError::HeadsNotDivisible { hq, hkv });
    }
    check_dims(hq, hkv, d, bs)?;
    check_float_dtype("q", inp.q.dtype)?;
    check_same_dtype("k", inp.k.dtype, inp.q.dtype)?;
    check_same_dtype("v", inp.v.dtype, inp.q.dtype)?;
    check_same_dtype("out", inp.out.dtype, inp.q.dtype)?;
    check_strides("q", &inp.q)?;
    check_strides("k", &inp.k)?;
    check_strides("v", &inp.v)?;
    check_strides("out", &inp.out)
}

/// `cu_seqlens_q` starts at 0, never decreases and ends at T; returns the query lengths.
fn check_cu_seqlens(cu: &[i32], num_tokens: usize) -> Result<Vec<i32>, InputError> {
    let (&first, &last) = match (cu.first(), cu.last()) {
        (Some(f), Some(l)) => (f, l),
        _ => return Err(InputError::CuSeqlensEmpty),
    };
    if first != 0 {
        return Err(InputError::CuSeqlensStart { got: first });
    }
    let mut lens = Vec::with_capacity(cu.len().saturating_sub(1));
    for (i, w) in cu.windows(2).enumerate() {
        let &[prev, next] = w else { continue };
        // Monotone from 0, so `next - prev` lies in [0, i32::MAX].
        if next < prev {
            return Err(InputError::CuSeqlensNotMonotone {
                index: i.saturating_add(1),
                prev,
                next,
            });
        }
        lens.push(next.saturating_sub(prev));
    }
    if usize::try_from(last).ok() != Some(num_tokens) {
        return Err(InputError::CuSeqlensEnd {
            got: last,
            num_tokens,
        });
    }
    Ok(lens)
}

/// `L ≥ q_len` (so the context length is ≥ 0) and `L ≤ MAX_SEQ_LEN` (see `limits`).
fn check_seq_lens(seq_lens: &[i32], query_lens: &[i32]) -> Result<(), InputError> {
    len_check("seq_lens", seq_lens.len(), query_lens.len(), "sequence")?;
    for (seq, (&l, &ql)) in seq_lens.iter().zip(query_lens).enumerate() {
        if l < ql {
            return Err(InputError::SeqLenBelowQueryLen {
                seq,
                seq_len: l,
                query_len: ql,
            });
        }
        if l > MAX_SEQ_LEN {
            return Err(InputError::SeqLenTooLong {
                seq,
                seq_len: l,
                max: MAX_SEQ_LEN,
            });
        }
    }
    Ok(())
}

/// Rows cover `ceil(L / block_size)` blocks and every used id is a block of the cache.
fn check_block_table(inp: &UnifiedAttentionInputs<'_>) -> Result<(), InputError> {
    let [rows, cols] = inp.block_table_shape;
    let stride = inp.block_table_stride;
    let len = inp.block_table.len();
    len_check("block_table rows", rows, inp.seq_lens.len(), "sequence")?;
    let buffer_err = || InputError::BlockTableBuffer {
        rows,
        cols,
        stride,
        len,
    };
    // `(rows − 1) · stride + cols` entries, computed without wrapping.
    let needed_len = match rows.checked_sub(1) {
        None => Some(0),
        Some(r) => r.checked_mul(stride).and_then(|x| x.checked_add(cols)),
    };
    match needed_len {
        Some(n) if stride >= cols && len >= n => {}
        _ => return Err(buffer_err()),
    }
    let [num_blocks, block_size, _, _] = inp.k.shape;
    for (seq, &l) in inp.seq_lens.iter().enumerate() {
        let needed = usize::try_from(l).unwrap_or(0).div_ceil(block_size.max(1));
        if needed > cols {
            return Err(InputError::BlockTableRowTooShort {
                seq,
                cols,
                seq_len: l,
                block_size,
                needed,
            });
        }
        // The buffer check above proves `seq · stride + needed ≤ len`.
        let row = seq
            .checked_mul(stride)
            .and_then(|start| inp.block_table.get(start..start.checked_add(needed)?))
            .ok_or_else(buffer_err)?;
        check_block_ids(seq, row, num_blocks)?;
    }
    Ok(())
}

/// Every entry of one used block-table row names a block of the cache.
pub(crate) fn check_block_ids(
    seq: usize,
    row: &[i32],
    num_blocks: usize,
) -> Result<(), InputError> {
    for (block, &got) in row.iter().enumerate() {
        let inside = usize::try_from(got).is_ok_and(|b| b < num_blocks);
        if !inside {
            return Err(InputError::BlockIdOutOfRange {
                seq,
                block,
                got,
                num_blocks,
            });
        }
    }
    Ok(())
}

/// `[S, R, 2]` ranges: valid ones (`s < e`) lie inside `[0, L)`, sorted, non-overlapping;
/// `(0, 0)`-style padding (`s == e`) is ignored as the mask ignores it; `s > e` is an error.
/// The kernel indexes a sequence's ranges at `seq · 2R` in `i32`, so `S · R · 2` must fit.
fn check_sequence_ranges(
    data: &[i32],
    shape: [usize; 3],
    seq_lens: &[i32],
) -> Result<(), InputError> {
    let [s, r, two] = shape;
    let row_len = r
        .checked_mul(2)
        .filter(|&x| i32::try_from(x).is_ok())
        .ok_or_else(|| overflow("mm_prefix_range: 2 * max_ranges", I32_INDICES))?;
    let total = s
        .checked_mul(row_len)
        .filter(|&x| i32::try_from(x).is_ok())
        .ok_or_else(|| overflow("mm_prefix_range: S * max_ranges * 2", I32_INDICES))?;
    if s != seq_lens.len() || two != 2 || data.len() != total {
        return Err(shape_err(
            "mm_prefix_range",
            &shape,
            format!("[S = {}, R, 2] with S * R * 2 values", seq_lens.len()),
        ));
    }
    if row_len == 0 {
        // R = 0: nothing to check here; the config rejects it (MAX_MM_RANGES >= 1).
        return Ok(());
    }
    for (seq, (row, &l)) in data.chunks_exact(row_len).zip(seq_lens).enumerate() {
        check_sequence_row(seq, row, l)?;
    }
    Ok(())
}

fn check_sequence_row(seq: usize, row: &[i32], l: i32) -> Result<(), InputError> {
    let mut prev: Option<(i32, i32)> = None;
    for pair in row.chunks_exact(2) {
        let &[start, end] = pair else { continue };
        if start > end || start < 0 || (start < end && end >= l) {
            return Err(InputError::RangeOutsideSequence {
                seq,
                start,
                end,
                seq_len: l,
            });
        }
        if start == end {
            continue;
        }
        if let Some((a0, a1)) = prev {
            if start <= a1 {
                return Err(InputError::RangesOverlap {
                    seq,
                    a0,
                    a1,
                    b0: start,
                    b1: end,
                });
            }
        }
        prev = Some((start, end));
    }
    Ok(())
}

/// `[T, 2]` rows: `(−1, −1)` or an inclusive range inside `[0, L)` containing the
/// token's absolute position; distinct ranges of one sequence must not overlap.
/// Runs after `check_cu_seqlens` / `check_seq_lens` (monotone, one length per sequence).
fn check_query_ranges(
    data: &[i32],
    shape: [usize; 2],
    cu: &[i32],
    seq_lens: &[i32],
) -> Result<(), InputError> {
    let num_tokens = cu.last().map_or(0, |&t| usize::try_from(t).unwrap_or(0));
    let values = num_tokens
        .checked_mul(2)
        .filter(|&x| i32::try_from(x).is_ok())
        .ok_or_else(|| overflow("mm_prefix_query_range: 2 * T", I32_INDICES))?;
    if shape != [num_tokens, 2] || data.len() != values {
        return Err(shape_err(
            "mm_prefix_query_range",
            &shape,
            format!("[T = {num_tokens}, 2]"),
        ));
    }
    for (seq, (w, &l)) in cu.windows(2).zip(seq_lens).enumerate() {
        let &[lo, hi] = w else { continue };
        let lo = usize::try_from(lo).unwrap_or(0);
        let hi = usize::try_from(hi).unwrap_or(0);
        let rows = data
            .get(lo.saturating_mul(2)..hi.saturating_mul(2))
            .unwrap_or(&[]);
        check_query_rows(seq, lo, rows, l)?;
    }
    Ok(())
}

/// The rows of one sequence, whose first token is `first_token` (positions in i64: no wrap).
fn check_query_rows(
    seq: usize,
    first_token: usize,
    rows: &[i32],
    l: i32,
) -> Result<(), InputError> {
    let qlen = i64::try_from(rows.len() / 2).unwrap_or(i64::MAX);
    let context = i64::from(l).saturating_sub(qlen);
    let mut seen: Vec<(i32, i32)> = Vec::new();
    for (i, pair) in rows.chunks_exact(2).enumerate() {
        let &[start, end] = pair else { continue };
        if (start, end) == (-1, -1) {
            continue;
        }
        let position = context.saturating_add(i64::try_from(i).unwrap_or(i64::MAX));
        let inside = 0 <= start && start <= end && end < l;
        if !inside || i64::from(start) > position || position > i64::from(end) {
            return Err(InputError::QueryRangeRow {
                token: first_token.saturating_add(i),
                start,
                end,
                position,
            });
        }
        seen.push((start, end));
    }
    check_disjoint(seq, seen)
}

fn check_disjoint(seq: usize, mut ranges: Vec<(i32, i32)>) -> Result<(), InputError> {
    ranges.sort_unstable();
    ranges.dedup();
    for w in ranges.windows(2) {
        let &[(a0, a1), (b0, b1)] = w else { continue };
        if b0 <= a1 {
            return Err(InputError::RangesOverlap {
                seq,
                a0,
                a1,
                b0,
                b1,
            });
        }
    }
    Ok(())
}

fn check_per_sequence_extras(inp: &UnifiedAttentionInputs<'_>) -> Result<(), InputError> {
    let s = inp.seq_lens.len();
    if let Some(n) = inp.per_seq_causal_len {
        len_check("per-sequence causal flags", n, s, "sequence")?;
    }
    if let Some(p) = inp.rswa_prefix_lens {
        len_check("rswa_prefix_lens", p.len(), s, "sequence")?;
        if let Some((seq, &got)) = p.iter().enumerate().find(|(_, &v)| v < 0) {
            return Err(InputError::NegativePrefixLen { seq, got });
        }
    }
    Ok(())
}

fn check_per_head_extras(inp: &UnifiedAttentionInputs<'_>) -> Result<(), InputError> {
    let hq = inp.q.shape[1];
    if let Some(n) = inp.sinks_len {
        len_check("sinks", n, hq, "query head")?;
    }
    if let Some(n) = inp.alibi_slopes_len {
        len_check("alibi_slopes", n, hq, "query head")?;
    }
    Ok(())
}

/// Square, at least `max q_len` rows, and `rows · cols` within the kernel's `i32` indexing
/// (`t · qq_bias_stride0 + col`).
fn check_qq_bias(shape: Option<[usize; 2]>, query_lens: &[i32]) -> Result<(), InputError> {
    let Some([rows, cols]) = shape else {
        return Ok(());
    };
    let max_query_len = query_lens
        .iter()
        .copied()
        .max()
        .map_or(0, |m| usize::try_from(m).unwrap_or(0));
    if rows != cols || rows < max_query_len {
        return Err(InputError::QqBiasShape {
            rows,
            cols,
            max_query_len,
        });
    }
    rows.checked_mul(cols)
        .filter(|&n| i32::try_from(n).is_ok())
        .map(|_| ())
        .ok_or_else(|| overflow("qq_bias rows * cols", I32_INDICES))
}
