//! Rejects Rust syntax that has no meaning in a tile program, at its span, before any
//! constexpr is known (so a kernel with a `match` fails at `#[kernel]`, not at
//! `instantiate!`). Also rejects `return` inside loops: early exit is structured as
//! `if c { ...; return; } rest` ⇒ `if c {...} else {rest}`, which has no loop form.

use crate::specialize::DslError;
use quote::ToTokens;
use syn::spanned::Spanned;
use syn::visit::{self, Visit};

/// Methods the DSL gives meaning to (`step_by` only on a `for` range).
pub const DSL_METHODS: [&str; 7] = ["unsqueeze", "max", "min", "sum", "cast", "trans", "step_by"];

/// Checks the body of a kernel (`is_kernel`) or device function.
pub fn check_body(block: &syn::Block, is_kernel: bool) -> Result<(), DslError> {
    let mut v = SyntaxChecker {
        place: if is_kernel {
            "a kernel"
        } else {
            "a device function"
        },
        loop_depth: 0,
        error: None,
    };
    v.visit_block(block);
    v.error.map_or(Ok(()), Err)
}

struct SyntaxChecker {
    place: &'static str,
    loop_depth: usize,
    error: Option<DslError>,
}

impl SyntaxChecker {
    fn reject(&mut self, span: proc_macro2::Span, what: &str) {
        if self.error.is_none() {
            self.error = Some(DslError::new(
                span,
                format!("unsupported syntax in {}: {what}", self.place),
            ));
        }
    }

    /// Names the construct and, where there is one, the DSL way to say it.
    fn expr_problem(e: &syn::Expr) -> Option<String> {
        use syn::Expr as E;
        Some(match e {
            E::Match(_) => "`match` (use `if`/`select`)".into(),
            E::Loop(_) => "`loop` (use `while`)".into(),
            E::Closure(_) => "closure (write a `#[device]` function)".into(),
            E::Reference(_) | E::RawAddr(_) => "reference `&` (values are passed by value)".into(),
            E::Macro(m) => format!("macro `{}!`", m.mac.path.to_token_stream()),
            E::Struct(_) => "struct literal".into(),
            E::Index(_) => "indexing `a[i]` (use pointer arithmetic and `load`)".into(),
            E::Field(_) => "field access `.field`".into(),
            E::Async(_) | E::Await(_) => "`async`".into(),
            E::Unsafe(_) => "`unsafe`".into(),
            E::Break(_) => "`break` (use a `while` condition)".into(),
            E::Continue(_) => "`continue` (use `if`)".into(),
            E::Cast(_) => "`as` cast (use `.cast::<T>()`)".into(),
            E::Try(_) | E::TryBlock(_) => "`?`".into(),
            E::Yield(_) => "`yield`".into(),
            E::Let(_) => "`let` in a condition (`if let`/`while let`)".into(),
            E::Repeat(_) => "array repeat `[x; n]` (use `full`)".into(),
            E::Const(_) => "`const` block (only `if const { COND }` is supported)".into(),
            E::Infer(_) => "`_` expression".into(),
            E::Unary(u) if matches!(u.op, syn::UnOp::Deref(_)) => "dereference `*p` (use `load(p)`)".into(),
            E::Lit(l) if !matches!(l.lit, syn::Lit::Int(_) | syn::Lit::Float(_) | syn::Lit::Bool(_)) => {
                format!("literal `{}` (only integer, float and bool literals)", l.lit.to_token_stream())
            }
            E::MethodCall(m) if !DSL_METHODS.contains(&m.method.to_string().as_str()) => format!(
                "method call `.{}()` (DSL methods: unsqueeze, max, min, sum, cast, trans; `step_by` on a `for` range)",
                m.method
            ),
            E::Block(b) if b.label.is_some() => "block label".into(),
            E::ForLoop(f) if f.label.is_some() => "loop label".into(),
            E::While(w) if w.label.is_some() => "loop label".into(),
            E::Path(p) if p.qself.is_some() => "qualified path `<T as Trait>::..`".into(),
            E::Verbatim(_) => "unrecognized expression".into(),
            _ => return None,
        })
    }
}

impl<'ast> Visit<'ast> for SyntaxChecker {
    fn visit_expr(&mut self, e: &'ast syn::Expr) {
        if self.error.is_some() {
            return;
        }
        if let Some(what) = Self::expr_problem(e) {
            return self.reject(e.span(), &what);
        }
        match e {
            syn::Expr::If(i) => self.visit_if(i),
            // `f(Contract { a: x, .. })`: a call by name, the one place a struct literal means
            // something (named arguments; see `specialize::named_call`).
            syn::Expr::Call(c) if crate::specialize::named_call::named_args(&c.args).is_some() => {
                self.visit_expr(&c.func);
                if let Some(s) = crate::specialize::named_call::named_args(&c.args) {
                    for f in &s.fields {
                        self.visit_expr(&f.expr);
                    }
                }
            }
            syn::Expr::ForLoop(_) | syn::Expr::While(_) => {
                self.loop_depth += 1;
                visit::visit_expr(self, e);
                self.loop_depth -= 1;
            }
            syn::Expr::Return(r) if self.loop_depth > 0 => self.reject(
                r.span(),
                "`return` inside a loop (early exit is only supported outside loops)",
            ),
            _ => visit::visit_expr(self, e),
        }
    }

    fn visit_stmt(&mut self, s: &'ast syn::Stmt) {
        match s {
            syn::Stmt::Item(i) => self.reject(i.span(), "nested item (declare it at module level)"),
            syn::Stmt::Macro(m) => self.reject(
                m.span(),
                &format!("macro `{}!`", m.mac.path.to_token_stream()),
            ),
            syn::Stmt::Local(l) => {
                if let Some(init) = &l.init {
                    if let Some((else_tok, _)) = &init.diverge {
                        return self.reject(else_tok.span, "`let ... else`");
                    }
                } else {
                    return self.reject(l.span(), "`let` without an initializer");
                }
                visit::visit_stmt(self, s)
            }
            syn::Stmt::Expr(..) => visit::visit_stmt(self, s),
        }
    }

    fn visit_pat(&mut self, p: &'ast syn::Pat) {
        match p {
            syn::Pat::Ident(pi) if pi.by_ref.is_none() && pi.subpat.is_none() => {}
            syn::Pat::Tuple(_) | syn::Pat::Wild(_) | syn::Pat::Type(_) | syn::Pat::Paren(_) => {
                visit::visit_pat(self, p)
            }
            other => self.reject(
                other.span(),
                &format!(
                    "pattern `{}` (use a name, `_` or a tuple of names)",
                    other.to_token_stream()
                ),
            ),
        }
    }

    fn visit_type(&mut self, _: &'ast syn::Type) {
        // Type annotations (`let x: T = ..`) are ignored: the specializer infers types.
    }
}

impl SyntaxChecker {
    /// `if const { COND } { .. }` is the one place an inline `const` block is allowed.
    fn visit_if(&mut self, i: &syn::ExprIf) {
        match &*i.cond {
            syn::Expr::Const(c) => self.visit_block(&c.block),
            cond => self.visit_expr(cond),
        }
        self.visit_block(&i.then_branch);
        if let Some((_, e)) = &i.else_branch {
            self.visit_expr(e);
        }
    }
}
