//! The unified-attention benchmark rows of the performance table (P0 dense causal 16k,
//! P1 Gemma4 sliding layer, P3 P1 + image ranges, D1 decode, and the launch-table sweep):
//! their shapes, useful-FLOP and KV-byte counts, and their problems built on the device.
//! Shared by the criterion bench (`benches/unified_attention.rs`) and `attn run` / `attn
//! bench` of the `unified_attention*` presets.

use std::sync::Arc;

use crate::ops::unified_attention::args::{
    Metadata, MmPrefixRanges, TokenLayout, Tokens, UnifiedAttentionArgs,
};
use crate::ops::unified_attention::gpu::{ContextOptions, WorkspaceCapacity};
use crate::ops::unified_attention::mask::{allowed, MaskConfig, SequenceMask};
use crate::ops::unified_attention::paged_cache::{CacheGeometry, PagedKvCache};
use crate::ops::unified_attention::plan::PathChoice;
use crate::problem::SplitMix64;
use cudarc::driver::{CudaSlice, CudaStream};
use half::bf16;

/// The spec's KV cache page: 16 tokens.
pub const BLOCK_SIZE: usize = 16;

/// The page size the rows' caches take: [`BLOCK_SIZE`], or `ATTN_BENCH_BLOCK_SIZE` for an
/// experiment (what gathering 16-token pages costs a row against whole-tile pages, which
/// TMA can move as one box); such timings are not the spec's rows.
pub fn block_size() -> usize {
    std::env::var("ATTN_BENCH_BLOCK_SIZE")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&b: &usize| b > 0)
        .unwrap_or(BLOCK_SIZE)
}

/// What a row's rate is measured in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rate {
    /// Useful TFLOP/s (prefill: compute-bound).
    Flops,
    /// GB/s of KV bytes (decode: memory-bound).
    KvBytes,
}

/// One benchmark row of `performance.md`.
#[derive(Clone, Debug)]
pub struct Row {
    pub id: &'static str,
    /// `(query_len, seq_len)` per sequence.
    pub seqs: Vec<(usize, usize)>,
    pub heads: (usize, usize),
    pub head_size: usize,
    pub sliding_window: i32,
    /// `None`: `D^-0.5`.
    pub scale: Option<f32>,
    /// Inclusive ranges of the (single) sequence.
    pub mm_ranges: Vec<[i32; 2]>,
    pub clamp: bool,
    /// Gemma-2's logit softcap (`None`: off).
    pub softcap: Option<f32>,
    pub path: PathChoice,
    pub rate: Rate,
    /// The spec's floor for the row, in µs.
    pub floor_us: f64,
}

pub fn rows() -> Vec<Row> {
    let p1 = Row {
        id: "P1",
        seqs: vec![(8192, 8192)],
        heads: (16, 8),
        head_size: 256,
        sliding_window: 1024,
        scale: Some(1.0),
        mm_ranges: vec![],
        clamp: false,
        softcap: None,
        path: PathChoice::Heuristic,
        rate: Rate::Flops,
        floor_us: 163.0,
    };
    let images: Vec<[i32; 2]> = (0..30)
        .map(|i| [100 + 270 * i, 100 + 270 * i + 255])
        .collect();
    let p3 = Row {
        id: "P3",
        mm_ranges: images,
        clamp: true,
        floor_us: 183.0,
        ..p1.clone()
    };
    let d1 = Row {
        id: "D1-2D",
        seqs: vec![(1, 4096); 64],
        heads: (32, 8),
        head_size: 128,
        sliding_window: 0,
        scale: None,
        mm_ranges: vec![],
        clamp: false,
        softcap: None,
        path: PathChoice::Force2d,
        rate: Rate::KvBytes,
        floor_us: 250.0,
    };
    let p0 = Row {
        id: "P0",
        seqs: vec![(16384, 16384)],
        heads: (16, 16),
        head_size: 128,
        sliding_window: 0,
        scale: None,
        mm_ranges: vec![],
        clamp: false,
        softcap: None,
        path: PathChoice::Heuristic,
        rate: Rate::Flops,
        floor_us: 1441.0,
    };
    vec![
        p0.clone(),
        p1.clone(),
        p3.clone(),
        Row {
            id: "P3-noclamp",
            clamp: false,
            ..p3.clone()
        },
        Row {
            id: "P1-softcap",
            softcap: Some(50.0),
            ..p1.clone()
        },
        Row {
            id: "D1",
            path: PathChoice::Heuristic,
            ..d1.clone()
        },
        d1.clone(),
        Row {
            id: "D1-3D",
            path: PathChoice::Force3d { num_segments: 16 },
            ..d1.clone()
        },
    ]
    .into_iter()
    .chain(sweep_rows(&p0, &p1, &p3, &d1))
    .collect()
}

