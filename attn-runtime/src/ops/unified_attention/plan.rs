//! The launch plan of one unified-attention call: which specializations, on which grids,
//! with which arguments (spec `unified_attention.md` §1.2, §5, §6).
//!
//! The plan is backend-agnostic: arguments are named by role ([`KernelArg`]), and the CPU
//! executor and the GPU runtime each turn roles into their own buffers. That keeps the
//! parameter order, the constexpr bindings and the grid in ONE place, so both backends
//! launch exactly the same specialization the same way.

#![deny(clippy::indexing_slicing, clippy::arithmetic_side_effects)]

use attn_dsl::ir::ScalarType;
use attn_dsl::kernel::ScalarArg;
use attn_dsl::{Binding, ConstValue};
use thiserror::Error;

use super::config::{
    choose_3d, get_tile_size, AttentionProblem, ConfigError, LaunchValues, MmaKind,
    UnifiedAttentionConfig,
};
use super::variant::VariantModule;
use crate::kernels::unified_attention::{
    ATTENTION_KERNEL, DEFAULT_BOUNDS, DEFAULT_FULL_TILE, DEFAULT_MASK, NO_FULL_TILE, REDUCE_KERNEL,
};

/// 2D or 3D: the §6 heuristic, or a forced path (tests, benchmarks, batch invariance).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathChoice {
    /// §6: 3D iff a split-KV workspace is configured, the batch is pure decode and small.
    Heuristic,
    /// 2D, whatever the batch.
    Force2d,
    /// Split-KV with this many segments (a power of two); decode batches only.
    Force3d {
        /// `NUM_SEGMENTS_PER_SEQ`.
        num_segments: i32,
    },
    /// 2D with an explicit tiling (rows per program, keys per tile): what the launch-table
    /// sweeps of the benchmarks measure. The kernel's `require` rules still judge it.
    Force2dTiled {
        /// `BLOCK_M`: query rows per program.
        block_m: i32,
        /// `TILE_SIZE`: keys per tile.
        tile_size: i32,
        /// `SLABS_PER_WARP`: 16-row slabs each warp computes (`num_warps = BLOCK_M / (16 · SLABS_PER_WARP)`).
        slabs_per_warp: i32,
        /// `NUM_STAGES`: buffers of each K/V copy ring.
        num_stages: i32,
    },
    /// Split-KV with an explicit split count and keys per tile (decode sweeps).
    Force3dTiled {
        /// `NUM_SEGMENTS_PER_SEQ`.
        num_segments: i32,
        /// `TILE_SIZE`: keys per tile.
        tile_size: i32,
    },
}

/// The device functions bound to the kernel's `MASK`, `BOUNDS` and `FULL_TILE` constexprs,
/// and what a variant binds beyond them.
#[derive(Clone, Debug, PartialEq)]
pub struct MaskVariant {
    /// The device function bound to `MASK`.
    pub mask: String,
    /// The device function bound to `BOUNDS`.
    pub bounds: String,
    /// The predicate of tiles the mask allows entirely (no mask, no V guard there).
    pub full_tile: String,
    /// Tile ranges the bounds function returns per q-block (`TILE_RANGES`); `None`: the
    /// built-in mode's count ([`UnifiedAttentionConfig::tile_ranges`]).
    pub tile_ranges: Option<i32>,
    /// The variant's own constexprs (declared by its device functions), bound after the
    /// kernel's.
    pub constexprs: Vec<(String, ConstValue)>,
}

impl Default for MaskVariant {
    /// vLLM's semantics: the spec §3.6 mask, §4 bounds and the mask's full tiles.
    fn default() -> Self {
        MaskVariant {
            mask: DEFAULT_MASK.to_string(),
            bounds: DEFAULT_BOUNDS.to_string(),
            full_tile: DEFAULT_FULL_TILE.to_string(),
            tile_ranges: None,
            constexprs: vec![],
        }
    }
}

impl MaskVariant {
    /// A user variant's mask and bounds; every tile is masked (it declares no full tiles).
    pub fn custom(mask: impl Into<String>, bounds: impl Into<String>) -> Self {
        MaskVariant {
            mask: mask.into(),
            bounds: bounds.into(),
            full_tile: NO_FULL_TILE.to_string(),
            tile_ranges: None,
            constexprs: vec![],
        }
    }
}

impl MaskVariant {
    /// `TILE_RANGES` under `cfg`.
    pub fn tile_ranges(&self, cfg: &UnifiedAttentionConfig) -> i32 {
        self.tile_ranges.unwrap_or(cfg.tile_ranges)
    }
}

/// The run-time facts the plan needs beyond the constexpr configuration: sizes, element
/// strides of the big tensors, and the scalar arguments.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LaunchShape {
    /// T: total scheduled query tokens.
    pub num_tokens: usize,
    /// S.
    pub num_seqs: usize,
    /// `max_seqlen_q` (3D needs ≤ 1).
    pub max_seqlen_q: usize,
    /// q strides `[token, head]` in elements (D is contiguous).
    pub q_strides: [usize; 2],
    /// out strides `[token, head]` in elements.
    pub out_strides: [usize; 2],
    /// K/V cache strides `[block, slot, head]` in elements (shared by K and V).
    pub kv_strides: [usize; 3],
    /// Row stride of the block table, in entries.
    pub block_table_stride: usize,
    /// Columns of the `qq_bias` matrix (0 when absent).
    pub qq_bias_stride0: usize,
    /// Row stride of the variant's `i32` aux tensor; `None` when the variant has none.
    pub mask_aux_stride: Option<usize>,
    /// Row stride of the variant's `f32` aux tensor; `None` when the variant has none.
    pub mask_aux_f32_stride: Option<usize>,
    /// Multiplier of `q · k` before the softmax.
    pub softmax_scale: f32,
    /// The softcap value (ignored unless `USE_SOFTCAP`).
    pub softcap: f32,
    /// `len(sinks)` when sinks are given (rule 5).
    pub num_sinks: usize,
}

