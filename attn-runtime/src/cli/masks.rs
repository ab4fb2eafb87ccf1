//! `attn masks`: draws the mask of a unified-attention configuration and the tiles its
//! bounds visit, so a user sees what gets pruned. Both come from the DSL itself: every
//! q-block's `BOUNDS` and `MASK` device functions run on the CPU executor through the bounds
//! probe kernel — the same code the GPU runs.
//!
//! Output: an ASCII picture in the terminal (`#` a cell with allowed keys, `.` visited but
//! fully masked — the pruning slack, blank = pruned) and an SVG at block × tile resolution.

use crate::kernels::bounds_probe::{probe_block, ProbeBlock};
use crate::kernels::unified_attention::module;
use crate::ops::unified_attention::config::{
    AlibiMode, AttentionProblem, CausalMode, MmRangeEncoding, MmaKind, UnifiedAttentionConfig,
};
use crate::ops::unified_attention::mask::{allowed, SequenceMask};
use crate::ops::unified_attention::plan::{choose_config, MaskVariant, PathChoice};
use std::fmt::Write as _;

/// One configuration to draw (a single sequence, context 0 unless given).
#[derive(Clone, Debug, clap::Args)]
pub struct MasksArgs {
    /// Sequence length L (keys), any positive length (16384 draws in a few seconds).
    #[arg(long, default_value_t = 4096)]
    pub seq_len: i32,
    /// Scheduled query tokens (the last `query_len` positions of the sequence).
    #[arg(long)]
    pub query_len: Option<i32>,
    /// Sliding window SW (0 = off).
    #[arg(long, default_value_t = 1024)]
    pub window: i32,
    /// Query heads / KV heads.
    #[arg(long, default_value_t = 16)]
    pub q_heads: i32,
    #[arg(long, default_value_t = 8)]
    pub kv_heads: i32,
    #[arg(long, default_value_t = 256)]
    pub head_size: i32,
    /// Inclusive multimodal range `START-END` (repeatable).
    #[arg(long = "range", value_parser = parse_range)]
    pub ranges: Vec<[i32; 2]>,
    /// Turn the Gemma4 window clamp of MM ranges off (no pruning under MM).
    #[arg(long)]
    pub no_clamp: bool,
    /// Bidirectional (non-causal) attention.
    #[arg(long)]
    pub bidirectional: bool,
    /// Chunked local attention lookback (chunk = SW / (LB + 1)).
    #[arg(long, default_value_t = -1)]
    pub chunk_lookback: i32,
    /// Width of the ASCII picture in characters.
    #[arg(long, default_value_t = 96)]
    pub cols: usize,
    /// Where to write the SVG.
    #[arg(long, default_value = "device-out/masks.svg")]
    pub svg: std::path::PathBuf,
}

fn parse_range(s: &str) -> Result<[i32; 2], String> {
    let (a, b) = s
        .split_once('-')
        .ok_or_else(|| format!("`{s}`: expected START-END"))?;
    let p = |x: &str| x.trim().parse::<i32>().map_err(|e| format!("`{s}`: {e}"));
    Ok([p(a)?, p(b)?])
}

/// One q-block: the tile ranges `[lo, hi)` it visits and which tiles hold an allowed key.
pub type BlockTiles = (Vec<(i32, i32)>, Vec<bool>);

/// Per q-block: the tile ranges visited and which tiles hold an allowed key.
pub struct MaskPicture {
    pub cfg: UnifiedAttentionConfig,
    pub seq_len: i32,
    pub context_len: i32,
    /// Rows: q-blocks; each `(visited tile ranges [lo, hi), tiles with an allowed key)`.
    pub blocks: Vec<BlockTiles>,
    /// Allowed (q, k) pairs at cell resolution for the ASCII picture: `[rows][cols]`.
    pub cells: Vec<Vec<bool>>,
}

impl MaskPicture {
    pub fn num_tiles(&self) -> usize {
        (self.seq_len as usize).div_ceil(self.cfg.tile_size as usize)
    }
    /// (visited tiles, tiles holding an allowed key, all tiles up to L).
    pub fn counts(&self) -> (usize, usize, usize) {
        let visited = self
            .blocks
            .iter()
            .flat_map(|(ranges, _)| ranges)
            .map(|(lo, hi)| (hi - lo).max(0) as usize)
            .sum();
        let needed = self
            .blocks
            .iter()
            .map(|(_, t)| t.iter().filter(|&&x| x).count())
            .sum();
        (visited, needed, self.blocks.len() * self.num_tiles())
    }
}

/// Whether block `ranges` visit tile `t`.
fn visits(ranges: &[(i32, i32)], t: i32) -> bool {
    ranges.iter().any(|(lo, hi)| (*lo..*hi).contains(&t))
}

