//! Where compiled kernels are kept on disk, from the environment.

use std::path::PathBuf;

/// `ATTN_DSL_CACHE_DIR`: the cache directory (default: the user cache dir).
pub const CACHE_DIR_VAR: &str = "ATTN_DSL_CACHE_DIR";
/// `ATTN_DSL_CACHE=off` (or `0`, `false`, `no`): compile every time, never touch the disk.
pub const CACHE_SWITCH_VAR: &str = "ATTN_DSL_CACHE";

/// The on-disk cache location, or `None` when the disk cache is off.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheConfig {
    pub dir: Option<PathBuf>,
}

impl CacheConfig {
    /// Reads `ATTN_DSL_CACHE` / `ATTN_DSL_CACHE_DIR`, falling back to
    /// `$XDG_CACHE_HOME/attn-dsl`, then `~/.cache/attn-dsl`; off when no location is known.
    pub fn from_env() -> Self {
        let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
        let off = std::env::var(CACHE_SWITCH_VAR)
            .map(|v| {
                matches!(
                    v.to_ascii_lowercase().as_str(),
                    "off" | "0" | "false" | "no"
                )
            })
            .unwrap_or(false);
        if off {
            return CacheConfig { dir: None };
        }
        let dir = var(CACHE_DIR_VAR)
            .map(PathBuf::from)
            .or_else(|| var("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("attn-dsl")))
            .or_else(|| var("HOME").map(|h| PathBuf::from(h).join(".cache").join("attn-dsl")));
        CacheConfig { dir }
    }

    /// A cache in `dir` (tests).
    pub fn in_dir(dir: impl Into<PathBuf>) -> Self {
        CacheConfig {
            dir: Some(dir.into()),
        }
    }

    /// No disk cache.
    pub fn disabled() -> Self {
        CacheConfig { dir: None }
    }
}
