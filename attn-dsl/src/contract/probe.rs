//! Body checks of a variant: its functions are specialized inside the contract's probe
//! kernel (the kernel's by-name calls with the kernel's argument types), so a type error in
//! a variant's body is reported at the user's line when the user's crate compiles, not at
//! the first launch.

use super::{VariantContract, VariantFns};
use crate::ast::Module;
use crate::frontend::parse_module_str;
use crate::specialize::{specialize, Binding, ConstValue, DslError};
use proc_macro2::Span;

/// Specializes the probe with the functions of `items` bound to the roles (FULL_TILE:
/// the probe's own "no full tile" unless the variant binds one), once per representative
/// setting of the shared constexprs (so code behind a constexpr `if` is checked too).
pub fn probe_variant(
    contract: &VariantContract,
    items: &Module,
    fns: VariantFns<'_>,
    tile_ranges: i32,
    at: Span,
) -> Result<(), DslError> {
    let (mask, bounds) = (fns.mask.0, fns.bounds.0);
    let probe = parse_module_str(contract.probe_source).map_err(|e| {
        DslError::new(
            at,
            format!(
                "internal error: the contract probe does not parse: {}",
                e.message
            ),
        )
    })?;
    let mut merged = Module {
        items: items.items.clone(),
    };
    for item in probe.items {
        if merged.item(&item.name()).is_some() {
            return Err(DslError::new(
                at,
                format!(
                    "`{}` is a reserved name (the contract's probe); rename it",
                    item.name()
                ),
            ));
        }
        merged.items.push(item);
    }
    for setting in [&[][..], &[("SLIDING_WINDOW", ConstValue::Int(64))][..]] {
        let mut bindings = vec![
            Binding::new("MASK", ConstValue::Device(mask.to_string())),
            Binding::new("BOUNDS", ConstValue::Device(bounds.to_string())),
            Binding::new("TILE_RANGES", ConstValue::Int(i64::from(tile_ranges))),
        ];
        if let Some((f, _)) = fns.full_tile {
            bindings.push(Binding::new("FULL_TILE", ConstValue::Device(f.to_string())));
        }
        bindings.extend(setting.iter().map(|(n, v)| Binding::new(*n, v.clone())));
        for b in &mut bindings {
            b.span = at;
        }
        specialize(&merged, contract.probe_kernel, &bindings)?;
    }
    Ok(())
}
