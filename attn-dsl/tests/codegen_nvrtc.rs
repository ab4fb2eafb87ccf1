//! Every test program's CUDA compiles with NVRTC for sm_80 and sm_90 (no GPU needed).
//!
//! NVRTC must be loadable: run `eval "$(scripts/nvrtc-env)"` first. A missing NVRTC is a
//! failure, not a skip.

mod codegen_common;

use attn_dsl::codegen::{emit_cuda, CudaKernel, PRELUDE, PRELUDE_NAME};
use cudarc::nvrtc::sys;
use std::ffi::{c_char, CStr, CString};

const ARCHS: [&str; 2] = ["sm_80", "sm_90"];

/// What NVRTC produced for one kernel and arch.
struct Compiled {
    cubin_len: usize,
    log: String,
}

fn check(r: sys::nvrtcResult, what: &str) -> Result<(), String> {
    if r == sys::nvrtcResult::NVRTC_SUCCESS {
        Ok(())
    } else {
        Err(format!("{what}: {r:?}"))
    }
}

fn require_nvrtc() {
    // SAFETY: probing for the shared library has no preconditions.
    let present = unsafe { sys::is_culib_present() };
    assert!(
        present,
        "NVRTC (libnvrtc.so.13) cannot be loaded: run `eval \"$(scripts/nvrtc-env)\"` before `cargo test`"
    );
}

/// Compiles `k` to a cubin for `arch` with the runtime's options (+ `extra`), handing the
/// prelude over as an in-memory header.
fn nvrtc_compile(k: &CudaKernel, arch: &str, extra: &[&str]) -> Result<Compiled, String> {
    require_nvrtc();
    let src = CString::new(k.source.as_str()).map_err(|e| e.to_string())?;
    let name = CString::new(format!("{}.cu", k.entry)).map_err(|e| e.to_string())?;
    let header = CString::new(PRELUDE).map_err(|e| e.to_string())?;
    let header_name = CString::new(PRELUDE_NAME).map_err(|e| e.to_string())?;
    let headers = [header.as_ptr()];
    let include_names = [header_name.as_ptr()];
    let mut opts: Vec<CString> = vec![
        format!("--gpu-architecture={arch}"),
        "--std=c++17".into(),
        "-lineinfo".into(),
    ]
    .into_iter()
    .chain(extra.iter().map(|s| s.to_string()))
    .map(|s| CString::new(s).expect("option without NUL"))
    .collect();
    opts.shrink_to_fit();
    let opt_ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
    let mut prog: sys::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: every pointer handed to NVRTC points into CStrings that outlive the program,
    // which is destroyed before they are dropped.
    unsafe {
        check(
            sys::nvrtcCreateProgram(
                &mut prog,
                src.as_ptr(),
                name.as_ptr(),
                1,
                headers.as_ptr(),
                include_names.as_ptr(),
            ),
            "nvrtcCreateProgram",
        )?;
        let compiled = sys::nvrtcCompileProgram(prog, opt_ptrs.len() as i32, opt_ptrs.as_ptr());
        let mut log_len = 0usize;
        check(sys::nvrtcGetProgramLogSize(prog, &mut log_len), "log size")?;
        let mut log = vec![0 as c_char; log_len.max(1)];
        check(sys::nvrtcGetProgramLog(prog, log.as_mut_ptr()), "log")?;
        let log = CStr::from_ptr(log.as_ptr()).to_string_lossy().into_owned();
        let result = if compiled == sys::nvrtcResult::NVRTC_SUCCESS {
            let mut n = 0usize;
            check(sys::nvrtcGetCUBINSize(prog, &mut n), "cubin size")?;
            Ok(Compiled { cubin_len: n, log })
        } else {
            Err(format!("{compiled:?}\n{log}"))
        };
        check(sys::nvrtcDestroyProgram(&mut prog), "destroy")?;
        result
    }
}

/// Registers and spill bytes from a `-Xptxas -v` log line set (for the test output).
fn ptxas_summary(log: &str) -> String {
    log.lines()
        .filter(|l| l.contains("registers") || l.contains("spill"))
        .map(|l| {
            l.trim()
                .trim_start_matches("ptxas info    :")
                .trim()
                .to_string()
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[test]
fn every_program_compiles_for_sm80_and_sm90() {
    let mut failures = Vec::new();
    for (label, f) in codegen_common::all_programs() {
        let k = emit_cuda(&f).unwrap_or_else(|e| panic!("{label}: {e}"));
        for arch in ARCHS {
            match nvrtc_compile(&k, arch, &["--ptxas-options=-v"]) {
                Ok(c) => {
                    assert!(c.cubin_len > 0, "{label} {arch}: empty cubin");
                    println!(
                        "{label:28} {arch}: smem {:6} B | {}",
                        k.shared_bytes,
                        ptxas_summary(&c.log)
                    );
                }
                Err(log) => failures.push(format!(
                    "== {label} ({arch}) ==\n{log}\n--- source ---\n{}",
                    k.source
                )),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} NVRTC failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn dsl_kernels_compile_for_sm80_and_sm90() {
    let mut failures = Vec::new();
    for (label, k) in codegen_common::dsl_kernels() {
        // Above 48 KiB the launcher opts in; 227 KiB is what one block can have on sm_90.
        assert!(
            k.shared_bytes <= 227 * 1024,
            "{label}: {} bytes of shared memory",
            k.shared_bytes
        );
        for arch in ARCHS {
            match nvrtc_compile(&k, arch, &["--ptxas-options=-v"]) {
                Ok(c) => println!(
                    "{label} {arch}: smem {} B | {}",
                    k.shared_bytes,
                    ptxas_summary(&c.log)
                ),
                Err(log) => failures.push(format!(
                    "== {label} ({arch}) ==\n{log}\n--- source ---\n{}",
                    k.source
                )),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} NVRTC failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn compile_errors_are_reported_not_swallowed() {
    // Guard against a helper that would pass anything: broken source must fail.
    let mut k = emit_cuda(&codegen_common::vec_add(128, 4)).expect("emit");
    k.source.push_str("\nthis is not C++;\n");
    let err = nvrtc_compile(&k, "sm_80", &[])
        .err()
        .expect("broken source must not compile");
    assert!(err.contains("NVRTC_ERROR_COMPILATION"), "{err}");
}

/// The attention kernel's shared memory is its K and V rings: two stages each of
/// `[BLOCK_N][D + 8]` bf16 (the copies' allocs), and no scratch at all when everything else
/// stays in fragments.
#[test]
fn flash_attention_shared_memory_is_its_two_stage_rings() {
    for (bm, bn, d) in [(64, 64, 128), (64, 64, 64), (64, 32, 64)] {
        let k = emit_cuda(&codegen_common::attention(bm, bn, d, 4)).expect("emit");
        let ring = 2 * bn * (d + 8) * 2;
        assert!(
            k.shared_bytes as usize >= 2 * ring && k.shared_bytes <= 227 * 1024,
            "attention {bm}x{bn}x{d}: {} bytes of shared memory, rings {}",
            k.shared_bytes,
            2 * ring
        );
        nvrtc_compile(&k, "sm_90", &[]).unwrap_or_else(|e| panic!("attention {bm}x{bn}x{d}: {e}"));
    }
}
