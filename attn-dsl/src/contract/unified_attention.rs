//! The contract of `unified_attention`'s `MASK`, `BOUNDS` and `FULL_TILE` constexprs (the kernel lives
//! in `attn-runtime/src/kernels/unified_attention.rs`; its tests pin that these names and
//! types are exactly what its by-name calls pass).

use super::{ContractArg, ContractRole, SharedConstexpr, VariantContract};

const fn arg(name: &'static str, ty: &'static str, doc: &'static str) -> ContractArg {
    ContractArg { name, ty, doc }
}

/// The sequence's ranges, and the block's candidate span of them: MASK and FULL_TILE get both.
const MM_RANGES: ContractArg = arg(
    "mm_ranges",
    "*const i32",
    "the sequence's [R, 2] multimodal ranges",
);
const MM_FIRST: ContractArg = arg(
    "mm_first",
    "i32",
    "the block's first candidate MM range (the others meet none of its queries)",
);
const MM_END: ContractArg = arg(
    "mm_end",
    "i32",
    "one past the block's last candidate MM range",
);

/// What MASK receives.
pub const MASK_ARGS: &[ContractArg] = &[
    arg(
        "q_abs",
        "Tile<i32>",
        "[M, 1] absolute query positions (context_len + t)",
    ),
    arg("k", "Tile<i32>", "[1, N] absolute key positions"),
    arg(
        "k_first",
        "i32",
        "the smallest key of `k` (per-tile pre-tests)",
    ),
    arg("k_last", "i32", "the largest key of `k`"),
    arg(
        "q_first",
        "i32",
        "the smallest valid query position of the block",
    ),
    arg(
        "q_last",
        "i32",
        "the largest valid query position of the block",
    ),
    arg("seq_len", "i32", "L: keys of the sequence"),
    arg(
        "context_len",
        "i32",
        "L - qlen: keys before the first query",
    ),
    arg("qlen", "i32", "query tokens of the sequence"),
    arg("causal", "bool", "the sequence's causality"),
    arg(
        "rswa_prefix",
        "i32",
        "R-SWA prefix length (0 without R-SWA)",
    ),
    MM_RANGES,
    arg(
        "q_range_lo",
        "Tile<i32>",
        "[M, 1] per-query range starts (MM per-query encoding)",
    ),
    arg("q_range_hi", "Tile<i32>", "[M, 1] per-query range ends"),
    MM_FIRST,
    MM_END,
    arg(
        "aux",
        "*const i32",
        "the sequence's row of the variant's i32 aux tensor",
    ),
    arg(
        "aux_f32",
        "*const f32",
        "the sequence's row of the variant's f32 aux tensor",
    ),
];

/// What BOUNDS receives.
pub const BOUNDS_ARGS: &[ContractArg] = &[
    arg("r", "i32", "which tile range (0..TILE_RANGES), a constexpr"),
    arg("context_len", "i32", "L - qlen"),
    arg("seq_len", "i32", "L"),
    arg("qlen", "i32", "query tokens of the sequence"),
    arg(
        "b",
        "i32",
        "q-block index in the sequence (rows b*BLOCK_Q ..)",
    ),
    arg("causal", "bool", "the sequence's causality"),
    arg("rswa_prefix", "i32", "R-SWA prefix length"),
    MM_RANGES,
    arg("q_range_lo", "Tile<i32>", "[M] per-query range starts"),
    arg("q_range_hi", "Tile<i32>", "[M] per-query range ends"),
    arg(
        "q_abs",
        "Tile<i32>",
        "[M] absolute query positions of the block's rows",
    ),
    arg(
        "row_valid",
        "Tile<bool>",
        "[M] rows that are real (query, head) pairs",
    ),
    arg(
        "aux",
        "*const i32",
        "the sequence's row of the variant's i32 aux tensor",
    ),
    arg(
        "aux_f32",
        "*const f32",
        "the sequence's row of the variant's f32 aux tensor",
    ),
];

/// What FULL_TILE receives: one tile of keys and the block's queries, scalars (the
/// predicate runs once per tile, before the tile is loaded).
pub const FULL_TILE_ARGS: &[ContractArg] = &[
    arg("k_first", "i32", "the tile's first key (j * TILE_SIZE)"),
    arg(
        "k_last",
        "i32",
        "the tile's last key (j * TILE_SIZE + TILE_SIZE - 1)",
    ),
    arg(
        "q_first",
        "i32",
        "absolute position of the block's first valid query",
    ),
    arg(
        "q_last",
        "i32",
        "absolute position of the block's last valid query",
    ),
    arg(
        "msp",
        "i32",
        "the range's key limit min(msp of BOUNDS, L): keys k >= msp are never attended",
    ),
    arg("seq_len", "i32", "L: keys of the sequence"),
    arg("context_len", "i32", "L - qlen"),
    arg("qlen", "i32", "query tokens of the sequence"),
    arg("causal", "bool", "the sequence's causality"),
    arg("rswa_prefix", "i32", "R-SWA prefix length"),
    MM_RANGES,
    MM_FIRST,
    MM_END,
    arg(
        "aux",
        "*const i32",
        "the sequence's row of the variant's i32 aux tensor",
    ),
    arg(
        "aux_f32",
        "*const f32",
        "the sequence's row of the variant's f32 aux tensor",
    ),
];

