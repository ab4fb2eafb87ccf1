//! Constexpr configuration of one unified-attention specialization, its launch heuristics
//! (spec `unified_attention.md` §6) and its validity rules (§2.1).
//!
//! The rule messages are `pub const` strings: the DSL kernel's `require(cond, MSG)` rules
//! use the same text, so a rejected configuration reads the same whether it is caught
//! here (run time, host) or by the compiler (compile time, at the binding).
//!
//! Every field comes from the caller's problem, so no arithmetic here may panic or wrap.

#![deny(clippy::indexing_slicing, clippy::arithmetic_side_effects)]

use thiserror::Error;

use super::limits::effective_sliding_window;
use super::mask::MaskConfig;

/// Rule 1: `Hq % Hkv == 0`.
pub const MSG_HEADS_NOT_DIVISIBLE: &str = "num_query_heads must be a multiple of num_kv_heads";
/// `NUM_QUERIES_PER_KV` must equal `Hq / Hkv`.
pub const MSG_QUERIES_PER_KV_MISMATCH: &str =
    "NUM_QUERIES_PER_KV must equal num_query_heads / num_kv_heads";
/// Rule 2: the paged cache block must be a multiple of 16 tokens.
pub const MSG_BLOCK_SIZE_NOT_MULTIPLE_OF_16: &str = "BLOCK_SIZE must be a multiple of 16";
/// Rule 3: chunked attention needs a window that yields a non-empty chunk.
pub const MSG_CHUNK_WITHOUT_WINDOW: &str = "CHUNK_LOOKBACK needs SLIDING_WINDOW > 0";
/// Rule 3: `⌊SW / (LB + 1)⌋ == 0`.
pub const MSG_CHUNK_SIZE_ZERO: &str = "sliding_window must be > chunk_lookback+1";
/// `CHUNK_LOOKBACK ∈ {−1} ∪ [0, ∞)`.
pub const MSG_CHUNK_LOOKBACK_RANGE: &str = "CHUNK_LOOKBACK must be -1 (off) or >= 0";
/// `CHUNK_SIZE` must be what the launcher derives: `⌊SW / (LB + 1)⌋`.
pub const MSG_CHUNK_SIZE_MISMATCH: &str =
    "CHUNK_SIZE must equal SLIDING_WINDOW / (CHUNK_LOOKBACK + 1)";
/// A negative window is meaningless (0 = off).
pub const MSG_WINDOW_NEGATIVE: &str = "SLIDING_WINDOW must be >= 0 (0 = off)";
/// Rule 10.
pub const MSG_CLAMP_WITHOUT_MM: &str = "MM_PREFIX_CLAMP_SW needs USE_MM_PREFIX";
/// Rule 11.
pub const MSG_CLAMP_WITHOUT_WINDOW: &str = "MM_PREFIX_CLAMP_SW needs SLIDING_WINDOW > 0";
/// Per-sequence MM ranges need at least one slot per sequence.
pub const MSG_MM_RANGES_ZERO: &str =
    "USE_MM_PREFIX with per-sequence ranges needs MAX_MM_RANGES >= 1";
/// The per-query encoding is an encoding of the MM prefix; it needs the prefix on.
pub const MSG_MM_QUERY_RANGE_WITHOUT_MM: &str = "USE_MM_QUERY_RANGE needs USE_MM_PREFIX";
/// Rule 12.
pub const MSG_RSWA_WINDOW_EMPTY: &str = "USE_R_SWA needs R_SWA_WINDOW > 0";
/// Rule 13.
pub const MSG_RSWA_WITH_SLIDING_WINDOW: &str =
    "R-SWA carries its own window; set SLIDING_WINDOW = 0";
/// Rule 14.
pub const MSG_RSWA_WITH_CHUNK: &str = "USE_R_SWA cannot be combined with CHUNK_LOOKBACK";
/// Rule 15.
pub const MSG_CHUNK_NONCAUSAL: &str =
    "CHUNK_LOOKBACK needs causal attention (USE_CAUSAL and not USE_PER_SEQ_CAUSAL)";
