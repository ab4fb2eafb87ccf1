//! Fuzz of the unified-attention op's host-side path (issue 13): 20 000 argument sets,
//! each a valid random base plus 0–3 malformed or edge-case mutations, run through the
//! op's validation and planning under `catch_unwind` and judged by an independent oracle.
//! Every case must be a typed error exactly when the oracle calls it malformed: 0 panics,
//! 0 accepted-malformed, 0 rejected-valid.

mod fuzz_support;

use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};

use attn_runtime::split_mix64::SplitMix64;
use fuzz_support::outcome::{judge, Tally};
use fuzz_support::unified_case::{mutate, valid_base, MUTATIONS};
use fuzz_support::unified_host::host_plan;
use fuzz_support::unified_oracle::check;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

const CASES: u32 = 20_000;

#[test]
fn unified_host_validation_fuzz() {
    let mut runner = TestRunner::new(Config {
        cases: CASES,
        failure_persistence: None,
        ..Config::default()
    });
    let tally = RefCell::new(Tally::default());
    let strategy = (any::<u64>(), vec(0..MUTATIONS, 0..=3));
    let result = runner.run(&strategy, |(seed, mutations)| {
        let mut rng = SplitMix64(seed);
        let mut case = valid_base(&mut rng, 40);
        for &m in &mutations {
            mutate(&mut case, m, &mut rng);
        }
        let verdict = check(&case);
        let ran = catch_unwind(AssertUnwindSafe(|| host_plan(&case)));
        judge(&tally, ran, &verdict, (&mutations, &case))
    });
    let tally = tally.into_inner();
    println!("unified host fuzz: {tally}");
    if let Err(e) = result {
        panic!("{e}\n{tally}");
    }
    assert!(tally.clean(), "{tally}");
    assert!(tally.total() >= CASES as usize, "{tally}");
    // Both sides of the oracle are exercised in bulk.
    assert!(
        tally.accepted >= 2_000 && tally.rejected >= 10_000,
        "{tally}"
    );
}
