//! The variant contract (`attn_dsl::contract::unified_attention`, which `#[variant]` checks
//! user code against) is exactly what the kernel passes: the fields of its by-name
//! `MASK(MaskArgs { .. })` / `BOUNDS(BoundsArgs { .. })` / `FULL_TILE(FullTileArgs { .. })`
//! calls, and the built-in `vllm_mask` / `vllm_bounds` / `vllm_full_tile` satisfy it like
//! any variant.

use std::collections::BTreeSet;

use attn_dsl::contract::unified_attention::CONTRACT;
use attn_dsl::contract::{check_role, ContractRole};
use attn_runtime::kernels::unified_attention::{self, ATTENTION_KERNEL};
use syn::visit::Visit;

/// Field names of every `ROLE(Struct { .. })` call in a function body.
struct CallFields<'a> {
    role: &'a str,
    found: Vec<BTreeSet<String>>,
}

impl<'ast> Visit<'ast> for CallFields<'_> {
    fn visit_expr_call(&mut self, c: &'ast syn::ExprCall) {
        let is_role = matches!(&*c.func, syn::Expr::Path(p) if p.path.is_ident(self.role));
        if let (true, Some(syn::Expr::Struct(s))) = (is_role, c.args.first()) {
            self.found.push(
                s.fields
                    .iter()
                    .map(|f| match &f.member {
                        syn::Member::Named(i) => i.to_string(),
                        syn::Member::Unnamed(i) => i.index.to_string(),
                    })
                    .collect(),
            );
        }
        syn::visit::visit_expr_call(self, c);
    }
}

fn kernel_fields(role: &ContractRole) -> Vec<BTreeSet<String>> {
    let module = unified_attention::module().expect("module");
    let kernel = module.module().item(ATTENTION_KERNEL).expect("kernel");
    let mut v = CallFields {
        role: role.role,
        found: vec![],
    };
    v.visit_block(&kernel.func.block);
    v.found
}

#[test]
fn the_contract_lists_exactly_what_the_kernel_passes() {
    for role in [&CONTRACT.mask, &CONTRACT.bounds, &CONTRACT.full_tile] {
        let calls = kernel_fields(role);
        assert_eq!(
            calls.len(),
            1,
            "{}: one by-name call in the kernel",
            role.role
        );
        let contract: BTreeSet<String> = role.args.iter().map(|a| a.name.to_string()).collect();
        assert_eq!(
            calls[0], contract,
            "{}: kernel fields vs contract",
            role.role
        );
    }
}

#[test]
fn the_built_in_mask_and_bounds_satisfy_the_contract() {
    let module = unified_attention::module().expect("module");
    let span = proc_macro2::Span::call_site();
    for (role, name) in [
        (&CONTRACT.mask, "vllm_mask"),
        (&CONTRACT.bounds, "vllm_bounds"),
        (&CONTRACT.full_tile, "vllm_full_tile"),
        (&CONTRACT.full_tile, "no_full_tile"),
    ] {
        check_role(&CONTRACT, role, &[], module.module(), (name, span))
            .unwrap_or_else(|e| panic!("{name}: {}", e.message));
    }
}

#[test]
fn a_function_outside_the_contract_is_refused_with_the_expected_signature() {
    let text = "#[device] fn m(q_abs: Tile, k: Tile, window: i32) -> Tile<bool> { k <= q_abs }";
    let items =
        attn_runtime::kernels::dsl_module::module_from_source(text, "m.rs").expect("parses");
    let span = proc_macro2::Span::call_site();
    let e = check_role(&CONTRACT, &CONTRACT.mask, &[], items.module(), ("m", span))
        .expect_err("window is not offered");
    assert!(
        e.message
            .contains("`m` takes `window`, which MASK does not provide"),
        "{}",
        e.message
    );
    assert!(e.message.contains("q_abs: Tile<i32>"), "{}", e.message);
}
