//! The cache key: a blake3 digest of everything that determines the compiled bytes
//! (DESIGN §3.6) — the source, the prelude, this runtime's version, the arch, the NVRTC
//! version and the options. Never names, paths or mtimes.

use crate::jit::{CudaSource, JitOptions};
use std::fmt;

/// 32-byte content key of one compiled module.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CacheKey(pub [u8; 32]);

impl CacheKey {
    /// Keys `source` compiled with `opts` by NVRTC `nvrtc_version`.
    pub fn new(source: &CudaSource<'_>, opts: &JitOptions, nvrtc_version: &str) -> Self {
        let mut h = blake3::Hasher::new();
        // Each field is length-prefixed so no two field splits give the same stream.
        let mut field = |bytes: &[u8]| {
            h.update(&(bytes.len() as u64).to_le_bytes());
            h.update(bytes);
        };
        field(b"attn-dsl module cache v1");
        field(env!("CARGO_PKG_VERSION").as_bytes());
        field(source.entry.as_bytes());
        field(source.source.as_bytes());
        field(source.prelude_name.as_bytes());
        field(source.prelude.as_bytes());
        field(opts.arch.to_string().as_bytes());
        field(nvrtc_version.as_bytes());
        field(opts.fingerprint().as_bytes());
        CacheKey(*h.finalize().as_bytes())
    }

    pub fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl fmt::Display for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.hex())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jit::Arch;

    #[test]
    fn key_changes_with_every_input() {
        let src = CudaSource::new("k", "extern \"C\" __global__ void k() {}").with_prelude("// p");
        let o90 = JitOptions::new(Arch::SM_90);
        let base = CacheKey::new(&src, &o90, "13.0");
        assert_eq!(base, CacheKey::new(&src, &o90, "13.0"), "deterministic");
        let edited = CudaSource {
            source: "extern \"C\" __global__ void k() { }",
            ..src
        };
        assert_ne!(base, CacheKey::new(&edited, &o90, "13.0"));
        assert_ne!(base, CacheKey::new(&src.with_prelude("// q"), &o90, "13.0"));
        assert_ne!(
            base,
            CacheKey::new(&src, &JitOptions::new(Arch::SM_80), "13.0")
        );
        assert_ne!(base, CacheKey::new(&src, &o90, "13.1"));
        let mut extra = o90.clone();
        extra.extra.push("--use_fast_math".into());
        assert_ne!(base, CacheKey::new(&src, &extra, "13.0"));
        assert_eq!(base.hex().len(), 64);
    }
}
