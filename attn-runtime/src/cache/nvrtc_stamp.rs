//! NVRTC's version for the cache key without loading NVRTC. A warm start must not pay for
//! `dlopen("libnvrtc")` (most of an 11.6 ms warm load on the H200) just to read a version, so
//! the version is remembered per *library identity*: the loader's inputs (`LD_LIBRARY_PATH`,
//! `ld.so.cache`), the file the search finds and that file's size, mtime, inode and device.
//! A new NVRTC is a new file (or a new search result), hence a new identity, hence one real
//! load that reads its version — so the key still changes with the NVRTC version. A stamp is
//! written only after a real load proved that the loader opened the file the search found.

use super::loader_path::{ld_so_cache_stamp, ResolvedLibrary, SearchPath};
use crate::jit::{nvrtc_version, JitError};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Subdirectory of the cache directory holding one stamp file per library identity.
const STAMP_DIR: &str = "nvrtc-stamps";

/// Everything that decides which NVRTC a `dlopen` would load, as text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LibraryIdentity {
    text: String,
    /// The file the search found (what a real load must have opened).
    canonical: PathBuf,
}

impl LibraryIdentity {
    /// This process's NVRTC identity, or `None` when the search finds no library.
    pub fn current() -> Option<Self> {
        let search = SearchPath::for_nvrtc();
        let lib = search.resolve()?;
        Some(Self::new(&search, &lib, &ld_so_cache_stamp()))
    }

    pub fn new(search: &SearchPath, lib: &ResolvedLibrary, ld_so_cache: &str) -> Self {
        let text = format!(
            "LD_LIBRARY_PATH={}\nld.so.cache {}\nname {} in {}\nfile {} {}\n",
            search.ld_library_path,
            ld_so_cache,
            lib.name,
            lib.dir.display(),
            lib.canonical.display(),
            lib.file_stamp
        );
        LibraryIdentity {
            text,
            canonical: lib.canonical.clone(),
        }
    }

    fn path(&self, cache_dir: &Path) -> PathBuf {
        let hash = blake3::hash(self.text.as_bytes()).to_hex();
        cache_dir.join(STAMP_DIR).join(hash.as_str())
    }
}

/// The version recorded for `id`, if a stamp with exactly this identity exists.
pub fn read_stamp(cache_dir: &Path, id: &LibraryIdentity) -> Option<String> {
    let text = std::fs::read_to_string(id.path(cache_dir)).ok()?;
    let (version, identity) = text.split_once('\n')?;
    (identity == id.text && !version.is_empty()).then(|| version.to_string())
}

