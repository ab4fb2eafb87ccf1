//! The registered kernels (vadd and the proof kernels softmax, matmul, flash attention) on the
//! CPU executor, at every parity case of their registry entry (odd sizes, tails, fully masked
//! rows, bf16 and f16), against their independent f64 references. Outputs start NaN-poisoned,
//! so an unwritten element fails.

use attn_runtime::parity::{compare, interp_executor, run_on_cpu};
use attn_runtime::registry::Registry;

#[test]
fn every_registered_kernel_matches_its_reference_on_the_cpu_executor() {
    let exec = interp_executor();
    let registry = Registry::with_builtins();
    let mut checked = 0;
    for entry in registry.entries() {
        for bindings in entry.case_bindings().expect("cases") {
            let built =
                (entry.build)(&bindings).unwrap_or_else(|e| panic!("{}: build: {e}", entry.name));
            let ir = built.ir.as_ref().expect("every registered kernel has IR");
            let problem = (entry.problem)(&bindings).expect("problem");
            let outputs =
                run_on_cpu(&*exec, ir, &problem).unwrap_or_else(|e| panic!("{}: {e}", built.key));
            let want = (entry.reference)(&problem);
            assert_eq!(outputs.len(), want.len(), "{}", built.key);
            for (i, (got, want)) in outputs.iter().zip(&want).enumerate() {
                let name = format!("{} [{}] output {i}", built.key, problem.label);
                let c = compare(&name, &got.to_f64s(), want, entry.tolerance)
                    .unwrap_or_else(|e| panic!("{e}"));
                println!("{name}: max abs err {:.3e}", c.max_abs_err);
            }
            checked += 1;
        }
    }
    assert!(checked >= 16, "only {checked} cases ran");
}
