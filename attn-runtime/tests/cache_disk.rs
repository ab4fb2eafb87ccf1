//! The disk cache: a second process loads without compiling, an edit invalidates, a
//! truncated or garbage entry is rebuilt, `ATTN_DSL_CACHE=off` bypasses. NVRTC, no GPU.

mod common;

use attn_runtime::cache::nvrtc_stamp::{
    loaded_nvrtc_file, read_stamp, write_stamp, LibraryIdentity,
};
use attn_runtime::cache::{
    entry_path, CacheConfig, CacheOutcome, ModuleCache, CACHE_DIR_VAR, CACHE_SWITCH_VAR,
};
use attn_runtime::jit::{nvrtc_compile_count, nvrtc_version, Arch, CudaSource, JitOptions};
use common::{scratch_dir, TEST_PRELUDE, VADD_SRC};
use std::process::Command;
use std::time::Instant;

const CHILD_DIR_VAR: &str = "ATTN_TEST_CACHE_CHILD_DIR";

fn vadd(src: &str) -> CudaSource<'_> {
    CudaSource::new("test_vadd", src).with_prelude(TEST_PRELUDE)
}

#[test]
fn second_process_loads_without_compiling() {
    let dir = scratch_dir("second-process");
    let cache = ModuleCache::new(CacheConfig::in_dir(&dir));
    let first = cache
        .get_or_compile(&vadd(VADD_SRC), &JitOptions::new(Arch::SM_90))
        .expect("compile");
    assert_eq!(first.outcome, CacheOutcome::Compiled { stored: true });
    let exe = std::env::current_exe().expect("test binary path");
    let out = Command::new(exe)
        .args([
            "--exact",
            "child_loads_from_disk_cache",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR_VAR, &dir)
        .output()
        .expect("spawn the test binary");
    let stdout = String::from_utf8_lossy(&out.stdout);
    print!("{stdout}");
    assert!(
        out.status.success(),
        "child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("CHILD: hit with 0 compiles"),
        "child did not run the check:\n{stdout}"
    );
}

/// Runs only when spawned by `second_process_loads_without_compiling`.
#[test]
fn child_loads_from_disk_cache() {
    let Some(dir) = std::env::var_os(CHILD_DIR_VAR) else {
        return;
    };
    let cache = ModuleCache::new(CacheConfig::in_dir(dir));
    let started = Instant::now();
    let got = cache
        .get_or_compile(&vadd(VADD_SRC), &JitOptions::new(Arch::SM_90))
        .expect("load");
    let warm = started.elapsed();
    assert_eq!(got.outcome, CacheOutcome::Hit);
    assert_eq!(nvrtc_compile_count(), 0, "the child must not run NVRTC");
    assert_eq!(
        loaded_nvrtc_file(),
        None,
        "a warm hit must not load libnvrtc (the key's version comes from the stamp)"
    );
    println!(
        "CACHE warm disk hit (no NVRTC loaded) in {:.3} ms",
        warm.as_secs_f64() * 1e3
    );
    assert!(
        got.module.entry_stats().is_some_and(|s| s.registers > 0),
        "stats survive the cache"
    );
    println!("CHILD: hit with {} compiles", nvrtc_compile_count());
}

#[test]
fn edited_kernel_misses_and_same_kernel_hits() {
    let dir = scratch_dir("edit");
    let cache = ModuleCache::new(CacheConfig::in_dir(&dir));
    let opts = JitOptions::new(Arch::SM_80);
    let a = cache
        .get_or_compile(&vadd(VADD_SRC), &opts)
        .expect("compile a");
    let again = cache
        .get_or_compile(&vadd(VADD_SRC), &opts)
        .expect("load a");
    assert_eq!(again.outcome, CacheOutcome::Hit);
    assert_eq!(again.module.image, a.module.image);
    let edited_src = VADD_SRC.replace("x[i] + attn_twice", "x[i] - attn_twice");
    let b = cache
        .get_or_compile(&vadd(&edited_src), &opts)
        .expect("compile b");
    assert_eq!(b.outcome, CacheOutcome::Compiled { stored: true });
    assert_ne!(a.key, b.key);
    assert_ne!(a.module.image, b.module.image);
    let other_arch = cache
        .get_or_compile(&vadd(VADD_SRC), &JitOptions::new(Arch::SM_90))
        .expect("sm_90");
    assert_ne!(
        other_arch.outcome,
        CacheOutcome::Hit,
        "another arch is another entry"
    );
}

#[test]
fn truncated_or_garbage_entry_is_rebuilt() {
    let dir = scratch_dir("corrupt");
    let cache = ModuleCache::new(CacheConfig::in_dir(&dir));
    let opts = JitOptions::new(Arch::SM_90);
    let good = cache
        .get_or_compile(&vadd(VADD_SRC), &opts)
        .expect("compile");
    let path = entry_path(&dir, &good.key);
    let bytes = std::fs::read(&path).expect("entry written");
    for (label, damaged) in [
        ("truncated", bytes[..bytes.len() / 2].to_vec()),
        ("header only", bytes[..20].to_vec()),
        ("flipped byte", {
            let mut b = bytes.clone();
            let last = b.len() - 1;
            b[last] ^= 0xff;
            b
        }),
        ("garbage", b"not a cache entry at all".to_vec()),
    ] {
        std::fs::write(&path, &damaged).expect("damage the entry");
        let rebuilt = cache
            .get_or_compile(&vadd(VADD_SRC), &opts)
            .expect("rebuild");
        assert!(
            matches!(rebuilt.outcome, CacheOutcome::Rebuilt { .. }),
            "{label}: {:?}",
            rebuilt.outcome
        );
        assert_eq!(rebuilt.module.image, good.module.image, "{label}");
        let after = cache.get_or_compile(&vadd(VADD_SRC), &opts).expect("load");
        assert_eq!(
            after.outcome,
            CacheOutcome::Hit,
            "{label}: the rebuilt entry is valid"
        );
    }
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .expect("dir")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "no temp files left behind");
}

