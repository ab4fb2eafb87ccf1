//! The checking kit for a variant's author: on random geometries, does the variant's DSL
//! mask equal the author's own definition of it, do its DSL bounds visit every key that
//! mask allows (bounds ⊇ mask), how much do they visit beyond (slack), and is every tile
//! its FULL_TILE declares full really allowed whole for every row of the block (sound:
//! the kernel skips the mask there)? Also the tile visits of one whole sequence, the
//! number that pruning is judged by.
//!
//! It runs the variant's real MASK / BOUNDS code (the bounds probe on the CPU executor),
//! with the kernel's clipping of ranges, so what passes here is what the kernel does.

use thiserror::Error;

use super::config::{block_m_for, AttentionProblem, UnifiedAttentionConfig};
use super::plan::{choose_config, PathChoice};
use super::variant::Variant;
use crate::kernels::bounds_probe::{probe_block, ProbeBlock, ProbeError, ProbeResult};
use crate::kernels::dsl_module::ModuleLoadError;
use crate::problem::SplitMix64;

/// One random case's data, made by the author for a geometry: the aux rows of the one
/// sequence and the definition of the mask (absolute query and key positions).
pub struct VariantCase {
    /// The sequence's `i32` (or bool) aux row.
    pub aux_i32: Vec<i32>,
    /// The sequence's `f32` aux row.
    pub aux_f32: Vec<f32>,
    /// The author's definition; `None` checks the bounds against the DSL mask itself
    /// (no definition to compare the mask with: `attn check-variant`).
    pub mask: Option<Box<dyn Fn(i64, i64) -> bool>>,
}

impl VariantCase {
    /// A case with an `i32` aux row and the author's definition of the mask.
    pub fn new(aux_i32: Vec<i32>, mask: impl Fn(i64, i64) -> bool + 'static) -> Self {
        VariantCase {
            aux_i32,
            aux_f32: vec![],
            mask: Some(Box::new(mask)),
        }
    }
}

/// A sequence as a case sees it: `L` keys, the last `qlen` of which are queries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CaseGeometry {
    /// L: keys of the sequence.
    pub seq_len: i32,
    /// Query tokens (the last `query_len` of the keys).
    pub query_len: i32,
}

/// Key `k` of query `q` (absolute positions) the mask allows but the bounds skip.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MissedKey {
    /// L: keys of the sequence.
    pub seq_len: i32,
    /// Query tokens of the sequence.
    pub query_len: i32,
    /// Keys per tile.
    pub tile_size: i32,
    /// The q-block probed.
    pub q_block: i32,
    /// Query position (absolute).
    pub q: i64,
    /// Key position (absolute).
    pub k: i64,
}

/// The DSL mask disagreeing with the author's definition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaskMismatch {
    /// L: keys of the sequence.
    pub seq_len: i32,
    /// Query tokens of the sequence.
    pub query_len: i32,
    /// Query position (absolute).
    pub q: i64,
    /// Key position (absolute).
    pub k: i64,
    /// What the DSL mask said.
    pub dsl: bool,
}

/// A visited tile FULL_TILE declares full holding a key some valid row may not see.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnsoundFullTile {
    /// L: keys of the sequence.
    pub seq_len: i32,
    /// Query tokens of the sequence.
    pub query_len: i32,
    /// Keys per tile.
    pub tile_size: i32,
    /// The q-block probed.
    pub q_block: i32,
    /// The tile's index.
    pub tile: i64,
    /// The first such (query, key).
    pub q: i64,
    /// Key position of the first such pair (absolute).
    pub k: i64,
}

/// What [`check_bounds`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BoundsReport {
    /// Random cases run.
    pub cases: usize,
    /// Keys the mask allows that no range visits (the first few are kept in `missed`).
    pub missed_count: usize,
    /// The first few missed keys.
    pub missed: Vec<MissedKey>,
    /// Pairs where the DSL mask and the definition disagree (the first few are kept in `mask_mismatches`).
    pub mask_mismatch_count: usize,
    /// The first few mask mismatches.
    pub mask_mismatches: Vec<MaskMismatch>,
    /// Tiles the bounds make the kernel visit, summed over the probed blocks.
    pub visited_tiles: u64,
    /// Tiles that hold at least one allowed key of a valid row.
    pub needed_tiles: u64,
    /// Visited tiles FULL_TILE declares full (the mask skipped there).
    pub full_tiles: u64,
    /// Of those, tiles holding a key some valid row may not see (the first few kept).
    pub unsound_full_count: usize,
    /// The first few unsound full tiles.
    pub unsound_full: Vec<UnsoundFullTile>,
}

impl BoundsReport {
    /// No missed key, the DSL mask equals the definition and every full tile is sound.
    pub fn passed(&self) -> bool {
        self.missed_count == 0 && self.mask_mismatch_count == 0 && self.unsound_full_count == 0
    }