/// Rule 16.
pub const MSG_PER_SEQ_CAUSAL_WITHOUT_CAUSAL: &str = "USE_PER_SEQ_CAUSAL needs USE_CAUSAL";
/// Rule 17.
pub const MSG_ALIBI_SQRT_WITHOUT_SLOPES: &str = "USE_ALIBI_SQRT needs USE_ALIBI_SLOPES";
/// Rule 17 (run-time value).
pub const MSG_SOFTCAP_NOT_POSITIVE: &str = "USE_SOFTCAP needs softcap > 0";
/// Rule 18 (run-time value).
pub const MSG_3D_WITH_PREFILL: &str = "IS_3D is decode only: max_seqlen_q must be <= 1";
/// Rule 18.
pub const MSG_2D_WITH_SEGMENTS: &str = "NUM_SEGMENTS must be 1 when IS_3D is false";
/// Rule 19.
pub const MSG_SEGMENTS_NOT_POW2: &str = "NUM_SEGMENTS must be a power of two";
/// Rule 19.
pub const MSG_TILE_NOT_POW2: &str = "TILE_SIZE must be a power of two";
/// Rule 19.
pub const MSG_TILE_TOO_SMALL: &str = "TILE_SIZE must be >= 16";
/// Rule 19.
pub const MSG_TILE_TOO_SMALL_FOR_1_BYTE_KV: &str = "TILE_SIZE must be >= 32 with 1-byte KV";
/// Rule 19.
pub const MSG_BLOCK_M_NOT_POW2: &str = "BLOCK_M must be a power of two >= 16";
/// Rule 19.
pub const MSG_BLOCK_M_BELOW_QUERIES_PER_KV: &str = "BLOCK_M must be >= NUM_QUERIES_PER_KV";
/// §1.2: `BLOCK_Q = ⌊BLOCK_M / nqpkv⌋`.
pub const MSG_BLOCK_Q_MISMATCH: &str = "BLOCK_Q must equal BLOCK_M / NUM_QUERIES_PER_KV";
/// Rule 19.
pub const MSG_HEAD_SIZE_PADDED_NOT_POW2: &str = "HEAD_SIZE_PADDED must be a power of two";
/// §2: `D ≤ Dp`.
pub const MSG_HEAD_SIZE_OVER_PADDED: &str = "HEAD_SIZE must be in 1..=HEAD_SIZE_PADDED";
/// Rule 5 (run-time value).
pub const MSG_SINKS_LEN: &str = "sinks must have one entry per query head";

/// Every rule message, in rule order: for the kernel author to check that each `require`
/// has its counterpart here, and for tests.
pub const ALL_RULE_MESSAGES: &[&str] = &[
    MSG_HEADS_NOT_DIVISIBLE,
    MSG_QUERIES_PER_KV_MISMATCH,
    MSG_BLOCK_SIZE_NOT_MULTIPLE_OF_16,
    MSG_CHUNK_WITHOUT_WINDOW,
    MSG_CHUNK_SIZE_ZERO,
    MSG_CHUNK_LOOKBACK_RANGE,
    MSG_CHUNK_SIZE_MISMATCH,
    MSG_WINDOW_NEGATIVE,
    MSG_CLAMP_WITHOUT_MM,
    MSG_CLAMP_WITHOUT_WINDOW,
    MSG_MM_RANGES_ZERO,
    MSG_MM_QUERY_RANGE_WITHOUT_MM,
    MSG_RSWA_WINDOW_EMPTY,
    MSG_RSWA_WITH_SLIDING_WINDOW,
    MSG_RSWA_WITH_CHUNK,
    MSG_CHUNK_NONCAUSAL,
    MSG_PER_SEQ_CAUSAL_WITHOUT_CAUSAL,
    MSG_ALIBI_SQRT_WITHOUT_SLOPES,
    MSG_SOFTCAP_NOT_POSITIVE,
    MSG_3D_WITH_PREFILL,
    MSG_2D_WITH_SEGMENTS,
    MSG_SEGMENTS_NOT_POW2,
    MSG_TILE_NOT_POW2,
    MSG_TILE_TOO_SMALL,
    MSG_TILE_TOO_SMALL_FOR_1_BYTE_KV,
    MSG_BLOCK_M_NOT_POW2,
    MSG_BLOCK_M_BELOW_QUERIES_PER_KV,
    MSG_BLOCK_Q_MISMATCH,
    MSG_HEAD_SIZE_PADDED_NOT_POW2,
    MSG_HEAD_SIZE_OVER_PADDED,
    MSG_SINKS_LEN,
];

/// Backend constant: minimum grid size of the 2D launch (\[NEW\] `triton_attn.py`).
pub const MIN_LAUNCH_GRID_SIZE_2D: i32 = 128;
/// Backend constant: segments of the 3D split-KV path.
pub const NUM_PAR_SOFTMAX_SEGMENTS: i32 = 16;

/// A configuration rejected by a §2.1 rule: `rule` is the shared message (the kernel's
/// `require` text), `detail` names the offending values.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("{rule} (got {detail})")]
pub struct ConfigError {
    /// One of the `MSG_*` constants.
    pub rule: &'static str,
    /// The offending values, e.g. `SLIDING_WINDOW = 3, CHUNK_LOOKBACK = 3`.
    pub detail: String,
}