fn config(a: &MasksArgs, query_len: i32) -> Result<UnifiedAttentionConfig, String> {
    let problem = AttentionProblem {
        num_query_heads: a.q_heads,
        num_kv_heads: a.kv_heads,
        head_size: a.head_size,
        block_size: 16,
        kv_elem_bytes: 2,
        sliding_window: a.window,
        causal: if a.bidirectional {
            CausalMode::NonCausal
        } else {
            CausalMode::Causal
        },
        chunk_lookback: a.chunk_lookback,
        mm: if a.ranges.is_empty() {
            MmRangeEncoding::None
        } else {
            MmRangeEncoding::PerSequence {
                max_ranges: a.ranges.len() as i32,
            }
        },
        mm_prefix_clamp_sw: !a.ranges.is_empty() && !a.no_clamp,
        r_swa_window: None,
        softcap: 0.0,
        use_sinks: false,
        alibi: AlibiMode::None,
        use_qq_bias: false,
        max_seqlen_q: query_len,
        num_seqs: 1,
        split_kv: None,
        batch_invariant: false,
        mma: MmaKind::Sync,
    };
    if !a.ranges.is_empty() && !a.no_clamp && a.window <= 0 {
        return Err(format!(
            "--range with --window {}: the Gemma4 clamp of MM ranges to the window needs a window; \
             pass --no-clamp (ranges OR-ed in unclamped) or --window W with W > 0",
            a.window
        ));
    }
    // The op's own choice (prefill programs take 64 rows), so the picture is what it runs.
    let cfg = choose_config(&problem, PathChoice::Heuristic).map_err(|e| e.to_string())?;
    cfg.validate().map_err(|e| e.to_string())?;
    Ok(cfg)
}

/// Probes every q-block's DSL bounds on the CPU executor; the allowed keys come from the
/// host mask predicate (property-tested equal to the DSL mask), on all cores, so any L
/// draws in seconds (the probe's own key axis would need a power of two and L² work).
pub fn picture(a: &MasksArgs) -> Result<MaskPicture, String> {
    let query_len = a.query_len.unwrap_or(a.seq_len).clamp(1, a.seq_len.max(1));
    let cfg = config(a, query_len)?;
    let module = module().map_err(|e| e.to_string())?;
    let context_len = a.seq_len - query_len;
    let num_blocks = (query_len as usize).div_ceil(cfg.block_q.max(1) as usize);
    let mut ranges = Vec::with_capacity(num_blocks);
    for b in 0..num_blocks {
        let block = ProbeBlock {
            context_len,
            seq_len: a.seq_len,
            query_len,
            q_block: b as i32,
            causal: !a.bidirectional,
            rswa_prefix_len: 0,
            mm_ranges: &a.ranges,
            query_ranges: &[],
            mask_aux: &[],
            mask_aux_f32: &[],
        };
        let r = probe_block(&module, &cfg, &MaskVariant::default(), &block, 16)
            .map_err(|e| e.to_string())?;
        let tile = i64::from(cfg.tile_size);
        let visited: Vec<(i32, i32)> = r
            .visited_keys(cfg.tile_size, a.seq_len)
            .into_iter()
            .map(|(s, e)| ((s / tile) as i32, ((e + tile - 1) / tile) as i32))
            .collect();
        ranges.push(visited);
    }
    let rows = allowed_rows(a, &cfg, query_len);
    let needed = needed_tiles(&cfg, &rows, num_blocks);
    Ok(MaskPicture {
        cells: cells(a, &rows, query_len),
        cfg,
        seq_len: a.seq_len,
        context_len,
        blocks: ranges.into_iter().zip(needed).collect(),
    })
}

/// Per query token `t`: its allowed keys as sorted half-open intervals (runs).
fn allowed_rows(
    a: &MasksArgs,
    cfg: &UnifiedAttentionConfig,
    query_len: i32,
) -> Vec<Vec<(i64, i64)>> {
    let mcfg = cfg.mask_config();
    let context = i64::from(a.seq_len - query_len);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let n = query_len.max(0) as usize;
    let chunk = n.div_ceil(threads).max(1);
    let mut out = vec![vec![]; n];
    std::thread::scope(|s| {
        for (i, part) in out.chunks_mut(chunk).enumerate() {
            let mcfg = &mcfg;
            s.spawn(move || {
                let seq = SequenceMask {
                    seq_len: i64::from(a.seq_len),
                    causal: !a.bidirectional,
                    rswa_prefix_len: 0,
                    mm_ranges: if a.ranges.is_empty() { &[] } else { &a.ranges },
                };
                for (j, runs) in part.iter_mut().enumerate() {
                    let q = context + (i * chunk + j) as i64;
                    *runs = runs_of(|k| allowed(mcfg, &seq, q, k), i64::from(a.seq_len));
                }
            });
        }
    });
    out
}

