//! placeholder
pub fn run(_f: &mut crate::ir::Function) {}
