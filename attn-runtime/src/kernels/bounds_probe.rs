//! A one-program test kernel that runs a unified-attention BOUNDS and MASK device function
//! pair on the CPU executor for one q-block, so tests can check the DSL's own tile bounds
//! against a reference mask (spec §4 invariant, §7.4) — the DSL code itself, not a host
//! transcription of it. Variants (see the kernel's MASK / BOUNDS convention) are probed
//! the same way, by merging their device functions into the module.

use attn_dsl::interp::{run, HostBuffer};
use attn_dsl::ir::ScalarType;
use attn_dsl::{Binding, ConstValue};
use attn_dsl_macros::module;
use thiserror::Error;

use super::dsl_module::{module_from_template, DslModule, ModuleLoadError};
use super::specialization_cache::specialize_cached;
use crate::ops::unified_attention::config::UnifiedAttentionConfig;
use crate::ops::unified_attention::plan::{attention_bindings, MaskVariant};

#[module]
pub mod probe {
    /// Stores `BOUNDS(..)` of q-block `b` as `[lo, hi, msp]`, `FULL_TILE` of every tile of
    /// keys `[0, KEYS)` under each range's key limit as `[TILE_RANGES, KEYS / TILE_SIZE]`
    /// 0/1, and `MASK` over keys `[0, KEYS)` for every row of the block as
    /// `[BLOCK_M, KEYS]` 0/1 (invalid rows 0), with the same row mapping and arguments as
    /// `unified_attention`.
    #[kernel]
    pub fn bounds_probe<
        const TILE_SIZE: i32,
        const BLOCK_M: i32,
        const BLOCK_Q: i32,
        const NUM_QUERIES_PER_KV: i32,
        const SLIDING_WINDOW: i32,
        const USE_CAUSAL: bool,
        const USE_PER_SEQ_CAUSAL: bool,
        const CHUNK_LOOKBACK: i32,
        const CHUNK_SIZE: i32,
        const USE_R_SWA: bool,
        const R_SWA_WINDOW: i32,
        const USE_MM_PREFIX: bool,
        const USE_MM_QUERY_RANGE: bool,
        const MM_PREFIX_CLAMP_SW: bool,
        const MAX_MM_RANGES: i32,
        const MASK_INTERVALS: bool,
        const KEYS: i32,
        const MASK: Device,
        const BOUNDS: Device,
        const FULL_TILE: Device,
        const TILE_RANGES: i32,
    >(
        geometry: *const i32,
        mm_ranges: *const i32,
        query_ranges: *const i32,
        mask_aux: *const i32,
        mask_aux_f32: *const f32,
        bounds_out: *mut i32,
        full_out: *mut i32,
        mask_out: *mut i32,
    ) {
        let context_len = load(geometry);
        let seq_len = load(geometry + 1);
        let qlen = load(geometry + 2);
        let b = load(geometry + 3);
        let causal = load(geometry + 4) != 0;
        let rswa_prefix = load(geometry + 5);
        let rows = arange::<BLOCK_M>();
        let t = b * BLOCK_Q + rows / NUM_QUERIES_PER_KV;
        let row_valid = (rows < BLOCK_Q * NUM_QUERIES_PER_KV) & (t < qlen);
        let q_abs = context_len + t;
        let mut q_range_lo = zeros::<i32>([BLOCK_M]);
        let mut q_range_hi = zeros::<i32>([BLOCK_M]);
        if USE_MM_QUERY_RANGE {
            q_range_lo = load(query_ranges + 2 * t, row_valid, -1);
            q_range_hi = load(query_ranges + 2 * t + 1, row_valid, -1);
        }
        for r in static_range::<TILE_RANGES>() {
            let (lo, hi, msp) = BOUNDS(BoundsArgs {
                r,
                context_len,
                seq_len,
                qlen,
                b,
                causal,
                rswa_prefix,
                mm_ranges,
                q_range_lo,
                q_range_hi,
                q_abs,
                row_valid,
                aux: mask_aux,
                aux_f32: mask_aux_f32,
            });
            store(bounds_out + 3 * r, lo);
            store(bounds_out + 3 * r + 1, hi);
            store(bounds_out + 3 * r + 2, msp);
            // The kernel's FULL_TILE call, for every tile (the host keeps the visited ones).
            let q_first = context_len + b * BLOCK_Q;
            let q_last = context_len + min(b * BLOCK_Q + BLOCK_Q, qlen) - 1;
            for j in 0..KEYS / TILE_SIZE {
                let full = FULL_TILE(FullTileArgs {
                    k_first: j * TILE_SIZE,
                    k_last: j * TILE_SIZE + TILE_SIZE - 1,
                    q_first,
                    q_last,
                    msp: min(msp, seq_len),
                    seq_len,
                    context_len,
                    qlen,
                    causal,
                    rswa_prefix,
                    mm_ranges,
                    mm_first: 0,
                    mm_end: MAX_MM_RANGES,
                    aux: mask_aux,
                    aux_f32: mask_aux_f32,
                });
                let at = full_out + r * (KEYS / TILE_SIZE) + j;
                if full {
                    store(at, 1);
                } else {
                    store(at, 0);
                }
            }
        }
        let k = arange::<KEYS>();
        let allowed = MASK(MaskArgs {
            q_abs: q_abs.unsqueeze(1),
            k: k.unsqueeze(0),
            k_first: 0,
            k_last: KEYS - 1,
            q_first: context_len + b * BLOCK_Q,
            q_last: context_len + min(b * BLOCK_Q + BLOCK_Q, qlen) - 1,
            seq_len,
            context_len,
            qlen,
            causal,
            rswa_prefix,
            mm_ranges,
            q_range_lo: q_range_lo.unsqueeze(1),
            q_range_hi: q_range_hi.unsqueeze(1),
            // Every range is a candidate: the probe's queries span the whole block.
            mm_first: 0,
            mm_end: MAX_MM_RANGES,
            aux: mask_aux,
            aux_f32: mask_aux_f32,
        }) & row_valid.unsqueeze(1);
        store(
            mask_out + (rows * KEYS).unsqueeze(1) + k.unsqueeze(0),
            allowed.cast::<i32>(),
        );
    }
}