/// A buffer the op owns or receives, by its role in the op.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum BufferRole {
    /// q `[T, Hq, D]`.
    Query,
    /// The paged K cache.
    KeyCache,
    /// The paged V cache.
    ValueCache,
    /// out `[T, Hq, D]`.
    Output,
    /// 3D workspace `[T, Hq, NSEG, Dp]` f32.
    SegmentOutput,
    /// 3D workspace `[T, Hq, NSEG]` f32.
    SegmentMax,
    /// 3D workspace `[T, Hq, NSEG]` f32.
    SegmentExpSum,
    /// `i32 [S + 1]` query starts.
    CuSeqlensQ,
    /// `i32 [S]` KV lengths.
    SeqLens,
    /// `i32 [S, max_blocks]` block table.
    BlockTable,
    /// `i32 [S]`, nonzero = causal.
    PerSeqCausal,
    /// `i32 [S, R, 2]`.
    MmPrefixRange,
    /// `i32 [T, 2]`.
    MmPrefixQueryRange,
    /// `i32 [S]` R-SWA prefix lengths.
    RswaPrefixLens,
    /// `f32 [Hq]` sink logits.
    Sinks,
    /// `f32 [Hq]` ALiBi slopes.
    AlibiSlopes,
    /// `f32 [Qmax, Qmax]` query×query bias.
    QqBias,
    /// The variant's `i32` data (see the kernel's MASK / BOUNDS convention).
    MaskAux,
    /// The variant's `f32` data.
    MaskAuxF32,
}

/// One kernel argument, as a role the backend resolves.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KernelArg {
    /// A buffer, by role.
    Buffer(BufferRole),
    /// An optional input that is off: a 1-element buffer of this dtype, never read.
    Dummy(ScalarType),
    /// A scalar argument.
    Scalar(ScalarArg),
}

/// One launch: a specialization (kernel + bindings), its grid and its arguments in
/// parameter order (each with the parameter's name, so a backend can check the order).
#[derive(Clone, Debug)]
pub struct KernelLaunch {
    /// Name of the DSL kernel.
    pub kernel: &'static str,
    /// Its constexpr bindings (the specialization).
    pub bindings: Vec<Binding>,
    /// `[x, y, z]`; a grid with a zero extent means "nothing to do" (T = 0).
    pub grid: [u32; 3],
    /// Arguments in parameter order, each with the parameter's name.
    pub args: Vec<(&'static str, KernelArg)>,
    /// The tensor-core instructions the kernel is generated for (part of its key).
    pub mma: MmaKind,
}

/// The 3D split-KV workspace the attention launch writes and the reduce reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentWorkspace {
    /// Tokens T.
    pub num_tokens: usize,
    /// Query heads Hq.
    pub num_query_heads: usize,
    /// Segments NSEG.
    pub num_segments: usize,
    /// Head size padded to a power of two (Dp).
    pub head_size_padded: usize,
}

impl SegmentWorkspace {
    /// Elements of `segm_output` (saturating; [`plan_launch`] bounds it by `i32::MAX`).
    pub fn output_len(&self) -> usize {
        self.stats_len().saturating_mul(self.head_size_padded)
    }

    /// Elements of `segm_max` and of `segm_expsum`.
    pub fn stats_len(&self) -> usize {
        self.num_tokens
            .saturating_mul(self.num_query_heads)
            .saturating_mul(self.num_segments)
    }
}

/// Everything to run one call: the attention launch, and in 3D the reduce launch.
#[derive(Clone, Debug)]
pub struct LaunchPlan {
    /// The constexpr configuration.
    pub config: UnifiedAttentionConfig,
    /// Element type of q, out and the cache.
    pub dtype: ScalarType,
    /// The attention launch.
    pub attention: KernelLaunch,
    /// The 3D segment reduce launch; `None` in 2D.
    pub reduce: Option<KernelLaunch>,
    /// The 3D workspace; `None` in 2D.
    pub workspace: Option<SegmentWorkspace>,
    /// The user variant's module the attention launch specializes against (`None`: the
    /// shipped module). Set by the backend that knows the variant.
    pub variant: Option<VariantModule>,
}

impl LaunchPlan {
    /// `2D` or `3D`, for reports.
    pub fn path_name(&self) -> &'static str {
        if self.config.is_3d {
            "3D"
        } else {
            "2D"
        }
    }
}

/// Why no plan could be made.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum PlanError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The element type is not supported.
    #[error("dtype {got} is not supported; allowed: bf16, f16, f32")]
    Dtype {
        /// The element type given.
        got: ScalarType,
    },
    /// The cache's element size does not match the dtype.
    #[error("kv_elem_bytes = {got} does not match the {dtype} element size {expected}")]
    ElemBytes {
        /// The `kv_elem_bytes` given.
        got: i32,
        /// The element type.
        dtype: ScalarType,
        /// Its size in bytes.
        expected: usize,
    },
    /// A grid axis needs more programs than CUDA allows.
    #[error("grid axis {axis} would need {value} programs; at most {max} are allowed")]
    GridTooLarge {
        /// Grid axis (0 = x, 1 = y, 2 = z).
        axis: usize,
        /// Programs it would need.
        value: usize,
        /// The most CUDA allows on that axis.
        max: u32,
    },
    /// A size does not fit the kernel's scalar parameter type.
    #[error("{what} = {value} does not fit in the kernel's {ty} parameter")]
    ScalarOverflow {
        /// Name of the size.
        what: &'static str,
        /// Its value.
        value: usize,
        /// The parameter's type.
        ty: &'static str,
    },
}