/// Checks one rule: `ok` or an error carrying `rule` and the formatted values.
fn require(
    ok: bool,
    rule: &'static str,
    detail: impl FnOnce() -> String,
) -> Result<(), ConfigError> {
    if ok {
        Ok(())
    } else {
        Err(ConfigError {
            rule,
            detail: detail(),
        })
    }
}

/// `⌊SW / (LB + 1)⌋` for `LB ≥ 0`, in i64 so `LB = i32::MAX` cannot overflow (gives 0,
/// which the chunk rule rejects); 0 when chunking is off.
pub fn chunk_size_of(sliding_window: i32, chunk_lookback: i32) -> i32 {
    if chunk_lookback < 0 || sliding_window <= 0 {
        return 0;
    }
    // `chunk_lookback ≥ 0` here, so the divisor is in 1..=2^31 and the i64 sums cannot wrap.
    let size = i64::from(chunk_lookback)
        .checked_add(1)
        .and_then(|d| i64::from(sliding_window).checked_div(d))
        .unwrap_or(0);
    i32::try_from(size).unwrap_or(i32::MAX)
}

fn is_pow2(x: i32) -> bool {
    u32::try_from(x).is_ok_and(u32::is_power_of_two)
}

/// Smallest power of two ≥ `x` (1 for `x ≤ 1`); `i32::MAX` for `x > 2^30`, where no `i32`
/// power of two exists. That value is not a power of two, so the config rules that require
/// one (`HEAD_SIZE_PADDED`, `BLOCK_M`) turn it into a typed error: doubling past `i32::MAX`
/// used to panic in debug builds and loop forever on 0 in release builds.
pub fn next_pow2(x: i32) -> i32 {
    let x = u32::try_from(x).unwrap_or(0);
    x.checked_next_power_of_two()
        .and_then(|p| i32::try_from(p).ok())
        .unwrap_or(i32::MAX)
}

/// The constexprs of one unified-attention specialization (spec §2 table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnifiedAttentionConfig {
    /// `BLOCK_SIZE`: tokens per KV-cache block.
    pub block_size: i32,
    /// `TILE_SIZE`: keys per tile.
    pub tile_size: i32,
    /// `BLOCK_M`: query rows (token × head) per program.
    pub block_m: i32,
    /// `BLOCK_Q`: query tokens per program (`BLOCK_M / NUM_QUERIES_PER_KV`).
    pub block_q: i32,
    /// `HEAD_SIZE`: D.
    pub head_size: i32,
    /// `HEAD_SIZE_PADDED`: D rounded up to a power of two.
    pub head_size_padded: i32,
    /// `NUM_QUERY_HEADS`: Hq.
    pub num_query_heads: i32,
    /// Not a kernel constexpr (the kernel sees `NUM_QUERIES_PER_KV`), kept for rule 1.
    pub num_kv_heads: i32,
    /// `NUM_QUERIES_PER_KV`: `Hq / Hkv`.
    pub num_queries_per_kv: i32,
    /// Bytes per KV element (2 for bf16/f16): rule 19 and `_get_tile_size`.
    pub kv_elem_bytes: i32,
    /// `SLIDING_WINDOW`: SW, 0 = off.
    pub sliding_window: i32,
    /// `USE_CAUSAL`.
    pub use_causal: bool,
    /// `USE_PER_SEQ_CAUSAL`: causality from the per-sequence flags.
    pub use_per_seq_causal: bool,
    /// `CHUNK_LOOKBACK`: LB, −1 = off.
    pub chunk_lookback: i32,
    /// `CHUNK_SIZE`: `⌊SW / (LB + 1)⌋` ([`chunk_size_of`]), 0 when chunking is off.
    pub chunk_size: i32,
    /// `USE_MM_PREFIX`: multimodal bidirectional ranges on.
    pub use_mm_prefix: bool,
    /// Per-query `[T, 2]` range encoding instead of per-sequence `[S, R, 2]`.
    pub use_mm_query_range: bool,
    /// `MAX_MM_RANGES`: R of the per-sequence encoding.
    pub max_mm_ranges: i32,
    /// `MM_PREFIX_CLAMP_SW`: clamp the MM terms to the window's left edge.
    pub mm_prefix_clamp_sw: bool,
    /// `USE_R_SWA`.
    pub use_r_swa: bool,
    /// `R_SWA_WINDOW`: R.
    pub r_swa_window: i32,
    /// `USE_SOFTCAP`.
    pub use_softcap: bool,
    /// `USE_SINKS`.
    pub use_sinks: bool,
    /// `USE_ALIBI_SLOPES`.
    pub use_alibi_slopes: bool,
    /// `USE_ALIBI_SQRT`: the sqrt ALiBi variant.
    pub use_alibi_sqrt: bool,
    /// `USE_QQ_BIAS`.
    pub use_qq_bias: bool,
    /// The 3D (split-KV) path.
    pub is_3d: bool,
    /// `NUM_SEGMENTS_PER_SEQ` of the 3D path.
    pub num_segments: i32,
    /// 16-row slabs of the accumulator per warp (`num_warps = BLOCK_M / (16 · this)`): two let
    /// each B fragment loaded from shared memory feed two mma rows (the launch table's choice).
    pub slabs_per_warp: i32,
    /// Buffers of each K/V copy ring (`NUM_STAGES`, the kernel's `num_stages`): tiles in
    /// flight plus the one computed (the launch table's choice).
    pub num_stages: i32,
    /// Tile ranges per q-block the built-in bounds visit (`TILE_RANGES`): 1, or 2 where a
    /// mode allows keys in two disjoint spans (R-SWA: prefix + window; an unclamped MM
    /// prefix with a window: the ranges' hull + window).
    pub tile_ranges: i32,
    /// The tensor-core instructions the launch targets (the problem's; the launch table
    /// picks tilings by it, and the code generator emits warpgroup MMAs for `Warpgroup`).
    pub mma: MmaKind,
}

