//! IR parser.
