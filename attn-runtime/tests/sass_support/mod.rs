//! SASS instruction counts of a kernel's main loop on a machine without a GPU: the cubin is
//! disassembled by `../shared/tools/sass-counts` (nvdisasm from a wheel) and the counts of
//! its largest loop returned by mnemonic, so a test can pin what one KV tile executes.

#![allow(dead_code)]

use attn_runtime::jit::{compile, Arch, CompiledModule, CudaSource, JitOptions, ModuleImage};
use std::collections::BTreeMap;

/// NVRTC for `arch`, the entry's ptxas statistics printed and asserted spill-free: no spill
/// stores or loads, no stack frame (local memory).
pub fn compile_spill_free(label: &str, source: &CudaSource<'_>, arch: Arch) -> CompiledModule {
    compile_with_spills(label, source, arch, (0, 0, 0))
}

/// NVRTC for `arch`, the entry's (spill store, spill load, stack frame) bytes asserted to be
/// exactly `pinned`: a kernel that trades a few spilled words for speed keeps that trade,
/// and neither more spills nor fewer go unnoticed.
pub fn compile_with_spills(
    label: &str,
    source: &CudaSource<'_>,
    arch: Arch,
    pinned: (u32, u32, u32),
) -> CompiledModule {
    let m =
        compile(source, &JitOptions::new(arch)).unwrap_or_else(|e| panic!("{label}: NVRTC: {e}"));
    let s = m.entry_stats().expect("ptxas statistics");
    println!("{label} {arch:?}: {s:?}");
    assert_eq!(
        (s.spill_store_bytes, s.spill_load_bytes, s.stack_frame_bytes),
        pinned,
        "{label}: spills or local memory: {s:?}"
    );
    m
}

/// The counts line (`loop 0x..-0x..: n=... LDSM=.. HMMA=..`) and its counts, of the largest
/// loop of `cubin`.
pub fn main_loop(label: &str, cubin: &[u8]) -> (String, BTreeMap<String, usize>) {
    loops(label, cubin, 1)
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("{label}: no loop in the SASS counts"))
}

/// The innermost loop holding the most `mnemonic`s: a warp-specialized kernel's consumer
/// loop, where the largest "loop" the backward branches give spans the producer's too.
pub fn innermost_loop_with(
    label: &str,
    cubin: &[u8],
    mnemonic: &str,
) -> (String, BTreeMap<String, usize>) {
    let all = loops(label, cubin, 64);
    let most = all
        .iter()
        .map(|(_, c)| count(c, mnemonic))
        .max()
        .unwrap_or(0);
    all.into_iter()
        .filter(|(_, c)| count(c, mnemonic) == most)
        .min_by_key(|(_, c)| count(c, "n"))
        .unwrap_or_else(|| panic!("{label}: no loop in the SASS counts"))
}

/// The smallest loop whose counts satisfy `wanted` (described by `what` in the panic): a
/// warp-specialized kernel's producer loop, inside the loops the backward branches make
/// around it.
pub fn smallest_loop_where(
    label: &str,
    cubin: &[u8],
    what: &str,
    wanted: impl Fn(&BTreeMap<String, usize>) -> bool,
) -> (String, BTreeMap<String, usize>) {
    loops(label, cubin, 64)
        .into_iter()
        .filter(|(_, c)| wanted(c))
        .min_by_key(|(_, c)| count(c, "n"))
        .unwrap_or_else(|| panic!("{label}: no loop {what}"))
}

/// The counts of the whole kernel of `cubin` (every instruction, loops or not).
pub fn whole_kernel(label: &str, cubin: &[u8]) -> BTreeMap<String, usize> {
    counted(label, cubin, 0, "whole kernel:")
        .into_iter()
        .next()
        .map(|(_, c)| c)
        .unwrap_or_else(|| panic!("{label}: no whole-kernel counts"))
}

/// The `n` largest loops of `cubin`, largest first, as (counts line, counts).
fn loops(label: &str, cubin: &[u8], n: usize) -> Vec<(String, BTreeMap<String, usize>)> {
    counted(label, cubin, n, "loop")
}