/// Run-time values some §2.1 rules look at (they are not constexprs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LaunchValues {
    /// Longest query length of the batch.
    pub max_seqlen_q: i32,
    /// The softcap value when `USE_SOFTCAP`.
    pub softcap: f32,
    /// Length of the sinks tensor when `USE_SINKS`.
    pub num_sinks: usize,
}

impl UnifiedAttentionConfig {
    /// The mask-relevant subset, for [`super::mask::allowed`].
    pub fn mask_config(&self) -> MaskConfig {
        MaskConfig {
            sliding_window: self.sliding_window,
            chunk_lookback: self.chunk_lookback,
            chunk_size: self.chunk_size,
            use_r_swa: self.use_r_swa,
            r_swa_window: self.r_swa_window,
            use_mm_prefix: self.use_mm_prefix,
            mm_prefix_clamp_sw: self.mm_prefix_clamp_sw,
        }
    }

    /// Every constexpr-only rule of §2.1 (1–3, 10–16, the constexpr parts of 17–19, and
    /// the derived-value consistency checks). Rules on fp8, INT4 and TD are out of scope.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_heads()?;
        self.validate_tiles()?;
        self.validate_rswa()?;
        self.validate_window_and_chunk()?;
        self.validate_mm()?;
        self.validate_causality()?;
        self.validate_extras()?;
        self.validate_segments()
    }

    /// [`Self::validate`] plus the rules on run-time values (5, 17 softcap, 18 prefill).
    pub fn validate_launch(&self, v: &LaunchValues) -> Result<(), ConfigError> {
        self.validate()?;
        require(
            !self.use_softcap || v.softcap > 0.0,
            MSG_SOFTCAP_NOT_POSITIVE,
            || format!("softcap = {}", v.softcap),
        )?;
        require(
            !self.is_3d || v.max_seqlen_q <= 1,
            MSG_3D_WITH_PREFILL,
            || format!("max_seqlen_q = {}", v.max_seqlen_q),
        )?;
        let hq = self.num_query_heads as usize;
        require(!self.use_sinks || v.num_sinks == hq, MSG_SINKS_LEN, || {
            format!("len(sinks) = {}, num_query_heads = {hq}", v.num_sinks)
        })
    }

    fn validate_heads(&self) -> Result<(), ConfigError> {
        let (hq, hkv) = (self.num_query_heads, self.num_kv_heads);
        require(
            hq > 0 && hkv > 0 && hq.checked_rem(hkv) == Some(0),
            MSG_HEADS_NOT_DIVISIBLE,
            || format!("num_query_heads = {hq}, num_kv_heads = {hkv}"),
        )?;
        require(
            Some(self.num_queries_per_kv) == hq.checked_div(hkv),
            MSG_QUERIES_PER_KV_MISMATCH,
            || {
                format!(
                    "NUM_QUERIES_PER_KV = {}, {hq} / {hkv} = {:?}",
                    self.num_queries_per_kv,
                    hq.checked_div(hkv)
                )
            },
        )?;
        require(
            self.head_size >= 1 && self.head_size <= self.head_size_padded,
            MSG_HEAD_SIZE_OVER_PADDED,
            || {
                format!(
                    "HEAD_SIZE = {}, HEAD_SIZE_PADDED = {}",
                    self.head_size, self.head_size_padded
                )
            },
        )?;
        require(
            is_pow2(self.head_size_padded),
            MSG_HEAD_SIZE_PADDED_NOT_POW2,
            || format!("HEAD_SIZE_PADDED = {}", self.head_size_padded),
        )
    }

    /// Whether every image range the mask ORs in is bounded by the sliding window: clamped to
    /// it, or no window (nothing evicted), or no ranges. The keys the ranges add then lie
    /// where the window's do.
    pub fn mm_ranges_windowed(&self) -> bool {
        !self.use_mm_prefix || self.mm_prefix_clamp_sw || self.sliding_window == 0
    }

    fn validate_tiles(&self) -> Result<(), ConfigError> {
        let (bs, tile, bm, nq) = (
            self.block_size,
            self.tile_size,
            self.block_m,
            self.num_queries_per_kv,
        );
        require(
            bs > 0 && bs % 16 == 0,
            MSG_BLOCK_SIZE_NOT_MULTIPLE_OF_16,
            || format!("BLOCK_SIZE = {bs}"),
        )?;
        require(is_pow2(tile), MSG_TILE_NOT_POW2, || {
            format!("TILE_SIZE = {tile}")
        })?;
        require(tile >= 16, MSG_TILE_TOO_SMALL, || {
            format!("TILE_SIZE = {tile}")
        })?;
        require(
            self.kv_elem_bytes != 1 || tile >= 32,
            MSG_TILE_TOO_SMALL_FOR_1_BYTE_KV,
            || {
                format!(
                    "TILE_SIZE = {tile}, kv element bytes = {}",
                    self.kv_elem_bytes
                )
            },
        )?;
        require(is_pow2(bm) && bm >= 16, MSG_BLOCK_M_NOT_POW2, || {
            format!("BLOCK_M = {bm}")
        })?;
        require(bm >= nq, MSG_BLOCK_M_BELOW_QUERIES_PER_KV, || {
            format!("BLOCK_M = {bm}, NUM_QUERIES_PER_KV = {nq}")
        })?;
        require(
            nq > 0 && Some(self.block_q) == bm.checked_div(nq),
            MSG_BLOCK_Q_MISMATCH,
            || {
                format!(
                    "BLOCK_Q = {}, BLOCK_M = {bm}, NUM_QUERIES_PER_KV = {nq}",
                    self.block_q
                )
            },
        )
    }

    fn validate_window_and_chunk(&self) -> Result<(), ConfigError> {
        let (w, lb) = (self.sliding_window, self.chunk_lookback);
        require(w >= 0, MSG_WINDOW_NEGATIVE, || {
            format!("SLIDING_WINDOW = {w}")
        })?;
        require(lb >= -1, MSG_CHUNK_LOOKBACK_RANGE, || {
            format!("CHUNK_LOOKBACK = {lb}")
        })?;
        if lb < 0 {
            return Ok(());
        }
        require(w > 0, MSG_CHUNK_WITHOUT_WINDOW, || {
            format!("SLIDING_WINDOW = {w}, CHUNK_LOOKBACK = {lb}")
        })?;
        require(chunk_size_of(w, lb) > 0, MSG_CHUNK_SIZE_ZERO, || {
            format!("SLIDING_WINDOW = {w}, CHUNK_LOOKBACK = {lb}")
        })?;
        require(
            self.chunk_size == chunk_size_of(w, lb),
            MSG_CHUNK_SIZE_MISMATCH,
            || {
                format!(
                    "CHUNK_SIZE = {}, SLIDING_WINDOW = {w}, CHUNK_LOOKBACK = {lb}",
                    self.chunk_size
                )
            },
        )
    }

    fn validate_mm(&self) -> Result<(), ConfigError> {
        require(
            !self.mm_prefix_clamp_sw || self.use_mm_prefix,
            MSG_CLAMP_WITHOUT_MM,
            || "MM_PREFIX_CLAMP_SW = true, USE_MM_PREFIX = false".into(),
        )?;
        require(
            !self.mm_prefix_clamp_sw || self.sliding_window > 0,
            MSG_CLAMP_WITHOUT_WINDOW,
            || format!("SLIDING_WINDOW = {}", self.sliding_window),
        )?;
        require(
            !self.use_mm_query_range || self.use_mm_prefix,
            MSG_MM_QUERY_RANGE_WITHOUT_MM,
            || "USE_MM_QUERY_RANGE = true, USE_MM_PREFIX = false".into(),
        )?;
        let per_seq = self.use_mm_prefix && !self.use_mm_query_range;
        require(
            !per_seq || self.max_mm_ranges >= 1,
            MSG_MM_RANGES_ZERO,
            || format!("MAX_MM_RANGES = {}", self.max_mm_ranges),
        )
    }

    fn validate_rswa(&self) -> Result<(), ConfigError> {
        if !self.use_r_swa {
            return Ok(());
        }
        require(self.r_swa_window > 0, MSG_RSWA_WINDOW_EMPTY, || {
            format!("R_SWA_WINDOW = {}", self.r_swa_window)
        })?;
        require(
            self.sliding_window == 0,
            MSG_RSWA_WITH_SLIDING_WINDOW,
            || format!("SLIDING_WINDOW = {}", self.sliding_window),
        )?;
        require(self.chunk_lookback < 0, MSG_RSWA_WITH_CHUNK, || {
            format!("CHUNK_LOOKBACK = {}", self.chunk_lookback)
        })
    }

    fn validate_causality(&self) -> Result<(), ConfigError> {
        require(
            !self.use_per_seq_causal || self.use_causal,
            MSG_PER_SEQ_CAUSAL_WITHOUT_CAUSAL,
            || "USE_PER_SEQ_CAUSAL = true, USE_CAUSAL = false".into(),
        )?;
        let causal_only = self.use_causal && !self.use_per_seq_causal;
        require(
            self.chunk_lookback < 0 || causal_only,
            MSG_CHUNK_NONCAUSAL,
            || {
                format!(
                    "CHUNK_LOOKBACK = {}, USE_CAUSAL = {}, USE_PER_SEQ_CAUSAL = {}",
                    self.chunk_lookback, self.use_causal, self.use_per_seq_causal
                )
            },
        )
    }

    fn validate_extras(&self) -> Result<(), ConfigError> {
        require(
            !self.use_alibi_sqrt || self.use_alibi_slopes,
            MSG_ALIBI_SQRT_WITHOUT_SLOPES,
            || "USE_ALIBI_SQRT = true, USE_ALIBI_SLOPES = false".into(),
        )
    }

    fn validate_segments(&self) -> Result<(), ConfigError> {
        let n = self.num_segments;
        if self.is_3d {
            require(is_pow2(n), MSG_SEGMENTS_NOT_POW2, || {
                format!("NUM_SEGMENTS = {n}")
            })
        } else {
            require(n == 1, MSG_2D_WITH_SEGMENTS, || {
                format!("NUM_SEGMENTS = {n}")
            })
        }
    }
}

