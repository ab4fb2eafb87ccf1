//! The GPU parity harness pattern (feature `gpu`): each registered kernel runs on the GPU
//! (and the CPU executor once wired) and is compared with its f64 reference, outputs
//! NaN-poisoned. The lead adds the proof kernels to the registry; this file runs them all.
#![cfg(feature = "gpu")]

use attn_runtime::launch::{CudaDevice, CudaKernelHandle};
use attn_runtime::parity::{check_parity, ParityCase, Tolerance};
use attn_runtime::registry::{merge_bindings, parse_binding, Registry};

/// Odd sizes around block boundaries for every registered kernel that has an `N` binding.
const SIZES: &[&str] = &["N=1", "N=255", "N=256", "N=257", "N=100003"];

#[test]
fn every_registered_kernel_matches_its_reference_on_the_gpu() {
    let dev = CudaDevice::new(0).expect("the gpu feature requires a CUDA device");
    let stream = dev.default_stream();
    let registry = Registry::with_builtins();
    let mut checked = 0;
    for entry in registry.entries() {
        let defaults = (entry.default_bindings)();
        let has_n = defaults.iter().any(|b| b.name == "N");
        let sizes: Vec<Option<&str>> = if has_n {
            SIZES.iter().map(|s| Some(*s)).collect()
        } else {
            vec![None]
        };
        for size in sizes {
            let overrides: Vec<_> = size
                .map(|s| parse_binding(s).expect("binding"))
                .into_iter()
                .collect();
            let bindings = merge_bindings(defaults.clone(), &overrides).expect("bindings");
            let built = (entry.build)(&bindings).expect("build");
            let problem = (entry.problem)(&bindings).expect("problem");
            let handle = match &built.prelude {
                Some(p) => CudaKernelHandle::with_prelude(built.cuda.clone(), p.clone()),
                None => CudaKernelHandle::new(built.cuda.clone()),
            };
            let case = ParityCase {
                name: format!("{} [{}]", built.key, problem.label),
                kernel: &handle,
                ir: built.ir.as_ref(),
                problem,
                reference: &entry.reference,
                tolerance: entry.tolerance,
                gpu_cpu_tolerance: Tolerance::EXACT,
            };
            let report = check_parity(&stream, &case, None).unwrap_or_else(|e| panic!("{e}"));
            assert!(!report.gpu_vs_reference.is_empty());
            println!("{}: {:?}", report.case, report.gpu_vs_reference);
            checked += 1;
        }
    }
    assert!(checked >= SIZES.len());
}
