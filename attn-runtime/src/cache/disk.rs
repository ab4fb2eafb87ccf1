//! One cache entry per file, written atomically (temp file + rename) and verified on read.
//!
//! Layout: `MAGIC` (8 bytes) · key (32) · payload length (u64 LE) · blake3(payload) (32)
//! · payload. The payload is `meta length (u32 LE) · meta JSON · image bytes`, where the
//! meta holds everything of the `CompiledModule` except the image (kept binary). Any mismatch — wrong magic,
//! another key, a short file, a bad checksum, unparsable JSON — reads as "no entry", so a
//! corrupt cache is rebuilt rather than fatal.

use super::CacheKey;
use crate::jit::{CompiledModule, KernelStats, ModuleImage};
use serde::{Deserialize, Serialize};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

const MAGIC: &[u8; 8] = b"ATTNMOD1";
const HEADER_LEN: usize = 8 + 32 + 8 + 32;

/// Why an entry could not be used (reported by `attn compile`; never fatal).
#[derive(Debug, thiserror::Error)]
pub enum EntryError {
    #[error("no cache entry")]
    Missing,
    #[error("cache entry {path} is corrupt ({why}); it will be rebuilt")]
    Corrupt { path: PathBuf, why: String },
    #[error("cache I/O on {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The file that holds `key` under `dir`.
pub fn entry_path(dir: &Path, key: &CacheKey) -> PathBuf {
    dir.join(format!("{}.attnmod", key.hex()))
}

/// Reads and verifies the entry for `key`.
pub fn read_entry(dir: &Path, key: &CacheKey) -> Result<CompiledModule, EntryError> {
    let path = entry_path(dir, key);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(EntryError::Missing),
        Err(source) => return Err(EntryError::Io { path, source }),
    };
    let corrupt = |why: &str| EntryError::Corrupt {
        path: path.clone(),
        why: why.to_string(),
    };
    if bytes.len() < HEADER_LEN {
        return Err(corrupt(&format!(
            "{} bytes, shorter than the {HEADER_LEN}-byte header",
            bytes.len()
        )));
    }
    if &bytes[..8] != MAGIC {
        return Err(corrupt("bad magic"));
    }
    if bytes[8..40] != key.0 {
        return Err(corrupt("key mismatch"));
    }
    let mut len_bytes = [0u8; 8];
    len_bytes.copy_from_slice(&bytes[40..48]);
    let len = u64::from_le_bytes(len_bytes) as usize;
    let payload = &bytes[HEADER_LEN..];
    if payload.len() != len {
        return Err(corrupt(&format!(
            "payload is {} bytes, header says {len}",
            payload.len()
        )));
    }
    if blake3::hash(payload).as_bytes()[..] != bytes[48..80] {
        return Err(corrupt("checksum mismatch"));
    }
    decode_payload(payload).map_err(|why| corrupt(&why))
}

/// The module without its image, as stored in an entry.
#[derive(Serialize, Deserialize)]
struct EntryMeta {
    entry: String,
    arch_label: String,
    /// `cubin` or `ptx`.
    kind: String,
    stats: Vec<KernelStats>,
    log: String,
    nvrtc_version: String,
}

fn encode_payload(m: &CompiledModule) -> Result<Vec<u8>, serde_json::Error> {
    let meta = EntryMeta {
        entry: m.entry.clone(),
        arch_label: m.arch_label.clone(),
        kind: m.image.kind().to_string(),
        stats: m.stats.clone(),
        log: m.log.clone(),
        nvrtc_version: m.nvrtc_version.clone(),
    };
    let meta = serde_json::to_vec(&meta)?;
    let image: &[u8] = match &m.image {
        ModuleImage::Cubin(b) => b,
        ModuleImage::Ptx(s) => s.as_bytes(),
    };
    let mut out = Vec::with_capacity(4 + meta.len() + image.len());
    out.extend_from_slice(&(meta.len() as u32).to_le_bytes());
    out.extend_from_slice(&meta);
    out.extend_from_slice(image);
    Ok(out)
}

fn decode_payload(payload: &[u8]) -> Result<CompiledModule, String> {
    let len_bytes: [u8; 4] = payload
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .ok_or("payload too short")?;
    let meta_len = u32::from_le_bytes(len_bytes) as usize;
    let meta_bytes = payload
        .get(4..4 + meta_len)
        .ok_or("meta length past the end")?;
    let meta: EntryMeta =
        serde_json::from_slice(meta_bytes).map_err(|e| format!("unreadable meta: {e}"))?;
    let image_bytes = payload[4 + meta_len..].to_vec();
    let image = match meta.kind.as_str() {
        "cubin" => ModuleImage::Cubin(image_bytes),
        "ptx" => ModuleImage::Ptx(String::from_utf8(image_bytes).map_err(|_| "PTX is not UTF-8")?),
        other => return Err(format!("unknown image kind `{other}`")),
    };
    if image.is_empty() {
        return Err("empty image".into());
    }
    Ok(CompiledModule {
        entry: meta.entry,
        arch_label: meta.arch_label,
        image,
        stats: meta.stats,
        log: meta.log,
        compile_time: std::time::Duration::ZERO,
        nvrtc_version: meta.nvrtc_version,
    })
}

/// Writes the entry for `key` atomically: readers see the old file or the whole new one.
pub fn write_entry(
    dir: &Path,
    key: &CacheKey,
    module: &CompiledModule,
) -> Result<PathBuf, EntryError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| EntryError::Io { path, source }
    };
    fs::create_dir_all(dir).map_err(io(dir))?;
    let payload = encode_payload(module).map_err(|e| EntryError::Io {
        path: dir.to_path_buf(),
        source: std::io::Error::other(e),
    })?;
    let mut bytes = Vec::with_capacity(HEADER_LEN + payload.len());
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&key.0);
    bytes.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    bytes.extend_from_slice(blake3::hash(&payload).as_bytes());
    bytes.extend_from_slice(&payload);

    let final_path = entry_path(dir, key);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let tmp = dir.join(format!(".{}.{}.{nanos}.tmp", key.hex(), std::process::id()));
    let written = fs::File::create(&tmp)
        .and_then(|mut f| f.write_all(&bytes).and_then(|_| f.sync_all()))
        .and_then(|_| fs::rename(&tmp, &final_path));
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(io(&final_path)(e));
    }
    Ok(final_path)
}
