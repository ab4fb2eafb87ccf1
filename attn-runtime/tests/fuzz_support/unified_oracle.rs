//! An independent statement of when a unified-attention call is valid (spec §1.1, §1.3,
//! §2.1, §3.5, the op's documented limits), written from the contract in `i128`
//! arithmetic, without the library's validation code. `Err` names the first rule broken.

use attn_runtime::ops::unified_attention::plan::PathChoice;

use super::unified_case::UnifiedCase;

type Verdict = Result<(), &'static str>;

const I32_MAX: i128 = i32::MAX as i128;
const I64_MAX: i128 = i64::MAX as i128;
/// The documented limits (`limits::MAX_SEQ_LEN`, `MAX_HEAD_SIZE`): restated, not imported.
const MAX_SEQ_LEN: i128 = 1 << 30;
const MAX_HEAD_SIZE: i128 = 1 << 16;
const GRID_YZ: i128 = 65_535;

fn rule(ok: bool, why: &'static str) -> Verdict {
    if ok {
        Ok(())
    } else {
        Err(why)
    }
}

fn n(x: usize) -> i128 {
    x as i128
}

/// Products of up to a few usize-sized factors, saturating at i128::MAX (far above every
/// limit compared against).
fn mul(factors: &[i128]) -> i128 {
    factors.iter().fold(1i128, |p, &f| p.saturating_mul(f))
}

/// The whole contract.
pub fn check(c: &UnifiedCase) -> Verdict {
    geometry(c)?;
    layouts(c)?;
    let qlens = batch(c)?;
    block_table(c)?;
    ranges(c)?;
    extras(c, &qlens)?;
    scalars(c)?;
    path(c, &qlens)
}

fn geometry(c: &UnifiedCase) -> Verdict {
    rule(c.hkv >= 1, "Hkv >= 1")?;
    rule(c.kv_d == c.d, "K/V head size is q's")?;
    rule(c.out_tokens == c.num_tokens, "out has q's shape")?;
    rule(!c.out_dtype_f32, "out dtype is q's")?;
    rule(c.num_blocks >= 1 && c.block_size >= 1, "cache not empty")?;
    rule(c.hq.is_multiple_of(c.hkv), "Hq multiple of Hkv")?;
    rule(n(c.hq) <= I32_MAX && n(c.hkv) <= I32_MAX, "heads fit i32")?;
    rule(n(c.d) <= MAX_HEAD_SIZE, "head size limit")?;
    rule(n(c.block_size) <= I32_MAX, "block size fits i32")?;
    rule(c.d >= 1, "head size >= 1")?;
    rule(c.block_size.is_multiple_of(16), "block size multiple of 16")?;
    let elems = mul(&[n(c.num_blocks), n(c.block_size), n(c.hkv), n(c.d)]);
    rule(elems <= I64_MAX, "cache addressable")?;
    rule(c.hkv as i128 <= GRID_YZ, "grid y = Hkv")
}

/// One past the last element, or `None` for an empty tensor.
fn end(shape: [usize; 3], strides: [usize; 3]) -> i128 {
    if shape.contains(&0) {
        return 0;
    }
    (0..3).fold(1i128, |e, i| {
        e.saturating_add(mul(&[n(shape[i]) - 1, n(strides[i])]))
    })
}

/// Distinct index tuples never share an address: dims of size > 1 sorted by stride, each
/// stride at least stride · size of the dim below (the documented rule).
fn no_overlap(shape: [usize; 3], strides: [usize; 3]) -> bool {
    let mut dims: Vec<(i128, i128)> = (0..3)
        .filter(|&i| shape[i] > 1)
        .map(|i| (n(strides[i]), n(shape[i])))
        .collect();
    dims.sort();
    let mut reach = 1i128;
    for (stride, size) in dims {
        if stride < reach {
            return false;
        }
        reach = mul(&[stride, size]);
    }
    true
}

fn layout(shape: [usize; 3], strides: [usize; 3], buffer: usize) -> Verdict {
    let e = end(shape, strides);
    rule(e <= n(usize::MAX), "extent representable")?;
    rule(e <= n(buffer), "buffer holds the layout")?;
    rule(e <= I64_MAX, "extent within i64 offsets")?;
    rule(shape[2] <= 1 || strides[2] == 1, "D contiguous")?;
    rule(no_overlap(shape, strides), "no aliasing")?;
    rule(
        n(strides[0]) <= I64_MAX && n(strides[1]) <= I64_MAX,
        "strides fit the kernel's i64 parameters",
    )
}

fn layouts(c: &UnifiedCase) -> Verdict {
    layout([c.num_tokens, c.hq, c.d], c.q_strides, c.q_buffer)?;
    layout([c.out_tokens, c.hq, c.d], c.out_strides, c.out_buffer)
}