/// §6 configuration with the path override applied, validated (§2.1, run-time rules too).
pub fn choose_config(
    problem: &AttentionProblem,
    path: PathChoice,
) -> Result<UnifiedAttentionConfig, ConfigError> {
    let mut cfg = UnifiedAttentionConfig::from_problem(problem)?;
    let heuristic_3d = choose_3d(
        problem.split_kv,
        problem.max_seqlen_q,
        problem.num_seqs,
        problem.batch_invariant,
    );
    let (is_3d, num_segments) = match path {
        PathChoice::Heuristic if heuristic_3d => (
            true,
            decode_segments(cfg.num_segments, problem.num_seqs, problem.num_kv_heads),
        ),
        PathChoice::Heuristic => (false, cfg.num_segments),
        PathChoice::Force2d => (false, 1),
        PathChoice::Force3d { num_segments } | PathChoice::Force3dTiled { num_segments, .. } => {
            (true, num_segments)
        }
        PathChoice::Force2dTiled { .. } => (false, 1),
    };
    cfg.is_3d = is_3d;
    cfg.num_segments = num_segments;
    tune_prefill_block_m(&mut cfg, problem);
    cfg.tile_size = get_tile_size(
        problem.head_size,
        problem.sliding_window,
        problem.kv_elem_bytes,
        !is_3d,
    );
    // A forced tiling replaces the launch table's (every field of it).
    let tiling = match path {
        PathChoice::Force2dTiled {
            block_m,
            tile_size,
            slabs_per_warp,
            ..
        } => Some((block_m, tile_size, slabs_per_warp)),
        _ => prefill_tiling(&cfg, problem),
    };
    if matches!(path, PathChoice::Heuristic | PathChoice::Force2d) {
        cfg.tile_size = decode_tile_size(&cfg, problem).unwrap_or(cfg.tile_size);
    }
    if let Some((block_m, tile_size, slabs_per_warp)) = tiling {
        cfg.block_m = block_m;
        cfg.block_q = block_m
            .checked_div(cfg.num_queries_per_kv.max(1))
            .unwrap_or(0);
        cfg.tile_size = tile_size;
        cfg.slabs_per_warp = slabs_per_warp;
    }
    if let PathChoice::Force3dTiled { tile_size, .. } = path {
        cfg.tile_size = tile_size;
    }
    cfg.num_stages = match path {
        PathChoice::Force2dTiled { num_stages, .. } => num_stages,
        _ if tiling == Some(WARPGROUP_TILING_D128) => WARPGROUP_TILING_D128_STAGES,
        _ => NUM_STAGES,
    };
    cfg.validate_launch(&LaunchValues {
        max_seqlen_q: problem.max_seqlen_q,
        softcap: problem.softcap,
        num_sinks: if problem.use_sinks {
            problem.num_query_heads.max(0) as usize
        } else {
            0
        },
    })?;
    Ok(cfg)
}

/// Rows per program for prefill on this code generator (our tuning, not vLLM's §6 value):
/// the tensor-core path keeps the accumulator in `mma` fragments only when every warp of the
/// kernel's 4 owns a whole 16-row slab, so prefill programs take 64 rows (BLOCK_Q = 64 /
/// nqpkv tokens) instead of 16. Decode (one token per sequence) keeps vLLM's 16, and head
/// sizes above 256 keep it too (a 64 × 512 f32 accumulator would not fit in registers).
pub const PREFILL_BLOCK_M: i32 = 64;

/// Programs a split-KV decode launch aims for (one warp each). Measured on the H200
/// (2026-12-01T14:31Z, D1: 64 sequences x Hkv 8 x 4k context, tile 16, after the copy and
/// exp code-generation changes): 2048 programs (4 segments) 0.292 ms, 4096 (8) 0.298 ms;
/// earlier, with twice the instructions per tile, 4096 had won (0.333 against 0.358 ms).
pub const DECODE_PROGRAMS: i32 = 2048;

/// The launch table's K/V ring depth, every tiling but [`WARPGROUP_TILING_D128`]'s
/// ([`WARPGROUP_TILING_D128_STAGES`]): one tile in flight while one is computed.
/// Deeper rings cost resident programs more than they add bytes in flight. Measured on the
/// H200 (2026-12-01T14:56Z): D1 2D 0.286 ms with 2 stages, 0.304 with 3, 0.459 with 4 (39, 56
/// and 73 KB of shared memory: 5, 4 and 3 one-warp programs per SM); P0 5.06 ms with 2, 5.42
/// with 3.
pub const NUM_STAGES: i32 = 2;

/// Decode batches whose 2D grid (sequences x KV heads, one warp each) has at least this many
/// programs stay on the 2D path: D1's 512 ran 0.289 ms in the same run, no slower than any
/// split (and without the reduce launch).
pub const DECODE_2D_PROGRAMS: i32 = 512;

/// Segments per sequence of a heuristic split-KV launch: the power of two that brings the
/// grid (sequences x KV heads x segments) closest to [`DECODE_PROGRAMS`] from below, at most
/// the workspace's `max_segments` and at least 1.
pub fn decode_segments(max_segments: i32, num_seqs: i32, num_kv_heads: i32) -> i32 {
    let per_segment = num_seqs.max(1).saturating_mul(num_kv_heads.max(1));
    let want = DECODE_PROGRAMS.checked_div(per_segment).unwrap_or(1).max(1);
    // The highest set bit of `want` (>= 1): the power of two at or below it.
    let pow2 = 1i32.checked_shl(want.ilog2()).unwrap_or(1);
    pow2.min(max_segments.max(1))
}

