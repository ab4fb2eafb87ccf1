//! Hand-edited kernel sources, for experiments on the GPU without a Rust toolchain: with
//! `ATTN_SOURCE_DUMP=DIR` every source the process compiles (or finds in the cache) is
//! written to `DIR/<entry>.cu`; with `ATTN_SOURCE_OVERRIDE=DIR`, a file `DIR/<entry>.cu`
//! replaces the generated source of that entry. The cache key follows the text, so an
//! edited source never reads or overwrites the generated one's entry. Results of an edited
//! kernel are whatever the edit makes them: for timing what a code change would buy
//! (`scripts/kernel-experiment`), never for parity.

use super::CudaSource;
use std::path::PathBuf;
use std::sync::OnceLock;

/// `source` as this process compiles it: its text replaced by `edited` (from
/// [`replacement`]) when there is one. Everything that keys or compiles the source (the
/// cache lookup and a rebuild after a stale image) goes through this, so an edited kernel
/// is never stored under the generated one's key or the other way round.
pub fn effective<'a>(source: &CudaSource<'a>, edited: &'a Option<String>) -> CudaSource<'a> {
    match edited {
        Some(text) => CudaSource {
            source: text,
            ..*source
        },
        None => *source,
    }
}

/// The override text for `entry`, when `ATTN_SOURCE_OVERRIDE` names a directory holding one.
pub fn replacement(entry: &str) -> Option<String> {
    let dir = std::env::var_os("ATTN_SOURCE_OVERRIDE")?;
    std::fs::read_to_string(PathBuf::from(dir).join(format!("{entry}.cu"))).ok()
}

/// Writes `source` to `ATTN_SOURCE_DUMP/<entry>.cu` when the variable is set (best effort:
/// a dump that fails does not fail the compile).
pub fn dump(entry: &str, source: &str) {
    if let Some(dir) = std::env::var_os("ATTN_SOURCE_DUMP") {
        let dir = PathBuf::from(dir);
        let _ = std::fs::create_dir_all(&dir)
            .and_then(|_| std::fs::write(dir.join(format!("{entry}.cu")), source));
    }
}

/// `ATTN_EXPERIMENT_GRID_X_MULTIPLE=N`: launches pad the grid's x up to a multiple of `N`,
/// for an edited source that declares `__cluster_dims__(N, 1, 1)` (a cluster's programs
/// must tile the grid). Only for kernels whose programs past the work exit, such as the
/// unified attention's (its block index is counted from the grid's end). Read once per
/// process: every launch asks.
pub fn grid_x_multiple() -> Option<u32> {
    static N: OnceLock<Option<u32>> = OnceLock::new();
    *N.get_or_init(|| {
        std::env::var("ATTN_EXPERIMENT_GRID_X_MULTIPLE")
            .ok()?
            .parse()
            .ok()
            .filter(|&n| n > 1)
    })
}

/// `ATTN_EXPERIMENT_TMA_L2_PROMOTION=none|64|128|256`: the L2 promotion of every tensor map
/// the launcher encodes (default 128 bytes), to time what the fetch size does. Read once
/// per process: every launch with tensor maps asks.
pub fn tma_l2_promotion() -> Option<u32> {
    static BYTES: OnceLock<Option<u32>> = OnceLock::new();
    *BYTES.get_or_init(|| {
        match std::env::var("ATTN_EXPERIMENT_TMA_L2_PROMOTION")
            .ok()?
            .as_str()
        {
            "none" => Some(0),
            s => s.parse().ok().filter(|b| [64, 128, 256].contains(b)),
        }
    })
}