/// cu and seq_lens; returns the query lengths.
fn batch(c: &UnifiedCase) -> Result<Vec<i128>, &'static str> {
    rule(!c.cu.is_empty(), "cu_seqlens_q has S + 1 entries")?;
    rule(c.cu[0] == 0, "cu starts at 0")?;
    let qlens: Vec<i128> =
        c.cu.windows(2)
            .map(|w| i128::from(w[1]) - i128::from(w[0]))
            .collect();
    rule(qlens.iter().all(|&q| q >= 0), "cu monotone")?;
    rule(
        i128::from(*c.cu.last().unwrap_or(&0)) == n(c.num_tokens),
        "cu ends at T",
    )?;
    rule(c.seq_lens.len() == qlens.len(), "one seq_len per sequence")?;
    for (&l, &q) in c.seq_lens.iter().zip(&qlens) {
        rule(i128::from(l) >= q, "seq_len >= query len")?;
        rule(i128::from(l) <= MAX_SEQ_LEN, "seq_len limit")?;
    }
    Ok(qlens)
}

fn block_table(c: &UnifiedCase) -> Verdict {
    let s = n(c.num_seqs());
    let stride = n(c.table_stride);
    let needed_len = mul(&[s, stride]);
    rule(n(c.table.len()) >= needed_len, "block table buffer")?;
    rule(stride <= I64_MAX, "block table stride fits i64")?;
    for (seq, &l) in c.seq_lens.iter().enumerate() {
        let blocks = (i128::from(l) + n(c.block_size) - 1) / n(c.block_size);
        rule(blocks <= stride, "row covers the sequence")?;
        for b in 0..blocks {
            let id = c.table[(n(seq) * stride + b) as usize];
            rule(
                id >= 0 && n(id as usize) < n(c.num_blocks),
                "block id names a cache block",
            )?;
        }
    }
    Ok(())
}

fn ranges(c: &UnifiedCase) -> Verdict {
    let Some((data, r)) = &c.ranges else {
        return Ok(());
    };
    let (s, r) = (n(c.num_seqs()), n(*r));
    rule(2 * r <= I32_MAX, "2R fits i32")?;
    rule(mul(&[s, r, 2]) <= I32_MAX, "S*R*2 fits i32")?;
    rule(n(data.len()) == s * r * 2, "ranges are [S, R, 2]")?;
    rule(r >= 1, "MAX_MM_RANGES >= 1")?;
    for (seq, &l) in c.seq_lens.iter().enumerate() {
        let row = &data[seq * (r as usize) * 2..(seq + 1) * (r as usize) * 2];
        let mut last_end: Option<i32> = None;
        for p in row.chunks(2) {
            let (a, b) = (p[0], p[1]);
            rule(a <= b && a >= 0, "range is ordered and non-negative")?;
            if a == b {
                continue; // padding
            }
            rule(b < l, "range inside the sequence")?;
            rule(last_end.is_none_or(|e| a > e), "ranges sorted and disjoint")?;
            last_end = Some(b);
        }
    }
    Ok(())
}

fn extras(c: &UnifiedCase, qlens: &[i128]) -> Verdict {
    if let Some(len) = c.sinks_len {
        rule(len == c.hq, "one sink per query head")?;
    }
    if let Some([rows, cols]) = c.qq_bias {
        let maxq = qlens.iter().copied().max().unwrap_or(0);
        rule(
            rows == cols && n(rows) >= maxq,
            "qq_bias square, >= max q_len",
        )?;
        rule(
            mul(&[n(rows), n(cols)]) <= I32_MAX,
            "qq_bias indexable in i32",
        )?;
    }
    Ok(())
}

fn scalars(c: &UnifiedCase) -> Verdict {
    rule(c.scale.is_finite(), "scale finite")?;
    if let Some(cap) = c.softcap {
        rule(cap.is_finite() && cap > 0.0, "softcap finite and > 0")?;
    }
    let (w, lb) = (i128::from(c.window), i128::from(c.lookback));
    rule(w >= 0, "window >= 0")?;
    rule(lb >= -1, "lookback >= -1")?;
    if lb >= 0 {
        rule(w > 0, "chunking needs a window")?;
        rule(w / (lb + 1) >= 1, "chunk size >= 1")?;
        rule(w <= MAX_SEQ_LEN, "chunked window limit")?;
    }
    Ok(())
}

fn path(c: &UnifiedCase, qlens: &[i128]) -> Verdict {
    let PathChoice::Force3d { num_segments } = c.path else {
        return Ok(());
    };
    let nseg = i128::from(num_segments);
    rule(
        nseg > 0 && (nseg & (nseg - 1)) == 0,
        "segments a power of two",
    )?;
    rule(qlens.iter().all(|&q| q <= 1), "3D is decode only")?;
    rule(nseg <= GRID_YZ, "grid z = segments")?;
    rule(n(c.hq) <= GRID_YZ, "reduce grid y = Hq")?;
    let dp = n(c.d.next_power_of_two());
    let t = n(c.num_tokens);
    let stats = mul(&[t, n(c.hq), nseg]);
    rule(mul(&[stats, dp]) <= I32_MAX, "workspace indexable in i32")?;
    let w = &c.workspace;
    let cap_stats = mul(&[n(w.max_tokens), n(w.max_query_heads), n(w.max_segments)]);
    rule(stats <= cap_stats, "workspace statistics fit")?;
    let cap_dp = n(w.max_head_size.next_power_of_two());
    rule(
        mul(&[stats, dp]) <= mul(&[cap_stats, cap_dp]),
        "workspace output fits",
    )
}
