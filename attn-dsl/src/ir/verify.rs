//! IR verify.