// ------------------------------------------------------------------------------------------
// Launch heuristics (§6)
// ------------------------------------------------------------------------------------------

/// §1.2 / §6: `BLOCK_M = 16` if `nqpkv ≤ 16`, else `next_pow2(nqpkv)`, so a whole GQA
/// group always fits in one M-tile.
pub fn block_m_for(num_queries_per_kv: i32) -> i32 {
    if num_queries_per_kv <= 16 {
        16
    } else {
        next_pow2(num_queries_per_kv)
    }
}

/// §6 `_get_tile_size`: 32 for the Gemma3/4 signature (W 1024, D 128/256) and for prefill;
/// for decode 16 with 2-byte KV and 32 with 1-byte KV.
pub fn get_tile_size(
    head_size: i32,
    sliding_window: i32,
    kv_elem_bytes: i32,
    is_prefill: bool,
) -> i32 {
    let gemma_signature = sliding_window == 1024 && (head_size == 128 || head_size == 256);
    if gemma_signature || is_prefill || kv_elem_bytes < 2 {
        32
    } else {
        16
    }
}

/// §6 backend constant: `seq_threshold_3D = 128 // Hkv` (before CUDA-graph snapping).
pub fn seq_threshold_3d(num_kv_heads: i32) -> i32 {
    MIN_LAUNCH_GRID_SIZE_2D
        .checked_div(num_kv_heads.max(1))
        .unwrap_or(MIN_LAUNCH_GRID_SIZE_2D)
}

