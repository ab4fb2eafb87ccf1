//! Unified attention (spec `unified_attention.md`) written in the DSL: the 2D kernel and the 3D
//! split-KV kernel share one body (`IS_3D`), plus the segment reduce. The mask and the tile bounds
//! are `#[device]` functions so that the CPU executor, the GPU and the property tests all see the
//! same code, and a user variant can replace them (`MASK` / `BOUNDS` constexprs).

use attn_dsl_macros::module;

#[module]
pub mod unified {
    /// Index of the sequence owning global q-block `g`: the largest i with
    /// `cu[i] / BLOCK_Q + i <= g` (spec §1.2), by binary search over `[0, num_seqs)`.
    #[device]
    fn find_seq_idx<const BLOCK_Q: i32>(cu_seqlens_q: Ptr, g: i32, num_seqs: i32) -> i32 {
        let mut lo = 0;
        let mut hi = num_seqs;
        while lo < hi - 1 {
            let mid = (lo + hi) / 2;
            let start = load(cu_seqlens_q + mid) / BLOCK_Q + mid;
            if start <= g {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// Index of the sequence owning query token `tok` (token mode of the reduce kernel).
    #[device]
    fn find_seq_of_token(cu_seqlens_q: Ptr, tok: i32, num_seqs: i32) -> i32 {
        let mut lo = 0;
        let mut hi = num_seqs;
        while lo < hi - 1 {
            let mid = (lo + hi) / 2;
            if load(cu_seqlens_q + mid) <= tok {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// Image range `r` of the sequence's list as `(s, e)`, and whether it is non-empty and
    /// holds one of the queries `[q_first, q_last]`: what every loop over the block's
    /// candidate ranges tests first.
    #[device]
    fn range_meeting(mm_ranges: Ptr, r: i32, q_first: i32, q_last: i32) -> (i32, i32, bool) {
        let s = load(mm_ranges + 2 * r);
        let e = load(mm_ranges + 2 * r + 1);
        (s, e, (s < e) & (s <= q_last) & (q_first <= e))
    }

    /// The block's candidate MM ranges `[first, end)`: the smallest and one past the largest
    /// index of a non-empty range meeting the queries `[q_first, q_last]` (empty when `used`
    /// is false or none meets them). Ranges outside it meet none of the block's queries, so
    /// the per-tile mask loops over these alone; no order of the ranges is assumed.
    #[device]
    fn block_mm_ranges<const MAX_MM_RANGES: i32>(
        mm_ranges: Ptr,
        q_first: i32,
        q_last: i32,
        used: bool,
    ) -> (i32, i32) {
        let mut first = MAX_MM_RANGES;
        let mut end = 0;
        if used {
            for r in 0..MAX_MM_RANGES {
                let (_, _, meets) = range_meeting(mm_ranges, r, q_first, q_last);
                if meets {
                    first = min(first, r);
                    end = r + 1;
                }
            }
        }
        (first, end)
    }

    /// The attention mask of spec §3.6 for rows `q_abs [M, 1]` and keys `k [1, N]`, with the
    /// project's explicit `k < L`. `causal` is the sequence's (runtime) causality.
    #[device]
    fn vllm_mask<
        const SLIDING_WINDOW: i32,
        const CHUNK_LOOKBACK: i32,
        const CHUNK_SIZE: i32,
        const USE_R_SWA: bool,
        const R_SWA_WINDOW: i32,
        const USE_MM_PREFIX: bool,
        const USE_MM_QUERY_RANGE: bool,
        const MM_PREFIX_CLAMP_SW: bool,
        const MAX_MM_RANGES: i32,
        const MASK_INTERVALS: bool,
    >(
        q_abs: Tile,
        k: Tile,
        k_first: i32,
        k_last: i32,
        q_first: i32,
        q_last: i32,
        seq_len: i32,
        causal: bool,
        rswa_prefix: i32,
        mm_ranges: Ptr,
        q_range_lo: Tile,
        q_range_hi: Tile,
        mm_first: i32,
        mm_end: i32,
    ) -> Tile<bool> {
        if MASK_INTERVALS && !USE_R_SWA && CHUNK_LOOKBACK < 0 && !USE_MM_QUERY_RANGE {
            // The interval reads nothing of the tile: it is computed once, before the KV
            // loop (loop-invariant code motion), and each score costs two compares.
            let (lo, hi) = key_interval::<SLIDING_WINDOW, USE_MM_PREFIX, MM_PREFIX_CLAMP_SW>(
                q_abs, q_first, q_last, seq_len, causal, mm_ranges, mm_first, mm_end,
            );
            let mut allowed = (k <= hi) & (k < seq_len);
            if SLIDING_WINDOW > 0 || USE_MM_PREFIX {
                // Without either, lo is 0: every key passes (P0 would test it per score).
                allowed = allowed & (lo <= k);
            }
            return allowed;
        }
        let base = select(causal, k <= q_abs, k < seq_len);
        let mut win = base | !base; // all true, shaped [M, N]
        if CHUNK_LOOKBACK >= 0 {
            win = (q_abs / CHUNK_SIZE) - (k / CHUNK_SIZE) <= CHUNK_LOOKBACK;
        } else if SLIDING_WINDOW > 0 && !USE_R_SWA {
            win = (q_abs - k < SLIDING_WINDOW) & (causal | (k - q_abs < SLIDING_WINDOW));
        }
        let mut allowed = base & win;
        if USE_R_SWA {
            allowed = allowed & ((k < rswa_prefix) | (q_abs - k < R_SWA_WINDOW));
        }
        if USE_MM_PREFIX {
            let mut clamp = allowed | !allowed;
            if MM_PREFIX_CLAMP_SW && SLIDING_WINDOW > 0 {
                clamp = q_abs - k < SLIDING_WINDOW;
            }
            if USE_MM_QUERY_RANGE {
                let in_range = (q_range_lo < q_range_hi) & (q_range_lo <= k) & (k <= q_range_hi);
                allowed = allowed | (in_range & clamp);
            } else {
                // A runtime loop on purpose: unrolled (static_range) the mask becomes one
                // expression the copies can recompute, but 30 ranges per element made P3
                // slower (10.8 ms against 7.7 ms on the H200, 2026-12-01). Only the block's
                // candidate ranges `[mm_first, mm_end)` can meet its queries (one or two of
                // P3's 30), and a range that misses the tile's keys adds nothing: one scalar
                // test per candidate and tile skips its elementwise work.
                for r in mm_first..mm_end {
                    let (s, e, meets) = range_meeting(mm_ranges, r, q_first, q_last);
                    if meets & (s <= k_last) & (k_first <= e) {
                        let mm = (s <= q_abs) & (q_abs <= e) & (s <= k) & (k <= e);
                        allowed = allowed | (mm & clamp);
                    }
                }
            }
        }
        allowed & (k < seq_len)
    }

    /// The keys row `q_abs` may see under vLLM's mask without R-SWA, chunks or per-query
    /// ranges, as one interval `[lo, hi]` per row: the causal part `[.., q]`, the window
    /// `[q − W + 1, ..]` (both sides when not causal) and each image range holding q are all
    /// intervals around q, so their union is one. The mask is then two compares a score
    /// instead of the terms' five to ten (P3: a range's four bounds and its clamp a candidate).
    /// A clamped range adds nothing left of the window. The interval is the row's, whatever
    /// the tile: it reads no key, so it moves out of the KV loop and its range loads run once
    /// a program (tested per tile, P3 without the clamp read 24 range bounds a tile and ran
    /// 10 % slower than the per-term mask). Bounds stay in i32: `|q| ≤ MAX_SEQ_LEN = 2^30`,
    /// the window's reach clamped to the sequence.
    #[device]
    fn key_interval<
        const SLIDING_WINDOW: i32,
        const USE_MM_PREFIX: bool,
        const MM_PREFIX_CLAMP_SW: bool,
    >(
        q_abs: Tile,
        q_first: i32,
        q_last: i32,
        seq_len: i32,
        causal: bool,
        mm_ranges: Ptr,
        mm_first: i32,
        mm_end: i32,
    ) -> (Tile, Tile) {
        let mut lo = q_abs - q_abs; // keys are >= 0
        let mut hi = q_abs + (seq_len - 1);
        if SLIDING_WINDOW > 0 {
            let reach = min(SLIDING_WINDOW - 1, seq_len);
            lo = q_abs - reach;
            hi = q_abs + reach;
        }
        hi = select(causal, q_abs, hi);
        if USE_MM_PREFIX {
            for r in mm_first..mm_end {
                let (s, e, meets) = range_meeting(mm_ranges, r, q_first, q_last);
                if meets {
                    let holds = (s <= q_abs) & (q_abs <= e);
                    hi = select(holds, max(hi, e), hi);
                    if !(MM_PREFIX_CLAMP_SW && SLIDING_WINDOW > 0) {
                        lo = select(holds, min(lo, s), lo);
                    }
                }
            }
        }
        (lo, hi)
    }

    /// The first key any valid row of the block attends under vLLM's mask without R-SWA,
    /// chunks or per-query ranges, with a window: the window of its first query, or an
    /// image range holding one of its queries and starting further left (unclamped).
    /// Every key from there to the block's last query is attended by some row: each row's
    /// keys are one interval holding its query (`key_interval`), and the queries are
    /// consecutive, so the union of the rows' intervals has no gap. Evicted keys (NaN) lie
    /// below it, so V can be guarded by `k >= first` alone (spec §3.8).
    #[device]
    fn block_first_key<
        const SLIDING_WINDOW: i32,
        const USE_MM_PREFIX: bool,
        const MM_PREFIX_CLAMP_SW: bool,
    >(
        q_first: i32,
        q_last: i32,
        seq_len: i32,
        mm_ranges: Ptr,
        mm_first: i32,
        mm_end: i32,
    ) -> i32 {
        let mut first = q_first - min(SLIDING_WINDOW - 1, seq_len);
        if USE_MM_PREFIX && !MM_PREFIX_CLAMP_SW {
            for r in mm_first..mm_end {
                let (s, _, meets) = range_meeting(mm_ranges, r, q_first, q_last);
                if meets {
                    first = min(first, s);
                }
            }
        }
        first
    }

    /// Whether vLLM's mask allows every key of `[k_first, k_last]` for every query of
    /// `[q_first, q_last]` (absolute positions of the block's valid tokens) and the keys are
    /// all below `msp`: such a tile needs no mask and no V guard. Conservative: chunked
    /// attention is never full by its window. MM prefix ranges only add keys, so they cannot
    /// make a tile less full, and a tile whose queries and keys all lie in one of the block's
    /// candidate ranges (within the clamp) is full by that range alone: inside an image every
    /// pair attends both ways, which P3's q-blocks over images meet on most tiles past the
    /// diagonal.
    #[device]
    fn vllm_full_tile<
        const SLIDING_WINDOW: i32,
        const CHUNK_LOOKBACK: i32,
        const USE_R_SWA: bool,
        const R_SWA_WINDOW: i32,
        const USE_MM_PREFIX: bool,
        const USE_MM_QUERY_RANGE: bool,
        const MM_PREFIX_CLAMP_SW: bool,
    >(
        k_first: i32,
        k_last: i32,
        q_first: i32,
        q_last: i32,
        msp: i32,
        causal: bool,
        rswa_prefix: i32,
        mm_ranges: Ptr,
        mm_first: i32,
        mm_end: i32,
    ) -> bool {
        let mut full = k_last < msp;
        if causal {
            full = full & (k_last <= q_first);
        }
        if SLIDING_WINDOW > 0 && !USE_R_SWA {
            full = full & (q_last - k_first < SLIDING_WINDOW);
            if !causal {
                full = full & (k_last - q_first < SLIDING_WINDOW);
            }
        }
        if USE_R_SWA {
            full = full & ((k_last < rswa_prefix) | (q_last - k_first < R_SWA_WINDOW));
        }
        if CHUNK_LOOKBACK >= 0 {
            full = false;
        }
        if USE_MM_PREFIX && !USE_MM_QUERY_RANGE {
            let mut clamp_ok = true;
            if MM_PREFIX_CLAMP_SW && SLIDING_WINDOW > 0 {
                clamp_ok = q_last - k_first < SLIDING_WINDOW;
            }
            for r in mm_first..mm_end {
                let s = load(mm_ranges + 2 * r);
                let e = load(mm_ranges + 2 * r + 1);
                let inside =
                    (s < e) & (s <= q_first) & (q_last <= e) & (s <= k_first) & (k_last <= e);
                full = full | (inside & clamp_ok & (k_last < msp));
            }
        }
        full
    }

    /// The full-tile predicate of variants that declare none: every tile is masked.
    #[device]
    fn no_full_tile(k_first: i32, k_last: i32) -> bool {
        k_first > k_last
    }

    /// `(loop_lo, loop_hi, max_seq_prefix_len)`, loop bounds in tiles, half-open, before 3D scoping.
    /// Union bounds for clamped MM ranges and unclamped ones listed per sequence; right window
    /// for bidirectional sequences; chunk lower bound.
    #[device]
    fn vllm_bounds<
        const TILE_SIZE: i32,
        const BLOCK_Q: i32,
        const SLIDING_WINDOW: i32,
        const USE_CAUSAL: bool,
        const USE_PER_SEQ_CAUSAL: bool,
        const CHUNK_LOOKBACK: i32,
        const CHUNK_SIZE: i32,
        const USE_R_SWA: bool,
        const USE_MM_PREFIX: bool,
        const USE_MM_QUERY_RANGE: bool,
        const MM_PREFIX_CLAMP_SW: bool,
        const MAX_MM_RANGES: i32,
        const R_SWA_WINDOW: i32,
        const TILE_RANGES: i32,
    >(
        r: i32,
        context_len: i32,
        seq_len: i32,
        qlen: i32,
        b: i32,
        causal: bool,
        rswa_prefix: i32,
        mm_ranges: Ptr,
        q_range_lo: Tile,
        q_range_hi: Tile,
        q_abs: Tile,
        row_valid: Tile<bool>,
    ) -> (i32, i32, i32) {
        let q_lo = b * BLOCK_Q;
        let q_hi = min(q_lo + BLOCK_Q - 1, qlen - 1);
        let mut msp = min(context_len + q_hi + 1, seq_len);
        if USE_MM_PREFIX || USE_R_SWA || USE_PER_SEQ_CAUSAL || !USE_CAUSAL {
            msp = seq_len;
        }
        let num_tiles = cdiv(msp, TILE_SIZE);
        let mut tile_start = 0;
        let mut tile_end = num_tiles;
        // Unclamped ranges listed per sequence keep one span (see `block_first_key`): a
        // range holding one of the block's queries moves its start left.
        let one_span = !USE_MM_QUERY_RANGE && CHUNK_LOOKBACK < 0;
        if SLIDING_WINDOW > 0 && !USE_R_SWA && (!USE_MM_PREFIX || MM_PREFIX_CLAMP_SW || one_span) {
            let a_lo = context_len + q_lo;
            let a_hi = context_len + q_hi;
            let mut first = a_lo - SLIDING_WINDOW + 1;
            if CHUNK_LOOKBACK >= 0 {
                first = (a_lo / CHUNK_SIZE - CHUNK_LOOKBACK) * CHUNK_SIZE;
            }
            let mut last = select(causal, a_hi, a_hi + SLIDING_WINDOW - 1);
            if USE_MM_PREFIX {
                if USE_MM_QUERY_RANGE {
                    // Each valid row's own range contains the row, so it intersects the span.
                    let has = row_valid & (q_range_lo < q_range_hi);
                    let row_first = max(q_range_lo, q_abs - SLIDING_WINDOW + 1);
                    let big = 2147483647;
                    first = min(first, select(has, row_first, big).min(0));
                    last = max(last, select(has, q_range_hi, -1).max(0));
                } else {
                    for r in 0..MAX_MM_RANGES {
                        let s = load(mm_ranges + 2 * r);
                        let e = load(mm_ranges + 2 * r + 1);
                        if (s < e) && (s <= a_hi) && (e >= a_lo) {
                            let mut start = s;
                            if MM_PREFIX_CLAMP_SW {
                                start = max(s, a_lo - SLIDING_WINDOW + 1);
                            }
                            first = min(first, start);
                            last = max(last, e);
                        }
                    }
                }
            }
            last = min(last, seq_len - 1);
            tile_start = max(0, first) / TILE_SIZE;
            tile_end = min(last / TILE_SIZE + 1, num_tiles);
        }
        if TILE_RANGES > 1 {
            // Two spans where the mask ORs an unpruned term into a pruned one (R-SWA's
            // prefix, unclamped MM ranges): range r of the two, in ascending order.
            let (lo, hi) = two_spans(
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
                row_valid,
                num_tiles,
            );
            tile_start = lo;
            tile_end = hi;
        }
        (tile_start, tile_end, msp)
    }

    /// Tile range `r` (0 or 1) of the two spans that hold every key of modes whose mask is
    /// `pruned ∨ extra`: the pruned span (window or chunk, or causal) and the extra term's
    /// hull (R-SWA's prefix `[0, P)`, the MM ranges that meet the block's queries), as
    /// half-open tile ranges sorted by start (the kernel clips each range to begin where
    /// the previous ended, so overlap costs nothing and no tile is attended twice).
    #[device]
    fn two_spans<
        const TILE_SIZE: i32,
        const BLOCK_Q: i32,
        const SLIDING_WINDOW: i32,
        const CHUNK_LOOKBACK: i32,
        const CHUNK_SIZE: i32,
        const USE_R_SWA: bool,
        const USE_MM_PREFIX: bool,
        const USE_MM_QUERY_RANGE: bool,
        const MAX_MM_RANGES: i32,
        const R_SWA_WINDOW: i32,
    >(
        r: i32,
        context_len: i32,
        seq_len: i32,
        qlen: i32,
        b: i32,
        causal: bool,
        rswa_prefix: i32,
        mm_ranges: Ptr,
        q_range_lo: Tile,
        q_range_hi: Tile,
        row_valid: Tile,
        num_tiles: i32,
    ) -> (i32, i32) {
        let q_lo = b * BLOCK_Q;
        let q_hi = min(q_lo + BLOCK_Q - 1, qlen - 1);
        let a_lo = context_len + q_lo;
        let a_hi = context_len + q_hi;
        // Span A: the mask without its OR-ed term.
        let mut a_first = 0;
        let mut a_last = select(causal, a_hi, seq_len - 1);
        if USE_R_SWA {
            a_first = a_lo - R_SWA_WINDOW + 1;
        } else if SLIDING_WINDOW > 0 {
            a_first = a_lo - SLIDING_WINDOW + 1;
            if CHUNK_LOOKBACK >= 0 {
                a_first = (a_lo / CHUNK_SIZE - CHUNK_LOOKBACK) * CHUNK_SIZE;
            }
            a_last = select(causal, a_hi, a_hi + SLIDING_WINDOW - 1);
        }
        // Span B: the OR-ed term's keys.
        let mut b_first = 2147483647;
        let mut b_last = -1;
        if USE_R_SWA {
            b_first = 0;
            b_last = rswa_prefix - 1;
        }
        if USE_MM_PREFIX {
            if USE_MM_QUERY_RANGE {
                let has = row_valid & (q_range_lo < q_range_hi);
                b_first = min(b_first, select(has, q_range_lo, 2147483647).min(0));
                b_last = max(b_last, select(has, q_range_hi, -1).max(0));
            } else {
                for i in 0..MAX_MM_RANGES {
                    let s = load(mm_ranges + 2 * i);
                    let e = load(mm_ranges + 2 * i + 1);
                    if (s < e) && (s <= a_hi) && (e >= a_lo) {
                        b_first = min(b_first, s);
                        b_last = max(b_last, e);
                    }
                }
            }
        }
        let a_lo_t = max(0, a_first) / TILE_SIZE;
        let a_hi_t = max(
            a_lo_t,
            min(min(a_last, seq_len - 1) / TILE_SIZE + 1, num_tiles),
        );
        let mut b_lo_t = 0;
        let mut b_hi_t = 0;
        if b_first <= b_last {
            b_lo_t = max(0, b_first) / TILE_SIZE;
            b_hi_t = max(
                b_lo_t,
                min(min(b_last, seq_len - 1) / TILE_SIZE + 1, num_tiles),
            );
        }
        // Range 0 is the span that starts first; `r` is a constexpr, so this folds.
        let mut take_a = a_lo_t <= b_lo_t;
        if r != 0 {
            take_a = !take_a;
        }
        (
            select(take_a, a_lo_t, b_lo_t),
            select(take_a, a_hi_t, b_hi_t),
        )
    }

    /// One program per (q-block, kv-head[, segment]): the GQA group of a KV head is processed
    /// together (rows = BLOCK_Q tokens × NUM_QUERIES_PER_KV heads), each K/V tile loaded once.
    /// 2D writes normalized outputs; 3D (`IS_3D`) writes unnormalized segment partials.
    ///
    /// Variants plug in through two `Device` constexprs (the op binds `vllm_mask` and
    /// `vllm_bounds`); a variant's device functions are merged into this module and may
    /// declare any of this kernel's constexprs, and constexprs of their own (bound like the
    /// kernel's, checked by their `#[device(require(..))]` rules). Both are called BY NAME
    /// (`MaskArgs { .. }`, `BoundsArgs { .. }`): a variant declares only the arguments it
    /// uses, with their types (`attn_dsl::contract::unified_attention` is the same list):
    ///
    /// - `MASK(q_abs: Tile<i32> [M,1], k: Tile<i32> [1,N], k_first, k_last, q_first, q_last:
    ///   i32 (the tile's key span and the block's valid query span, for per-tile pre-tests),
    ///   seq_len, context_len, qlen: i32,
    ///   causal: bool, rswa_prefix: i32, mm_ranges: *const i32, q_range_lo, q_range_hi:
    ///   Tile<i32> [M,1], mm_first, mm_end: i32 (the block's candidate MM ranges: those
    ///   outside `[mm_first, mm_end)` meet none of its queries), aux: *const i32,
    ///   aux_f32: *const f32) -> Tile<bool>`: may row (absolute position q_abs) see key k.
    /// - `BOUNDS(r: i32, context_len, seq_len, qlen, b: i32, causal: bool, rswa_prefix: i32,
    ///   mm_ranges, q_range_lo, q_range_hi, q_abs: Tile<i32> [M], row_valid: Tile<bool> [M],
    ///   aux, aux_f32) -> (i32, i32, i32)`: tile range `r` of `TILE_RANGES` as
    ///   `(tile_lo, tile_hi, msp)`, half-open, plus the load limit `k < msp`. Contract: every
    ///   key MASK allows for a valid row lies in the union over r of
    ///   `[TILE·lo_r, min(TILE·hi_r, msp_r))`. Ranges are visited in order and clipped to
    ///   start where the previous one ended, so a tile is never attended twice; the kernel
    ///   clamps msp to seq_len and never attends a key >= msp.
    ///
    /// `aux = mask_aux + seq_idx · mask_aux_stride` (and `aux_f32` likewise): the sequence's
    /// row of the variant's data (a 4-element dummy when the variant has none). The V guard
    /// and the score mask both use MASK's result, so they cannot disagree.
    ///
    /// `V_GUARD_FIRST_KEY` (set by the op for vLLM's mask where it is exact, see
    /// `plan::first_key_v_guard`): V is guarded by the first key the block's rows attend
    /// (`block_first_key`) instead of by the mask OR-ed over rows.
    ///
    /// `HEADS_FASTEST` (opt-in, `plan::heads_fastest`): the grid is one axis of
    /// `q-blocks × KV heads`, the heads fastest (else q-blocks on x, KV heads on y).
    ///
    /// `SHORT_LAST` (shipped, `plan::short_last`): the grid stays q-blocks × KV heads, but its
    /// programs in launch order take the first `cdiv(SLIDING_WINDOW − 1, BLOCK_Q)` q-blocks
    /// of every head last, heads fastest, and the others head by head, longest first.
    ///
    /// `SCALE_AFTER_MAX` (set by the op for a positive `softmax_scale` and plain scores, or
    /// softcapped ones, see `plan::scale_after_max`): the scores are scaled in the exponent,
    /// not before the max (by the softcap, for softcapped scores).
    ///
    /// `MASK_INTERVALS` (shipped, `features::mask_intervals`): `vllm_mask` tests each score
    /// against one key interval per row where its terms allow (`key_interval`).
    ///
    /// `LAZY_RESCALE` (shipped, `features::lazy_rescale`): a row's running max moves only when
    /// a tile's max exceeds it by more than 5.5, so most tiles skip the
    /// accumulator's rescale (every factor is 1); the normalization is the same either way.
    ///
    /// Feature constexprs default to off (causal, no window, vLLM's mask and bounds), so an
    /// instantiation names only the geometry and what it turns on.
    #[kernel(
        num_warps = BLOCK_M / (16 * SLABS_PER_WARP),
        num_stages = NUM_STAGES,
        fast_math = true,
        require(NUM_QUERIES_PER_KV >= 1, "NUM_QUERIES_PER_KV must equal num_query_heads / num_kv_heads"),
        require(BLOCK_SIZE % 16 == 0, "BLOCK_SIZE must be a multiple of 16"),
        require(TILE_SIZE & (TILE_SIZE - 1) == 0, "TILE_SIZE must be a power of two"),
        require(TILE_SIZE >= 16, "TILE_SIZE must be >= 16"),
        require(BLOCK_M >= 16 && BLOCK_M & (BLOCK_M - 1) == 0, "BLOCK_M must be a power of two >= 16"),
        require(!V_GUARD_FIRST_KEY || (!USE_R_SWA && CHUNK_LOOKBACK < 0 && !(USE_MM_QUERY_RANGE && !MM_PREFIX_CLAMP_SW)), "V_GUARD_FIRST_KEY needs vLLM's mask without R-SWA, chunks or unclamped per-query ranges"),
        require(BLOCK_M >= NUM_QUERIES_PER_KV, "BLOCK_M must be >= NUM_QUERIES_PER_KV"),
        require(BLOCK_Q == BLOCK_M / NUM_QUERIES_PER_KV, "BLOCK_Q must equal BLOCK_M / NUM_QUERIES_PER_KV"),
        require(HEAD_SIZE_PADDED & (HEAD_SIZE_PADDED - 1) == 0, "HEAD_SIZE_PADDED must be a power of two"),
        require(HEAD_SIZE >= 1 && HEAD_SIZE <= HEAD_SIZE_PADDED, "HEAD_SIZE must be in 1..=HEAD_SIZE_PADDED"),
        require(SLIDING_WINDOW >= 0, "SLIDING_WINDOW must be >= 0 (0 = off)"),
        require(CHUNK_LOOKBACK >= -1, "CHUNK_LOOKBACK must be -1 (off) or >= 0"),
        require(!USE_R_SWA || R_SWA_WINDOW > 0, "USE_R_SWA needs R_SWA_WINDOW > 0"),
        require(!USE_R_SWA || SLIDING_WINDOW == 0, "R-SWA carries its own window; set SLIDING_WINDOW = 0"),
        require(!USE_R_SWA || CHUNK_LOOKBACK < 0, "USE_R_SWA cannot be combined with CHUNK_LOOKBACK"),
        require(CHUNK_LOOKBACK < 0 || SLIDING_WINDOW > 0, "CHUNK_LOOKBACK needs SLIDING_WINDOW > 0"),
        require(CHUNK_LOOKBACK < 0 || SLIDING_WINDOW / (CHUNK_LOOKBACK + 1) > 0, "sliding_window must be > chunk_lookback+1"),
        require(CHUNK_LOOKBACK < 0 || CHUNK_SIZE == SLIDING_WINDOW / (CHUNK_LOOKBACK + 1), "CHUNK_SIZE must equal SLIDING_WINDOW / (CHUNK_LOOKBACK + 1)"),
        require(!MM_PREFIX_CLAMP_SW || USE_MM_PREFIX, "MM_PREFIX_CLAMP_SW needs USE_MM_PREFIX"),
        require(!MM_PREFIX_CLAMP_SW || SLIDING_WINDOW > 0, "MM_PREFIX_CLAMP_SW needs SLIDING_WINDOW > 0"),
        require(!USE_MM_QUERY_RANGE || USE_MM_PREFIX, "USE_MM_QUERY_RANGE needs USE_MM_PREFIX"),
        require(!USE_MM_PREFIX || USE_MM_QUERY_RANGE || MAX_MM_RANGES >= 1, "USE_MM_PREFIX with per-sequence ranges needs MAX_MM_RANGES >= 1"),
        require(CHUNK_LOOKBACK < 0 || (USE_CAUSAL && !USE_PER_SEQ_CAUSAL), "CHUNK_LOOKBACK needs causal attention (USE_CAUSAL and not USE_PER_SEQ_CAUSAL)"),
        require(!USE_PER_SEQ_CAUSAL || USE_CAUSAL, "USE_PER_SEQ_CAUSAL needs USE_CAUSAL"),
        require(!USE_ALIBI_SQRT || USE_ALIBI_SLOPES, "USE_ALIBI_SQRT needs USE_ALIBI_SLOPES"),
        require(IS_3D || NUM_SEGMENTS == 1, "NUM_SEGMENTS must be 1 when IS_3D is false"),
        require(NUM_SEGMENTS & (NUM_SEGMENTS - 1) == 0, "NUM_SEGMENTS must be a power of two"),
        require(!SCALE_AFTER_MAX || !(USE_ALIBI_SLOPES || USE_QQ_BIAS), "SCALE_AFTER_MAX needs plain or softcapped scores: ALiBi and qq_bias act on scaled ones"),
        require(TILE_RANGES >= 1 && TILE_RANGES <= 8, "TILE_RANGES (tile ranges per q-block the BOUNDS function returns) must be in 1..=8"),
    )]
    pub fn unified_attention<
        T,
        const HEAD_SIZE: i32,
        const HEAD_SIZE_PADDED: i32,
        const BLOCK_SIZE: i32,
        const TILE_SIZE: i32,
        const BLOCK_M: i32,
        const BLOCK_Q: i32,
        const NUM_QUERIES_PER_KV: i32,
        const SLIDING_WINDOW: i32 = 0,
        const USE_CAUSAL: bool = true,
        const USE_PER_SEQ_CAUSAL: bool = false,
        const CHUNK_LOOKBACK: i32 = -1,
        const CHUNK_SIZE: i32 = 0,
        const USE_MM_PREFIX: bool = false,
        const USE_MM_QUERY_RANGE: bool = false,
        const MM_PREFIX_CLAMP_SW: bool = false,
        const MAX_MM_RANGES: i32 = 1,
        const USE_R_SWA: bool = false,
        const R_SWA_WINDOW: i32 = 0,
        const USE_SOFTCAP: bool = false,
        const USE_SINKS: bool = false,
        const USE_ALIBI_SLOPES: bool = false,
        const USE_ALIBI_SQRT: bool = false,
        const USE_QQ_BIAS: bool = false,
        const IS_3D: bool = false,
        const NUM_SEGMENTS: i32 = 1,
        const MASK: Device = vllm_mask,
        const BOUNDS: Device = vllm_bounds,
        const FULL_TILE: Device = no_full_tile,
        const SLABS_PER_WARP: i32 = 1,
        const NUM_STAGES: i32 = 2,
        const TILE_RANGES: i32 = 1,
        const V_GUARD_FIRST_KEY: bool = false,
        const HEADS_FASTEST: bool = false,
        const SHORT_LAST: bool = false,
        const SCALE_AFTER_MAX: bool = false,
        const MASK_INTERVALS: bool = false,
        const LAZY_RESCALE: bool = false,
    >(
        q: *const T,
        k_cache: *const T,
        v_cache: *const T,
        out: *mut T,
        segm_out: *mut f32,
        segm_max: *mut f32,
        segm_expsum: *mut f32,
        cu_seqlens_q: *const i32,
        seq_lens: *const i32,
        block_table: *const i32,
        per_seq_causal: *const i32,
        mm_prefix_range: *const i32,
        mm_prefix_query_range: *const i32,
        rswa_prefix_lens: *const i32,
        sinks: *const f32,
        alibi_slopes: *const f32,
        qq_bias: *const f32,
        mask_aux: *const i32,
        mask_aux_f32: *const f32,
        num_seqs: i32,
        num_query_heads: i32,
        softmax_scale: f32,
        softcap: f32,
        q_stride0: i64,
        q_stride1: i64,
        out_stride0: i64,
        out_stride1: i64,
        kv_stride_block: i64,
        kv_stride_slot: i64,
        kv_stride_head: i64,
        block_table_stride: i64,
        qq_bias_stride0: i32,
        mask_aux_stride: i64,
        mask_aux_f32_stride: i64,
    ) {
        // Programs in reverse: under a causal mask a sequence's last query blocks see the
        // most keys, and launched last they would leave the grid's tail to a few SMs
        // (longest first: P0 2.53 -> 2.40 ms on the H200).
        let mut q_block_global = num_programs(0) - 1 - program_id(0);
        let mut kv_head = program_id(1);
        if HEADS_FASTEST || SHORT_LAST {
            // The launch index (x fastest, then y; `HEADS_FASTEST` launches one axis) read as:
            // the long q-blocks of each KV head in turn, longest first, then the `short`
            // first q-blocks (the fewest keys) of every head, heads fastest. Heads fastest
            // all q-blocks are short; `SHORT_LAST` takes those whose window the sequence's
            // start clips, so the grid's last wave is the shortest programs of all heads
            // while neighbouring long programs still share a head's keys in L2.
            let kv_heads = num_query_heads / NUM_QUERIES_PER_KV;
            let pid = program_id(1) * num_programs(0) + program_id(0);
            let blocks = num_programs(0) * num_programs(1) / kv_heads;
            let mut short = min(blocks, cdiv(SLIDING_WINDOW - 1, BLOCK_Q));
            if HEADS_FASTEST {
                short = blocks;
            }
            let long = blocks - short;
            if pid < long * kv_heads {
                kv_head = pid / long;
                q_block_global = blocks - 1 - pid % long;
            } else {
                let r = pid - long * kv_heads;
                kv_head = r % kv_heads;
                q_block_global = short - 1 - r / kv_heads;
            }
        }
        let seq_idx = find_seq_idx::<BLOCK_Q>(cu_seqlens_q, q_block_global, num_seqs);
        let q_start = load(cu_seqlens_q + seq_idx);
        let qlen = load(cu_seqlens_q + seq_idx + 1) - q_start;
        let b = q_block_global - (q_start / BLOCK_Q + seq_idx);
        if b * BLOCK_Q >= qlen {
            return;
        }
        let seq_len = load(seq_lens + seq_idx);
        let context_len = seq_len - qlen;
        let mut causal = USE_CAUSAL;
        if USE_PER_SEQ_CAUSAL {
            causal = load(per_seq_causal + seq_idx) != 0;
        }

        // Rows: BLOCK_Q tokens × NUM_QUERIES_PER_KV heads; spill rows (spec §1.2) are invalid.
        let rows = arange::<BLOCK_M>();
        let t = b * BLOCK_Q + rows / NUM_QUERIES_PER_KV;
        let h = kv_head * NUM_QUERIES_PER_KV + rows % NUM_QUERIES_PER_KV;
        let row_valid = (rows < BLOCK_Q * NUM_QUERIES_PER_KV) & (t < qlen) & (h < num_query_heads);
        let q_abs = context_len + t;
        let d = arange::<HEAD_SIZE_PADDED>();
        let d_ok = d < HEAD_SIZE;

        let tok = (q_start + t).cast::<i64>();
        let q_ptrs =
            q + (tok * q_stride0 + h.cast::<i64>() * q_stride1).unsqueeze(1) + d.unsqueeze(0);
        let q_tile = load(q_ptrs, row_valid.unsqueeze(1) & d_ok.unsqueeze(0), 0.0);

        let mut q_range_lo = zeros::<i32>([BLOCK_M]);
        let mut q_range_hi = zeros::<i32>([BLOCK_M]);
        if USE_MM_QUERY_RANGE {
            let tok32 = q_start + t;
            q_range_lo = load(mm_prefix_query_range + 2 * tok32, row_valid, -1);
            q_range_hi = load(mm_prefix_query_range + 2 * tok32 + 1, row_valid, -1);
        }
        let seq_ranges = mm_prefix_range + seq_idx * (2 * MAX_MM_RANGES);
        let mut rswa_prefix = 0;
        if USE_R_SWA {
            rswa_prefix = load(rswa_prefix_lens + seq_idx);
        }

        // The variant's data rows for this sequence (MASK / BOUNDS calling convention).
        let seq_aux = mask_aux + seq_idx.cast::<i64>() * mask_aux_stride;
        let seq_aux_f32 = mask_aux_f32 + seq_idx.cast::<i64>() * mask_aux_f32_stride;
        let mut segment = 0;
        let mut tiles_per_segment = 0;
        if IS_3D {
            segment = program_id(2);
            tiles_per_segment = cdiv(seq_len, NUM_SEGMENTS * TILE_SIZE);
            if segment * tiles_per_segment * TILE_SIZE >= seq_len {
                return;
            }
        }

        // Online-softmax state (spec §1.4): M = -inf (or the sink), L = 1, acc = 0.
        let mut m_i = full([BLOCK_M], f32::NEG_INFINITY);
        if USE_SINKS {
            if segment == 0 {
                m_i = load(sinks + h, row_valid, f32::NEG_INFINITY);
            }
        }
        let mut l_i = full([BLOCK_M], 1.0);
        let mut acc = zeros::<f32>([BLOCK_M, HEAD_SIZE_PADDED]);
        // Per-program factors of the scores: softcapped ones enter their `tanh` as
        // `s · (scale / softcap)`; under SCALE_AFTER_MAX the exponent takes the softmax
        // scale, or the softcap (> 0) of softcapped scores, whose tanh took the scale.
        let mut tanh_scale = 0.0;
        let mut exp_scale = softmax_scale;
        if USE_SOFTCAP {
            tanh_scale = softmax_scale / softcap;
            exp_scale = softcap;
        }
        let mut slope = zeros::<f32>([BLOCK_M]);
        if USE_ALIBI_SLOPES {
            slope = load(alibi_slopes + h, row_valid, 0.0);
        }
        let bt_row = block_table + seq_idx.cast::<i64>() * block_table_stride;
        let head_off = kv_head.cast::<i64>() * kv_stride_head;

        // One tile loop per range of the bounds function (one range unless the variant or
        // the mode binds TILE_RANGES): ranges ascend and are clipped to start where the
        // previous one ended, so no tile is attended twice whatever BOUNDS returns.
        // Absolute positions of the block's first and last valid query token.
        let q_first = context_len + b * BLOCK_Q;
        let q_last = context_len + min(b * BLOCK_Q + BLOCK_Q, qlen) - 1;
        let (mm_first, mm_end) = block_mm_ranges::<MAX_MM_RANGES>(
            seq_ranges,
            q_first,
            q_last,
            USE_MM_PREFIX && !USE_MM_QUERY_RANGE,
        );
        let mut first_key = 0;
        if V_GUARD_FIRST_KEY && SLIDING_WINDOW > 0 {
            first_key = block_first_key::<SLIDING_WINDOW, USE_MM_PREFIX, MM_PREFIX_CLAMP_SW>(
                q_first, q_last, seq_len, seq_ranges, mm_first, mm_end,
            );
        }
        let mut visited_hi = 0;
        for r in static_range::<TILE_RANGES>() {
            let (tile_lo, tile_hi, bounds_msp) = BOUNDS(BoundsArgs {
                r,
                context_len,
                seq_len,
                qlen,
                b,
                causal,
                rswa_prefix,
                mm_ranges: seq_ranges,
                q_range_lo,
                q_range_hi,
                q_abs,
                row_valid,
                aux: seq_aux,
                aux_f32: seq_aux_f32,
            });
            // Never read past L, whatever the bounds function says (NaN tails of the last page).
            let msp = min(bounds_msp, seq_len);
            let mut loop_lo = max(tile_lo, visited_hi);
            let mut loop_hi = tile_hi;
            visited_hi = max(visited_hi, tile_hi);
            if IS_3D {
                loop_lo = max(segment * tiles_per_segment, loop_lo);
                loop_hi = min((segment + 1) * tiles_per_segment, loop_hi);
            }
            for j in loop_lo..loop_hi {
                // A full tile (every valid row sees every key) skips the mask and the V guard.
                let full = FULL_TILE(FullTileArgs {
                    k_first: j * TILE_SIZE,
                    k_last: j * TILE_SIZE + TILE_SIZE - 1,
                    q_first,
                    q_last,
                    msp,
                    seq_len,
                    context_len,
                    qlen,
                    causal,
                    rswa_prefix,
                    mm_ranges: seq_ranges,
                    mm_first,
                    mm_end,
                    aux: seq_aux,
                    aux_f32: seq_aux_f32,
                });
                let k_pos = j * TILE_SIZE + arange::<TILE_SIZE>();
                let k_ok = k_pos < msp;
                // Masked block-table read (DSL rule §1.3): never past the row's used entries.
                let phys = load(bt_row + k_pos / BLOCK_SIZE, k_ok, 0);
                let kv_off = phys.cast::<i64>() * kv_stride_block
                    + (k_pos % BLOCK_SIZE).cast::<i64>() * kv_stride_slot
                    + head_off;
                let k_tile = load(
                    k_cache + kv_off.unsqueeze(0) + d.unsqueeze(1),
                    k_ok.unsqueeze(0) & d_ok.unsqueeze(1),
                    0.0,
                );
                // Under SCALE_AFTER_MAX the scores stay unscaled until the exponent: the row
                // max is scaled once a row, and `exp(s·scale − m)` is one FMA into `ex2`.
                let mut s = dot(q_tile, k_tile);
                if USE_SOFTCAP {
                    // `softcap · tanh(s·scale / softcap)` with one multiply a score into the
                    // `tanh`; under SCALE_AFTER_MAX the factor `softcap` waits for the
                    // exponent.
                    s = tanh(s * tanh_scale);
                    if !SCALE_AFTER_MAX {
                        s = softcap * s;
                    }
                } else if !SCALE_AFTER_MAX {
                    s = s * softmax_scale;
                }
                // A key the kernel did not load (k >= MSP) is never attended: its score would
                // be q·0 = 0, not -inf.
                let allowed = MASK(MaskArgs {
                    q_abs: q_abs.unsqueeze(1),
                    k: k_pos.unsqueeze(0),
                    k_first: j * TILE_SIZE,
                    k_last: j * TILE_SIZE + TILE_SIZE - 1,
                    q_first,
                    q_last,
                    seq_len,
                    context_len,
                    qlen,
                    causal,
                    rswa_prefix,
                    mm_ranges: seq_ranges,
                    q_range_lo: q_range_lo.unsqueeze(1),
                    q_range_hi: q_range_hi.unsqueeze(1),
                    mm_first,
                    mm_end,
                    aux: seq_aux,
                    aux_f32: seq_aux_f32,
                }) & row_valid.unsqueeze(1)
                    & k_ok.unsqueeze(0);
                if !full {
                    s = select(allowed, s, f32::NEG_INFINITY);
                }
                if USE_ALIBI_SLOPES {
                    if USE_ALIBI_SQRT {
                        let dist = (q_abs.unsqueeze(1) - k_pos.unsqueeze(0)).cast::<f32>();
                        s = s + select(
                            dist >= 0.0,
                            -slope.unsqueeze(1) * sqrt(max(dist, 0.0)),
                            0.0,
                        );
                    } else {
                        s = s + slope.unsqueeze(1)
                            * (k_pos.unsqueeze(0) - context_len).cast::<f32>();
                    }
                }
                if USE_QQ_BIAS {
                    // Query×query bias (spec §1.4 step 5): row t, column k - context_len.
                    let col = k_pos - context_len;
                    let col_ok = (col >= 0) & (col < qq_bias_stride0);
                    let bias = load(
                        qq_bias + (t * qq_bias_stride0).unsqueeze(1) + col.unsqueeze(0),
                        allowed & col_ok.unsqueeze(0),
                        0.0,
                    );
                    s = s + bias;
                }
                let mut row_max = s.max(1);
                let mut scaled = s;
                if SCALE_AFTER_MAX {
                    // max(s·c) = c·max(s) for c > 0 (rounding is monotone), -inf stays -inf.
                    row_max = row_max * exp_scale;
                    scaled = s * exp_scale;
                }
                let mut m_raw = max(m_i, row_max);
                if LAZY_RESCALE {
                    // A row keeps its running max until a tile's exceeds it by more than
                    // 5.5: its p stay below e^5.5 ≈ 245 (bf16 and the f32 sums hold them
                    // exactly as well as p ≤ 1), its alpha is exactly 1 and the
                    // accumulator's rescale is skipped. The first finite max always
                    // lands (`x − (−inf)` is +inf); an all-masked row stays -inf (NaN > s is
                    // false).
                    m_raw = select(m_raw - m_i > 5.5, m_raw, m_i);
                }
                let m_new = select(m_raw == f32::NEG_INFINITY, 0.0, m_raw);
                let p = exp(scaled - m_new.unsqueeze(1));
                let alpha = exp(m_i - m_new);
                l_i = l_i * alpha + p.sum(1);
                acc = acc * alpha.unsqueeze(1);
                // Keep -inf for rows with nothing allowed yet, so a later merge weights them 0.
                m_i = m_raw;
                // V guard derived from the mask (DSL rule §3.8): only keys some valid row
                // attends. Under V_GUARD_FIRST_KEY the keys the block's rows attend are every
                // key from the first one on (`block_first_key`), and every key below L in a
                // cache without a window: the guard is a bound on the key, which the copy of
                // V evaluates without the mask's per-element work.
                let mut v_keep = full | (allowed.cast::<i32>().max(0) > 0);
                if V_GUARD_FIRST_KEY {
                    if SLIDING_WINDOW > 0 {
                        v_keep = k_pos >= first_key;
                    } else {
                        v_keep = k_ok;
                    }
                }
                let v_tile = load(
                    v_cache + kv_off.unsqueeze(1) + d.unsqueeze(0),
                    (k_ok & v_keep).unsqueeze(1) & d_ok.unsqueeze(0),
                    0.0,
                );
                acc = dot(p.cast::<T>(), v_tile, acc);
            }
        }

        let store_mask = row_valid.unsqueeze(1) & d_ok.unsqueeze(0);
        if IS_3D {
            let ws_row = ((q_start + t) * num_query_heads + h) * NUM_SEGMENTS + segment;
            store(
                segm_out + (ws_row * HEAD_SIZE_PADDED).unsqueeze(1) + d.unsqueeze(0),
                acc,
                store_mask,
            );
            store(segm_max + ws_row, m_i, row_valid);
            store(segm_expsum + ws_row, l_i, row_valid);
        } else {
            // A row whose every key is masked has L = 0: it outputs zeros, never NaN.
            // One reciprocal per row, then a multiply per element: an IEEE division per
            // element of the [BLOCK_M, HEAD_SIZE_PADDED] accumulator is a slow-path check
            // (`FCHK`) and ~10 instructions each, in every program's epilogue.
            let l_safe = select(l_i == 0.0, 1.0, l_i);
            let o = acc * (1.0 / l_safe).unsqueeze(1);
            let out_ptrs = out
                + (tok * out_stride0 + h.cast::<i64>() * out_stride1).unsqueeze(1)
                + d.unsqueeze(0);
            store(out_ptrs, o.cast::<T>(), store_mask);
        }
    }

    /// Combines the 3D kernel's segment partials (spec §5), grid (T, Hq).
    ///
    /// The partials are read `SEGMENT_CHUNK` segments at a time: a whole
    /// `[NUM_SEGMENTS, HEAD_SIZE_PADDED]` f32 tile would need 256 KiB of shared memory for
    /// its column sums at 1024 segments, more than a block may have, so large splits could
    /// not run. The global max `m*` comes first (one `[NUM_SEGMENTS]` vector), so every chunk
    /// is weighted by the same `exp(m_s − m*)` and the sum is the one-pass result.
    #[kernel(
        num_warps = 4,
        require(NUM_SEGMENTS & (NUM_SEGMENTS - 1) == 0, "NUM_SEGMENTS must be a power of two"),
        require(SEGMENT_CHUNK >= 1 && SEGMENT_CHUNK & (SEGMENT_CHUNK - 1) == 0 && SEGMENT_CHUNK <= NUM_SEGMENTS, "SEGMENT_CHUNK must be a power of two in 1..=NUM_SEGMENTS"),
    )]
    pub fn reduce_segments<
        T,
        const HEAD_SIZE: i32,
        const HEAD_SIZE_PADDED: i32,
        const TILE_SIZE: i32,
        const NUM_SEGMENTS: i32,
        const SEGMENT_CHUNK: i32,
    >(
        out: *mut T,
        segm_out: *const f32,
        segm_max: *const f32,
        segm_expsum: *const f32,
        cu_seqlens_q: *const i32,
        seq_lens: *const i32,
        num_seqs: i32,
        num_query_heads: i32,
        out_stride0: i64,
        out_stride1: i64,
    ) {
        let tok = program_id(0);
        let h = program_id(1);
        let seq_idx = find_seq_of_token(cu_seqlens_q, tok, num_seqs);
        let seq_len = load(seq_lens + seq_idx);
        let tiles_per_segment = cdiv(seq_len, NUM_SEGMENTS * TILE_SIZE);
        let active = cdiv(seq_len, tiles_per_segment * TILE_SIZE);
        let base = (tok * num_query_heads + h) * NUM_SEGMENTS;
        let seg = arange::<NUM_SEGMENTS>();
        let m_all = load(segm_max + base + seg, seg < active, f32::NEG_INFINITY);
        let m_star = m_all.max(0);
        let d = arange::<HEAD_SIZE_PADDED>();
        let d_ok = d < HEAD_SIZE;
        let mut e = 0.0;
        let mut num = zeros::<f32>([HEAD_SIZE_PADDED]);
        for c in 0..cdiv(active, SEGMENT_CHUNK) {
            let sc = c * SEGMENT_CHUNK + arange::<SEGMENT_CHUNK>();
            let sc_ok = sc < active;
            let m_s = load(segm_max + base + sc, sc_ok, f32::NEG_INFINITY);
            let l_s = load(segm_expsum + base + sc, sc_ok, 0.0);
            let w = select(sc_ok & (m_s > f32::NEG_INFINITY), exp(m_s - m_star), 0.0);
            e = e + (l_s * w).sum(0);
            let parts = load(
                segm_out + ((base + sc) * HEAD_SIZE_PADDED).unsqueeze(1) + d.unsqueeze(0),
                sc_ok.unsqueeze(1) & d_ok.unsqueeze(0),
                0.0,
            );
            num = num + (parts * w.unsqueeze(1)).sum(0);
        }
        let o = select(e > 0.0, num / select(e > 0.0, e, 1.0), 0.0);
        let out_ptrs = out + tok.cast::<i64>() * out_stride0 + h.cast::<i64>() * out_stride1 + d;
        store(out_ptrs, o.cast::<T>(), d_ok);
    }
}

use crate::kernels::dsl_module::{module_from_template, DslModule, ModuleLoadError};

/// Name of the DSL module above.
pub const MODULE_NAME: &str = "unified";
/// The attention kernel (2D and 3D through `IS_3D`).
pub const ATTENTION_KERNEL: &str = "unified_attention";
/// The 3D segment combine.
pub const REDUCE_KERNEL: &str = "reduce_segments";
/// The default mask device function bound to `MASK` (spec §3.6).
pub const DEFAULT_MASK: &str = "vllm_mask";
/// The default tile-bounds device function bound to `BOUNDS` (spec §4).
pub const DEFAULT_BOUNDS: &str = "vllm_bounds";
/// The full-tile predicate of the default mask, bound to `FULL_TILE`.
pub const DEFAULT_FULL_TILE: &str = "vllm_full_tile";
/// The full-tile predicate of variants that declare none (every tile masked).
pub const NO_FULL_TILE: &str = "no_full_tile";

/// The unified-attention DSL module (parsed once per thread), for run-time specialization
/// and for merging a variant's device functions into it.
///
/// The one place that knows where the module's text comes from: the `#[module]` macro's
/// embedded template source, padded back to its file lines so errors name this file's lines.
pub fn module() -> Result<DslModule, ModuleLoadError> {
    module_from_template(&unified::UNIFIED_ATTENTION_TEMPLATE)
}