fn tune_prefill_block_m(cfg: &mut UnifiedAttentionConfig, problem: &AttentionProblem) {
    let nqpkv = cfg.num_queries_per_kv.max(1);
    if !cfg.is_3d
        && problem.max_seqlen_q > 1
        && cfg.head_size_padded <= 256
        && cfg.block_m < PREFILL_BLOCK_M
    {
        cfg.block_m = PREFILL_BLOCK_M;
        cfg.block_q = PREFILL_BLOCK_M
            .checked_div(nqpkv)
            .unwrap_or(PREFILL_BLOCK_M);
    }
}

/// The launch table's prefill tiling where it departs from the heuristic: head sizes up to 128
/// run 128-row programs on 4 warps (two 16-row slabs per warp, so each B fragment read from
/// shared memory feeds two mma rows) over 32-key tiles. Measured on the H200 (2026-12-01, the
/// `P0-m*t*` rows of the `unified_attention` bench): P0 6.38 ms against 6.60 (128×64, 1 slab),
/// 6.98 (64×32) and 10.3 (64×64, 2 slabs). 128×64 with 2 slabs ran 6.12 ms but spills 120 bytes
/// per thread, and shipped specializations must not spill. D = 256 keeps 64×32 with one slab
/// (P1 0.949 ms against 0.967 at 128×32 and 1.08 at 64×16; re-measured on the current code
/// generator, 2026-12-01T15:23Z: 0.783 ms against 0.865 at 128×32, 0.924 at 64×16 and 1.08 at
/// 64×64, and P0 5.06 ms against 5.13 at 128×64 and 6.19 at 64×32).
fn prefill_tiling(
    cfg: &UnifiedAttentionConfig,
    problem: &AttentionProblem,
) -> Option<(i32, i32, i32)> {
    if cfg.block_m != PREFILL_BLOCK_M || cfg.is_3d {
        return None;
    }
    let nqpkv = cfg.num_queries_per_kv.max(1);
    let wide = PREFILL_BLOCK_M.saturating_mul(2);
    let tokens = wide.checked_div(nqpkv)?;
    if wide.checked_rem(nqpkv) != Some(0) || tokens > problem.max_seqlen_q {
        return None;
    }
    match (problem.mma, cfg.head_size_padded) {
        // Padded head size 64 or 128 with lean scores: 128 rows on two warpgroups over
        // 128-key tiles (see [`WARPGROUP_TILING_D128`]); heavier scores at 128 over 64 keys,
        // smaller heads and heavier scores at 64 the heuristic's.
        (MmaKind::Warpgroup, 64 | 128) if lean_scores(cfg) => Some(WARPGROUP_TILING_D128),
        (MmaKind::Warpgroup, 128) => Some(WARPGROUP_TILING_D128_HEAVY),
        (MmaKind::Warpgroup, d) if d <= 128 => None,
        (MmaKind::Warpgroup, d) if d <= 256 && lean_scores(cfg) => Some(WARPGROUP_TILING_D256),
        (MmaKind::Sync, d) if d <= 128 => Some((wide, 32, 2)),
        _ => None,
    }
}

/// Whether the scores' extra per-element terms leave the two-warpgroup tilings their
/// registers and its producer warpgroup: the window and causal mask, Gemma-2's softcap, and
/// image ranges whose keys the window bounds (clamped, or no window) or that keep one tile
/// span (unclamped, listed per sequence), whose V guard is then a bound on the key
/// ([`first_key_v_guard`]) and whose program splits. Measured on the H200 (2026-12-02): P3
/// at 128 × 64 0.420 ms split against 0.487 at 64 × 32 (unsplit, with the guard's range
/// loop in the V copy, it had run 0.567 against 0.548); P1 with softcap 50 0.620 against
/// 0.654 (with `tanhf`); P3 without the clamp 0.338 ms split against 0.492 at 64 × 32 on two
/// tile spans (2026-12-03). Per-query unclamped ranges keep the mask's guard and the
/// heuristic's 64 rows, and so do ALiBi and the query bias (they compile split and
/// spill-free at 128 × 64 but were not timed there).
fn lean_scores(cfg: &UnifiedAttentionConfig) -> bool {
    let bounded = cfg.mm_ranges_windowed() || cfg.unclamped_ranges_in_one_span();
    bounded && !cfg.use_alibi_slopes && !cfg.use_qq_bias
}

/// The warpgroup-MMA prefill tiling of padded head sizes 64 and 128 with lean scores
/// (`lean_scores`): 128 rows on two warpgroups (8 warps, one slab each, taking turns) over
/// 128-key tiles. The two warpgroups share each K/V tile, and the split gives each consumer
/// 232 registers. Measured on the H200: P0 2.503 ms against 2.611 at 128 × 64 (one call,
/// 2026-12-02T20:3xZ, the `P0-m*` rows; 2.763 at 64 × 64 on one warpgroup, an earlier run);
/// P0's problem at D = 64 1.783 ms against 1.890 at 128 × 64, 2.021 at 64 × 64 and 2.490 at
/// the heuristic's 64 × 32 (one call, 21:1xZ, the `P0-d64*` rows). At D 128 the key tile is
/// as wide as the padded head, so the scores issue each k-step as two m64n64k16 (see the
/// code generator's `wgmma` module: whole, the pair of same-width dots gave wrong results).
pub const WARPGROUP_TILING_D128: (i32, i32, i32) = (PREFILL_BLOCK_M * 2, 128, 1);

