//! Fuzz of the MLA-DCP decode op's host-side validation (issue 13): 20 000 argument sets
//! (valid random base plus 0–3 mutations) through `check_host_inputs` under `catch_unwind`,
//! judged by an independent oracle: 0 panics, 0 accepted-malformed, 0 rejected-valid.

mod fuzz_support;

use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};

use attn_runtime::ops::mla_dcp::op::check_host_inputs;
use attn_runtime::split_mix64::SplitMix64;
use fuzz_support::mla_case::{mla_mutate, mla_valid_base, MLA_MUTATIONS};
use fuzz_support::mla_oracle::mla_check;
use fuzz_support::outcome::{judge, Tally};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

const CASES: u32 = 20_000;

#[test]
fn mla_host_validation_fuzz() {
    let mut runner = TestRunner::new(Config {
        cases: CASES,
        failure_persistence: None,
        ..Config::default()
    });
    let tally = RefCell::new(Tally::default());
    let strategy = (any::<u64>(), vec(0..MLA_MUTATIONS, 0..=3));
    let result = runner.run(&strategy, |(seed, mutations)| {
        let mut rng = SplitMix64(seed);
        let mut case = mla_valid_base(&mut rng);
        for &m in &mutations {
            mla_mutate(&mut case, m, &mut rng);
        }
        let verdict = mla_check(&case);
        let ran = catch_unwind(AssertUnwindSafe(|| {
            check_host_inputs(&case.config(), &case.inputs())
        }));
        judge(&tally, ran, &verdict, (&mutations, &case))
    });
    let tally = tally.into_inner();
    println!("MLA host fuzz: {tally}");
    if let Err(e) = result {
        panic!("{e}\n{tally}");
    }
    assert!(tally.clean(), "{tally}");
    assert!(tally.total() >= CASES as usize, "{tally}");
    assert!(
        tally.accepted >= 2_000 && tally.rejected >= 10_000,
        "{tally}"
    );
}