/// The counts lines of `sass-counts --loops n` on `cubin` that start with `prefix`.
fn counted(
    label: &str,
    cubin: &[u8],
    n: usize,
    prefix: &str,
) -> Vec<(String, BTreeMap<String, usize>)> {
    let tool =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/tools/sass-counts");
    assert!(tool.exists(), "{label}: {} is missing", tool.display());
    // One file a call: tests of one binary run in parallel, and several disassemble a
    // kernel under the same label (a shared name let one test delete another's cubin).
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!(
        "attn_sass_{label}_{}_{call}.cubin",
        std::process::id()
    ));
    std::fs::write(&path, cubin).expect("write cubin");
    let out = std::process::Command::new(&tool)
        .arg(&path)
        .args(["--loops", &n.to_string()])
        .output()
        .expect("run sass-counts");
    let _ = std::fs::remove_file(&path);
    assert!(
        out.status.success(),
        "{label}: sass-counts failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with(prefix))
        .map(|line| {
            let counts = line
                .split_whitespace()
                .filter_map(|kv| kv.split_once('='))
                .filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
                .collect();
            (line.to_string(), counts)
        })
        .collect()
}

/// The instructions of `cubin` in program order (`nvdisasm -c`, as `sass-counts` finds or
/// installs it), without addresses, labels or encodings: for tests of where ptxas placed
/// an instruction relative to others, which counts cannot tell.
pub fn instructions(label: &str, cubin: &[u8]) -> Vec<String> {
    let cached = || {
        std::env::var("HOME")
            .map(|h| std::path::Path::new(&h).join(".cache/sass-tools/nvidia/cu13/bin/nvdisasm"))
            .ok()
            .filter(|p| p.exists())
    };
    if cached().is_none() {
        // Counting installs nvdisasm where the tool keeps it (if it is not on PATH).
        whole_kernel(label, cubin);
    }
    let exe = cached().map_or_else(|| "nvdisasm".into(), |p| p.display().to_string());
    let path = std::env::temp_dir().join(format!(
        "attn_sass_{label}_{}_listing.cubin",
        std::process::id()
    ));
    std::fs::write(&path, cubin).expect("write cubin");
    let out = std::process::Command::new(&exe)
        .arg("-c")
        .arg(&path)
        .output()
        .unwrap_or_else(|e| panic!("{label}: run {exe}: {e}"));
    let _ = std::fs::remove_file(&path);
    assert!(out.status.success(), "{label}: nvdisasm failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (_, rest) = l.trim().strip_prefix("/*")?.split_once("*/")?;
            let ins = rest.split(';').next()?.trim();
            (!ins.is_empty()).then(|| ins.to_string())
        })
        .collect()
}

/// `R2UR` moves issued between a kernel's warpgroup MMAs (an `HGMMA` among the four
/// instructions before and the four after): a descriptor computed in vector registers,
/// which each `wgmma` then waits to move into uniform ones.
pub fn descriptor_moves_among_mmas(label: &str, cubin: &[u8]) -> usize {
    const NEAR: usize = 4;
    let sass = instructions(label, cubin);
    // Whether an instruction's opcode (past its predicate) starts with `name`.
    let is = |i: &String, name: &str| {
        i.split_whitespace()
            .find(|w| !w.starts_with('@'))
            .is_some_and(|w| w.starts_with(name))
    };
    let mma = |i: &String| is(i, "HGMMA");
    (0..sass.len())
        .filter(|&k| is(&sass[k], "R2UR"))
        .filter(|&k| sass[k.saturating_sub(NEAR)..k].iter().any(mma))
        .filter(|&k| sass[k + 1..(k + 1 + NEAR).min(sass.len())].iter().any(mma))
        .count()
}

/// The count of `key` in `counts` (0 when the loop has none).
pub fn count(counts: &BTreeMap<String, usize>, key: &str) -> usize {
    counts.get(key).copied().unwrap_or(0)
}

/// `source` compiled spill-free for sm_90a ([`compile_spill_free`]): its cubin.
pub fn sm90a_cubin(label: &str, source: &CudaSource<'_>) -> Vec<u8> {
    let arch: Arch = "sm_90a".parse().expect("arch");
    let ModuleImage::Cubin(bytes) = compile_spill_free(label, source, arch).image else {
        panic!("{label}: no cubin");
    };
    bytes
}

/// A warp-specialized producer's loop filling one K and one V tile of 8 rows a thread each
/// (32 16-byte `cp.async`s, K's 8 block-table loads: V reads K's rows), compiled spill-free
/// for sm_90a: its counts line and counts.
pub fn producer_fill_loop(
    label: &str,
    source: &CudaSource<'_>,
) -> (String, BTreeMap<String, usize>) {
    let bytes = sm90a_cubin(label, source);
    let (line, c) = smallest_loop_where(label, &bytes, "filling K and V", |c| {
        count(c, "LDGSTS") == 32
    });
    assert_eq!(count(&c, "LDG"), 8, "{label}: {line}");
    (line, c)
}
