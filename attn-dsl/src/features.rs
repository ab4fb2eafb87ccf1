//! Code-generation features an A/B measurement can switch, read once per process from the
//! environment, comma-separated: `ATTN_CODEGEN_DISABLE` names shipped features to switch off
//! ([`SHIPPED`]), `ATTN_CODEGEN_ENABLE` opt-in ones to switch on ([`OPT_IN`]); `attn
//! features` prints both tables. A name in neither table is refused with the list of the
//! known ones, since a misspelt switch would otherwise time the default against itself; a
//! name of the other table asks for what is already so and is accepted. The code reads a
//! feature with `on`, whose default is its table's, so shipping a measured opt-in is
//! one row moved from [`OPT_IN`] to [`SHIPPED`].
//! The generated source changes with them, and so does every cache key built from it. Unset
//! (the default) ships the measured choice; `scripts/ab-h200` compares one binary's kernels
//! with and without.

use std::sync::OnceLock;

/// A feature table: (name, what it does).
pub type Table = &'static [(&'static str, &'static str)];

/// Shipped features `ATTN_CODEGEN_DISABLE` can switch off: (name, what it does).
pub const SHIPPED: Table = &[
    (
        "consumer_landing",
        "a split program's consumers wait on its TMA boxes themselves",
    ),
    (
        "copy_fusion",
        "adjacent copies of the same rows share their pass loop and row addresses",
    ),
    (
        "deferred_sum",
        "row sums kept per lane across the loop, reduced once after it",
    ),
    (
        "exact_alpha",
        "a row vector's fast e^(x - y) exactly 1 where x == y",
    ),
    (
        "fill_select",
        "masked fills as `attn_fill_select` while warpgroup MMAs are in flight",
    ),
    ("fold_chains", "row reductions folded in four chains"),
    (
        "guarded_shuffles",
        "a copy mask's row reductions shuffle inside their uniform guard",
    ),
    (
        "hold_a",
        "a dot's A operand held in registers across the loop",
    ),
    (
        "k_split",
        "dots split along K for more independent MMA chains",
    ),
    (
        "lazy_rescale",
        "a running max that moves only past a slack (with exact_alpha)",
    ),
    ("licm", "loop-invariant code motion"),
    ("mask_intervals", "vLLM's mask as one key interval a row"),
    (
        "merge_wgmma",
        "the MLA merge (fused combine + V-up) on warpgroup MMAs over 64-token tiles",
    ),
    ("mma_chain", "MMAs of a dot issued as one chain"),
    (
        "mma_overlap",
        "a pipelined loop's top copies issued behind its first MMA",
    ),
    ("previous_stage", "PV reads V from the previous stage"),
    (
        "row_step",
        "a copy's later passes addressed at a constant from its first",
    ),
    (
        "run_rows",
        "copies' row addresses from their page's first row",
    ),
    (
        "scratch_ledger",
        "a scratch write's barrier dropped where nothing read its bytes since the last one; row reductions' cross-warp slots alternate",
    ),
    (
        "shared_divisor",
        "under fast_math, a tile divided by a shared scalar as a multiply by its reciprocal",
    ),
    (
        "short_last",
        "a sliding-window grid's short first q-blocks of every head launched last",
    ),
    (
        "split_ring",
        "K and V rings of their own under the previous stage",
    ),
    (
        "staged_store",
        "outputs leave through shared memory in 16-byte chunks",
    ),
    ("swizzle", "swizzled shared tiles (else padded rows)"),
    (
        "tma",
        "the copies of kernels whose `tma` attribute asks for boxes, as boxes",
    ),
    ("wait_in_scale", "PV's wait in the rescale's arms"),
    ("wg_turns", "two warpgroups take turns issuing their dots"),
    ("wgmma", "warpgroup MMAs beside `mma.sync`"),
    (
        "wgmma_split",
        "the square tilings' split scores (off only for timing: wrong results)",
    ),
    (
        "warpgroup_loops",
        "a loop running several warpgroups' owned regions emitted once a warpgroup",
    ),
    (
        "uniform_desc",
        "warpgroup MMA descriptors from warp-uniform warp indices (no R2UR a k-step)",
    ),
    (
        "uniform_wg",
        "the turns' warpgroup index broadcast from lane 0 (warp-uniform)",
    ),
    ("ws", "warp specialization"),
];

