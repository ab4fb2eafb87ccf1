//! MLA decode with decode context parallelism (spec `mla_dcp.md`): the DCP token
//! sharding metadata and the N-way LSE merge of partial attention outputs.

pub mod cpu;
pub mod merge;
pub mod metadata;
pub mod plan;