/// The preallocated split-KV workspace of the 3D path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitKvWorkspace {
    /// Largest batch (number of sequences) that takes the 3D path.
    pub seq_threshold_3d: i32,
    /// `NUM_SEGMENTS_PER_SEQ` (power of two; vLLM uses 16).
    pub num_segments: i32,
}

/// §6 "3D is chosen iff": workspace given, pure decode, small batch, not batch-invariant.
pub fn choose_3d(
    workspace: Option<SplitKvWorkspace>,
    max_seqlen_q: i32,
    num_seqs: i32,
    batch_invariant: bool,
) -> bool {
    match workspace {
        Some(ws) => max_seqlen_q <= 1 && num_seqs <= ws.seq_threshold_3d && !batch_invariant,
        None => false,
    }
}

/// How causality is given to the op: a bool, or a per-sequence tensor (§1.1 `causal`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CausalMode {
    /// Every sequence causal.
    Causal,
    /// No sequence causal.
    NonCausal,
    /// `bool [S]` tensor: USE_PER_SEQ_CAUSAL (and USE_CAUSAL = true, as the wrapper sets).
    PerSequence,
}

/// Which multimodal range encoding the op receives (§1.1, §9.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MmRangeEncoding {
    /// No multimodal ranges.
    None,
    /// `int32 [S, R, 2]`, padded with `(0, 0)`.
    PerSequence {
        /// R: ranges per sequence.
        max_ranges: i32,
    },
    /// `int32 [T, 2]`, `(−1, −1)` = not in a range.
    PerQuery,
}

