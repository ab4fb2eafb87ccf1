//! NVRTC compiles without a GPU: cubins for sm_80/sm_90, PTX fallback, errors on DSL lines,
//! ptxas statistics. Fails (does not skip) when NVRTC cannot be loaded.

mod common;

use attn_runtime::jit::{compile_for_arch, Arch, CudaSource, JitError, ModuleImage};
use common::{TEST_PRELUDE, VADD_SRC};

fn vadd(src: &str) -> CudaSource<'_> {
    CudaSource::new("test_vadd", src).with_prelude(TEST_PRELUDE)
}

#[test]
fn compiles_cubin_for_sm80_and_sm90_with_stats() {
    for arch in [Arch::SM_80, Arch::SM_90] {
        let m = compile_for_arch(&vadd(VADD_SRC), arch).expect("vadd compiles");
        let ModuleImage::Cubin(bytes) = &m.image else {
            panic!("expected a cubin for {arch}, got {}", m.image.kind())
        };
        assert_eq!(&bytes[..4], b"\x7fELF", "a cubin is an ELF image");
        assert_eq!(m.arch_label, arch.to_string());
        let s = m.entry_stats().expect("ptxas reported the entry");
        assert_eq!(s.arch, arch.to_string());
        assert!(
            s.registers > 0 && s.registers <= 255,
            "registers {}",
            s.registers
        );
        assert!(!s.spills());
    }
}

#[test]
fn compile_error_points_at_the_dsl_line() {
    let bad = VADD_SRC.replace("attn_twice(x[i])", "attn_thrice(x[i])");
    let err = compile_for_arch(&vadd(&bad), Arch::SM_90).expect_err("undefined function");
    assert_eq!(err.dsl_lines(), vec![5], "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("DSL line 5") && msg.contains("attn_thrice"),
        "{msg}"
    );
}

#[test]
fn prelude_is_an_in_memory_header() {
    let no_prelude = vadd(VADD_SRC).with_prelude("#pragma once\n");
    let err = compile_for_arch(&no_prelude, Arch::SM_90).expect_err("prelude function missing");
    assert!(matches!(err, JitError::Compile { .. }), "{err}");
}

#[test]
fn unknown_future_arch_falls_back_to_ptx() {
    let future = Arch {
        number: 99,
        arch_specific: false,
    };
    let m = compile_for_arch(&vadd(VADD_SRC), future).expect("PTX fallback");
    let ModuleImage::Ptx(ptx) = &m.image else {
        panic!("expected PTX")
    };
    assert!(ptx.contains(".entry test_vadd"), "PTX names the entry");
    assert!(m.arch_label.starts_with("compute_"), "{}", m.arch_label);
}

#[test]
fn too_old_arch_is_a_typed_error() {
    let err = compile_for_arch(&vadd(VADD_SRC), "sm_50".parse().expect("arch"))
        .expect_err("sm_50 unsupported");
    let JitError::UnsupportedArch { supported, .. } = &err else {
        panic!("{err}")
    };
    assert!(supported.contains("sm_90"), "{err}");
}

#[test]
fn nul_in_source_is_rejected() {
    let err = compile_for_arch(&vadd("extern \"C\" __global__ void k() {}\0"), Arch::SM_90)
        .expect_err("NUL");
    assert!(
        matches!(err, JitError::NulInSource { offset: 33, .. }),
        "{err}"
    );
}

/// Every registered kernel (the proof kernels included) compiles for sm_80 and sm_90; registers
/// and spills are printed.
#[test]
fn every_registered_kernel_compiles_for_sm80_and_sm90() {
    let registry = attn_runtime::registry::Registry::with_builtins();
    for entry in registry.entries() {
        let built = (entry.build)(&(entry.default_bindings)()).expect("build");
        let src = CudaSource::from_kernel(&built.cuda);
        let src = match &built.prelude {
            Some(p) => src.with_prelude(p),
            None => src,
        };
        for arch in [Arch::SM_80, Arch::SM_90] {
            let m = compile_for_arch(&src, arch)
                .unwrap_or_else(|e| panic!("{} for {arch}: {e}", built.key));
            let s = m
                .entry_stats()
                .unwrap_or_else(|| panic!("{}: no ptxas stats", built.key));
            // Spills are a performance fact, reported (DESIGN §4), not a failure.
            println!(
                "{} on {arch}: {s:?}{}",
                built.key,
                if s.spills() { "  [SPILLS]" } else { "" }
            );
        }
    }
}