/// The runs of `k` in `[0, n)` where `f(k)`.
fn runs_of(f: impl Fn(i64) -> bool, n: i64) -> Vec<(i64, i64)> {
    let mut runs = vec![];
    let mut start: Option<i64> = None;
    for k in 0..n {
        match (f(k), start) {
            (true, None) => start = Some(k),
            (false, Some(s)) => {
                runs.push((s, k));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        runs.push((s, n));
    }
    runs
}

/// Per q-block, the tiles holding a key some query of the block may see.
fn needed_tiles(
    cfg: &UnifiedAttentionConfig,
    rows: &[Vec<(i64, i64)>],
    num_blocks: usize,
) -> Vec<Vec<bool>> {
    let tile = i64::from(cfg.tile_size.max(1));
    let max_key = rows.iter().flatten().map(|r| r.1).max().unwrap_or(0);
    let num_tiles = (max_key + tile - 1) / tile;
    let bq = cfg.block_q.max(1) as usize;
    (0..num_blocks)
        .map(|b| {
            let mut needed = vec![false; num_tiles as usize];
            for runs in rows.iter().skip(b * bq).take(bq) {
                for &(s, e) in runs {
                    for t in s / tile..(e + tile - 1) / tile {
                        needed[t as usize] = true;
                    }
                }
            }
            needed
        })
        .collect()
}

/// The ASCII picture's cells: a cell is set when any of its (q, k) pairs is allowed.
fn cells(a: &MasksArgs, rows: &[Vec<(i64, i64)>], query_len: i32) -> Vec<Vec<bool>> {
    let keys = a.seq_len.max(1) as usize;
    let cols = a.cols.max(1);
    let k_per_col = keys.div_ceil(cols) as i64;
    let rows_ascii = (query_len as usize).div_ceil(k_per_col as usize).max(1);
    let q_per_row = (query_len as usize).div_ceil(rows_ascii).max(1);
    let mut cells = vec![vec![false; cols]; rows_ascii];
    for (t, runs) in rows.iter().enumerate() {
        let row = &mut cells[(t / q_per_row).min(rows_ascii - 1)];
        for &(s, e) in runs {
            for c in s / k_per_col..=((e - 1) / k_per_col) {
                row[(c as usize).min(cols - 1)] = true;
            }
        }
    }
    cells
}

/// The terminal picture plus a summary line.
pub fn ascii(p: &MaskPicture, cols: usize) -> String {
    let keys = p.seq_len as usize;
    let tile = p.cfg.tile_size as usize;
    let k_per_col = keys.div_ceil(cols.max(1));
    let blocks_per_row = p.blocks.len().div_ceil(p.cells.len().max(1)).max(1);
    let mut s = String::new();
    for (r, row) in p.cells.iter().enumerate() {
        let bl = &p.blocks[(r * blocks_per_row).min(p.blocks.len() - 1)
            ..((r + 1) * blocks_per_row).min(p.blocks.len())];
        let line: String = row
            .iter()
            .enumerate()
            .map(|(c, &allowed)| {
                let tile_of = (c * k_per_col / tile) as i32;
                let visited = bl.iter().any(|(r, _)| visits(r, tile_of));
                match (allowed, visited) {
                    (true, _) => '#',
                    (false, true) => '.',
                    (false, false) => ' ',
                }
            })
            .collect();
        let _ = writeln!(s, "|{line}|");
    }
    let (visited, needed, all) = p.counts();
    let _ = writeln!(
        s,
        "tiles visited {visited} of {all} ({:.1}%), holding an allowed key {needed}; slack {} tiles; \
         TILE {tile}, BLOCK_M {}, BLOCK_Q {}",
        100.0 * visited as f64 / all.max(1) as f64,
        visited.saturating_sub(needed),
        p.cfg.block_m,
        p.cfg.block_q
    );
    s
}

/// An SVG at q-block × tile resolution: blue = visited with allowed keys, orange = visited
/// but fully masked (slack), light grey = pruned.
pub fn svg(p: &MaskPicture) -> String {
    let (w, h) = (p.num_tiles(), p.blocks.len());
    let scale = (1200.0 / w.max(h) as f64).max(1.0);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0}\" height=\"{:.0}\" shape-rendering=\"crispEdges\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"#eeeeee\"/>\n",
        w as f64 * scale,
        h as f64 * scale
    );
    for (b, (ranges, needed)) in p.blocks.iter().enumerate() {
        // Runs of equal colour per row keep the file small.
        let colour = |t: usize| match (
            visits(ranges, t as i32),
            needed.get(t).copied().unwrap_or(false),
        ) {
            (true, true) => Some("#1f5fbf"),
            (true, false) => Some("#f08c00"),
            (false, true) => Some("#d00000"), // an allowed key in a pruned tile: a bounds bug
            (false, false) => None,
        };
        let mut t = 0;
        while t < w {
            let c = colour(t);
            let start = t;
            while t < w && colour(t) == c {
                t += 1;
            }
            if let Some(fill) = c {
                let _ = writeln!(
                    s,
                    "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{fill}\"/>",
                    start as f64 * scale,
                    b as f64 * scale,
                    (t - start) as f64 * scale,
                    scale
                );
            }
        }
    }
    s.push_str("</svg>\n");
    s
}