/// ALiBi variant (§1.4 step 4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AlibiMode {
    /// ALiBi off.
    None,
    /// Linear slopes.
    Linear,
    /// The sqrt variant.
    Sqrt,
}

/// What the op knows before choosing a specialization: geometry and enabled features.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionProblem {
    /// Hq.
    pub num_query_heads: i32,
    /// Hkv.
    pub num_kv_heads: i32,
    /// Head size D.
    pub head_size: i32,
    /// Tokens per KV-cache block.
    pub block_size: i32,
    /// Bytes per KV element.
    pub kv_elem_bytes: i32,
    /// SW = `1 + window_size.left` (0 = off); see [`sliding_window_from_left`].
    pub sliding_window: i32,
    /// How causality is given.
    pub causal: CausalMode,
    /// −1 = off.
    pub chunk_lookback: i32,
    /// The multimodal range encoding.
    pub mm: MmRangeEncoding,
    /// Clamp the MM terms to the window's left edge (Gemma4).
    pub mm_prefix_clamp_sw: bool,
    /// `Some(R)` when R-SWA is on (prefix lens given).
    pub r_swa_window: Option<i32>,
    /// `USE_SOFTCAP = softcap > 0`.
    pub softcap: f32,
    /// Sinks given.
    pub use_sinks: bool,
    /// ALiBi variant.
    pub alibi: AlibiMode,
    /// `qq_bias` given.
    pub use_qq_bias: bool,
    /// Longest query length of the batch.
    pub max_seqlen_q: i32,
    /// S: sequences in the batch.
    pub num_seqs: i32,
    /// The split-KV workspace, if the context has one (3D is possible only then).
    pub split_kv: Option<SplitKvWorkspace>,
    /// Forbid the 3D path, so results do not depend on the batch.
    pub batch_invariant: bool,
    /// The tensor-core instructions the target runs the dots on (the launch table has
    /// tilings for each).
    pub mma: MmaKind,
}

/// Which tensor-core instructions a target issues for the kernel's dots.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MmaKind {
    /// Warp-level `mma.sync` (sm_80 and later).
    #[default]
    Sync,
    /// Hopper's warpgroup MMAs (`wgmma`, sm_90a), where the code generator emits them.
    Warpgroup,
}

impl MmaKind {
    /// The instructions the JIT's code for `arch` runs on: warpgroup MMAs when it compiles
    /// sm_90a and the code generator emits them.
    pub fn for_arch(arch: crate::jit::Arch) -> MmaKind {
        if arch.arch_specific && arch.number == 90 && attn_dsl::features::warpgroup_mma() {
            MmaKind::Warpgroup
        } else {
            MmaKind::Sync
        }
    }
}

impl AttentionProblem {
    /// Dense causal attention of one query per sequence over a bf16 cache of 16-token blocks,
    /// every optional feature off: the base that tests and tools adjust with struct update
    /// (`AttentionProblem { sliding_window: 64, ..AttentionProblem::dense_causal(..) }`).
    pub fn dense_causal(num_query_heads: i32, num_kv_heads: i32, head_size: i32) -> Self {
        AttentionProblem {
            num_query_heads,
            num_kv_heads,
            head_size,
            block_size: 16,
            kv_elem_bytes: 2,
            sliding_window: 0,
            causal: CausalMode::Causal,
            chunk_lookback: -1,
            mm: MmRangeEncoding::None,
            mm_prefix_clamp_sw: false,
            r_swa_window: None,
            softcap: 0.0,
            use_sinks: false,
            alibi: AlibiMode::None,
            use_qq_bias: false,
            max_seqlen_q: 1,
            num_seqs: 1,
            split_kv: None,
            batch_invariant: false,
            mma: MmaKind::Sync,
        }
    }
}

/// §1.1: `window_size = (left, right)` → `SLIDING_WINDOW = 1 + left`, `left = −1` → 0.
pub fn sliding_window_from_left(left: i32) -> i32 {
    // `left = i32::MAX` covers every key, as does the saturated window.
    if left < 0 {
        0
    } else {
        left.saturating_add(1)
    }
}

