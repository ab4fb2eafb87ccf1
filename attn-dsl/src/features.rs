//! Code-generation features an A/B measurement can switch, read once per process from the
//! environment: `ATTN_CODEGEN_DISABLE` lists shipped features to switch off (`copy_fusion`,
//! `deferred_sum`, `fill_select`, `fold_chains`, `guarded_shuffles`, `hold_a`, `k_split`, `licm`, `mask_intervals`, `mma_chain`, `mma_overlap`,
//! `previous_stage`, `row_step` (a copy's later passes addressed at a constant from its
//! first), `run_rows` (copies' row addresses from their page's first row), `split_ring` (K
//! and V rings of their own under the previous stage), `staged_store`, `swizzle`,
//! `wait_in_scale`, `tma` (the copies of kernels whose `tma`
//! attribute asks for boxes, by `cp.async` instead), `consumer_landing` (a split program's
//! consumers waiting on its TMA boxes themselves), `wg_turns`, `wgmma`, `ws`; `wgmma_split`, the square tilings' split scores,
//! only for timing: unsplit they compute wrong results), `ATTN_CODEGEN_ENABLE` ones to force
//! on (`swizzle`
//! for issue-bound copies, `tma` for TMA copies on sm_90a in every kernel, not only those
//! whose `tma` attribute asks — the producer warpgroup's in a split program, else the math
//! warps' — `rotate` for scores computed one tile ahead,
//! `softmax_ahead` for those scores' softmax run under PV, rotation included, `pv_behind`
//! for PV of the previous tile issued with the scores and the softmax under it on every
//! warpgroup loop (shipped only where the split reads V from the previous stage),
//! `copy_arrive` for the producer's copies completing on the stage's mbarrier,
//! `heads_fastest` for the unified-attention grid's programs on one axis, KV heads fastest,
//! `unroll_scans` for short scalar loops with constant bounds unrolled by 8, `page_pointer`
//! for a producer's block-table entries at a constant from one pointer a tile, `byte_rows`
//! for the row offsets a split ring's producer keeps for V kept in bytes, `mask_bound` for a
//! producer's copy masks testing each row against the tile's uniform bound,
//! `split_row_step` for `row_step` in a split ring's producer too, `wide_mul` for strides
//! promised in `int`'s range and multiplied by sign-extended `int`s in one widening
//! multiply, `lazy_rescale` for a running max that moves only past a slack (with
//! `exact_alpha`),
//! `fill_select_all` for masked fills through `attn_fill_select` with no MMA in flight
//! too, `exact_alpha` for a row vector's fast e^(x − y) exactly 1 where x == y),
//! comma-separated.
//! The generated source changes with them, and so does every cache key built from it. Unset
//! (the default) ships the measured choice; `scripts/ab-h200` compares one binary's kernels
//! with and without.

use std::sync::OnceLock;

fn listed(var: &str, cell: &'static OnceLock<Vec<String>>, feature: &str) -> bool {
    cell.get_or_init(|| {
        std::env::var(var)
            .map(|v| v.split(',').map(|s| s.trim().to_string()).collect())
            .unwrap_or_default()
    })
    .iter()
    .any(|d| d == feature)
}

/// Whether shipped feature `feature` is switched off.
pub(crate) fn disabled(feature: &str) -> bool {
    static DISABLED: OnceLock<Vec<String>> = OnceLock::new();
    listed("ATTN_CODEGEN_DISABLE", &DISABLED, feature)
}

/// Whether opt-in feature `feature` is switched on.
pub(crate) fn enabled(feature: &str) -> bool {
    static ENABLED: OnceLock<Vec<String>> = OnceLock::new();
    listed("ATTN_CODEGEN_ENABLE", &ENABLED, feature)
}

/// Whether the unified-attention grid runs its (q-block, KV head) programs on one axis with
/// the heads fastest (opt-in: `ATTN_CODEGEN_ENABLE=heads_fastest`; read by the op's plan).
pub fn heads_fastest() -> bool {
    enabled("heads_fastest")
}

/// Whether a launch promises its 64-bit strides in `int`'s range where they are, so a page
/// times its stride is one widening multiply (opt-in: `ATTN_CODEGEN_ENABLE=wide_mul`; read
/// by the ops' plans, which put the promise in the kernel's key).
pub fn wide_mul() -> bool {
    enabled("wide_mul")
}

/// Whether the unified-attention kernel moves a row's running max only when a tile's max
/// exceeds it by more than its slack, so most tiles skip the accumulator's rescale (opt-in:
/// `ATTN_CODEGEN_ENABLE=lazy_rescale`; read by the op's plan).
pub fn lazy_rescale() -> bool {
    enabled("lazy_rescale")
}

/// Whether vLLM's built-in mask tests each score against one key interval per row where
/// its terms allow it (shipped; `ATTN_CODEGEN_DISABLE=mask_intervals` evaluates the terms
/// per score; read by the op's plan).
pub fn mask_intervals() -> bool {
    !disabled("mask_intervals")
}

/// Whether the code generator emits warpgroup MMAs (`wgmma`, compiled on sm_90a) beside
/// `mma.sync` for the dots that fit them (shipped; `ATTN_CODEGEN_DISABLE=wgmma` turns it
/// off): a launch table picks its tilings by it.
pub fn warpgroup_mma() -> bool {
    !disabled("wgmma")
}
