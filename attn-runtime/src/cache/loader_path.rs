//! Which file the dynamic loader would open for NVRTC, found with `stat` alone: the cache
//! key needs NVRTC's version, and reading it by loading libnvrtc costs most of a warm start.
//! The search mirrors how cudarc asks for the library (each candidate name in order, one
//! `dlopen` per name) and how glibc looks a name up (`LD_LIBRARY_PATH`, then the
//! directories configured for `ld.so.cache`, then the defaults). Where the mirror could be
//! wrong, [`super::nvrtc_stamp`] only trusts it after checking it against a real load.

use std::ffi::OsStr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The loader's own default directories (searched after `ld.so.cache`).
const DEFAULT_DIRS: [&str; 6] = [
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
];

const LD_SO_CONF: &str = "/etc/ld.so.conf";
const LD_SO_CACHE: &str = "/etc/ld.so.cache";

/// The inputs of one resolution: search directories in order, and the library names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SearchPath {
    /// `LD_LIBRARY_PATH` as given (part of the identity: another value may resolve elsewhere).
    pub ld_library_path: String,
    pub dirs: Vec<PathBuf>,
    pub names: Vec<String>,
}

/// The file names tried for NVRTC: cudarc's candidates when it opens the library itself.
#[cfg(feature = "dynamic-loading")]
fn nvrtc_names() -> Vec<String> {
    cudarc::get_lib_name_candidates("nvrtc")
}

/// Linked builds (`candle-cuda`): the dynamic linker looks for the CUDA 13 library's SONAME.
#[cfg(not(feature = "dynamic-loading"))]
fn nvrtc_names() -> Vec<String> {
    vec!["libnvrtc.so.13".to_string(), "libnvrtc.so".to_string()]
}

/// The library file a search found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedLibrary {
    /// The name cudarc asked for and the directory that had it.
    pub name: String,
    pub dir: PathBuf,
    /// The file behind any symlinks.
    pub canonical: PathBuf,
    /// [`file_stamp`] of the canonical file: a reinstalled library differs.
    pub file_stamp: String,
}

impl SearchPath {
    /// This process's search for NVRTC.
    pub fn for_nvrtc() -> Self {
        let ld = std::env::var_os("LD_LIBRARY_PATH").unwrap_or_default();
        let mut dirs = split_path_list(&ld);
        dirs.extend(ld_so_conf_dirs(Path::new(LD_SO_CONF)));
        dirs.extend(DEFAULT_DIRS.iter().map(PathBuf::from));
        SearchPath {
            ld_library_path: ld.to_string_lossy().into_owned(),
            dirs,
            names: nvrtc_names(),
        }
    }

    /// The first `dir/name` that exists, names outermost (cudarc tries one name at a time).
    pub fn resolve(&self) -> Option<ResolvedLibrary> {
        self.names.iter().find_map(|name| {
            self.dirs.iter().find_map(|dir| {
                let path = dir.join(name);
                let canonical = std::fs::canonicalize(&path).ok()?;
                if !canonical.is_file() {
                    return None;
                }
                Some(ResolvedLibrary {
                    name: name.clone(),
                    dir: dir.clone(),
                    file_stamp: file_stamp(&canonical)?,
                    canonical,
                })
            })
        })
    }
}

/// Bytes hashed at each end of a library file: a rebuilt library differs in its ELF headers
/// and tables even when an installer keeps its size and mtime.
const EDGE_BYTES: u64 = 64 * 1024;

/// `size mtime_ns inode device head+tail-hash` of the file at `path` (`None` if unreadable).
pub fn file_stamp(path: &Path) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path).ok()?;
    let meta = f.metadata().ok()?;
    let mut h = blake3::Hasher::new();
    let mut buf = Vec::with_capacity(EDGE_BYTES as usize);
    (&mut f).take(EDGE_BYTES).read_to_end(&mut buf).ok()?;
    h.update(&buf);
    buf.clear();
    f.seek(SeekFrom::Start(meta.size().saturating_sub(EDGE_BYTES)))
        .ok()?;
    f.take(EDGE_BYTES).read_to_end(&mut buf).ok()?;
    h.update(&buf);
    let mtime_ns = meta.mtime() as i128 * 1_000_000_000 + meta.mtime_nsec() as i128;
    Some(format!(
        "{} {} {} {} {}",
        meta.size(),
        mtime_ns,
        meta.ino(),
        meta.dev(),
        &h.finalize().to_hex()[..16]
    ))
}

