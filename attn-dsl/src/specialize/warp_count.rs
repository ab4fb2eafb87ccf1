//! `num_warps = <constexpr expression>`: the launch width of one specialization.
//!
//! Evaluated after binding, like a `require` rule, so a kernel can size its program to a
//! tile constexpr (`num_warps = BLOCK_M / 16`: one warp per 16-row tensor-core slab).

use super::const_eval;
use super::requires::{blame_span, with_values};
use super::value::describe_const;
use super::{Binding, ConstValue, DslError};
use crate::ast::{Item, WarpCount};
use crate::frontend::attr::ALLOWED_NUM_WARPS;
use quote::ToTokens;

/// The warp count of `item` under the bound constexprs; an expression that is not an
/// integer in [`ALLOWED_NUM_WARPS`] fails at the binding it depends on, with the values.
pub(crate) fn resolve_num_warps(
    item: &Item,
    bound: &[(String, ConstValue)],
    bindings: &[Binding],
) -> Result<u32, DslError> {
    let (expr, span) = match &item.num_warps {
        WarpCount::Fixed(n) => return Ok(*n),
        WarpCount::Constexpr { expr, span } => (expr, *span),
    };
    let lookup = |n: &str| bound.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    let value = const_eval::eval(expr, &lookup)?;
    let written = expr.to_token_stream().to_string();
    let allowed = |v: i64| ALLOWED_NUM_WARPS.iter().any(|&a| i64::from(a) == v);
    match value {
        ConstValue::Int(v) if allowed(v) => Ok(v as u32),
        ConstValue::Int(v) => Err(DslError::new(
            blame_span(expr, bindings, span),
            format!(
                "num_warps = {written} evaluates to {v}, which is not supported; allowed: 1, 2, 4, 8, 16{}",
                with_values(expr, bound)
            ),
        )),
        other => Err(DslError::new(
            span,
            format!(
                "num_warps = {written} must be an integer constexpr, got {}",
                describe_const(&other)
            ),
        )),
    }
}
