//! Content-keyed module cache (DESIGN §3.6): NVRTC output on disk under
//! `$ATTN_DSL_CACHE_DIR`, so a second process loads a kernel without compiling it.
//! (The in-process, per-kernel slot lives in [`crate::launch::KernelSlot`].)

mod config;
mod disk;
mod key;
pub mod loader_path;
pub mod nvrtc_stamp;

pub use config::{CacheConfig, CACHE_DIR_VAR, CACHE_SWITCH_VAR};
pub use disk::{entry_path, read_entry, write_entry, EntryError};
pub use key::CacheKey;

use crate::jit::{self, CompiledModule, CudaSource, JitError, JitOptions};
use nvrtc_stamp::LibraryIdentity;

/// Where a module came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Loaded from the disk cache: no NVRTC compile.
    Hit,
    /// Compiled now; `stored` says whether the disk entry was written.
    Compiled { stored: bool },
    /// A corrupt entry was found and replaced by a fresh compile.
    Rebuilt { why: String },
    /// The disk cache is off.
    Bypassed,
}

/// A module and how it was obtained.
#[derive(Clone, Debug)]
pub struct CachedModule {
    pub module: CompiledModule,
    pub key: CacheKey,
    pub outcome: CacheOutcome,
}

/// The disk cache in front of [`jit::compile`].
#[derive(Clone, Debug)]
pub struct ModuleCache {
    config: CacheConfig,
}

impl ModuleCache {
    pub fn new(config: CacheConfig) -> Self {
        ModuleCache { config }
    }

    /// The cache the environment asks for (see [`CacheConfig::from_env`]).
    pub fn from_env() -> Self {
        ModuleCache::new(CacheConfig::from_env())
    }

    pub fn config(&self) -> &CacheConfig {
        &self.config
    }

    /// Returns the module for `source` and `opts`, from disk when a valid entry exists,
    /// else compiling it and storing it. Disk problems never fail the call: the module
    /// is compiled and the problem is reported in the outcome.
    pub fn get_or_compile(
        &self,
        source: &CudaSource<'_>,
        opts: &JitOptions,
    ) -> Result<CachedModule, JitError> {
        jit::source_override::dump(source.entry, source.source);
        let edited = jit::source_override::replacement(source.entry);
        let source = &jit::source_override::effective(source, &edited);
        let Some(dir) = &self.config.dir else {
            let module = jit::compile(source, opts)?;
            let key = CacheKey::new(source, opts, &module.nvrtc_version);
            return Ok(CachedModule {
                module,
                key,
                outcome: CacheOutcome::Bypassed,
            });
        };
        // No dlopen of NVRTC on a hit (see `nvrtc_stamp`).
        let id = LibraryIdentity::current();
        let version = nvrtc_stamp::key_version(dir, id.as_ref(), nvrtc_stamp::probe_loaded)?;
        let key = CacheKey::new(source, opts, &version);
        let rebuilt = match read_entry(dir, &key) {
            Ok(mut module) => {
                module.compile_time = std::time::Duration::ZERO;
                return Ok(CachedModule {
                    module,
                    key,
                    outcome: CacheOutcome::Hit,
                });
            }
            Err(EntryError::Missing) => None,
            Err(e) => Some(e.to_string()),
        };
        let module = jit::compile(source, opts)?;
        // The compile loaded NVRTC: its own version is the truth (a stale stamp re-keys here).
        let key = if module.nvrtc_version == version {
            key
        } else {
            if let Some(id) = &id {
                let _ = nvrtc_stamp::write_stamp(dir, id, &module.nvrtc_version);
            }
            CacheKey::new(source, opts, &module.nvrtc_version)
        };
        let stored = write_entry(dir, &key, &module).is_ok();
        let outcome = match rebuilt {
            Some(why) => CacheOutcome::Rebuilt { why },
            None => CacheOutcome::Compiled { stored },
        };
        Ok(CachedModule {
            module,
            key,
            outcome,
        })
    }
}