/// Records `version` for `id` (temp file + rename: readers see all of it or nothing).
pub fn write_stamp(cache_dir: &Path, id: &LibraryIdentity, version: &str) -> std::io::Result<()> {
    let path = id.path(cache_dir);
    let dir = cache_dir.join(STAMP_DIR);
    std::fs::create_dir_all(&dir)?;
    let tmp = dir.join(format!(
        ".stamp.{}.{:?}.tmp",
        std::process::id(),
        std::thread::current().id()
    ));
    let written = std::fs::File::create(&tmp)
        .and_then(|mut f| f.write_all(format!("{version}\n{}", id.text).as_bytes()))
        .and_then(|_| std::fs::rename(&tmp, &path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// The NVRTC library mapped into this process (from `/proc/self/maps`), if any.
pub fn loaded_nvrtc_file() -> Option<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .map(PathBuf::from)
        .find(|p| {
            p.file_name()
                .map(|f| f.to_string_lossy())
                .is_some_and(|f| f.starts_with("libnvrtc") && !f.contains("builtins"))
        })
}

/// What a real load reports: the version and the file that was opened.
pub type Probe = fn() -> Result<(String, Option<PathBuf>), JitError>;

/// Loads NVRTC and reads its version (the slow path).
pub fn probe_loaded() -> Result<(String, Option<PathBuf>), JitError> {
    let (major, minor) = nvrtc_version()?;
    Ok((format!("{major}.{minor}"), loaded_nvrtc_file()))
}

/// The NVRTC version for the cache key in `cache_dir`: from the stamp of `id` when there is
/// one, else from `probe` (a real load), recording it when the loaded file is `id`'s.
pub fn key_version(
    cache_dir: &Path,
    id: Option<&LibraryIdentity>,
    probe: Probe,
) -> Result<String, JitError> {
    if let Some(v) = id.and_then(|id| read_stamp(cache_dir, id)) {
        return Ok(v);
    }
    let (version, loaded) = probe()?;
    if let Some(id) = id {
        let same_file = loaded
            .and_then(|p| std::fs::canonicalize(p).ok())
            .is_some_and(|p| p == id.canonical);
        if same_file {
            // A failed write only costs the next process one more load.
            let _ = write_stamp(cache_dir, id, &version);
        }
    }
    Ok(version)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn scratch(test: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("attn-stamp-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// A fake library in `dir` and its identity.
    fn identity(dir: &Path, contents: &str) -> LibraryIdentity {
        std::fs::write(dir.join("libnvrtc.so"), contents).unwrap();
        let search = SearchPath {
            ld_library_path: dir.display().to_string(),
            dirs: vec![dir.to_path_buf()],
            names: vec!["libnvrtc.so".into()],
        };
        LibraryIdentity::new(&search, &search.resolve().unwrap(), "none")
    }

    static PROBES: AtomicUsize = AtomicUsize::new(0);
    static LIB_DIR: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);

    /// A probe that "loads" the fake library of [`LIB_DIR`], whose contents are its version.
    fn fake_probe() -> Result<(String, Option<PathBuf>), JitError> {
        PROBES.fetch_add(1, Ordering::SeqCst);
        let dir = LIB_DIR.lock().unwrap().clone().unwrap();
        let file = dir.join("libnvrtc.so");
        Ok((std::fs::read_to_string(&file).unwrap(), Some(file)))
    }

    fn elsewhere_probe() -> Result<(String, Option<PathBuf>), JitError> {
        Ok((
            "13.0".into(),
            Some(PathBuf::from("/somewhere/else/libnvrtc.so.13")),
        ))
    }

    #[test]
    fn the_stamp_skips_the_load_until_the_library_changes() {
        let cache = scratch("cache");
        let lib = scratch("lib");
        *LIB_DIR.lock().unwrap() = Some(lib.clone());
        let v13 = identity(&lib, "13.0");
        let probes = || PROBES.load(Ordering::SeqCst);
        let start = probes();
        assert_eq!(key_version(&cache, Some(&v13), fake_probe).unwrap(), "13.0");
        assert_eq!(probes(), start + 1, "no stamp yet: one real load");
        assert_eq!(key_version(&cache, Some(&v13), fake_probe).unwrap(), "13.0");
        assert_eq!(probes(), start + 1, "stamped: no load");
        // A new NVRTC installed over the old file: another identity, one load, a new version.
        std::fs::remove_file(lib.join("libnvrtc.so")).unwrap();
        let v131 = identity(&lib, "13.1");
        assert_ne!(v13, v131);
        assert_eq!(
            key_version(&cache, Some(&v131), fake_probe).unwrap(),
            "13.1"
        );
        assert_eq!(probes(), start + 2);
        assert_eq!(
            key_version(&cache, Some(&v131), fake_probe).unwrap(),
            "13.1"
        );
        assert_eq!(probes(), start + 2);
    }

    #[test]
    fn no_stamp_when_the_loader_opened_another_file() {
        let cache = scratch("other-file");
        let lib = scratch("other-lib");
        let id = identity(&lib, "12.9");
        assert_eq!(
            key_version(&cache, Some(&id), elsewhere_probe).unwrap(),
            "13.0"
        );
        assert_eq!(
            read_stamp(&cache, &id),
            None,
            "the search did not find what dlopen loaded"
        );
    }

    #[test]
    fn a_stamp_of_another_identity_is_not_used() {
        let cache = scratch("collide");
        let lib = scratch("collide-lib");
        let id = identity(&lib, "13.0");
        write_stamp(&cache, &id, "13.0").unwrap();
        assert_eq!(read_stamp(&cache, &id).as_deref(), Some("13.0"));
        // Same file name on disk, different recorded identity text: rejected.
        let path = id.path(&cache);
        std::fs::write(&path, "13.0\nLD_LIBRARY_PATH=/other\n").unwrap();
        assert_eq!(read_stamp(&cache, &id), None);
        std::fs::write(&path, "").unwrap();
        assert_eq!(read_stamp(&cache, &id), None);
    }
}
