//! An independent statement of when an MLA-DCP decode call is valid (spec `mla_dcp.md`
//! §2.2–§2.3, §9; the op's documented limits), in `i128`, with each rank's local history
//! length counted from the sharding rule itself rather than the library's closed form.

use super::mla_case::MlaCase;

type Verdict = Result<(), &'static str>;

const QK: i128 = 576;
/// `plan::MAX_QUERY_LEN`, restated.
const MAX_QUERY_LEN: i128 = 64;

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

/// Tokens among positions `0..h` that rank `r` owns: each virtual block of `B·D` positions
/// gives every rank `B`; the partial block is counted position by position (owner of
/// offset `o` is `⌊o / I⌋ mod D`).
fn local_len(h: i128, c: &MlaCase) -> i128 {
    let (b, d, i) = (
        i128::from(c.block_size),
        i128::from(c.dcp_size),
        i128::from(c.interleave),
    );
    let full = h / (b * d);
    let partial = (0..h % (b * d))
        .filter(|o| (o / i) % d == i128::from(c.rank))
        .count() as i128;
    full * b + partial
}

pub fn mla_check(c: &MlaCase) -> Verdict {
    let batch = c.seq_lens.len();
    rule(batch >= 1, "batch not empty")?;
    rule(c.query_lens.len() == batch, "one query_len per request")?;
    let (b, d) = (i128::from(c.block_size), i128::from(c.dcp_size));
    let stride = n(c.stride);
    for (&q, &s) in c.query_lens.iter().zip(&c.seq_lens) {
        let (q, s) = (i128::from(q), i128::from(s));
        rule((1..=MAX_QUERY_LEN).contains(&q), "query_len in 1..=64")?;
        rule(s <= i128::from(i32::MAX), "seq_len fits i32")?;
        rule(q <= s, "query inside its sequence")?;
        rule(
            (s + b * d - 1) / (b * d) <= stride,
            "row covers the sequence",
        )?;
    }
    let t: i128 = c.query_lens.iter().map(|&q| i128::from(q)).sum();
    rule(t <= n(c.max_tokens), "token capacity")?;
    rule(n(batch) <= n(c.max_batch), "batch capacity")?;
    let block_elems = b * QK;
    let cache = n(c.cache_len);
    rule(
        cache > 0 && cache % block_elems == 0,
        "cache is whole blocks",
    )?;
    let num_blocks = cache / block_elems;
    let heads = i128::from(c.heads);
    rule(n(c.q_loc_len) >= t * heads * QK, "q_loc size")?;
    rule(n(c.cur_kv_len) >= t * QK, "cur_kv size")?;
    let table_len = n(batch).saturating_mul(stride);
    rule(n(c.table_device_len) >= table_len, "device table size")?;
    rule(
        c.table.len() == c.table_device_len,
        "host copy mirrors the table",
    )?;
    rule(n(c.w_uv_len) >= heads * 512 * 128, "w_uv size")?;
    if c.simulated {
        let q_all = c.q_all_len.ok_or("q_all given in simulated mode")?;
        rule(n(q_all) >= d * t * heads * QK, "q_all size")?;
    }
    for (req, (&q, &s)) in c.query_lens.iter().zip(&c.seq_lens).enumerate() {
        let hist = local_len(i128::from(s) - i128::from(q), c);
        let cols = (hist + b - 1) / b;
        for col in 0..cols {
            let id = c.table[(n(req) * stride + col) as usize];
            rule(
                id >= 0 && i128::from(id) < num_blocks,
                "page id names a block",
            )?;
        }
    }
    Ok(())
}
