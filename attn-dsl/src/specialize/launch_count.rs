//! `num_warps = <constexpr expression>`, `num_stages = <constexpr expression>` and the
//! schedule flags (`tma`, `warp_specialize`, `pingpong = <constexpr expression>`): the
//! launch width, the pipeline depth, the copy engine and the warp schedule of one
//! specialization.
//!
//! Evaluated after binding, like a `require` rule, so a kernel can size its program to a
//! tile constexpr (`num_warps = BLOCK_M / 16`: one warp per 16-row tensor-core slab) or
//! stream deeper on the tilings that need bytes in flight (decode).

use super::const_eval;
use super::requires::{blame_span, with_values};
use super::value::describe_const;
use super::{Binding, ConstValue, DslError};
use crate::ast::{ConstFlag, Item, LaunchCount};
use crate::frontend::attr::{allowed_list, ALLOWED_NUM_STAGES, ALLOWED_NUM_WARPS};
use crate::ir::ScheduleChoice;
use quote::ToTokens;

/// The warp count of `item` under the bound constexprs; an expression that is not an
/// integer in [`ALLOWED_NUM_WARPS`] fails at the binding it depends on, with the values.
pub(crate) fn resolve_num_warps(
    item: &Item,
    bound: &[(String, ConstValue)],
    bindings: &[Binding],
) -> Result<u32, DslError> {
    resolve(
        &item.num_warps,
        "num_warps",
        &ALLOWED_NUM_WARPS,
        bound,
        bindings,
    )
}

/// The pipeline stages of `item` under the bound constexprs (see [`resolve_num_warps`]).
pub(crate) fn resolve_num_stages(
    item: &Item,
    bound: &[(String, ConstValue)],
    bindings: &[Binding],
) -> Result<u32, DslError> {
    resolve(
        &item.num_stages,
        "num_stages",
        &ALLOWED_NUM_STAGES,
        bound,
        bindings,
    )
}

/// Whether `item`'s tiles move as TMA boxes under the bound constexprs; an expression that
/// is not a boolean fails at its span, with the values.
pub(crate) fn resolve_tma(item: &Item, bound: &[(String, ConstValue)]) -> Result<bool, DslError> {
    resolve_flag(&item.tma, "tma", bound)
}

/// The schedule choices of `item`'s `warp_specialize` and `pingpong` (absent: the
/// compiler's), under the bound constexprs.
pub(crate) fn resolve_schedule(
    item: &Item,
    bound: &[(String, ConstValue)],
) -> Result<(ScheduleChoice, ScheduleChoice), DslError> {
    let choice = |flag: &Option<ConstFlag>, what| -> Result<ScheduleChoice, DslError> {
        Ok(match flag {
            None => ScheduleChoice::Auto,
            Some(f) if resolve_flag(f, what, bound)? => ScheduleChoice::Required,
            Some(_) => ScheduleChoice::Off,
        })
    };
    Ok((
        choice(&item.warp_specialize, "warp_specialize")?,
        choice(&item.pingpong, "pingpong")?,
    ))
}

/// A boolean attribute's value; an expression that is not a boolean fails at its span,
/// with the values.
fn resolve_flag(
    flag: &ConstFlag,
    what: &str,
    bound: &[(String, ConstValue)],
) -> Result<bool, DslError> {
    let (expr, span) = match flag {
        ConstFlag::Fixed(b) => return Ok(*b),
        ConstFlag::Constexpr { expr, span } => (expr, *span),
    };
    match const_eval::eval_bound(expr, bound)? {
        ConstValue::Bool(b) => Ok(b),
        other => Err(DslError::new(
            span,
            format!(
                "{what} = {} must be a boolean constexpr, got {}{}",
                expr.to_token_stream(),
                describe_const(&other),
                with_values(expr, bound)
            ),
        )),
    }
}

fn resolve(
    count: &LaunchCount,
    what: &str,
    allowed: &[u32],
    bound: &[(String, ConstValue)],
    bindings: &[Binding],
) -> Result<u32, DslError> {
    let (expr, span) = match count {
        LaunchCount::Fixed(n) => return Ok(*n),
        LaunchCount::Constexpr { expr, span } => (expr, *span),
    };
    let value = const_eval::eval_bound(expr, bound)?;
    let written = expr.to_token_stream().to_string();
    match value {
        ConstValue::Int(v) if allowed.iter().any(|&a| i64::from(a) == v) => Ok(v as u32),
        ConstValue::Int(v) => Err(DslError::new(
            blame_span(expr, bindings, span),
            format!(
                "{what} = {written} evaluates to {v}, which is not supported; allowed: {}{}",
                allowed_list(allowed),
                with_values(expr, bound)
            ),
        )),
        other => Err(DslError::new(
            span,
            format!(
                "{what} = {written} must be an integer constexpr, got {}",
                describe_const(&other)
            ),
        )),
    }
}