/// Launch-table sweep: the same workloads under other tilings and split counts (rows named
/// `<row>-m<BLOCK_M>t<TILE>[s<SLABS>]` and `D1-3D-<segments>[t<TILE>]`).
pub fn sweep_rows(p0: &Row, p1: &Row, p3: &Row, d1: &Row) -> Vec<Row> {
    let staged =
        |r: &Row, id: &'static str, block_m: i32, tile_size: i32, slabs: i32, stages: i32| Row {
            id,
            path: PathChoice::Force2dTiled {
                block_m,
                tile_size,
                slabs_per_warp: slabs,
                num_stages: stages,
            },
            ..r.clone()
        };
    let tiled = |r: &Row, id: &'static str, block_m: i32, tile_size: i32, slabs: i32| {
        staged(r, id, block_m, tile_size, slabs, 2)
    };
    let p0_d64 = Row {
        id: "P0-d64",
        head_size: 64,
        floor_us: p0.floor_us / 2.0,
        ..p0.clone()
    };
    let split = |id: &'static str, num_segments: i32| Row {
        id,
        path: PathChoice::Force3d { num_segments },
        ..d1.clone()
    };
    let split_tiled = |id: &'static str, num_segments: i32, tile_size: i32| Row {
        id,
        path: PathChoice::Force3dTiled {
            num_segments,
            tile_size,
        },
        ..d1.clone()
    };
    vec![
        tiled(p0, "P0-m64t32", 64, 32, 1),
        tiled(p0, "P0-m128t32s2", 128, 32, 2),
        tiled(p0, "P0-m128t64s2", 128, 64, 2),
        tiled(p0, "P0-m64t64s2", 64, 64, 2),
        split("D1-3D-4", 4),
        split("D1-3D-8", 8),
        split_tiled("D1-3D-4t32", 4, 32),
        split_tiled("D1-3D-8t32", 8, 32),
        tiled(d1, "D1-2D-m16t16", 16, 16, 1),
        tiled(d1, "D1-2D-m16t64", 16, 64, 1),
        // The table's 64-key decode tiles with a third stage, and split over 4 segments.
        staged(d1, "D1-2D-m16t64-3st", 16, 64, 1, 3),
        split_tiled("D1-3D-4t64", 4, 64),
        tiled(p1, "P1-m64t64", 64, 64, 1),
        tiled(p1, "P1-m128t32", 128, 32, 1),
        tiled(p1, "P1-m64t16", 64, 16, 1),
        staged(d1, "D1-2D-s2", 16, 32, 1, 2),
        staged(d1, "D1-2D-s4", 16, 32, 1, 4),
        staged(p0, "P0-m128t32s2-3st", 128, 32, 2, 3),
        // One slab per warp on 8 warps: two warpgroups, the shapes the warpgroup MMA
        // path (sm_90a) wants (no B fragments in registers, so no reason for 2 slabs).
        tiled(p0, "P0-m128t32s1", 128, 32, 1),
        tiled(p0, "P0-m128t64s1", 128, 64, 1),
        tiled(p0, "P0-m128t128s1", 128, 128, 1),
        tiled(p1, "P1-m128t64", 128, 64, 1),
        // One warpgroup over wider key tiles, or a third stage.
        tiled(p0, "P0-m64t64", 64, 64, 1),
        staged(p0, "P0-m64t32-3st", 64, 32, 1, 3),
        tiled(p3, "P3-m128t32", 128, 32, 1),
        tiled(p3, "P3-m64t32", 64, 32, 1),
        // P1's tiling for P3, the launch table's since the V guard is the window's bound
        // (the program splits: 0.418 ms against 0.483 at 64 x 32, 2026-12-02T17:53Z).
        tiled(p3, "P3-m128t64", 128, 64, 1),
        // Gemma-2's softcap (tanh per score) on P1's two-warpgroup tiling: warp-specialized
        // and spill-free on sm_90a since the V guard is the window's bound.
        tiled(
            &Row {
                softcap: Some(50.0),
                ..p1.clone()
            },
            "P1-softcap-m128t64",
            128,
            64,
            1,
        ),
        // P0 at D = 64 (half the FLOPs): the launch table's tiling, and the warpgroup
        // tilings a key tile as wide as the head no longer rules out.
        p0_d64.clone(),
        tiled(&p0_d64, "P0-d64-m64t64", 64, 64, 1),
        tiled(&p0_d64, "P0-d64-m128t64", 128, 64, 1),
        tiled(&p0_d64, "P0-d64-m128t128", 128, 128, 1),
        // The table's tiling (three stages; `P0-m128t128s1` and `P0-d64-m128t128` are it
        // with two) with four at D = 64.
        staged(&p0_d64, "P0-d64-4st", 128, 128, 1, 4),
        // Deeper rings of narrower key tiles (the K/V supply bounds P0, P1 and P3, docs/gpu_ir.md,
        // "What bounds P0 and P1 now"): as many bytes a stage fewer, more stages in flight.
        staged(p0, "P0-m128t64s1-3st", 128, 64, 1, 3),
        staged(p0, "P0-m128t64s1-4st", 128, 64, 1, 4),
        staged(p1, "P1-m128t32-3st", 128, 32, 1, 3),
        staged(p1, "P1-m128t32-4st", 128, 32, 1, 4),
        staged(p3, "P3-m128t32-4st", 128, 32, 1, 4),
    ]
}

