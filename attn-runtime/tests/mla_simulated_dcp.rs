//! The whole MLA-DCP decode step on simulated ranks (spec §9.5) against the dense f64 reference.

mod mla_support;

use mla_support::{check_case, Case};

#[test]
fn d2_i8_b16_mixed_query_lens() {
    let t0 = std::time::Instant::now();
    check_case(&Case::new(2, 8, 16, 2, &[70, 33], &[1, 2]), 1);
    eprintln!("took {:?}", t0.elapsed());
}
