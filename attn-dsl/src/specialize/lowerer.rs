//! The lowering state: the IR builder, the module (for device functions), and a stack of
//! frames — one per function being inlined, each with its constexprs and variables.

use super::env::Env;
use super::value::Val;
use super::{ConstValue, DslError};
use crate::ast::{Item, Module};
use crate::frontend::signature::ParamDecl;
use crate::ir::{Builder, Function, IrError, Loc, ValueId};
use proc_macro2::Span;
use syn::spanned::Spanned;

pub(crate) type R<T> = Result<T, DslError>;

/// Device functions may call each other; this bounds runaway (recursive) inlining.
pub(crate) const MAX_INLINE_DEPTH: usize = 32;

/// One function being lowered: the kernel, or a device function inlined into it.
pub(crate) struct Frame {
    pub func_name: String,
    pub is_kernel: bool,
    pub constexprs: Vec<(String, ConstValue)>,
    pub env: Env,
}

pub(crate) struct Lowerer<'m, 'f> {
    pub module: &'m Module,
    pub b: Builder<'f>,
    pub frames: Vec<Frame>,
}

/// Lowers the body of `item` into `func`, whose params are already added (`params` pairs
/// each declaration with its entry-block value).
pub(crate) fn lower_kernel(
    module: &Module,
    item: &Item,
    constexprs: Vec<(String, ConstValue)>,
    func: &mut Function,
    params: &[(ParamDecl, ValueId)],
) -> R<()> {
    let mut env = Env::default();
    for (p, v) in params {
        env.define(&p.name, Val::Runtime(*v), p.mutable);
    }
    let frame = Frame {
        func_name: item.name(),
        is_kernel: true,
        constexprs,
        env,
    };
    let mut l = Lowerer {
        module,
        b: Builder::new(func),
        frames: vec![frame],
    };
    let result = l.lower_fn_body(&item.func.block)?;
    if result != Val::Unit {
        return Err(DslError::new(
            item.func.block.span(),
            format!(
                "a kernel returns nothing, but this body ends in {}",
                result.kind_name()
            ),
        ));
    }
    l.at(item.func.block.brace_token.span.close());
    l.b.finish();
    Ok(())
}

/// The DSL source position of a span (1-based line and column; 0 when unknown).
pub(crate) fn loc_of(span: Span) -> Loc {
    let s = span.start();
    if s.line == 0 {
        return Loc::default();
    }
    Loc {
        line: s.line as u32,
        col: s.column as u32 + 1,
    }
}

impl<'m, 'f> Lowerer<'m, 'f> {
    pub fn frame(&self) -> &Frame {
        self.frames
            .last()
            .expect("a frame is always open while lowering")
    }
    pub fn env(&self) -> &Env {
        &self.frame().env
    }
    pub fn env_mut(&mut self) -> &mut Env {
        &mut self
            .frames
            .last_mut()
            .expect("a frame is always open while lowering")
            .env
    }
    /// The value of a constexpr of the current function.
    pub fn constexpr(&self, name: &str) -> Option<&ConstValue> {
        self.frame()
            .constexprs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
    }
    /// Ops built from now on carry this span's DSL position.
    pub fn at(&mut self, span: Span) {
        self.b.loc = loc_of(span);
    }
    /// Converts a builder error into a diagnostic at `span`.
    pub fn ir_err(span: Span) -> impl Fn(IrError) -> DslError {
        move |e| DslError::new(span, e.to_string())
    }
    /// Names an SSA value after the DSL variable it was assigned to (unless already named).
    pub fn name_value(&mut self, v: &Val, name: &str) {
        if let Val::Runtime(id) = v {
            if self.b.func.value(*id).name.is_none() {
                self.b.set_name(*id, name);
            }
        }
    }
}
