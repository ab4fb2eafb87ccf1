//! `require(COND, "message")` rules, evaluated once the constexprs are bound. A violated
//! rule reports the values it depends on, at the binding that most likely needs changing.

use super::const_eval;
use super::value::describe_const;
use super::{Binding, ConstValue, DslError};
use crate::ast::Item;
use crate::frontend::expr_idents::value_idents;
use proc_macro2::Span;

/// Fails with the first violated rule of `item`.
pub(crate) fn check_requires(
    item: &Item,
    bound: &[(String, ConstValue)],
    bindings: &[Binding],
) -> Result<(), DslError> {
    for r in &item.requires {
        match const_eval::eval_bound(&r.cond, bound)? {
            ConstValue::Bool(true) => {}
            ConstValue::Bool(false) => return Err(violation(r, bound, bindings)),
            other => {
                return Err(DslError::new(
                    r.span,
                    format!(
                        "`require` condition must be a bool, got {}",
                        describe_const(&other)
                    ),
                ))
            }
        }
    }
    Ok(())
}

/// Fails with the first violated rule of a device function bound to one of the kernel's
/// `Device` constexprs (a variant's mask or bounds), over the kernel's bound values plus
/// the function's own defaults.
pub(crate) fn check_device_requires(
    module: &crate::ast::Module,
    bound: &[(String, ConstValue)],
    bindings: &[Binding],
) -> Result<(), DslError> {
    for (_, v) in bound {
        let ConstValue::Device(name) = v else {
            continue;
        };
        let Some(item) = module.item(name) else {
            continue;
        };
        if item.requires.is_empty() {
            continue;
        }
        let mut values = bound.to_vec();
        for d in crate::frontend::signature::constexpr_decls(&item.func)? {
            if values.iter().any(|(k, _)| *k == d.name) {
                continue;
            }
            if let Some(expr) = &d.default {
                let v = const_eval::eval_bound(expr, &values)?;
                values.push((d.name.clone(), v));
            }
        }
        check_requires(item, &values, bindings)?;
    }
    Ok(())
}

/// `require failed: <message>\n  with A = 1, B = true`, at the binding of the first named
/// constexpr that was bound explicitly (the rule's span when all came from defaults).
fn violation(
    r: &crate::ast::Require,
    bound: &[(String, ConstValue)],
    bindings: &[Binding],
) -> DslError {
    let mut message = format!("require failed: {}", r.message);
    message.push_str(&with_values(&r.cond, bound));
    DslError::new(blame_span(&r.cond, bindings, r.span), message)
}

/// The constexprs `e` names, each once, in the order written.
fn named_constexprs(e: &syn::Expr) -> Vec<String> {
    let mut named: Vec<String> = vec![];
    for id in value_idents(e) {
        let n = id.to_string();
        if !named.contains(&n) {
            named.push(n);
        }
    }
    named
}

/// `"\n  with A = 1, B = true"` for the constexprs `e` names (empty when it names none).
pub(crate) fn with_values(e: &syn::Expr, bound: &[(String, ConstValue)]) -> String {
    let values: Vec<String> = named_constexprs(e)
        .iter()
        .filter_map(|n| {
            bound
                .iter()
                .find(|(k, _)| k == n)
                .map(|(k, v)| format!("{k} = {v}"))
        })
        .collect();
    if values.is_empty() {
        String::new()
    } else {
        format!("\n  with {}", values.join(", "))
    }
}

/// The binding of the first constexpr `e` names that was bound explicitly: the value the
/// user most likely needs to change; `fallback` when all came from defaults.
pub(crate) fn blame_span(e: &syn::Expr, bindings: &[Binding], fallback: Span) -> Span {
    named_constexprs(e)
        .iter()
        .find_map(|n| bindings.iter().find(|b| &b.name == n).map(|b| b.span))
        .unwrap_or(fallback)
}