/// The K/V ring depth of [`WARPGROUP_TILING_D128`]: the producer warpgroup keeps two
/// 128-key tiles in flight while the consumers compute one. With two stages it issues a
/// tile only once the consumers released the one before. Measured on the H200 in one call
/// (2026-12-03T04:02Z, `P0-m128t128s1`, `P0-d64*` and `scripts/kernel-experiment`): P0 2.377
/// ms against 2.384 with two stages, at D = 64 1.666 against 1.671 (1.670 with four); P0's
/// MMAs alone (the softmax edited out of the kernel) 1.765 ms against 1.990, near cuDNN's
/// whole attention (1.708). 224 KB of shared memory at padded head size 128, 112 KB at 64.
pub const WARPGROUP_TILING_D128_STAGES: i32 = 3;

/// Padded head size 128 whose scores carry ALiBi, the query bias or unclamped image ranges:
/// 128 rows over 64-key tiles (P0's tiling before 128-key tiles were correct, 2.612 ms;
/// the heavier scores were not timed at 128 keys, and their registers would grow with the
/// tile).
pub const WARPGROUP_TILING_D128_HEAVY: (i32, i32, i32) = (PREFILL_BLOCK_M * 2, 64, 1);

/// The warpgroup-MMA prefill tiling of head sizes up to 256: 128 rows on two warpgroups (8
/// warps, one slab each: the tensor cores read B from shared memory, so a second slab per
/// warp saves nothing) over 64-key tiles. Measured on the H200 (2026-12-01T20:15Z,
/// `scripts/ab-h200`, warpgroup MMAs): P1 486 µs at 128 × 64 against 534 at 64 × 32, 573 at
/// 128 × 32 and 731 at 64 × 64; P0 3.44 ms at 64 × 32 against 3.57 at 128 × 32, 3.98 at
/// 128 × 64, 4.01 at 128 × 128 (8 warps, one program per SM) and 3.85 at 128 × 32 with 2
/// slabs per warp (which spills 8 bytes).
pub const WARPGROUP_TILING_D256: (i32, i32, i32) = (128, 64, 1);

/// Keys per tile of the 2D decode path where the launch table departs from the heuristic's
/// 32: 64 for 2-byte K/V up to padded head size 128 outside the Gemma signature (the
/// `D1-2D-m16t64` sweep row: D1 0.252 ms, 4.26 TB/s, against 0.279 at 32 keys, in two runs
/// of the H200, 2026-12-02T13:04Z and 14:29Z; as the table's choice 0.252 against 0.280 in
/// the 16:00Z run, where a third stage took 0.418 and 4 split-KV segments 0.270). A one-warp
/// program then has twice the bytes in flight per stage (64 KB of shared memory for its two
/// stages, three programs an SM).
pub const DECODE_TILE_SIZE: i32 = 64;

fn decode_tile_size(cfg: &UnifiedAttentionConfig, problem: &AttentionProblem) -> Option<i32> {
    let gemma_signature = problem.sliding_window == 1024;
    (!cfg.is_3d
        && problem.max_seqlen_q == 1
        && problem.kv_elem_bytes == 2
        && cfg.head_size_padded <= 128
        && !gemma_signature)
        .then_some(DECODE_TILE_SIZE)
}

/// Builds the plan for a validated configuration.
pub fn plan_launch(
    cfg: &UnifiedAttentionConfig,
    shape: &LaunchShape,
    dtype: ScalarType,
    variant: &MaskVariant,
) -> Result<LaunchPlan, PlanError> {
    if !dtype.is_float() {
        return Err(PlanError::Dtype { got: dtype });
    }
    if cfg.kv_elem_bytes as usize != dtype.size_bytes() {
        return Err(PlanError::ElemBytes {
            got: cfg.kv_elem_bytes,
            dtype,
            expected: dtype.size_bytes(),
        });
    }
    cfg.validate_launch(&LaunchValues {
        max_seqlen_q: i32_of("max_seqlen_q", shape.max_seqlen_q)?,
        softcap: shape.softcap,
        num_sinks: shape.num_sinks,
    })?;
    let workspace = cfg.is_3d.then_some(SegmentWorkspace {
        num_tokens: shape.num_tokens,
        num_query_heads: cfg.num_query_heads.max(0) as usize,
        num_segments: cfg.num_segments.max(0) as usize,
        head_size_padded: cfg.head_size_padded.max(0) as usize,
    });
    if let Some(ws) = workspace {
        // The kernels index the workspace in i32: `(row · NSEG + seg) · Dp + d`.
        i32_of(
            "split-KV workspace elements (T x Hq x NSEG x Dp)",
            ws.output_len(),
        )?;
    }
    let reduce = if cfg.is_3d {
        Some(reduce_launch(cfg, shape, dtype)?)
    } else {
        None
    };
    Ok(LaunchPlan {
        config: *cfg,
        dtype,
        attention: attention_launch(cfg, shape, dtype, variant)?,
        reduce,
        workspace,
        variant: None,
    })
}

