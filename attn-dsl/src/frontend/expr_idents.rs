//! The constexpr names an expression mentions (the plain identifiers in value position),
//! in source order: what a `require` rule depends on.

use syn::visit::{self, Visit};

/// Identifiers used as values in `e` (callees of calls excluded), in order of appearance.
pub fn value_idents(e: &syn::Expr) -> Vec<syn::Ident> {
    let mut v = IdentCollector { idents: vec![] };
    v.visit_expr(e);
    v.idents
}

struct IdentCollector {
    idents: Vec<syn::Ident>,
}

impl<'ast> Visit<'ast> for IdentCollector {
    fn visit_expr_path(&mut self, p: &'ast syn::ExprPath) {
        if p.qself.is_none() && p.path.segments.len() == 1 {
            self.idents.push(p.path.segments[0].ident.clone());
        }
    }
    fn visit_expr_call(&mut self, c: &'ast syn::ExprCall) {
        for a in &c.args {
            self.visit_expr(a);
        }
    }
    fn visit_expr_method_call(&mut self, m: &'ast syn::ExprMethodCall) {
        self.visit_expr(&m.receiver);
        for a in &m.args {
            self.visit_expr(a);
        }
    }
    fn visit_expr(&mut self, e: &'ast syn::Expr) {
        visit::visit_expr(self, e)
    }
}
