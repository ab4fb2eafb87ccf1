//! The `{ NAME = value, .. }` part of `instantiate!`: constexpr bindings with the span of
//! each name, so a violated `require` or an unknown constexpr points at the binding.

use attn_dsl::ir::ScalarType;
use attn_dsl::{Binding, ConstValue};
use std::collections::BTreeMap;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Ident, Lit, Token};

/// What a binding's value may be, for error messages.
const EXPECTED_VALUE: &str = "expected a constexpr value: an integer (`128`, `-1`), a float (`0.5`), \
     `true`/`false`, a dtype (`bf16`, `f16`, `f32`, `i32`, `i64`, `bool`) or the name of a #[device] function";

/// All bindings of one instantiation, in the order written.
pub struct BindingList(pub Vec<Binding>);

impl Parse for BindingList {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let items = Punctuated::<OneBinding, Token![,]>::parse_terminated(input)?;
        let mut seen: BTreeMap<String, ()> = BTreeMap::new();
        let mut out = Vec::new();
        for OneBinding(binding, name) in items {
            if seen.insert(binding.name.clone(), ()).is_some() {
                return Err(syn::Error::new(
                    name.span(),
                    format!("constexpr `{name}` is bound twice"),
                ));
            }
            out.push(binding);
        }
        Ok(BindingList(out))
    }
}

/// `NAME = value`; the ident is kept for its span.
struct OneBinding(Binding, Ident);

impl Parse for OneBinding {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let name: Ident = input.parse()?;
        input.parse::<Token![=]>()?;
        let value = parse_value(input)?;
        let binding = Binding {
            name: name.to_string(),
            value,
            span: name.span(),
        };
        Ok(OneBinding(binding, name))
    }
}

fn parse_value(input: ParseStream) -> syn::Result<ConstValue> {
    let negative = input.peek(Token![-]);
    if negative {
        input.parse::<Token![-]>()?;
    }
    if input.peek(Ident) && !negative {
        let ident: Ident = input.parse()?;
        let name = ident.to_string();
        return Ok(match ScalarType::from_name(&name) {
            Some(t) => ConstValue::Dtype(t),
            None => ConstValue::Device(name),
        });
    }
    let lit: Lit = input
        .parse()
        .map_err(|e| syn::Error::new(e.span(), EXPECTED_VALUE))?;
    match lit {
        Lit::Int(i) => {
            let magnitude: i128 = i.base10_parse()?;
            let value = if negative { -magnitude } else { magnitude };
            let value = i64::try_from(value).map_err(|_| {
                syn::Error::new(
                    i.span(),
                    format!("integer constexpr {value} does not fit in i64"),
                )
            })?;
            Ok(ConstValue::Int(value))
        }
        Lit::Float(f) => {
            let magnitude: f64 = f.base10_parse()?;
            Ok(ConstValue::Float(if negative {
                -magnitude
            } else {
                magnitude
            }))
        }
        Lit::Bool(b) if !negative => Ok(ConstValue::Bool(b.value)),
        other => Err(syn::Error::new(other.span(), EXPECTED_VALUE)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(src: &str) -> syn::Result<Vec<(String, ConstValue)>> {
        let list: BindingList = syn::parse_str(src)?;
        Ok(list.0.into_iter().map(|b| (b.name, b.value)).collect())
    }

    #[test]
    fn bindings_parse_every_value_kind() {
        let got = parse(
            "T = bf16, BLOCK = 128, NEG = -7, S = -0.25, F = 1e-3, C = true, M = causal_mask,",
        )
        .unwrap();
        assert_eq!(
            got,
            vec![
                ("T".into(), ConstValue::Dtype(ScalarType::Bf16)),
                ("BLOCK".into(), ConstValue::Int(128)),
                ("NEG".into(), ConstValue::Int(-7)),
                ("S".into(), ConstValue::Float(-0.25)),
                ("F".into(), ConstValue::Float(1e-3)),
                ("C".into(), ConstValue::Bool(true)),
                ("M".into(), ConstValue::Device("causal_mask".into())),
            ]
        );
        assert_eq!(parse("").unwrap(), vec![]);
        assert_eq!(
            parse("X = -9223372036854775808").unwrap(),
            vec![("X".into(), ConstValue::Int(i64::MIN))]
        );
    }

    #[test]
    fn bindings_reject_bad_values_and_duplicates() {
        let dup = parse("A = 1, A = 2").err().unwrap().to_string();
        assert_eq!(dup, "constexpr `A` is bound twice");
        assert!(parse("A = \"x\"")
            .err()
            .unwrap()
            .to_string()
            .starts_with("expected a constexpr value"));
        assert!(parse("A = -true").is_err());
        assert!(parse("A = -bf16").is_err());
        assert!(parse("A = 9223372036854775808")
            .err()
            .unwrap()
            .to_string()
            .contains("does not fit in i64"));
    }
}
