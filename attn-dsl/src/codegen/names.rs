//! C++ identifiers for kernel parameters and SSA values: DSL names where the IR has them,
//! made valid and unique, so the generated code reads like the kernel it came from.

use std::collections::BTreeSet;

/// Words a generated identifier must not be: C++ keywords the DSL could plausibly use as
/// variable names, and the names the prelude and the emitter define. (Values are always
/// named `<dsl name>_<id>`, so in practice this renames kernel parameters: `c` → `c_`.)
const RESERVED: &[&str] = &[
    "auto",
    "bool",
    "break",
    "case",
    "char",
    "class",
    "const",
    "continue",
    "default",
    "delete",
    "do",
    "double",
    "else",
    "enum",
    "extern",
    "false",
    "float",
    "for",
    "goto",
    "if",
    "inline",
    "int",
    "long",
    "new",
    "operator",
    "private",
    "public",
    "register",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "struct",
    "switch",
    "template",
    "this",
    "true",
    "typedef",
    "union",
    "unsigned",
    "using",
    "virtual",
    "void",
    "volatile",
    "while",
    "bf16",
    "f16",
    "tid",
    "lane",
    "warp",
    "threadIdx",
    "blockIdx",
    "blockDim",
    "gridDim",
    "min",
    "max",
    "abs",
    // Locals of the emitter whose scope contains expressions over kernel parameters (slot
    // and fragment loops, scatter coordinates, staging buffers, reduction accumulators): a
    // parameter of the same name would be shadowed there.
    "s",
    "r",
    "c",
    "f",
    "j",
    "nt",
    "sa",
    "sb",
    "sc",
    "sd",
    "sx",
    "acc",
    "sum",
    "g",
    "t4",
    "frag",
];

/// Turns any DSL name into a C identifier (ASCII alphanumerics and `_`, not starting with
/// a digit, never a reserved word and never starting with the prelude's `attn_` prefix).
pub(crate) fn sanitize(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    if out.starts_with("attn_") || out.starts_with("__") || RESERVED.contains(&out.as_str()) {
        out.push('_');
    }
    out
}

/// Hands out identifiers that never collide with each other.
#[derive(Default)]
pub(crate) struct NameTable {
    used: BTreeSet<String>,
}

impl NameTable {
    /// Claims `base` (sanitized), appending `_` until it is unused.
    pub(crate) fn claim(&mut self, base: &str) -> String {
        let mut name = sanitize(base);
        while self.used.contains(&name) {
            name.push('_');
        }
        self.used.insert(name.clone());
        name
    }

    /// Names SSA value `id`: `<dsl name>_<id>` when the DSL named it, else `v<id>`.
    pub(crate) fn value(&mut self, dsl_name: Option<&str>, id: u32) -> String {
        match dsl_name {
            Some(n) if !n.is_empty() => self.claim(&format!("{n}_{id}")),
            _ => self.claim(&format!("v{id}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitize_makes_valid_identifiers() {
        assert_eq!(sanitize("q_ptr"), "q_ptr");
        assert_eq!(sanitize("1x"), "_1x");
        assert_eq!(sanitize("a-b.c"), "a_b_c");
        assert_eq!(sanitize("int"), "int_");
        assert_eq!(sanitize("attn_smem"), "attn_smem_");
        assert_eq!(sanitize(""), "_");
    }

    #[test]
    fn claims_are_unique() {
        let mut t = NameTable::default();
        assert_eq!(t.claim("x"), "x");
        assert_eq!(t.claim("x"), "x_");
        assert_eq!(t.value(Some("acc"), 3), "acc_3");
        assert_eq!(t.value(None, 4), "v4");
    }
}
