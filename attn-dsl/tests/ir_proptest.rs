//! Property: random straight-line programs verify and round-trip through the text form
//! exactly, before and after the optimization pipeline.

#[path = "ir_fixtures.rs"]
mod fixtures;

use attn_dsl::ir::parser::parse_function;
use attn_dsl::ir::printer::print_function;
use attn_dsl::ir::verify::verify;
use proptest::prelude::*;

fn steps() -> impl Strategy<Value = Vec<fixtures::Step>> {
    prop::collection::vec(
        (any::<u8>(), any::<u16>(), any::<u16>(), -1000i64..1000),
        1..40,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn random_programs_round_trip(s in steps(), tile in any::<bool>()) {
        let mut f = fixtures::random_program(&s, tile);
        prop_assert!(verify(&f).is_ok());
        let text = print_function(&f);
        let g = parse_function(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(format!("{f:?}"), format!("{g:?}"));
        attn_dsl::passes::optimize(&mut f);
        let text = print_function(&f);
        let g = parse_function(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(format!("{f:?}"), format!("{g:?}"));
        prop_assert_eq!(print_function(&g), text);
    }
}