    /// `visited / needed` (1.0 = no slack).
    pub fn slack(&self) -> f64 {
        self.visited_tiles as f64 / self.needed_tiles.max(1) as f64
    }
}

impl std::fmt::Display for BoundsReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} cases: {} missed key(s), {} mask mismatch(es), visited {} tiles for {} holding an allowed key (slack {:.3}x)",
            self.cases,
            self.missed_count,
            self.mask_mismatch_count,
            self.visited_tiles,
            self.needed_tiles,
            self.slack()
        )?;
        write!(
            f,
            ", {} full tile(s), {} unsound",
            self.full_tiles, self.unsound_full_count
        )?;
        if let Some(m) = self.missed.first() {
            write!(
                f,
                "; first missed: L {} qlen {} tile {} block {}: q {} k {}",
                m.seq_len, m.query_len, m.tile_size, m.q_block, m.q, m.k
            )?;
        }
        if let Some(u) = self.unsound_full.first() {
            write!(
                f,
                "; first unsound full tile: L {} qlen {} tile size {} block {}: tile {} holds k {} that q {} may not see",
                u.seq_len, u.query_len, u.tile_size, u.q_block, u.tile, u.k, u.q
            )?;
        }
        if let Some(m) = self.mask_mismatches.first() {
            write!(
                f,
                "; first mismatch: L {} qlen {}: q {} k {}: DSL {} vs definition {}",
                m.seq_len, m.query_len, m.q, m.k, m.dsl, !m.dsl
            )?;
        }
        Ok(())
    }
}

/// Why a check could not run.
#[derive(Debug, Error)]
pub enum VariantCheckError {
    /// The variant's module did not load.
    #[error(transparent)]
    Module(#[from] ModuleLoadError),
    /// The bounds probe failed.
    #[error(transparent)]
    Probe(#[from] ProbeError),
    /// No configuration could be chosen for a probed geometry ([`choose_config`] refused it).
    #[error("no configuration: {0}")]
    Config(String),
}

/// Options of [`check_bounds`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckOptions {
    /// Random cases to draw.
    pub cases: usize,
    /// Seed of the case generator.
    pub seed: u64,
    /// Largest sequence length drawn (keys probed: `[0, max_seq_len)`).
    pub max_seq_len: i32,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            cases: 100,
            seed: 0x5EED,
            max_seq_len: 256,
        }
    }
}

const KEEP: usize = 8;

/// Draws `options.cases` random (tile size, GQA ratio, L, qlen, q-block) cases, asks
/// `make` for the aux data and mask of each, and checks the variant against them.
pub fn check_bounds(
    variant: &Variant,
    options: &CheckOptions,
    make: &dyn Fn(&mut SplitMix64, CaseGeometry) -> VariantCase,
) -> Result<BoundsReport, VariantCheckError> {
    let module = variant.module()?;
    let mut rng = SplitMix64(options.seed);
    let mut report = BoundsReport::default();
    for _ in 0..options.cases {
        let tile = [16, 32][rng.below(2)];
        let nqpkv: i32 = [1, 2, 3, 5, 8][rng.below(5)];
        let l = 1 + rng.below(options.max_seq_len.max(1) as usize) as i32;
        let qlen = 1 + rng.below(l as usize) as i32;
        let cfg = probe_config(tile, nqpkv)?;
        let blocks = (qlen + cfg.block_q - 1) / cfg.block_q;
        let b = rng.below(blocks as usize) as i32;
        let g = CaseGeometry {
            seq_len: l,
            query_len: qlen,
        };
        let case = make(&mut rng, g);
        let r = probe(
            &module,
            &cfg,
            variant,
            &case,
            g,
            b,
            options.max_seq_len as usize,
        )?;
        tally(&mut report, &cfg, &case, g, b, &r);
        report.cases += 1;
    }
    Ok(report)
}

/// The probe's view of one block.
fn probe(
    module: &crate::kernels::dsl_module::DslModule,
    cfg: &UnifiedAttentionConfig,
    variant: &Variant,
    case: &VariantCase,
    g: CaseGeometry,
    b: i32,
    keys: usize,
) -> Result<ProbeResult, VariantCheckError> {
    let block = ProbeBlock {
        context_len: g.seq_len - g.query_len,
        seq_len: g.seq_len,
        query_len: g.query_len,
        q_block: b,
        causal: true,
        rswa_prefix_len: 0,
        mm_ranges: &[],
        query_ranges: &[],
        mask_aux: &case.aux_i32,
        mask_aux_f32: &case.aux_f32,
    };
    // The probe's key axis is a tile: a power of two.
    let keys = keys.max(g.seq_len as usize).next_power_of_two();
    Ok(probe_block(
        module,
        cfg,
        &variant.mask_variant(),
        &block,
        keys,
    )?)
}