/// The `attn` preset entries and their rows: `unified_attention` is P1.
pub const PRESETS: [(&str, &str); 4] = [
    ("unified_attention", "P1"),
    ("unified_attention_p0", "P0"),
    ("unified_attention_p3", "P3"),
    ("unified_attention_d1", "D1-2D"),
];

impl Row {
    /// The row of an `attn` preset entry (see [`PRESETS`]).
    pub fn preset(name: &str) -> Option<Row> {
        let id = PRESETS.iter().find(|(n, _)| *n == name)?.1;
        rows().into_iter().find(|r| r.id == id)
    }

    /// The row with every sequence `seq_len` long: prefill rows query all of it, decode
    /// rows keep their query length. Image ranges past the end are dropped, the last one
    /// clipped.
    pub fn with_seq_len(mut self, seq_len: usize) -> Row {
        for s in &mut self.seqs {
            *s = if s.0 == s.1 {
                (seq_len, seq_len)
            } else {
                (s.0.min(seq_len), seq_len)
            };
        }
        let last = seq_len as i32 - 1;
        self.mm_ranges.retain(|r| r[0] < last);
        for r in &mut self.mm_ranges {
            r[1] = r[1].min(last);
        }
        self
    }

    /// The row with `n` sequences of its first sequence's shape.
    pub fn with_num_seqs(mut self, n: usize) -> Row {
        let first = self.seqs.first().copied().unwrap_or((1, 1));
        self.seqs = vec![first; n];
        self
    }

    /// The softmax scale the row runs with.
    pub fn softmax_scale(&self) -> f64 {
        self.scale
            .map_or(1.0 / (self.head_size as f64).sqrt(), f64::from)
    }

    /// Bytes a run must move at least: q and out once, K and V of every sequence once.
    pub fn io_bytes(&self) -> f64 {
        let tokens: usize = self.seqs.iter().map(|&(q, _)| q).sum();
        let qo = 2 * tokens * self.heads.0 * self.head_size * std::mem::size_of::<bf16>();
        self.kv_bytes() + qo as f64
    }