/// Opt-in features `ATTN_CODEGEN_ENABLE` can switch on: (name, what it does).
pub const OPT_IN: Table = &[
    (
        "byte_rows",
        "a split ring's producer keeps V's row offsets in bytes",
    ),
    (
        "copy_arrive",
        "the producer's copies complete on the stage's mbarrier",
    ),
    (
        "fill_select_all",
        "masked fills as `attn_fill_select` with no MMA in flight too",
    ),
    (
        "heads_fastest",
        "the unified-attention grid on one axis, KV heads fastest",
    ),
    (
        "mask_bound",
        "a producer's copy masks test each row against a uniform bound",
    ),
    (
        "merge_t128",
        "the MLA merge on warpgroup MMAs over 128-token tiles at dcp 1 (one program a head)",
    ),
    (
        "page_pointer",
        "a producer's block-table entries at a constant from one pointer",
    ),
    (
        "page_row",
        "a producer's rows as one mad.wide on the thread's base (with wide_mul)",
    ),
    (
        "pv_behind",
        "PV of the previous tile issued with the scores",
    ),
    (
        "pv_wait_behind",
        "PV after the softmax waited for in the next iteration, in the carried accumulator",
    ),
    ("rotate", "scores computed one tile ahead"),
    (
        "seesaw",
        "two warpgroups take a key loop's tiles in turn, each its own scores",
    ),
    (
        "softmax_ahead",
        "the scores' softmax run under PV, rotation included",
    ),
    (
        "split_row_step",
        "`row_step` in a split ring's producer too",
    ),
    ("swizzle", "swizzled tiles for the issue-bound copies too"),
    ("tma", "TMA copies on sm_90a in every kernel"),
    (
        "two_stage_overlap",
        "PV from the previous stage on two-stage rings split into K and V parts",
    ),
    (
        "unroll_scans",
        "short scalar loops with constant bounds unrolled by 8",
    ),
    (
        "wide_mul",
        "strides promised in int range, times an int in one widening multiply",
    ),
];

/// The names in `value` (a comma-separated list; blanks ignored), each checked against
/// `known`, the table `var` switches, and `other`, the other table: a name of `other` alone
/// asks for what is already so (enabling a shipped feature, disabling an opt-in one) and
/// is dropped, so switches stay valid when a feature ships; a name in neither is an error
/// naming `var` and its known names.
pub fn parse(
    var: &str,
    value: &str,
    known: &[(&str, &str)],
    other: &[(&str, &str)],
) -> Result<Vec<String>, String> {
    let has = |table: &[(&str, &str)], n: &str| table.iter().any(|(k, _)| *k == n);
    let names: Vec<String> = value
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect();
    match names.iter().find(|n| !has(known, n) && !has(other, n)) {
        None => Ok(names.into_iter().filter(|n| has(known, n)).collect()),
        Some(n) => {
            let all: Vec<&str> = known.iter().map(|(k, _)| *k).collect();
            Err(format!(
                "{var} names `{n}`, which is not one of its features: {}",
                all.join(", ")
            ))
        }
    }
}

/// Checks both variables' lists ([`parse`]); the code generator panics on the same error
/// when it first reads one, so tools call this first to report it cleanly.
pub fn check_environment() -> Result<(), String> {
    for (var, known, other) in [
        ("ATTN_CODEGEN_DISABLE", SHIPPED, OPT_IN),
        ("ATTN_CODEGEN_ENABLE", OPT_IN, SHIPPED),
    ] {
        parse(var, &std::env::var(var).unwrap_or_default(), known, other)?;
    }
    Ok(())
}

fn listed(
    var: &str,
    (known, other): (Table, Table),
    cell: &'static OnceLock<Vec<String>>,
    feature: &str,
) -> bool {
    // Read for every op the code generator renders: the registry is checked in debug
    // builds (every test) and by `tests/feature_registry.rs`, not on each release call.
    debug_assert!(
        known.iter().any(|(k, _)| *k == feature),
        "internal error: feature `{feature}` is not registered for {var}"
    );
    cell.get_or_init(|| {
        let value = std::env::var(var).unwrap_or_default();
        parse(var, &value, known, other).unwrap_or_else(|e| panic!("{e}"))
    })
    .iter()
    .any(|d| d == feature)
}

/// Whether `feature` is on: a shipped one unless `ATTN_CODEGEN_DISABLE` names it, an opt-in
/// one when `ATTN_CODEGEN_ENABLE` does. Shipping a measured opt-in is then one row moved
/// from [`OPT_IN`] to [`SHIPPED`]: its readers, and the tests and scripts that enable it by
/// name (an enabled shipped feature is simply on), stay as they are. `swizzle` and `tma`
/// are in both tables with different meanings, so their readers say which
/// ([`disabled`] / [`enabled`]).
pub(crate) fn on(feature: &str) -> bool {
    let has = |table: Table| table.iter().any(|(n, _)| *n == feature);
    // Like `listed`'s registry check, for debug builds only: `on` is read for every op the
    // code generator renders.
    debug_assert!(
        has(SHIPPED) != has(OPT_IN),
        "internal error: feature `{feature}` must be in exactly one table to be read with `on`"
    );
    if has(OPT_IN) {
        enabled(feature)
    } else {
        !disabled(feature)
    }
}