impl UnifiedAttentionConfig {
    /// Tile ranges vLLM's bounds visit under this configuration: 2 where the mask ORs an
    /// unpruned term into a pruned one (R-SWA's prefix, unclamped MM ranges the window does
    /// not contain), else 1.
    pub fn builtin_tile_ranges(&self) -> i32 {
        let unclamped = self.use_mm_prefix && !self.mm_prefix_clamp_sw;
        if self.use_r_swa || (unclamped && !self.unclamped_ranges_in_one_span()) {
            2
        } else {
            1
        }
    }

    /// Whether each row of vLLM's mask attends one interval of keys around its query: no
    /// R-SWA prefix, no chunks, and image ranges either inside the window (clamped, or no
    /// window) or listed per sequence (a range holding the query spans it). A block's
    /// queries are consecutive, so the union of its rows' intervals has no gap: every key
    /// from the first one a row attends on is attended by some row.
    pub fn rows_attend_intervals(&self) -> bool {
        let ranges = self.mm_ranges_windowed() || !self.use_mm_query_range;
        !self.use_r_swa && self.chunk_lookback < 0 && ranges
    }

    /// Whether unclamped image ranges leave a block's keys one span
    /// ([`Self::rows_attend_intervals`], with a window: without one the bounds are the causal
    /// span and the ranges' hull). The span runs from the first key of a range holding one of
    /// its queries, or its first query's window, to its last query or the end of such a
    /// range.
    pub fn unclamped_ranges_in_one_span(&self) -> bool {
        let unclamped = self.use_mm_prefix && !self.mm_prefix_clamp_sw;
        unclamped && self.sliding_window > 0 && self.rows_attend_intervals()
    }

    /// Applies the §6 heuristics to a problem and validates the result (§2.1).
    /// Unlike vLLM's launcher, an LB ≥ 0 with SW ≤ 0 is not silently dropped (rule 3).
    pub fn from_problem(p: &AttentionProblem) -> Result<Self, ConfigError> {
        let nqpkv = if p.num_kv_heads > 0 {
            p.num_query_heads.checked_div(p.num_kv_heads).unwrap_or(0)
        } else {
            0
        };
        let block_m = block_m_for(nqpkv);
        let is_3d = choose_3d(p.split_kv, p.max_seqlen_q, p.num_seqs, p.batch_invariant);
        // An all-covering window becomes an equivalent representable one (see `limits`).
        let lb = p.chunk_lookback;
        let w = effective_sliding_window(p.sliding_window, lb);
        let cfg = UnifiedAttentionConfig {
            slabs_per_warp: 1,
            num_stages: 2,
            block_size: p.block_size,
            tile_size: get_tile_size(p.head_size, w, p.kv_elem_bytes, !is_3d),
            block_m,
            block_q: if nqpkv > 0 {
                block_m.checked_div(nqpkv).unwrap_or(0)
            } else {
                0
            },
            head_size: p.head_size,
            head_size_padded: next_pow2(p.head_size),
            num_query_heads: p.num_query_heads,
            num_kv_heads: p.num_kv_heads,
            num_queries_per_kv: nqpkv,
            kv_elem_bytes: p.kv_elem_bytes,
            sliding_window: w,
            use_causal: p.causal != CausalMode::NonCausal,
            use_per_seq_causal: p.causal == CausalMode::PerSequence,
            chunk_lookback: lb,
            chunk_size: chunk_size_of(w, lb),
            use_mm_prefix: p.mm != MmRangeEncoding::None,
            use_mm_query_range: p.mm == MmRangeEncoding::PerQuery,
            max_mm_ranges: match p.mm {
                MmRangeEncoding::PerSequence { max_ranges } => max_ranges,
                _ => 0,
            },
            mm_prefix_clamp_sw: p.mm_prefix_clamp_sw,
            use_r_swa: p.r_swa_window.is_some(),
            r_swa_window: p.r_swa_window.unwrap_or(0),
            use_softcap: p.softcap > 0.0,
            use_sinks: p.use_sinks,
            use_alibi_slopes: p.alibi != AlibiMode::None,
            use_alibi_sqrt: p.alibi == AlibiMode::Sqrt,
            use_qq_bias: p.use_qq_bias,
            is_3d,
            num_segments: match (is_3d, p.split_kv) {
                (true, Some(ws)) => ws.num_segments,
                _ => 1,
            },
            tile_ranges: 1,
            mma: p.mma,
        };
        let cfg = UnifiedAttentionConfig {
            tile_ranges: cfg.builtin_tile_ranges(),
            ..cfg
        };
        cfg.validate()?;
        Ok(cfg)
    }
}