    pub fn mask_config(&self) -> MaskConfig {
        MaskConfig {
            sliding_window: self.sliding_window,
            use_mm_prefix: !self.mm_ranges.is_empty(),
            mm_prefix_clamp_sw: self.clamp,
            ..MaskConfig::full()
        }
    }

    /// Allowed (q, k) pairs over the batch, counted with the op's mask predicate.
    pub fn allowed_pairs(&self) -> u64 {
        let cfg = self.mask_config();
        let rows: Vec<(usize, i64)> = self
            .seqs
            .iter()
            .flat_map(|&(q, l)| (0..q).map(move |t| (l, (l - q + t) as i64)))
            .collect();
        parallel_sum(rows.len(), |i| {
            let (l, q_abs) = rows[i];
            let seq = SequenceMask {
                seq_len: l as i64,
                causal: true,
                rswa_prefix_len: 0,
                mm_ranges: &self.mm_ranges,
            };
            (0..l as i64)
                .filter(|&k| allowed(&cfg, &seq, q_abs, k))
                .count() as u64
        })
    }

    pub fn useful_flops(&self) -> f64 {
        4.0 * (self.heads.0 * self.head_size) as f64 * self.allowed_pairs() as f64
    }

    pub fn kv_bytes(&self) -> f64 {
        let tokens: usize = self.seqs.iter().map(|&(_, l)| l).sum();
        (tokens * self.heads.1 * self.head_size * 2 * std::mem::size_of::<bf16>()) as f64
    }
}

/// `Σ f(i)` for `i < n` over all cores.
pub fn parallel_sum(n: usize, f: impl Fn(usize) -> u64 + Sync) -> u64 {
    let threads = std::thread::available_parallelism().map_or(4, |t| t.get());
    let chunk = n.div_ceil(threads).max(1);
    std::thread::scope(|s| {
        let f = &f;
        let handles: Vec<_> = (0..n)
            .step_by(chunk)
            .map(|lo| s.spawn(move || (lo..(lo + chunk).min(n)).map(f).sum::<u64>()))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("counting thread"))
            .sum()
    })
}

/// Uniform bf16 in `[-1, 1)` from SplitMix64, generated on all cores (a 1 GB cache in
/// well under a second).
pub fn random_bf16(n: usize, seed: u64) -> Vec<bf16> {
    let mut v = vec![bf16::ZERO; n];
    let threads = std::thread::available_parallelism().map_or(4, |t| t.get());
    let chunk = n.div_ceil(threads).max(1);
    std::thread::scope(|s| {
        for (i, part) in v.chunks_mut(chunk).enumerate() {
            s.spawn(move || {
                let mut rng = SplitMix64(seed ^ (i as u64).wrapping_mul(0xA076_1D64_78BD_642F));
                for x in part {
                    *x = bf16::from_f64(rng.uniform(-1.0, 1.0));
                }
            });
        }
    });
    v
}

/// A row's problem on the device, built once.
pub struct Prepared {
    q: CudaSlice<bf16>,
    out: CudaSlice<bf16>,
    cache: PagedKvCache<bf16>,
    cu_seqlens_q: (CudaSlice<i32>, Vec<i32>),
    seq_lens: (CudaSlice<i32>, Vec<i32>),
    block_table: (CudaSlice<i32>, Vec<i32>),
    block_table_stride: usize,
    ranges: Option<(CudaSlice<i32>, Vec<i32>)>,
    layout: TokenLayout,
}