/// The attention kernel's constexprs, in declaration order.
pub fn attention_bindings(
    cfg: &UnifiedAttentionConfig,
    dtype: ScalarType,
    variant: &MaskVariant,
    softmax_scale: f32,
) -> Vec<Binding> {
    let int = |v: i32| ConstValue::Int(i64::from(v));
    let flag = ConstValue::Bool;
    [
        ("T", ConstValue::Dtype(dtype)),
        ("HEAD_SIZE", int(cfg.head_size)),
        ("HEAD_SIZE_PADDED", int(cfg.head_size_padded)),
        ("BLOCK_SIZE", int(cfg.block_size)),
        ("TILE_SIZE", int(cfg.tile_size)),
        ("BLOCK_M", int(cfg.block_m)),
        ("BLOCK_Q", int(cfg.block_q)),
        ("NUM_QUERIES_PER_KV", int(cfg.num_queries_per_kv)),
        ("SLIDING_WINDOW", int(cfg.sliding_window)),
        ("USE_CAUSAL", flag(cfg.use_causal)),
        ("USE_PER_SEQ_CAUSAL", flag(cfg.use_per_seq_causal)),
        ("CHUNK_LOOKBACK", int(cfg.chunk_lookback)),
        ("CHUNK_SIZE", int(cfg.chunk_size)),
        ("USE_MM_PREFIX", flag(cfg.use_mm_prefix)),
        ("USE_MM_QUERY_RANGE", flag(cfg.use_mm_query_range)),
        ("MM_PREFIX_CLAMP_SW", flag(cfg.mm_prefix_clamp_sw)),
        ("MAX_MM_RANGES", int(cfg.max_mm_ranges)),
        ("USE_R_SWA", flag(cfg.use_r_swa)),
        ("R_SWA_WINDOW", int(cfg.r_swa_window)),
        ("USE_SOFTCAP", flag(cfg.use_softcap)),
        ("USE_SINKS", flag(cfg.use_sinks)),
        ("USE_ALIBI_SLOPES", flag(cfg.use_alibi_slopes)),
        ("USE_ALIBI_SQRT", flag(cfg.use_alibi_sqrt)),
        ("USE_QQ_BIAS", flag(cfg.use_qq_bias)),
        ("IS_3D", flag(cfg.is_3d)),
        ("NUM_SEGMENTS", int(cfg.num_segments)),
        ("SLABS_PER_WARP", int(cfg.slabs_per_warp)),
        ("NUM_STAGES", int(cfg.num_stages)),
        ("MASK", ConstValue::Device(variant.mask.clone())),
        ("BOUNDS", ConstValue::Device(variant.bounds.clone())),
        ("FULL_TILE", ConstValue::Device(variant.full_tile.clone())),
        ("TILE_RANGES", int(variant.tile_ranges(cfg))),
        ("V_GUARD_FIRST_KEY", flag(first_key_v_guard(cfg, variant))),
        ("HEADS_FASTEST", flag(heads_fastest())),
        ("SCALE_AFTER_MAX", flag(scale_after_max(cfg, softmax_scale))),
        ("MASK_INTERVALS", flag(attn_dsl::features::mask_intervals())),
    ]
    .into_iter()
    // Bound only when on, so the kernels' keys without it stay as they were.
    .chain(attn_dsl::features::lazy_rescale().then(|| ("LAZY_RESCALE", flag(true))))
    .chain(short_last(cfg).then(|| ("SHORT_LAST", flag(true))))
    .chain(
        variant
            .constexprs
            .iter()
            .map(|(n, v)| (n.as_str(), v.clone())),
    )
    .map(|(n, v)| Binding::new(n, v))
    .collect()
}

/// Whether the attention grid is one axis of (q-block, KV head) pairs with the heads fastest
/// (`HEADS_FASTEST`; opt-in, `ATTN_CODEGEN_ENABLE=heads_fastest`). Programs run longest
/// first either way, but with q-blocks on x and heads on y that holds within a head only:
/// the grid's last wave holds one head's blocks from the longest to the shortest. Heads
/// fastest, it holds the first q-blocks of every head, the fewest keys, which is what fills
/// the tail of a launch that is not a whole number of waves (P1: 7.76 waves of equal
/// programs but for the first 16 q-blocks of each head).
/// Measured on the H200 (2026-12-03): P3 and D1 1 % faster, P0 5 % slower (probably its
/// neighbouring programs no longer sharing KV heads in L2), so it is not shipped.
pub fn heads_fastest() -> bool {
    attn_dsl::features::heads_fastest()
}

/// Whether the attention grid launches each KV head's short first q-blocks last
/// (`SHORT_LAST`; shipped in session 28, `ATTN_CODEGEN_DISABLE=short_last`): a sliding window
/// on the 2D grid, heads not fastest (that order already ends on every head's first
/// q-blocks). A prefill of one long sequence then ends its launch on its shortest programs,
/// while the long ones keep their head-by-head order (neighbouring programs sharing a head's
/// keys in L2): P1's model of the tail put the gain at ~2 %, and the H100 measured 2 % (P1)
/// and 3 % (P3) (docs/gpu_ir.md, "The grid's tail"). Any batch stays
/// correct: the order is a permutation of the programs.
pub fn short_last(cfg: &UnifiedAttentionConfig) -> bool {
    attn_dsl::features::short_last() && cfg.sliding_window > 0 && !cfg.is_3d && !heads_fastest()
}

/// Whether the kernel scales the scores in the exponent instead of before the row max
/// (`SCALE_AFTER_MAX`): `max(s·c) = c·max(s)` needs `c > 0` (the scale, or the softcap that
/// multiplies softcapped scores), and ALiBi and qq_bias act on scaled scores. It saves a
/// multiply a score (`exp(s·c − m)` is one FMA into `ex2`).
pub fn scale_after_max(cfg: &UnifiedAttentionConfig, softmax_scale: f32) -> bool {
    // Softcapped scores reach the exponent as `softcap · tanh(..)`, the softcap positive
    // (validated) whatever the scale's sign.
    (softmax_scale > 0.0 || cfg.use_softcap) && !(cfg.use_alibi_slopes || cfg.use_qq_bias)
}

