//! Named kernels for the CLI and benches: `name → build (bindings → CUDA + IR) + default
//! bindings + input builder + f64 reference`. The lead registers the proof kernels
//! (softmax, matmul, flash attention); `vadd` is a hand-written built-in that exercises
//! every path end to end until the DSL lands.

mod bindings;
mod mla;
mod proof;
mod unified;
mod vadd;

pub use bindings::{merge_bindings, parse_binding, BindingError};

use crate::parity::Tolerance;
use crate::problem::Problem;
use attn_dsl::codegen::CudaKernel;
use attn_dsl::ir::Function;
use attn_dsl::Binding;

/// A specialization ready to compile and run.
#[derive(Clone, Debug)]
pub struct BuiltKernel {
    /// `kernel<NAME=value,...>`.
    pub key: String,
    pub cuda: CudaKernel,
    /// A prelude replacing the compiler's (hand-written kernels); `None` = the compiler's.
    pub prelude: Option<String>,
    /// Specialized IR for the CPU executor (`None`: GPU only).
    pub ir: Option<Function>,
}

/// An entry for `attn emit` / `attn compile` of a specialization an op launches: it builds
/// the op's kernel but has no one-kernel problem (`problem` says how to run the op instead).
pub(crate) fn op_preset_entry(
    name: &'static str,
    summary: &'static str,
    default_bindings: fn() -> Vec<Binding>,
    build: fn(&[Binding]) -> Result<BuiltKernel, String>,
    problem: fn(&[Binding]) -> Result<Problem, String>,
) -> KernelEntry {
    KernelEntry {
        name,
        summary,
        default_bindings,
        build,
        problem,
        reference: |_| vec![],
        tolerance: Tolerance {
            atol: 1.5e-2,
            rtol: 1e-2,
        },
        cases: &[],
    }
}

/// One named kernel.
pub struct KernelEntry {
    pub name: &'static str,
    pub summary: &'static str,
    /// Constexprs and problem sizes with their defaults; `K=V` on the command line overrides.
    pub default_bindings: fn() -> Vec<Binding>,
    /// Specializes on (merged) bindings: typically `Template::specialize` + `emit_cuda`.
    pub build: fn(&[Binding]) -> Result<BuiltKernel, String>,
    /// Deterministic random inputs, grid, work counts for the bindings.
    pub problem: fn(&[Binding]) -> Result<Problem, String>,
    /// The independent f64 reference: one vector per output.
    pub reference: fn(&Problem) -> Vec<Vec<f64>>,
    pub tolerance: Tolerance,
    /// Parity cases: each a space-separated `K=V` list applied over the defaults (odd sizes,
    /// tails, the other branch of a constexpr). The defaults are always a case too.
    pub cases: &'static [&'static str],
}

impl KernelEntry {
    /// The bindings of every parity case: the defaults first, then each of [`Self::cases`].
    pub fn case_bindings(&self) -> Result<Vec<Vec<Binding>>, String> {
        let defaults = (self.default_bindings)();
        let mut all = vec![defaults.clone()];
        for case in self.cases {
            let overrides = case
                .split_whitespace()
                .map(parse_binding)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("{}: case `{case}`: {e}", self.name))?;
            all.push(
                merge_bindings(defaults.clone(), &overrides)
                    .map_err(|e| format!("{}: {e}", self.name))?,
            );
        }
        Ok(all)
    }
}

/// The set of named kernels, in registration order (deterministic listings).
#[derive(Default)]
pub struct Registry {
    entries: Vec<KernelEntry>,
}

/// An unknown kernel name.
#[derive(Debug, thiserror::Error)]
#[error("unknown kernel `{name}`; known kernels: {known}")]
pub struct UnknownKernel {
    pub name: String,
    pub known: String,
}

impl Registry {
    pub fn new() -> Self {
        Registry::default()
    }

    /// The built-in entries: `vadd` and the proof kernels.
    pub fn with_builtins() -> Self {
        let mut r = Registry::new();
        r.register(vadd::entry());
        for e in proof::entries() {
            r.register(e);
        }
        r
    }

    /// The built-ins plus unified attention's and MLA history's preset entries (emit /
    /// compile only: see `registry::unified`, `registry::mla`), as the `attn` binary
    /// registers them.
    pub fn with_cli_kernels() -> Self {
        let mut r = Registry::with_builtins();
        for e in unified::entries().into_iter().chain(mla::entries()) {
            r.register(e);
        }
        r
    }

    /// Adds or replaces (same name) an entry.
    pub fn register(&mut self, entry: KernelEntry) {
        match self.entries.iter_mut().find(|e| e.name == entry.name) {
            Some(slot) => *slot = entry,
            None => self.entries.push(entry),
        }
    }

    pub fn get(&self, name: &str) -> Result<&KernelEntry, UnknownKernel> {
        self.entries
            .iter()
            .find(|e| e.name == name)
            .ok_or_else(|| UnknownKernel {
                name: name.to_string(),
                known: self.names().join(", "),
            })
    }

    pub fn names(&self) -> Vec<&'static str> {
        self.entries.iter().map(|e| e.name).collect()
    }

    pub fn entries(&self) -> &[KernelEntry] {
        &self.entries
    }
}