/// Adds one block's misses, mismatches and tile counts to the report.
fn tally(
    report: &mut BoundsReport,
    cfg: &UnifiedAttentionConfig,
    case: &VariantCase,
    g: CaseGeometry,
    b: i32,
    r: &ProbeResult,
) {
    let tile = cfg.tile_size;
    let mut needed = std::collections::BTreeSet::new();
    for row in 0..cfg.block_m {
        let t = b * cfg.block_q + row / cfg.num_queries_per_kv;
        let valid = row < cfg.block_q * cfg.num_queries_per_kv && t < g.query_len;
        let q = i64::from(g.seq_len - g.query_len + t);
        // Keys at or past L are never attended (the kernel's `k < min(msp, L)`), whatever
        // the mask says of them.
        let row_mask = &r.mask[row as usize];
        for (k, &dsl) in row_mask.iter().enumerate().take(g.seq_len.max(0) as usize) {
            let k = k as i64;
            // The definition is asked only about real rows (an invalid row's q may lie past L).
            let want =
                valid && k < i64::from(g.seq_len) && case.mask.as_ref().map_or(dsl, |m| m(q, k));
            if dsl != want && valid {
                report.mask_mismatch_count += 1;
                if report.mask_mismatches.len() < KEEP {
                    report.mask_mismatches.push(MaskMismatch {
                        seq_len: g.seq_len,
                        query_len: g.query_len,
                        q,
                        k,
                        dsl,
                    });
                }
            }
            if !want {
                continue;
            }
            needed.insert(k / i64::from(tile));
            if !r.covers(k, tile, g.seq_len) {
                report.missed_count += 1;
                if report.missed.len() < KEEP {
                    report.missed.push(MissedKey {
                        seq_len: g.seq_len,
                        query_len: g.query_len,
                        tile_size: tile,
                        q_block: b,
                        q,
                        k,
                    });
                }
            }
        }
    }
    report.needed_tiles += needed.len() as u64;
    report.visited_tiles += r.visited_tiles().max(0) as u64;
    tally_full_tiles(report, cfg, g, b, r);
}

/// Every visited tile declared full must hold only keys below its range's key limit that
/// every valid row's DSL mask allows: the kernel applies neither there.
fn tally_full_tiles(
    report: &mut BoundsReport,
    cfg: &UnifiedAttentionConfig,
    g: CaseGeometry,
    b: i32,
    r: &ProbeResult,
) {
    let tile = i64::from(cfg.tile_size);
    for (j, msp) in r.full_visited(g.seq_len) {
        report.full_tiles += 1;
        let bad = (0..cfg.block_m).find_map(|row| {
            let t = b * cfg.block_q + row / cfg.num_queries_per_kv;
            let valid = row < cfg.block_q * cfg.num_queries_per_kv && t < g.query_len;
            let mask = &r.mask[row as usize];
            let q = i64::from(g.seq_len - g.query_len + t);
            (j * tile..(j + 1) * tile)
                .find(|&k| k >= msp || !mask.get(k as usize).copied().unwrap_or(false))
                .filter(|_| valid)
                .map(|k| (q, k))
        });
        if let Some((q, k)) = bad {
            report.unsound_full_count += 1;
            if report.unsound_full.len() < KEEP {
                report.unsound_full.push(UnsoundFullTile {
                    seq_len: g.seq_len,
                    query_len: g.query_len,
                    tile_size: cfg.tile_size,
                    q_block: b,
                    tile: j,
                    q,
                    k,
                });
            }
        }
    }
}

/// A 2D prefill configuration with `tile` keys per tile and GQA ratio `nqpkv` (variants
/// replace the vLLM mask, so only the geometry constexprs matter).
pub fn probe_config(tile: i32, nqpkv: i32) -> Result<UnifiedAttentionConfig, VariantCheckError> {
    let block_m = block_m_for(nqpkv);
    choose_config(
        &AttentionProblem {
            max_seqlen_q: 2,
            ..AttentionProblem::dense_causal(nqpkv, 1, 64)
        },
        PathChoice::Force2d,
    )
    .map(|c| UnifiedAttentionConfig {
        tile_size: tile,
        block_m,
        block_q: block_m / nqpkv,
        ..c
    })
    .map_err(|e| VariantCheckError::Config(e.to_string()))
}

/// Tiles visited and tiles holding an allowed key over every q-block of one sequence whose
/// queries are all its keys (prefill): the pruning figure of a variant under `cfg`.
pub fn sequence_tile_visits(
    variant: &Variant,
    cfg: &UnifiedAttentionConfig,
    case: &VariantCase,
    seq_len: i32,
) -> Result<BoundsReport, VariantCheckError> {
    let module = variant.module()?;
    let g = CaseGeometry {
        seq_len,
        query_len: seq_len,
    };
    let mut report = BoundsReport::default();
    let blocks = (seq_len + cfg.block_q - 1) / cfg.block_q;
    for b in 0..blocks {
        let r = probe(&module, cfg, variant, case, g, b, seq_len as usize)?;
        tally(&mut report, cfg, case, g, b, &r);
        report.cases += 1;
    }
    Ok(report)
}
