//! The variables a loop body assigns (`x = ..`, `x += ..`, `(a, b) = ..`), found before
//! the body is lowered: they become the loop's carried values (block arguments).

use syn::visit::{self, Visit};

/// Names assigned anywhere in `block` (nested blocks included), in order of first assignment.
pub(crate) fn assigned_names(block: &syn::Block) -> Vec<String> {
    let mut v = AssignCollector { names: vec![] };
    v.visit_block(block);
    v.names
}

/// Same for an expression (a `while` condition).
pub(crate) fn assigned_names_in_expr(e: &syn::Expr) -> Vec<String> {
    let mut v = AssignCollector { names: vec![] };
    v.visit_expr(e);
    v.names
}

struct AssignCollector {
    names: Vec<String>,
}

impl AssignCollector {
    fn targets(&mut self, lhs: &syn::Expr) {
        match lhs {
            syn::Expr::Path(p) => {
                if let Some(id) = p.path.get_ident() {
                    let n = id.to_string();
                    if !self.names.contains(&n) {
                        self.names.push(n);
                    }
                }
            }
            syn::Expr::Tuple(t) => t.elems.iter().for_each(|e| self.targets(e)),
            syn::Expr::Paren(p) => self.targets(&p.expr),
            _ => {}
        }
    }
}

fn is_compound_assign(op: &syn::BinOp) -> bool {
    super::operators::classify(op).is_some_and(|i| i.assign)
}

impl<'ast> Visit<'ast> for AssignCollector {
    fn visit_expr_assign(&mut self, a: &'ast syn::ExprAssign) {
        self.targets(&a.left);
        visit::visit_expr_assign(self, a);
    }
    fn visit_expr_binary(&mut self, b: &'ast syn::ExprBinary) {
        if is_compound_assign(&b.op) {
            self.targets(&b.left);
        }
        visit::visit_expr_binary(self, b);
    }
}