/// The probe's module text (the `#[module]` template source, at its file lines).
pub fn probe_module() -> Result<DslModule, ModuleLoadError> {
    module_from_template(&probe::BOUNDS_PROBE_TEMPLATE)
}

/// One q-block of one sequence, as the kernel would see it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProbeBlock<'a> {
    pub context_len: i32,
    pub seq_len: i32,
    pub query_len: i32,
    /// Local q-block index b.
    pub q_block: i32,
    /// The sequence's (runtime) causality.
    pub causal: bool,
    pub rswa_prefix_len: i32,
    /// The sequence's padded `[R, 2]` ranges (per-sequence encoding).
    pub mm_ranges: &'a [[i32; 2]],
    /// The sequence's `[qlen, 2]` per-query rows (per-query encoding), by local token.
    pub query_ranges: &'a [[i32; 2]],
    /// The sequence's row of the variant's `i32` aux data.
    pub mask_aux: &'a [i32],
    /// The sequence's row of the variant's `f32` aux data.
    pub mask_aux_f32: &'a [f32],
}

/// What the DSL says for one q-block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeResult {
    /// The first tile range `[loop_lo, loop_hi)` (before 3D segment scoping).
    pub loop_lo: i32,
    pub loop_hi: i32,
    pub max_seq_prefix_len: i32,
    /// Every range `(lo, hi, msp)` BOUNDS returned, in order (`TILE_RANGES` of them).
    pub ranges: Vec<(i32, i32, i32)>,
    /// `full[r][j]`: FULL_TILE of tile `j` under range `r`'s key limit.
    pub full: Vec<Vec<bool>>,
    /// `mask[row][k]` for the block's `BLOCK_M` rows and keys `[0, keys)`.
    pub mask: Vec<Vec<bool>>,
}

