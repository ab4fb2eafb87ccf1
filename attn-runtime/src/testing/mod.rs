//! Test helpers exported for the crate's own tests and for users testing their variants:
//! random paged problems, poisoned CPU runs, a dense f64 reference for any mask.

pub mod cpu_case;
pub mod device_variant;
pub mod main_grid;
pub mod masked_reference;
pub mod paged;

pub use cpu_case::{assert_poison_intact, check_case, ROW_PADDING};
pub use masked_reference::masked_reference;
pub use paged::{
    assert_close, max_abs_diff, per_query_rows, seeded, Geometry, PagedData, SplitMix64, ATOL, RTOL,
};
