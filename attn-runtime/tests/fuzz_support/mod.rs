//! Shared pieces of the validation fuzz suites: generators of unified-attention and
//! MLA-DCP argument sets (a valid random base, then malformed or edge-case mutations), an
//! independent validity oracle for each op, and the outcome tally.

#![allow(dead_code)]

pub mod mla_case;
pub mod mla_oracle;
pub mod outcome;
pub mod unified_case;
pub mod unified_host;
pub mod unified_oracle;
