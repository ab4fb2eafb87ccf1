//! IR text printer (round-trips through [`super::parser`]).

use super::Function;

/// Prints `f` in the IR text form.
pub fn print_function(f: &Function) -> String {
    format!("{f:?}")
}
