//! MLA-DCP decode argument sets for fuzzing: a valid random base (DCP geometry, rank,
//! batch of decode requests, paged block table, buffer sizes), then malformed mutations
//! (bad page ids, short or mismatched tables, lengths near u32/i32 limits, empty batch,
//! short buffers, capacity overruns).

use attn_runtime::ops::mla_dcp::metadata::DcpLayout;
use attn_runtime::ops::mla_dcp::op::{ExchangeMode, MlaDcpConfig, MlaHostInputs};
use attn_runtime::ops::mla_dcp::plan::{LATENT, QK_WIDTH, V_HEAD};
use attn_runtime::split_mix64::SplitMix64;

#[derive(Clone, Debug)]
pub struct MlaCase {
    pub dcp_size: u32,
    pub interleave: u32,
    pub block_size: u32,
    pub rank: u32,
    pub heads: u32,
    pub max_tokens: usize,
    pub max_batch: usize,
    pub simulated: bool,
    pub query_lens: Vec<u32>,
    pub seq_lens: Vec<u32>,
    pub table: Vec<i32>,
    pub table_device_len: usize,
    pub stride: usize,
    pub q_loc_len: usize,
    pub q_all_len: Option<usize>,
    pub cur_kv_len: usize,
    pub cache_len: usize,
    pub w_uv_len: usize,
}

pub const MLA_MUTATIONS: usize = 16;

fn pick<T: Copy>(rng: &mut SplitMix64, xs: &[T]) -> T {
    xs[rng.below(xs.len())]
}

impl MlaCase {
    pub fn config(&self) -> MlaDcpConfig {
        let layout = DcpLayout::new(self.dcp_size, self.interleave, self.block_size)
            .expect("generated layouts are valid");
        let mut c = MlaDcpConfig::new(
            layout,
            self.rank,
            self.heads,
            0.1,
            self.max_tokens,
            self.max_batch,
        );
        if self.simulated {
            c.exchange = ExchangeMode::Simulated;
        }
        c
    }

    pub fn inputs(&self) -> MlaHostInputs<'_> {
        MlaHostInputs {
            query_lens: &self.query_lens,
            seq_lens: &self.seq_lens,
            block_table: &self.table,
            block_table_device_len: self.table_device_len,
            block_table_stride: self.stride,
            q_loc_len: self.q_loc_len,
            q_all_len: self.q_all_len,
            cur_kv_len: self.cur_kv_len,
            cache_len: self.cache_len,
            w_uv_len: self.w_uv_len,
        }
    }

    pub fn tokens(&self) -> usize {
        self.query_lens.iter().map(|&q| q as usize).sum()
    }
}

pub fn mla_valid_base(rng: &mut SplitMix64) -> MlaCase {
    let dcp_size = pick(rng, &[1, 2, 4]);
    let block_size = pick(rng, &[16, 64]);
    let interleave = pick(rng, &[1, block_size]);
    let heads = pick(rng, &[1, 2]);
    let batch = 1 + rng.below(4);
    let query_lens: Vec<u32> = (0..batch).map(|_| 1 + rng.below(3) as u32).collect();
    let seq_lens: Vec<u32> = query_lens
        .iter()
        .map(|&q| q + rng.below(400) as u32)
        .collect();
    let per_vblock = block_size as usize * dcp_size as usize;
    let stride = seq_lens
        .iter()
        .map(|&s| (s as usize).div_ceil(per_vblock))
        .max()
        .unwrap_or(0)
        + rng.below(2);
    let num_blocks = 1 + batch * stride + rng.below(3);
    let table: Vec<i32> = (0..batch * stride)
        .map(|_| rng.below(num_blocks) as i32)
        .collect();
    let t: usize = query_lens.iter().map(|&q| q as usize).sum();
    let (d, n) = (dcp_size as usize, heads as usize);
    let simulated = rng.below(2) == 0;
    MlaCase {
        dcp_size,
        interleave,
        block_size,
        rank: rng.below(d) as u32,
        heads,
        max_tokens: 16,
        max_batch: 8,
        simulated,
        table_device_len: table.len(),
        table,
        stride,
        query_lens,
        seq_lens,
        q_loc_len: t * n * QK_WIDTH,
        q_all_len: simulated.then_some(d * t * n * QK_WIDTH),
        cur_kv_len: t * QK_WIDTH,
        cache_len: num_blocks * block_size as usize * QK_WIDTH,
        w_uv_len: n * LATENT * V_HEAD,
    }
}

pub fn mla_mutate(c: &mut MlaCase, kind: usize, rng: &mut SplitMix64) {
    let b = c.seq_lens.len();
    match kind % MLA_MUTATIONS {
        0 => {
            if !c.table.is_empty() {
                let i = rng.below(c.table.len());
                let blocks = (c.cache_len / (c.block_size as usize * QK_WIDTH)) as i32;
                c.table[i] = pick(rng, &[-1, i32::MIN, i32::MAX, blocks]);
            }
        }
        1 => {
            let l = c.table.len().saturating_sub(1);
            c.table.truncate(l);
        }
        2 => c.table_device_len = c.table_device_len.saturating_add(1),
        3 => c.stride = pick(rng, &[0, usize::MAX, 1 << 62, c.stride.saturating_add(1)]),
        4 if b > 0 => {
            c.seq_lens[rng.below(b)] = pick(rng, &[u32::MAX, 1 << 31, i32::MAX as u32, 0])
        }
        5 if c.query_lens.len() == b && b > 0 => {
            c.query_lens[rng.below(b)] = pick(rng, &[0, 65, 64, u32::MAX])
        }
        4 | 5 => {}
        6 => {
            c.seq_lens.clear();
            c.query_lens.clear();
        }
        7 => {
            c.query_lens.pop();
        }
        8 => c.cache_len = pick(rng, &[0, c.cache_len.saturating_sub(1), QK_WIDTH]),
        9 => c.q_loc_len = c.q_loc_len.saturating_sub(1),
        10 => c.q_all_len = None,
        11 => c.w_uv_len = c.w_uv_len.saturating_sub(1),
        12 => c.cur_kv_len = c.cur_kv_len.saturating_sub(1),
        13 => c.max_tokens = c.tokens().saturating_sub(1),
        14 => c.max_batch = b.saturating_sub(1),
        // A valid edge case: the cache holds exactly the blocks the table names (one page
        // when every id is 0).
        _ => {
            c.table.iter_mut().for_each(|x| *x = 0);
            c.cache_len = c.block_size as usize * QK_WIDTH;
        }
    }
}