/// Whether shipped feature `feature` is switched off.
pub(crate) fn disabled(feature: &str) -> bool {
    static DISABLED: OnceLock<Vec<String>> = OnceLock::new();
    listed(
        "ATTN_CODEGEN_DISABLE",
        (SHIPPED, OPT_IN),
        &DISABLED,
        feature,
    )
}

/// Whether opt-in feature `feature` is switched on.
pub(crate) fn enabled(feature: &str) -> bool {
    static ENABLED: OnceLock<Vec<String>> = OnceLock::new();
    listed("ATTN_CODEGEN_ENABLE", (OPT_IN, SHIPPED), &ENABLED, feature)
}

/// Whether the unified-attention grid runs its (q-block, KV head) programs on one axis with
/// the heads fastest (opt-in: `ATTN_CODEGEN_ENABLE=heads_fastest`; read by the op's plan).
pub fn heads_fastest() -> bool {
    on("heads_fastest")
}

/// Whether the MLA plan runs the fused combine + V-up on warpgroup MMAs over 64-token tiles
/// where the step has 64 tokens or more (shipped in session 28: L1's merge 19.4 → 17.7 µs on
/// the H100; `ATTN_CODEGEN_DISABLE=merge_wgmma`; read by the op's plan on sm_90a).
pub fn merge_wgmma() -> bool {
    on("merge_wgmma")
}

/// Whether the MLA plan's merge on warpgroup MMAs takes 128 tokens a program where a step of
/// one rank has them (one program a head, `W_UV[n]` read once; opt-in:
/// `ATTN_CODEGEN_ENABLE=merge_t128`; read by the op's plan on sm_90a).
pub fn merge_t128() -> bool {
    on("merge_t128")
}

/// Whether a sliding-window unified-attention grid launches the first q-blocks of every KV
/// head (those whose window the sequence's start clips) last, heads fastest, and the others
/// head by head as before (shipped in session 28: P1 −2 %, P3 −3 % on the H100;
/// `ATTN_CODEGEN_DISABLE=short_last`; read by the op's plan).
pub fn short_last() -> bool {
    on("short_last")
}

/// Whether a launch promises its 64-bit strides in `int`'s range where they are, so a page
/// times its stride is one widening multiply (opt-in: `ATTN_CODEGEN_ENABLE=wide_mul`; read
/// by the ops' plans, which put the promise in the kernel's key).
pub fn wide_mul() -> bool {
    on("wide_mul")
}

/// Whether the unified-attention kernel moves a row's running max only when a tile's max
/// exceeds it by more than its slack, so most tiles skip the accumulator's rescale (shipped
/// in session 20: 1–4 % off P0, P1, P3 and L1 on the H200; `ATTN_CODEGEN_DISABLE=lazy_rescale`;
/// read by the ops' plans).
pub fn lazy_rescale() -> bool {
    on("lazy_rescale")
}

/// Whether vLLM's built-in mask tests each score against one key interval per row where
/// its terms allow it (shipped; `ATTN_CODEGEN_DISABLE=mask_intervals` evaluates the terms
/// per score; read by the op's plan).
pub fn mask_intervals() -> bool {
    on("mask_intervals")
}

/// Whether the code generator emits warpgroup MMAs (`wgmma`, compiled on sm_90a) beside
/// `mma.sync` for the dots that fit them (shipped; `ATTN_CODEGEN_DISABLE=wgmma` turns it
/// off): a launch table picks its tilings by it.
pub fn warpgroup_mma() -> bool {
    on("wgmma")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_and_unknown_names_are_refused() {
        assert_eq!(
            parse("ATTN_CODEGEN_ENABLE", " wide_mul, ,tma ", OPT_IN, SHIPPED),
            Ok(vec!["wide_mul".to_string(), "tma".to_string()])
        );
        assert_eq!(
            parse("ATTN_CODEGEN_DISABLE", "", SHIPPED, OPT_IN),
            Ok(vec![])
        );
        let e = parse("ATTN_CODEGEN_ENABLE", "wide_mull", OPT_IN, SHIPPED).expect_err("misspelt");
        assert!(e.contains("`wide_mull`") && e.contains(", wide_mul"), "{e}");
        // Enabling a shipped feature (or disabling an opt-in one) asks for what is so.
        assert_eq!(
            parse("ATTN_CODEGEN_ENABLE", "hold_a,wide_mul", OPT_IN, SHIPPED),
            Ok(vec!["wide_mul".to_string()])
        );
        assert_eq!(
            parse("ATTN_CODEGEN_DISABLE", "wide_mul", SHIPPED, OPT_IN),
            Ok(vec![])
        );
    }

    #[test]
    fn names_are_unique_in_each_table() {
        for table in [SHIPPED, OPT_IN] {
            let mut names: Vec<&str> = table.iter().map(|(n, _)| *n).collect();
            names.sort_unstable();
            names.dedup();
            assert_eq!(names.len(), table.len());
        }
    }
}