/// Why a probe failed.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum ProbeError {
    #[error(transparent)]
    Module(#[from] ModuleLoadError),
    #[error("specializing the bounds probe: {0}")]
    Specialize(String),
    #[error("running the bounds probe: {0}")]
    Exec(#[from] attn_dsl::interp::ExecError),
}

/// Runs `variant`'s BOUNDS and MASK (device functions of `module`, e.g. the unified module
/// or it merged with a variant) for one block under `cfg`, masks over keys `[0, keys)`.
pub fn probe_block(
    module: &DslModule,
    cfg: &UnifiedAttentionConfig,
    variant: &MaskVariant,
    block: &ProbeBlock<'_>,
    keys: usize,
) -> Result<ProbeResult, ProbeError> {
    let merged = module.merged_with(&probe_module()?)?;
    let f = specialize_cached(&merged, "bounds_probe", &probe_bindings(cfg, variant, keys))
        .map_err(|e| ProbeError::Specialize(e.message))?;
    let geometry = vec![
        block.context_len,
        block.seq_len,
        block.query_len,
        block.q_block,
        i32::from(block.causal),
        block.rswa_prefix_len,
    ];
    let nonempty = |v: Vec<i32>| if v.is_empty() { vec![0] } else { v };
    let aux_f32 = if block.mask_aux_f32.is_empty() {
        vec![0.0]
    } else {
        block.mask_aux_f32.to_vec()
    };
    let inputs = [
        HostBuffer::I32(geometry),
        HostBuffer::I32(nonempty(block.mm_ranges.as_flattened().to_vec())),
        HostBuffer::I32(nonempty(block.query_ranges.as_flattened().to_vec())),
        HostBuffer::I32(nonempty(block.mask_aux.to_vec())),
        HostBuffer::F32(aux_f32),
    ];
    let block_m = cfg.block_m.max(1) as usize;
    let num_ranges = variant.tile_ranges(cfg).max(1) as usize;
    let tiles = keys / cfg.tile_size.max(1) as usize;
    let mut bounds = HostBuffer::I32(vec![i32::MIN; 3 * num_ranges]);
    let mut full = HostBuffer::I32(vec![-1; num_ranges * tiles.max(1)]);
    let mut mask = HostBuffer::I32(vec![-1; block_m * keys]);
    let mut args: Vec<_> = inputs.iter().map(HostBuffer::arg_in).collect();
    args.push(bounds.arg_out());
    args.push(full.arg_out());
    args.push(mask.arg_out());
    run(&f, [1, 1, 1], args)?;
    let b = bounds.to_f64s();
    let m = mask.to_f64s();
    let full = full.to_f64s();
    let ranges: Vec<(i32, i32, i32)> = b
        .chunks(3)
        .map(|r| (r[0] as i32, r[1] as i32, r[2] as i32))
        .collect();
    Ok(ProbeResult {
        loop_lo: b[0] as i32,
        loop_hi: b[1] as i32,
        max_seq_prefix_len: b[2] as i32,
        ranges,
        full: full
            .chunks(tiles.max(1))
            .map(|r| r.iter().map(|&x| x == 1.0).collect())
            .collect(),
        mask: m
            .chunks(keys.max(1))
            .map(|r| r.iter().map(|&x| x == 1.0).collect())
            .collect(),
    })
}

/// The probe's constexprs: the attention kernel's bindings it declares, plus `KEYS`.
pub fn probe_bindings(
    cfg: &UnifiedAttentionConfig,
    variant: &MaskVariant,
    keys: usize,
) -> Vec<Binding> {
    const NAMES: [&str; 20] = [
        "TILE_SIZE",
        "BLOCK_M",
        "BLOCK_Q",
        "NUM_QUERIES_PER_KV",
        "SLIDING_WINDOW",
        "USE_CAUSAL",
        "USE_PER_SEQ_CAUSAL",
        "CHUNK_LOOKBACK",
        "CHUNK_SIZE",
        "USE_R_SWA",
        "R_SWA_WINDOW",
        "USE_MM_PREFIX",
        "USE_MM_QUERY_RANGE",
        "MM_PREFIX_CLAMP_SW",
        "MAX_MM_RANGES",
        "MASK_INTERVALS",
        "MASK",
        "BOUNDS",
        "FULL_TILE",
        "TILE_RANGES",
    ];
    let mut b: Vec<Binding> = attention_bindings(cfg, ScalarType::F32, variant, 1.0)
        .into_iter()
        .filter(|b| {
            NAMES.contains(&b.name.as_str()) || variant.constexprs.iter().any(|(n, _)| *n == b.name)
        })
        .collect();
    b.push(Binding::new("KEYS", ConstValue::Int(keys as i64)));
    b
}

impl ProbeResult {
    /// The kernel's view of the ranges: each clipped to start where the previous ones
    /// ended and to `min(msp, seq_len)`, as `(first key, end key)` half-open intervals.
    pub fn visited_keys(&self, tile_size: i32, seq_len: i32) -> Vec<(i64, i64)> {
        let mut visited_hi = 0i64;
        let mut out = vec![];
        for &(lo, hi, msp) in &self.ranges {
            let lo = i64::from(lo).max(visited_hi);
            visited_hi = visited_hi.max(i64::from(hi));
            let end = (i64::from(hi) * i64::from(tile_size)).min(i64::from(msp.min(seq_len)));
            let start = lo * i64::from(tile_size);
            if start < end {
                out.push((start, end));
            }
        }
        out
    }

    /// Whether the kernel's tile loops attend key `k` (see [`ProbeResult::visited_keys`]).
    pub fn covers(&self, k: i64, tile_size: i32, seq_len: i32) -> bool {
        self.visited_keys(tile_size, seq_len)
            .iter()
            .any(|&(s, e)| s <= k && k < e)
    }

    /// Tiles the kernel's loops visit that FULL_TILE declares full (they skip the mask and
    /// the `k < msp` guard), each with its range's key limit `min(msp, seq_len)`.
    pub fn full_visited(&self, seq_len: i32) -> Vec<(i64, i64)> {
        let mut visited_hi = 0i64;
        let mut out = vec![];
        for (r, &(lo, hi, msp)) in self.ranges.iter().enumerate() {
            let lo = i64::from(lo).max(visited_hi);
            visited_hi = visited_hi.max(i64::from(hi));
            let full = self.full.get(r).map_or(&[][..], Vec::as_slice);
            for j in lo.max(0)..i64::from(hi) {
                if full.get(j as usize) == Some(&true) {
                    out.push((j, i64::from(msp.min(seq_len))));
                }
            }
        }
        out
    }

    /// Tiles the kernel's loops visit for this block.
    pub fn visited_tiles(&self) -> i64 {
        let mut visited_hi = 0i64;
        let mut n = 0;
        for &(lo, hi, _) in &self.ranges {
            let lo = i64::from(lo).max(visited_hi);
            n += (i64::from(hi) - lo).max(0);
            visited_hi = visited_hi.max(i64::from(hi));
        }
        n
    }
}
