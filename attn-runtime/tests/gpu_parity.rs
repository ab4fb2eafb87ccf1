//! The GPU parity harness pattern (feature `gpu`): each registered kernel runs on the GPU
//! (and the CPU executor once wired) and is compared with its f64 reference, outputs
//! NaN-poisoned. The lead adds the proof kernels to the registry; this file runs them all.
#![cfg(feature = "gpu")]

use attn_runtime::launch::{CudaDevice, CudaKernelHandle};
use attn_runtime::parity::{check_parity, interp_executor, ParityCase};
use attn_runtime::registry::Registry;

/// Every parity case of every registered kernel: GPU vs the f64 reference, CPU executor vs the
/// reference, and GPU vs CPU executor (within the entry's tolerance: the tensor-core `dot` adds
/// in hardware order, the executor k by k).
#[test]
fn every_registered_kernel_matches_its_reference_on_the_gpu() {
    let dev = CudaDevice::new(0).expect("the gpu feature requires a CUDA device");
    let stream = dev.default_stream();
    let registry = Registry::with_builtins();
    let exec = interp_executor();
    let mut checked = 0;
    for entry in registry.entries() {
        for bindings in entry.case_bindings().expect("cases") {
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
                gpu_cpu_tolerance: entry.tolerance,
            };
            let report =
                check_parity(&stream, &case, Some(&*exec)).unwrap_or_else(|e| panic!("{e}"));
            assert!(!report.gpu_vs_reference.is_empty());
            println!("PARITY {}: {:?}", report.case, report.gpu_vs_reference);
            checked += 1;
        }
    }
    assert!(checked >= 16, "only {checked} cases ran");
}