#[test]
fn environment_selects_dir_and_switch() {
    // The only test in this binary that reads the environment.
    let dir = scratch_dir("env");
    std::env::set_var(CACHE_DIR_VAR, &dir);
    std::env::remove_var(CACHE_SWITCH_VAR);
    assert_eq!(CacheConfig::from_env().dir.as_deref(), Some(dir.as_path()));
    std::env::set_var(CACHE_SWITCH_VAR, "off");
    assert_eq!(CacheConfig::from_env().dir, None);
    let cache = ModuleCache::from_env();
    let got = cache
        .get_or_compile(&vadd(VADD_SRC), &JitOptions::new(Arch::SM_90))
        .expect("compile");
    assert_eq!(got.outcome, CacheOutcome::Bypassed);
    assert_eq!(
        std::fs::read_dir(&dir).expect("dir").count(),
        0,
        "bypass writes nothing"
    );
    std::env::remove_var(CACHE_SWITCH_VAR);
    std::env::remove_var(CACHE_DIR_VAR);
    std::env::set_var("XDG_CACHE_HOME", &dir);
    assert_eq!(CacheConfig::from_env().dir, Some(dir.join("attn-dsl")));
}

/// The key follows the NVRTC version recorded for the library identity: a stamp that names
/// another version (what a different NVRTC file would record) misses the entry, the compile
/// re-keys with the loaded NVRTC's own version and corrects the stamp, and the next call hits.
#[test]
fn another_nvrtc_version_misses() {
    let dir = scratch_dir("nvrtc-version");
    let cache = ModuleCache::new(CacheConfig::in_dir(&dir));
    let opts = JitOptions::new(Arch::SM_90);
    let first = cache
        .get_or_compile(&vadd(VADD_SRC), &opts)
        .expect("compile");
    assert_eq!(first.outcome, CacheOutcome::Compiled { stored: true });
    let id = LibraryIdentity::current().expect("the loader search finds the NVRTC the test loads");
    let (major, minor) = nvrtc_version().expect("NVRTC");
    let real = format!("{major}.{minor}");
    assert_eq!(
        read_stamp(&dir, &id).as_deref(),
        Some(real.as_str()),
        "the compile stamped it"
    );
    assert_eq!(
        cache
            .get_or_compile(&vadd(VADD_SRC), &opts)
            .unwrap()
            .outcome,
        CacheOutcome::Hit
    );
    write_stamp(&dir, &id, "12.0").expect("stamp");
    let other = cache
        .get_or_compile(&vadd(VADD_SRC), &opts)
        .expect("recompile");
    assert_ne!(
        other.outcome,
        CacheOutcome::Hit,
        "a 12.0 key must not find the 13.x entry"
    );
    assert_eq!(
        other.key, first.key,
        "re-keyed with the loaded NVRTC's version"
    );
    assert_eq!(
        read_stamp(&dir, &id).as_deref(),
        Some(real.as_str()),
        "stamp corrected"
    );
    assert_eq!(
        cache
            .get_or_compile(&vadd(VADD_SRC), &opts)
            .unwrap()
            .outcome,
        CacheOutcome::Hit
    );
}
