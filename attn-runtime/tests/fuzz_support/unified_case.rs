//! Unified-attention argument sets for fuzzing: a valid random base (small geometry, random
//! varlen batch, paged block table, optional ranges / sinks / qq_bias / softcap / window /
//! chunking / 3D split), then mutations toward malformed or edge-case values (strides near
//! `usize::MAX`, counts near `i32::MAX`, empty and zero-size inputs, non-monotone or
//! out-of-range metadata, NaN/inf scalars). A mutation may keep the set valid; the oracle
//! decides.

use attn_runtime::ops::unified_attention::gpu::WorkspaceCapacity;
use attn_runtime::ops::unified_attention::plan::PathChoice;
use attn_runtime::split_mix64::SplitMix64;

/// One argument set, in the op's terms (host-visible parts only).
#[derive(Clone, Debug)]
pub struct UnifiedCase {
    pub hq: usize,
    pub hkv: usize,
    pub d: usize,
    /// K/V head size (normally `d`).
    pub kv_d: usize,
    pub block_size: usize,
    pub num_blocks: usize,
    /// q's token count (`q.shape[0]`); out has `out_tokens`.
    pub num_tokens: usize,
    pub out_tokens: usize,
    /// `[token, head, d]` element strides of q and out.
    pub q_strides: [usize; 3],
    pub out_strides: [usize; 3],
    /// Elements of the q and out buffers.
    pub q_buffer: usize,
    pub out_buffer: usize,
    /// out holds f32 instead of q's bf16.
    pub out_dtype_f32: bool,
    pub cu: Vec<i32>,
    pub seq_lens: Vec<i32>,
    pub table: Vec<i32>,
    pub table_stride: usize,
    /// Per-sequence ranges `[S, R, 2]` (flat) and R.
    pub ranges: Option<(Vec<i32>, usize)>,
    pub sinks_len: Option<usize>,
    pub qq_bias: Option<[usize; 2]>,
    pub softcap: Option<f32>,
    pub scale: f32,
    pub window: i32,
    pub lookback: i32,
    pub path: PathChoice,
    pub workspace: WorkspaceCapacity,
}

/// Number of mutation kinds [`mutate`] knows.
pub const MUTATIONS: usize = 32;

fn pick<T: Copy>(rng: &mut SplitMix64, xs: &[T]) -> T {
    xs[rng.below(xs.len())]
}

impl UnifiedCase {
    pub fn num_seqs(&self) -> usize {
        self.seq_lens.len()
    }

    /// The query lengths (`cu` differences), for generators of a valid base only.
    fn query_lens(&self) -> Vec<i32> {
        self.cu.windows(2).map(|w| w[1] - w[0]).collect()
    }
}

/// Which constexpr values a base may take: the host fuzz takes many; the GPU fuzz few, so
/// its thousand launches need only a few dozen compiled specializations.
#[derive(Clone, Copy, Debug)]
pub struct Profile {
    pub head_sizes: &'static [usize],
    pub block_sizes: &'static [usize],
    /// Windows other than 0 and i32::MAX.
    pub windows: &'static [i32],
    pub chunking: bool,
    pub segments: &'static [i32],
}

pub const HOST_PROFILE: Profile = Profile {
    head_sizes: &[8, 16, 64, 96],
    block_sizes: &[16, 32],
    windows: &[1, 2, 3, 5, 8, 13, 21, 34],
    chunking: true,
    segments: &[1, 2, 16, 64],
};

pub const GPU_PROFILE: Profile = Profile {
    head_sizes: &[64],
    block_sizes: &[16],
    windows: &[24],
    chunking: false,
    segments: &[16],
};

/// A valid random base: `max_ctx` bounds the history of a sequence.
pub fn valid_base(rng: &mut SplitMix64, max_ctx: usize) -> UnifiedCase {
    valid_base_in(rng, max_ctx, &HOST_PROFILE)
}