const fn shared(name: &'static str, ty: &'static str) -> SharedConstexpr {
    SharedConstexpr { name, ty }
}

/// The kernel constexprs a variant may declare and receive.
pub const SHARED: &[SharedConstexpr] = &[
    shared("TILE_SIZE", "i32"),
    shared("BLOCK_M", "i32"),
    shared("BLOCK_Q", "i32"),
    shared("NUM_QUERIES_PER_KV", "i32"),
    shared("SLIDING_WINDOW", "i32"),
    shared("USE_CAUSAL", "bool"),
    shared("USE_PER_SEQ_CAUSAL", "bool"),
    shared("CHUNK_LOOKBACK", "i32"),
    shared("CHUNK_SIZE", "i32"),
    shared("USE_R_SWA", "bool"),
    shared("R_SWA_WINDOW", "i32"),
    shared("USE_MM_PREFIX", "bool"),
    shared("USE_MM_QUERY_RANGE", "bool"),
    shared("MM_PREFIX_CLAMP_SW", "bool"),
    shared("MAX_MM_RANGES", "i32"),
    shared("MASK_INTERVALS", "bool"),
    shared("TILE_RANGES", "i32"),
];

/// A one-program kernel with the attention kernel's row mapping and by-name calls (and
/// the FULL_TILE of a variant that declares none).
const PROBE: &str = r#"
#[device]
fn __unified_variant_no_full_tile(k_first: i32, k_last: i32) -> bool {
    k_first > k_last
}

#[kernel]
pub fn __unified_variant_probe<
    const TILE_SIZE: i32 = 16,
    const BLOCK_M: i32 = 16,
    const BLOCK_Q: i32 = 8,
    const NUM_QUERIES_PER_KV: i32 = 2,
    const SLIDING_WINDOW: i32 = 0,
    const USE_CAUSAL: bool = true,
    const USE_PER_SEQ_CAUSAL: bool = false,
    const CHUNK_LOOKBACK: i32 = -1,
    const CHUNK_SIZE: i32 = 0,
    const USE_R_SWA: bool = false,
    const R_SWA_WINDOW: i32 = 0,
    const USE_MM_PREFIX: bool = false,
    const USE_MM_QUERY_RANGE: bool = false,
    const MM_PREFIX_CLAMP_SW: bool = false,
    const MAX_MM_RANGES: i32 = 1,
    const MASK_INTERVALS: bool = true,
    const MASK: Device,
    const BOUNDS: Device,
    const FULL_TILE: Device = __unified_variant_no_full_tile,
    const TILE_RANGES: i32 = 1,
>(
    geometry: *const i32,
    mm_ranges: *const i32,
    aux: *const i32,
    aux_f32: *const f32,
    out: *mut i32,
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
    let q_range_lo = zeros::<i32>([BLOCK_M]);
    let q_range_hi = zeros::<i32>([BLOCK_M]);
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
            aux,
            aux_f32,
        });
        store(out + 3 * r, lo);
        store(out + 3 * r + 1, hi);
        store(out + 3 * r + 2, msp);
        let full = FULL_TILE(FullTileArgs {
            k_first: lo * TILE_SIZE,
            k_last: lo * TILE_SIZE + TILE_SIZE - 1,
            q_first: context_len + b * BLOCK_Q,
            q_last: context_len + min(b * BLOCK_Q + BLOCK_Q, qlen) - 1,
            msp: min(msp, seq_len),
            seq_len,
            context_len,
            qlen,
            causal,
            rswa_prefix,
            mm_ranges,
            mm_first: 0,
            mm_end: MAX_MM_RANGES,
            aux,
            aux_f32,
        });
        if full {
            store(out + 3 * TILE_RANGES + BLOCK_M * TILE_SIZE + r, 1);
        }
    }
    let k = arange::<TILE_SIZE>();
    let allowed = MASK(MaskArgs {
        q_abs: q_abs.unsqueeze(1),
        k: k.unsqueeze(0),
        k_first: 0,
        k_last: TILE_SIZE - 1,
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
        mm_first: 0,
        mm_end: MAX_MM_RANGES,
        aux,
        aux_f32,
    }) & row_valid.unsqueeze(1);
    store(out + 3 * TILE_RANGES + (rows * TILE_SIZE).unsqueeze(1) + k.unsqueeze(0), allowed.cast::<i32>());
}
"#;

/// `unified_attention`'s contract.
pub const CONTRACT: VariantContract = VariantContract {
    kernel: "unified_attention",
    mask: ContractRole {
        role: "MASK",
        call: "MaskArgs",
        args: MASK_ARGS,
        returns: "Tile<bool>",
        returns_doc: "[M, N]: may row q_abs see key k",
    },
    bounds: ContractRole {
        role: "BOUNDS",
        call: "BoundsArgs",
        args: BOUNDS_ARGS,
        returns: "(i32, i32, i32)",
        returns_doc: "(tile_lo, tile_hi, msp): tile range r, half-open, and the key limit k < msp",
    },
    full_tile: ContractRole {
        role: "FULL_TILE",
        call: "FullTileArgs",
        args: FULL_TILE_ARGS,
        returns: "bool",
        returns_doc: "every valid query of the block may see every key of the tile (and \
                      k_last < msp): the tile skips the mask",
    },
    constexprs: SHARED,
    probe_source: PROBE,
    probe_kernel: "__unified_variant_probe",
};
