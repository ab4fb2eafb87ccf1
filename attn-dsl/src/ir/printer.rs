//! IR printer.