pub fn valid_base_in(rng: &mut SplitMix64, max_ctx: usize, p: &Profile) -> UnifiedCase {
    let hkv = pick(rng, &[1, 2]);
    let hq = hkv * pick(rng, &[1, 2, 4]);
    let d = pick(rng, p.head_sizes);
    let block_size = pick(rng, p.block_sizes);
    let num_seqs = rng.below(4);
    let decode = rng.below(3) == 0;
    let qlens: Vec<i32> = (0..num_seqs)
        .map(|_| if decode { 1 } else { rng.below(6) as i32 })
        .collect();
    let seq_lens: Vec<i32> = qlens
        .iter()
        .map(|&q| q + rng.below(max_ctx + 1) as i32)
        .collect();
    let mut cu = vec![0];
    for &q in &qlens {
        cu.push(cu.last().copied().unwrap_or(0) + q);
    }
    let num_tokens = cu.last().copied().unwrap_or(0) as usize;
    let needed: Vec<usize> = seq_lens
        .iter()
        .map(|&l| (l as usize).div_ceil(block_size))
        .collect();
    let table_stride = needed.iter().copied().max().unwrap_or(0) + rng.below(2);
    let num_blocks = needed.iter().sum::<usize>() + 1 + rng.below(3);
    let table: Vec<i32> = (0..num_seqs * table_stride)
        .map(|_| rng.below(num_blocks) as i32)
        .collect();
    let pad = pick(rng, &[0, 0, 8]);
    let token_stride = hq * d + pad;
    let strides = [token_stride, d, 1];
    let len = if num_tokens == 0 {
        0
    } else {
        (num_tokens - 1) * token_stride + hq * d
    };
    let maxq = qlens.iter().copied().max().unwrap_or(0) as usize;
    let window = match rng.below(5) {
        0 => pick(rng, p.windows),
        1 => i32::MAX,
        _ => 0,
    };
    let lookback = if p.chunking && window > 0 && window < i32::MAX && rng.below(3) == 0 {
        rng.below(window.min(4) as usize) as i32 - 1
    } else {
        -1
    };
    let path = match (maxq <= 1, rng.below(3)) {
        (true, 0) => PathChoice::Force3d {
            num_segments: pick(rng, p.segments),
        },
        (_, 1) => PathChoice::Force2d,
        _ => PathChoice::Heuristic,
    };
    let mut case = UnifiedCase {
        hq,
        hkv,
        d,
        kv_d: d,
        block_size,
        num_blocks,
        num_tokens,
        out_tokens: num_tokens,
        q_strides: strides,
        out_strides: strides,
        q_buffer: len,
        out_buffer: len,
        out_dtype_f32: false,
        cu,
        seq_lens,
        table,
        table_stride,
        ranges: None,
        sinks_len: (rng.below(3) == 0).then_some(hq),
        qq_bias: (rng.below(4) == 0).then_some([maxq + rng.below(2); 2]),
        softcap: (rng.below(3) == 0).then(|| rng.uniform(1.0, 50.0) as f32),
        // Ranges (a constexpr R) stay host-only on the GPU profile.
        scale: rng.uniform(0.05, 0.5) as f32,
        window,
        lookback,
        path,
        workspace: WorkspaceCapacity {
            max_tokens: 8,
            max_query_heads: 8,
            max_head_size: 128,
            max_segments: 64,
        },
    };
    if p.chunking && rng.below(3) == 0 {
        case.ranges = Some(valid_ranges(rng, &case.seq_lens));
    }
    case
}

/// Sorted, disjoint inclusive ranges inside each sequence, padded with `(0, 0)`.
fn valid_ranges(rng: &mut SplitMix64, seq_lens: &[i32]) -> (Vec<i32>, usize) {
    let r = 1 + rng.below(3);
    let mut data = Vec::with_capacity(seq_lens.len() * r * 2);
    for &l in seq_lens {
        let mut next = 0i32;
        for _ in 0..r {
            let room = l - next;
            if room >= 2 && rng.below(3) != 0 {
                let start = next + rng.below((room - 1) as usize) as i32;
                let end = start + 1 + rng.below((l - start - 1) as usize) as i32;
                data.extend([start, end]);
                next = end + 1;
            } else {
                data.extend([0, 0]);
            }
        }
    }
    (data, r)
}