/// Whether the kernel may guard V by the first key its block's rows attend
/// (`V_GUARD_FIRST_KEY`) instead of by the mask OR-ed over the block's rows. The guard keeps
/// NaN in evicted sliding-window pages out of `P · V` (0 · NaN = NaN) and must never zero a
/// key some row attends (spec §3.8). Where each row of vLLM's mask attends one interval
/// around its query ([`UnifiedAttentionConfig::rows_attend_intervals`]), the block's rows
/// attend every key from the first one on: the window of its first query, or the start of an
/// image range holding one of its queries (`block_first_key` in the kernel). Without a
/// window nothing is evicted, and every key below L is live. A user's mask may allow
/// anything, so it keeps the mask-derived guard.
///
/// The cheaper guard is what lets a masked tile's V copy run without the mask: P3's copy of V
/// re-evaluated the image-range loop per chunk, and a range loop kept its program from the
/// producer warpgroup (`attn_dsl::gpu_ir::warp_specialize`).
pub fn first_key_v_guard(cfg: &UnifiedAttentionConfig, variant: &MaskVariant) -> bool {
    variant.mask == DEFAULT_MASK && cfg.rows_attend_intervals()
}

/// The reduce kernel's constexprs, in declaration order.
pub fn reduce_bindings(cfg: &UnifiedAttentionConfig, dtype: ScalarType) -> Vec<Binding> {
    let int = |v: i32| ConstValue::Int(i64::from(v));
    [
        ("T", ConstValue::Dtype(dtype)),
        ("HEAD_SIZE", int(cfg.head_size)),
        ("HEAD_SIZE_PADDED", int(cfg.head_size_padded)),
        ("TILE_SIZE", int(cfg.tile_size)),
        ("NUM_SEGMENTS", int(cfg.num_segments)),
        ("SEGMENT_CHUNK", int(segment_chunk(cfg.num_segments))),
    ]
    .into_iter()
    .map(|(n, v)| Binding::new(n, v))
    .collect()
}

/// Segments the reduce combines per step: 16 (vLLM's default split, one step) or fewer, so
/// its `[chunk, Dp]` tile stays well inside shared memory at any `NUM_SEGMENTS`.
pub const MAX_SEGMENT_CHUNK: i32 = 16;

/// `min(NUM_SEGMENTS, MAX_SEGMENT_CHUNK)` (a power of two when NUM_SEGMENTS is).
pub fn segment_chunk(num_segments: i32) -> i32 {
    num_segments.clamp(1, MAX_SEGMENT_CHUNK)
}

/// §1.2: `total_q_blocks = ⌊T / BLOCK_Q⌋ + S` (surplus programs exit early).
pub fn total_q_blocks(num_tokens: usize, num_seqs: usize, block_q: i32) -> usize {
    // Saturates: a count past the grid limit is then refused by `grid_axis` as a typed error.
    let block_q = usize::try_from(block_q.max(1)).unwrap_or(1);
    num_tokens
        .checked_div(block_q)
        .unwrap_or(num_tokens)
        .saturating_add(num_seqs)
}

fn attention_launch(
    cfg: &UnifiedAttentionConfig,
    shape: &LaunchShape,
    dtype: ScalarType,
    variant: &MaskVariant,
) -> Result<KernelLaunch, PlanError> {
    let mut args = attention_buffers(cfg, shape);
    args.extend(attention_scalars(cfg, shape)?);
    Ok(KernelLaunch {
        kernel: ATTENTION_KERNEL,
        bindings: attention_bindings(cfg, dtype, variant, shape.softmax_scale),
        grid: attention_grid(cfg, shape)?,
        args,
        mma: cfg.mma,
    })
}

/// The attention kernel's buffer arguments in parameter order: a feature's buffer where the
/// configuration uses it, else a dummy of its element type.
fn attention_buffers(
    cfg: &UnifiedAttentionConfig,
    shape: &LaunchShape,
) -> Vec<(&'static str, KernelArg)> {
    use BufferRole as B;
    let buf = KernelArg::Buffer;
    let opt = |on: bool, role: BufferRole, dummy: ScalarType| {
        if on {
            KernelArg::Buffer(role)
        } else {
            KernelArg::Dummy(dummy)
        }
    };
    let ws = |role| opt(cfg.is_3d, role, ScalarType::F32);
    let per_seq_ranges = cfg.use_mm_prefix && !cfg.use_mm_query_range;
    vec![
        ("q", buf(B::Query)),
        ("k_cache", buf(B::KeyCache)),
        ("v_cache", buf(B::ValueCache)),
        // In 3D the output is written by the reduce; the attention kernel never stores it.
        ("out", buf(B::Output)),
        ("segm_out", ws(B::SegmentOutput)),
        ("segm_max", ws(B::SegmentMax)),
        ("segm_expsum", ws(B::SegmentExpSum)),
        ("cu_seqlens_q", buf(B::CuSeqlensQ)),
        ("seq_lens", buf(B::SeqLens)),
        ("block_table", buf(B::BlockTable)),
        (
            "per_seq_causal",
            opt(cfg.use_per_seq_causal, B::PerSeqCausal, ScalarType::I32),
        ),
        (
            "mm_prefix_range",
            opt(per_seq_ranges, B::MmPrefixRange, ScalarType::I32),
        ),
        (
            "mm_prefix_query_range",
            opt(
                cfg.use_mm_query_range,
                B::MmPrefixQueryRange,
                ScalarType::I32,
            ),
        ),
        (
            "rswa_prefix_lens",
            opt(cfg.use_r_swa, B::RswaPrefixLens, ScalarType::I32),
        ),
        ("sinks", opt(cfg.use_sinks, B::Sinks, ScalarType::F32)),
        (
            "alibi_slopes",
            opt(cfg.use_alibi_slopes, B::AlibiSlopes, ScalarType::F32),
        ),
        ("qq_bias", opt(cfg.use_qq_bias, B::QqBias, ScalarType::F32)),
        (
            "mask_aux",
            opt(shape.mask_aux_stride.is_some(), B::MaskAux, ScalarType::I32),
        ),
        (
            "mask_aux_f32",
            opt(
                shape.mask_aux_f32_stride.is_some(),
                B::MaskAuxF32,
                ScalarType::F32,
            ),
        ),
    ]
}