impl Prepared {
    /// Random bf16 q/K/V (SplitMix64) in a scattered paged cache, and the row's metadata.
    pub fn build(stream: &Arc<CudaStream>, row: &Row) -> Result<Prepared, String> {
        let (hq, hkv) = row.heads;
        let d = row.head_size;
        let t: usize = row.seqs.iter().map(|&(q, _)| q).sum();
        let blocks: Vec<usize> = row
            .seqs
            .iter()
            .map(|&(_, l)| l.div_ceil(block_size()))
            .collect();
        let num_blocks: usize = blocks.iter().sum();
        let stride = blocks.iter().copied().max().unwrap_or(1);
        // A scattered (not sequential) page order, as a serving cache has.
        let mut order: Vec<i32> = (0..num_blocks as i32).collect();
        let mut rng = SplitMix64(0x51);
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i + 1));
        }
        let mut table = vec![0i32; row.seqs.len() * stride];
        let mut next = 0;
        for (s, &n) in blocks.iter().enumerate() {
            for j in 0..n {
                table[s * stride + j] = order[next];
                next += 1;
            }
        }
        let mut cu = vec![0i32];
        for &(q, _) in &row.seqs {
            cu.push(cu.last().copied().unwrap_or(0) + q as i32);
        }
        let seq_lens: Vec<i32> = row.seqs.iter().map(|&(_, l)| l as i32).collect();
        let geometry = CacheGeometry {
            num_blocks,
            block_size: block_size(),
            num_kv_heads: hkv,
            head_size: d,
        };
        let elements = geometry
            .elements()
            .map_err(|e| format!("{}: {e}", row.id))?;
        let k = random_bf16(elements, 1);
        let v = random_bf16(elements, 2);
        let cache = PagedKvCache::from_host(stream, geometry, &k, &v)
            .map_err(|e| format!("uploading the cache: {e}"))?;
        let driver = |e: cudarc::driver::DriverError| format!("uploading {}: {e}", row.id);
        let up = |v: Vec<i32>| Ok::<_, String>((stream.clone_htod(&v).map_err(driver)?, v));
        let ranges = if row.mm_ranges.is_empty() {
            None
        } else {
            Some(up(row.mm_ranges.as_flattened().to_vec())?)
        };
        Ok(Prepared {
            q: stream
                .clone_htod(&random_bf16(t * hq * d, 3))
                .map_err(driver)?,
            out: stream.alloc_zeros(t * hq * d).map_err(driver)?,
            cache,
            cu_seqlens_q: up(cu)?,
            seq_lens: up(seq_lens)?,
            block_table: up(table)?,
            block_table_stride: stride,
            ranges,
            layout: TokenLayout::contiguous(t, hq, d),
        })
    }

    pub fn args(&mut self, row: &Row) -> UnifiedAttentionArgs<'_, bf16> {
        let mut args = UnifiedAttentionArgs::new(
            Tokens {
                data: self.q.as_view(),
                layout: self.layout,
            },
            Tokens {
                data: self.out.as_view_mut(),
                layout: self.layout,
            },
            &self.cache,
            meta(&self.cu_seqlens_q),
            meta(&self.seq_lens),
            meta(&self.block_table),
            self.block_table_stride,
        );
        if let Some(s) = row.scale {
            args.softmax_scale = s;
        }
        args.sliding_window = row.sliding_window;
        args.mm_prefix_clamp_sliding_window = row.clamp;
        args.softcap = row.softcap;
        args.path = row.path;
        if let Some(r) = &self.ranges {
            args.mm_prefix_ranges = MmPrefixRanges::PerSequence {
                ranges: meta(r),
                max_ranges: row.mm_ranges.len(),
            };
        }
        args
    }
}

/// A device metadata buffer with its host copy, as the op's argument.
pub fn meta((device, host): &(CudaSlice<i32>, Vec<i32>)) -> Metadata<'_> {
    Metadata {
        device: device.as_view(),
        host,
    }
}

/// The context every row runs in: the measured launch table (`D1`'s 512 programs stay 2D;
/// prefill rows are 2D whatever the table), with a workspace for the D1 decode batch at up
/// to 16 segments (the forced split-KV rows).
pub fn context_options() -> ContextOptions {
    let measured = ContextOptions::measured(32, 8, 256);
    ContextOptions {
        split_kv: measured.split_kv,
        workspace: Some(WorkspaceCapacity {
            max_tokens: 64,
            max_query_heads: 32,
            max_head_size: 256,
            max_segments: 16,
        }),
    }
}