/// The stamp of `/etc/ld.so.cache` (`none` without one): `ldconfig` rewrites it when the
/// loader's configured directories change.
pub fn ld_so_cache_stamp() -> String {
    file_stamp(Path::new(LD_SO_CACHE)).unwrap_or_else(|| "none".to_string())
}

fn split_path_list(list: &OsStr) -> Vec<PathBuf> {
    std::env::split_paths(list)
        .filter(|p| !p.as_os_str().is_empty())
        .collect()
}

/// Directories named in `conf` and the files it `include`s (a `*` in the file name part).
pub fn ld_so_conf_dirs(conf: &Path) -> Vec<PathBuf> {
    let Ok(text) = std::fs::read_to_string(conf) else {
        return vec![];
    };
    let mut dirs = vec![];
    for line in text
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
    {
        match line.strip_prefix("include") {
            Some(pattern) if pattern.starts_with(char::is_whitespace) => {
                for file in glob_files(Path::new(pattern.trim())) {
                    dirs.extend(ld_so_conf_dirs(&file));
                }
            }
            _ if line.starts_with('/') => dirs.push(PathBuf::from(line)),
            _ => {}
        }
    }
    dirs
}

/// Files matching `pattern` whose last component may hold one `*`, sorted (as ldconfig does).
fn glob_files(pattern: &Path) -> Vec<PathBuf> {
    let (Some(dir), Some(name)) = (pattern.parent(), pattern.file_name()) else {
        return vec![];
    };
    let name = name.to_string_lossy();
    let (prefix, suffix) = name.split_once('*').unwrap_or((&name, ""));
    let Ok(entries) = std::fs::read_dir(dir) else {
        return vec![];
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            let f = p.file_name().map(|f| f.to_string_lossy().into_owned());
            f.is_some_and(|f| {
                f.len() >= prefix.len() + suffix.len()
                    && f.starts_with(prefix)
                    && f.ends_with(suffix)
            })
        })
        .collect();
    files.sort();
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(test: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("attn-loader-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn search(dirs: &[&Path]) -> SearchPath {
        SearchPath {
            ld_library_path: String::new(),
            dirs: dirs.iter().map(|d| d.to_path_buf()).collect(),
            names: vec!["libnvrtc.so".into(), "libnvrtc.so.13".into()],
        }
    }

    #[test]
    fn names_outrank_directories_and_symlinks_resolve() {
        let root = scratch("order");
        let (a, b) = (root.join("a"), root.join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        std::fs::write(a.join("libnvrtc.so.13"), b"thirteen").unwrap();
        assert_eq!(search(&[&a, &b]).resolve().unwrap().name, "libnvrtc.so.13");
        // A later directory with an earlier name wins: cudarc asks name by name.
        std::os::unix::fs::symlink(a.join("libnvrtc.so.13"), b.join("libnvrtc.so")).unwrap();
        let r = search(&[&a, &b]).resolve().unwrap();
        assert_eq!(
            (r.name.as_str(), r.dir.as_path()),
            ("libnvrtc.so", b.as_path())
        );
        assert_eq!(
            r.canonical,
            std::fs::canonicalize(a.join("libnvrtc.so.13")).unwrap()
        );
        assert!(search(&[&root]).resolve().is_none());
    }

    #[test]
    fn a_rewritten_library_has_another_stamp() {
        let root = scratch("rewrite");
        let lib = root.join("libnvrtc.so");
        std::fs::write(&lib, b"nvrtc 13.0").unwrap();
        let before = search(&[&root]).resolve().unwrap();
        std::fs::remove_file(&lib).unwrap();
        std::fs::write(&lib, b"nvrtc 13.1").unwrap();
        let after = search(&[&root]).resolve().unwrap();
        assert_eq!(before.canonical, after.canonical);
        assert_ne!(before.file_stamp, after.file_stamp, "same size, new bytes");
    }

    #[test]
    fn ld_so_conf_includes_are_followed_in_order() {
        let root = scratch("conf");
        let d = root.join("conf.d");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("b.conf"), "/opt/b\n").unwrap();
        std::fs::write(d.join("a.conf"), "# cuda\n/usr/local/cuda/lib64\n").unwrap();
        std::fs::write(d.join("skip.txt"), "/nope\n").unwrap();
        let conf = root.join("ld.so.conf");
        let include = format!("/first\ninclude {}/*.conf\n", d.display());
        std::fs::write(&conf, include).unwrap();
        let dirs = ld_so_conf_dirs(&conf);
        let want: Vec<PathBuf> = ["/first", "/usr/local/cuda/lib64", "/opt/b"]
            .iter()
            .map(PathBuf::from)
            .collect();
        assert_eq!(dirs, want);
    }
}