/// The attention kernel's scalar arguments in parameter order, each checked to fit its type.
fn attention_scalars(
    cfg: &UnifiedAttentionConfig,
    shape: &LaunchShape,
) -> Result<Vec<(&'static str, KernelArg)>, PlanError> {
    Ok(vec![
        ("num_seqs", scalar_i32("num_seqs", shape.num_seqs)?),
        (
            "num_query_heads",
            KernelArg::Scalar(ScalarArg::I32(cfg.num_query_heads)),
        ),
        (
            "softmax_scale",
            KernelArg::Scalar(ScalarArg::F32(shape.softmax_scale)),
        ),
        (
            "softcap",
            KernelArg::Scalar(ScalarArg::F32(if cfg.use_softcap {
                shape.softcap
            } else {
                0.0
            })),
        ),
        ("q_stride0", scalar_i64("q_stride0", shape.q_strides[0])?),
        ("q_stride1", scalar_i64("q_stride1", shape.q_strides[1])?),
        (
            "out_stride0",
            scalar_i64("out_stride0", shape.out_strides[0])?,
        ),
        (
            "out_stride1",
            scalar_i64("out_stride1", shape.out_strides[1])?,
        ),
        (
            "kv_stride_block",
            scalar_i64("kv_stride_block", shape.kv_strides[0])?,
        ),
        (
            "kv_stride_slot",
            scalar_i64("kv_stride_slot", shape.kv_strides[1])?,
        ),
        (
            "kv_stride_head",
            scalar_i64("kv_stride_head", shape.kv_strides[2])?,
        ),
        (
            "block_table_stride",
            scalar_i64("block_table_stride", shape.block_table_stride)?,
        ),
        (
            "qq_bias_stride0",
            scalar_i32("qq_bias_stride0", shape.qq_bias_stride0)?,
        ),
        (
            "mask_aux_stride",
            scalar_i64("mask_aux_stride", shape.mask_aux_stride.unwrap_or(0))?,
        ),
        (
            "mask_aux_f32_stride",
            scalar_i64(
                "mask_aux_f32_stride",
                shape.mask_aux_f32_stride.unwrap_or(0),
            )?,
        ),
    ])
}

/// Programs: q-blocks × KV heads (one axis, heads fastest, under `heads_fastest`) × the 3D
/// path's segments.
fn attention_grid(
    cfg: &UnifiedAttentionConfig,
    shape: &LaunchShape,
) -> Result<[u32; 3], PlanError> {
    let blocks = total_q_blocks(shape.num_tokens, shape.num_seqs, cfg.block_q);
    let kv_heads = cfg.num_kv_heads.max(0) as usize;
    let (x, y) = if heads_fastest() {
        (blocks.saturating_mul(kv_heads), 1)
    } else {
        (blocks, kv_heads)
    };
    let grid = [
        grid_axis(0, x)?,
        grid_axis(1, y)?,
        grid_axis(
            2,
            if cfg.is_3d {
                cfg.num_segments.max(0) as usize
            } else {
                1
            },
        )?,
    ];
    Ok(grid)
}

/// §5 reduce: grid `(T, Hq)`.
fn reduce_launch(
    cfg: &UnifiedAttentionConfig,
    shape: &LaunchShape,
    dtype: ScalarType,
) -> Result<KernelLaunch, PlanError> {
    use BufferRole as B;
    let buf = KernelArg::Buffer;
    let args = vec![
        ("out", buf(B::Output)),
        ("segm_out", buf(B::SegmentOutput)),
        ("segm_max", buf(B::SegmentMax)),
        ("segm_expsum", buf(B::SegmentExpSum)),
        ("cu_seqlens_q", buf(B::CuSeqlensQ)),
        ("seq_lens", buf(B::SeqLens)),
        ("num_seqs", scalar_i32("num_seqs", shape.num_seqs)?),
        (
            "num_query_heads",
            KernelArg::Scalar(ScalarArg::I32(cfg.num_query_heads)),
        ),
        (
            "out_stride0",
            scalar_i64("out_stride0", shape.out_strides[0])?,
        ),
        (
            "out_stride1",
            scalar_i64("out_stride1", shape.out_strides[1])?,
        ),
    ];
    Ok(KernelLaunch {
        kernel: REDUCE_KERNEL,
        bindings: reduce_bindings(cfg, dtype),
        grid: [
            grid_axis(0, shape.num_tokens)?,
            grid_axis(1, cfg.num_query_heads.max(0) as usize)?,
            1,
        ],
        args,
        mma: MmaKind::Sync,
    })
}

/// CUDA's grid limits: 2^31 − 1 along x, 65535 along y and z.
fn grid_axis(axis: usize, value: usize) -> Result<u32, PlanError> {
    let max: u32 = if axis == 0 { i32::MAX as u32 } else { 65_535 };
    u32::try_from(value)
        .ok()
        .filter(|&v| v <= max)
        .ok_or(PlanError::GridTooLarge { axis, value, max })
}

fn i32_of(what: &'static str, value: usize) -> Result<i32, PlanError> {
    i32::try_from(value).map_err(|_| PlanError::ScalarOverflow {
        what,
        value,
        ty: "i32",
    })
}

fn scalar_i32(what: &'static str, value: usize) -> Result<KernelArg, PlanError> {
    Ok(KernelArg::Scalar(ScalarArg::I32(i32_of(what, value)?)))
}

fn scalar_i64(what: &'static str, value: usize) -> Result<KernelArg, PlanError> {
    let v = i64::try_from(value).map_err(|_| PlanError::ScalarOverflow {
        what,
        value,
        ty: "i64",
    })?;
    Ok(KernelArg::Scalar(ScalarArg::I64(v)))
}
