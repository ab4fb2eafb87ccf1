//! Kernel templates embedded in binaries for run-time specialization (DESIGN §3.2).
//!
//! `#[module]` / `#[kernel]` embed the module's source text in a [`Template`] so that a
//! configuration that only arrives at run time (a model's window size, head size) goes
//! through the very pipeline `instantiate!` runs inside rustc: [`crate::frontend`] then
//! [`crate::driver::compile`]. The text is rendered with every token on its original line
//! and column, and [`Template::specialize`] pads it back to its place in the user's file,
//! so DSL lines in errors, IR locations and CUDA comments are those of the user's file, and
//! the run-time output equals the compile-time one byte for byte.

use crate::ast::Module;
use crate::driver::{emit, optimize, Compiled};
use crate::frontend::parse_module_str;
use crate::specialize::{Binding, ConstValue, DslError};
use proc_macro2::Span;
use std::cell::RefCell;
use std::rc::Rc;

/// The source of one kernel's module, ready to be specialized at run time.
///
/// Built by the macros (`pub const <KERNEL>_TEMPLATE: Template`); all fields are
/// `'static` so the template is a plain constant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Template {
    /// The module's tokens re-rendered as text; line 1 is line `line_offset + 1` of `file`.
    source: &'static str,
    /// The kernel of the module this template specializes.
    kernel: &'static str,
    /// The file the module was written in (as `file!()` reports it), for error messages.
    file: &'static str,
    /// Lines of `file` above the first line of `source`.
    line_offset: u32,
}

/// A run-time specialization failure: the compile-time message plus where it happened.
///
/// Owns only strings so it is `Send + Sync + 'static` (the compiler's [`DslError`] holds a
/// `Span`, which is neither).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message} (kernel `{kernel}`, {file}:{line})")]
pub struct SpecializeError {
    /// The kernel being specialized.
    pub kernel: String,
    /// Exactly the message `instantiate!` reports as a compile error.
    pub message: String,
    /// The file the kernel was written in.
    pub file: String,
    /// The DSL line (of `file`) the error points at; the kernel's `fn` line when the error
    /// belongs to a binding rather than to DSL code.
    pub line: u32,
}

/// A parsed template, cached per thread (syn trees hold spans, which are not `Send`).
struct ParsedTemplate {
    module: Module,
    /// A span inside the parsed text: errors whose span joins with it point into the DSL.
    anchor: Span,
    /// Line of the kernel's name, for errors that point at no DSL code.
    kernel_line: u32,
}

/// Identifies a template: address and length of its `'static` source text, and its kernel.
type TemplateKey = (usize, usize, &'static str);

thread_local! {
    /// Parsed templates of this thread (a handful per process: a linear scan is enough).
    static PARSED: RefCell<Vec<(TemplateKey, Rc<ParsedTemplate>)>> =
        const { RefCell::new(Vec::new()) };
}

impl Template {
    /// Used by the generated constants; `source` must be the text the macros rendered.
    pub const fn new(
        source: &'static str,
        kernel: &'static str,
        file: &'static str,
        line_offset: u32,
    ) -> Self {
        Template {
            source,
            kernel,
            file,
            line_offset,
        }
    }

    /// The module's source text as embedded (without the leading line padding).
    pub fn source(&self) -> &'static str {
        self.source
    }

    /// The kernel this template specializes.
    pub fn kernel(&self) -> &'static str {
        self.kernel
    }

    /// The file the module was written in.
    pub fn file(&self) -> &'static str {
        self.file
    }

    /// Lines of [`Self::file`] above the first line of [`Self::source`].
    pub fn line_offset(&self) -> u32 {
        self.line_offset
    }

    /// Specializes the kernel on `bindings` (`("BLOCK", ConstValue::Int(128))`, ...) through
    /// the same pipeline as `instantiate!`; the error message is the compile-time one.
    pub fn specialize(&self, bindings: &[(&str, ConstValue)]) -> Result<Compiled, SpecializeError> {
        self.specialize_with(bindings, |_| Ok(()))
    }

    /// [`Self::specialize`] with `refine` applied to the optimized IR before the one CUDA
    /// emission (facts the caller promises, e.g. divisible integer arguments); its error is
    /// reported at the kernel's line.
    pub fn specialize_with(
        &self,
        bindings: &[(&str, ConstValue)],
        refine: impl FnOnce(&mut crate::ir::Function) -> Result<(), String>,
    ) -> Result<Compiled, SpecializeError> {
        let parsed = self.parsed()?;
        let bindings: Vec<Binding> = bindings
            .iter()
            .map(|(name, value)| Binding::new(*name, value.clone()))
            .collect();
        let at = |e| self.error(&parsed, e);
        let mut s = optimize(&parsed.module, self.kernel, &bindings).map_err(at)?;
        refine(&mut s.ir).map_err(|m| at(DslError::new(parsed.anchor, m)))?;
        emit(s).map_err(at)
    }

    /// The module parsed from [`Self::source`], parsed once per thread.
    fn parsed(&self) -> Result<Rc<ParsedTemplate>, SpecializeError> {
        let key = (
            self.source.as_ptr() as usize,
            self.source.len(),
            self.kernel,
        );
        if let Some(hit) = PARSED.with(|c| {
            c.borrow()
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, p)| p.clone())
        }) {
            return Ok(hit);
        }
        let parsed = Rc::new(self.parse()?);
        PARSED.with(|c| c.borrow_mut().push((key, parsed.clone())));
        Ok(parsed)
    }

    /// Parses the source padded with `line_offset` blank lines, so spans carry file lines.
    fn parse(&self) -> Result<ParsedTemplate, SpecializeError> {
        let padded = format!("{}{}", "\n".repeat(self.line_offset as usize), self.source);
        let module = parse_module_str(&padded).map_err(|e| self.plain_error(e.message))?;
        let Some(item) = module.item(self.kernel) else {
            return Err(self.plain_error(format!(
                "the embedded template has no kernel `{}`",
                self.kernel
            )));
        };
        // Any span of the parsed text works as the anchor: all of them share one source file.
        let anchor = item.func.sig.ident.span();
        let kernel_line = anchor.start().line as u32;
        Ok(ParsedTemplate {
            module,
            anchor,
            kernel_line,
        })
    }

    /// Maps a compiler error to its file line: the error's own line when it points into the
    /// template text, the kernel's line when it points at a (run-time) binding.
    fn error(&self, parsed: &ParsedTemplate, e: DslError) -> SpecializeError {
        let in_template = parsed.anchor.join(e.span).is_some();
        let line = if in_template {
            e.span.start().line as u32
        } else {
            parsed.kernel_line
        };
        SpecializeError {
            kernel: self.kernel.to_string(),
            message: e.message,
            file: self.file.to_string(),
            line,
        }
    }

    /// An error that belongs to the template as a whole.
    fn plain_error(&self, message: String) -> SpecializeError {
        SpecializeError {
            kernel: self.kernel.to_string(),
            message,
            file: self.file.to_string(),
            line: self.line_offset + 1,
        }
    }
}
