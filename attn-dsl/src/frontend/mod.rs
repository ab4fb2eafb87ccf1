//! Front end: `syn` syntax of `#[module]` / `#[kernel]` / `#[device]` items → [`crate::ast::Module`].