/// Applies mutation `kind` (mod [`MUTATIONS`]): most make the set malformed, some produce
/// valid edge cases (huge window, zero tokens, one token).
pub fn mutate(case: &mut UnifiedCase, kind: usize, rng: &mut SplitMix64) {
    let huge = [usize::MAX, usize::MAX - 1, 1 << 62, 1 << 63, (1 << 32) + 1];
    let big_i32 = [i32::MAX, i32::MAX - 1, i32::MIN, -1, 1 << 30, (1 << 30) + 1];
    let s = case.num_seqs();
    match kind % MUTATIONS {
        0 => case.q_strides[0] = pick(rng, &huge),
        1 => case.out_strides[1] = pick(rng, &huge),
        2 => case.q_strides[1] = pick(rng, &[0, 1, case.d.saturating_sub(1)]),
        3 => case.out_strides[2] = pick(rng, &[0, 2, 1 << 62]),
        4 => case.q_buffer = case.q_buffer.saturating_sub(1 + rng.below(4)),
        5 => case.out_tokens = case.out_tokens.saturating_add(1),
        6 => case.num_tokens = pick(rng, &[0, case.num_tokens.saturating_add(1), usize::MAX]),
        7 => {
            if let Some(c) = case.cu.get_mut(rng.below(s + 1)) {
                *c = pick(rng, &big_i32);
            }
        }
        8 => case.cu.clear(),
        9 => {
            if s > 0 {
                case.seq_lens[rng.below(s)] = pick(rng, &big_i32);
            }
        }
        10 => {
            let l = case.seq_lens.len();
            case.seq_lens.truncate(l.saturating_sub(1));
        }
        11 => {
            if !case.table.is_empty() {
                let i = rng.below(case.table.len());
                case.table[i] = pick(rng, &[-1, i32::MAX, i32::MIN, case.num_blocks as i32]);
            }
        }
        12 => case.table_stride = pick(rng, &huge),
        13 => {
            let l = case.table.len();
            case.table.truncate(l.saturating_sub(1 + rng.below(3)));
        }
        14 => case.num_blocks = pick(rng, &[0, 1, (1 << 54) + 8, usize::MAX]),
        15 => case.block_size = pick(rng, &[0, 8, 24, 1 << 31, usize::MAX]),
        16 => case.hkv = pick(rng, &[0, case.hkv.saturating_add(1), 70_000, 1 << 31]),
        17 => case.d = pick(rng, &[0, 65_537, usize::MAX]),
        18 => case.kv_d = case.d.saturating_add(1),
        19 => case.out_dtype_f32 = true,
        20 => {
            let r = pick(rng, &[0, 1 << 30, 1 << 62, 1 << 63, usize::MAX]);
            let data = case.ranges.take().map(|(d, _)| d).unwrap_or_default();
            case.ranges = Some((data, r));
        }
        21 => {
            let (mut data, r) = case.ranges.take().unwrap_or_else(|| (vec![0; 2 * s], 1));
            if !data.is_empty() {
                let i = rng.below(data.len());
                data[i] = pick(rng, &[-1, i32::MAX, 5, 0]);
            }
            case.ranges = Some((data, r));
        }
        22 => case.sinks_len = Some(case.hq.saturating_add(1)),
        23 => case.qq_bias = Some(pick(rng, &[[0, 1], [1 << 16, 1 << 16], [0, 0]])),
        24 => {
            case.softcap = Some(pick(
                rng,
                &[0.0, -1.0, f32::NAN, f32::INFINITY, f32::MIN_POSITIVE],
            ))
        }
        25 => case.scale = pick(rng, &[f32::NAN, f32::INFINITY, -0.5, 0.0]),
        26 => case.window = pick(rng, &[-1, i32::MIN, i32::MAX, (1 << 30) + 1, 1]),
        27 => case.lookback = pick(rng, &[-2, 0, 3, i32::MAX]),
        28 => {
            case.path = PathChoice::Force3d {
                num_segments: pick(rng, &[0, -16, 3, 1024, 1 << 30]),
            }
        }
        29 => case.workspace.max_segments = 1,
        // Valid edge cases: an empty batch, one sequence of one token.
        30 => empty_batch(case),
        _ => one_token(case),
    }
}

fn empty_batch(case: &mut UnifiedCase) {
    case.cu = vec![0];
    case.seq_lens.clear();
    case.table.clear();
    case.num_tokens = 0;
    case.out_tokens = 0;
    case.q_buffer = 0;
    case.out_buffer = 0;
    case.ranges = case.ranges.take().map(|(_, r)| (Vec::new(), r));
    case.qq_bias = case.qq_bias.map(|_| [0, 0]);
}

fn one_token(case: &mut UnifiedCase) {
    case.cu = vec![0, 1];
    case.seq_lens = vec![1];
    // Keep a mutated (huge) stride without allocating it: the table then stays short.
    case.table = vec![0; case.table_stride.clamp(1, 64)];
    case.table_stride = case.table_stride.max(1);
    case.num_tokens = 1;
    case.out_tokens = 1;
    let row = case.hq.saturating_mul(case.d);
    case.q_buffer = row;
    case.out_buffer = row;
    case.ranges = case.ranges.take().map(|(_, r)| (vec![0; 2 * r.min(8)], r));
    case.qq_bias = case.qq_bias.map(|_| [1, 1]);
    let _ = case.query_lens();
}
