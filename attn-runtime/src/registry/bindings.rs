//! `K=V` bindings from the command line, merged over a kernel's defaults.

use attn_dsl::ir::ScalarType;
use attn_dsl::{Binding, ConstValue};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BindingError {
    #[error("binding `{0}` is not of the form NAME=VALUE (e.g. BLOCK=128, CAUSAL=true, T=bf16)")]
    Syntax(String),
    #[error("unknown constexpr `{name}`; this kernel takes: {known}")]
    Unknown { name: String, known: String },
    #[error("`{name}` is {expected} by default; `{value}` is {got}")]
    Kind {
        name: String,
        expected: &'static str,
        value: String,
        got: &'static str,
    },
}

/// Parses `NAME=VALUE`: integers, floats, `true`/`false`, dtype names, else a device fn name.
pub fn parse_binding(s: &str) -> Result<Binding, BindingError> {
    let (name, value) = s
        .split_once('=')
        .ok_or_else(|| BindingError::Syntax(s.to_string()))?;
    let (name, value) = (name.trim(), value.trim());
    if name.is_empty()
        || value.is_empty()
        || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return Err(BindingError::Syntax(s.to_string()));
    }
    let v = if let Ok(i) = value.parse::<i64>() {
        ConstValue::Int(i)
    } else if let Ok(f) = value.parse::<f64>() {
        ConstValue::Float(f)
    } else if let Ok(b) = value.parse::<bool>() {
        ConstValue::Bool(b)
    } else if let Some(t) = ScalarType::from_name(value) {
        ConstValue::Dtype(t)
    } else {
        ConstValue::Device(value.to_string())
    };
    Ok(Binding::new(name, v))
}

fn kind(v: &ConstValue) -> &'static str {
    match v {
        ConstValue::Int(_) => "an integer",
        ConstValue::Bool(_) => "a bool",
        ConstValue::Float(_) => "a float",
        ConstValue::Dtype(_) => "a dtype",
        ConstValue::Device(_) => "a device function",
    }
}

/// `defaults` with `overrides` applied by name; an override must name a default and keep
/// its kind (an integer may stand for a float).
pub fn merge_bindings(
    defaults: Vec<Binding>,
    overrides: &[Binding],
) -> Result<Vec<Binding>, BindingError> {
    let mut out = defaults;
    for o in overrides {
        let known = || {
            out.iter()
                .map(|b| b.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let Some(slot) = out.iter().position(|b| b.name == o.name) else {
            return Err(BindingError::Unknown {
                name: o.name.clone(),
                known: known(),
            });
        };
        let value = match (&out[slot].value, &o.value) {
            (ConstValue::Float(_), ConstValue::Int(i)) => ConstValue::Float(*i as f64),
            (d, v) if std::mem::discriminant(d) == std::mem::discriminant(v) => v.clone(),
            (d, v) => {
                return Err(BindingError::Kind {
                    name: o.name.clone(),
                    expected: kind(d),
                    value: v.to_string(),
                    got: kind(v),
                })
            }
        };
        out[slot].value = value;
    }
    Ok(out)
}

/// The integer bound to `name`.
pub(crate) fn int_binding(bindings: &[Binding], name: &str) -> Result<i64, String> {
    match bindings.iter().find(|b| b.name == name).map(|b| &b.value) {
        Some(ConstValue::Int(v)) => Ok(*v),
        Some(other) => Err(format!("`{name}` must be an integer, got {other}")),
        None => Err(format!("missing binding `{name}`")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_value_kind() {
        assert_eq!(
            parse_binding("BLOCK=128").map(|b| b.value),
            Ok(ConstValue::Int(128))
        );
        assert_eq!(
            parse_binding("W=-1").map(|b| b.value),
            Ok(ConstValue::Int(-1))
        );
        assert_eq!(
            parse_binding("S=0.5").map(|b| b.value),
            Ok(ConstValue::Float(0.5))
        );
        assert_eq!(
            parse_binding("C=true").map(|b| b.value),
            Ok(ConstValue::Bool(true))
        );
        assert_eq!(
            parse_binding("T=bf16").map(|b| b.value),
            Ok(ConstValue::Dtype(ScalarType::Bf16))
        );
        assert_eq!(
            parse_binding("MASK=causal").map(|b| b.value),
            Ok(ConstValue::Device("causal".into()))
        );
        assert!(matches!(
            parse_binding("BLOCK"),
            Err(BindingError::Syntax(_))
        ));
        assert!(matches!(parse_binding("=3"), Err(BindingError::Syntax(_))));
    }

    #[test]
    fn merge_overrides_by_name_and_checks_kind() {
        let d = vec![
            Binding::new("BLOCK", ConstValue::Int(256)),
            Binding::new("SCALE", ConstValue::Float(1.0)),
        ];
        let m =
            merge_bindings(d.clone(), &[Binding::new("SCALE", ConstValue::Int(2))]).expect("merge");
        assert_eq!(m[1].value, ConstValue::Float(2.0));
        assert_eq!(m[0].value, ConstValue::Int(256));
        let e = merge_bindings(d.clone(), &[Binding::new("BLOK", ConstValue::Int(1))])
            .expect_err("typo");
        assert_eq!(
            e.to_string(),
            "unknown constexpr `BLOK`; this kernel takes: BLOCK, SCALE"
        );
        let e =
            merge_bindings(d, &[Binding::new("BLOCK", ConstValue::Bool(true))]).expect_err("kind");
        assert!(
            e.to_string()
                .contains("`BLOCK` is an integer by default; `true` is a bool"),
            "{e}"
        );
    }
}
