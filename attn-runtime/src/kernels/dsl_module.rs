//! DSL modules loaded from source text at run time, and the merge that lets a user's
//! `#[device]` functions (a mask, a bounds function) sit next to a shipped kernel.
//!
//! Why a merge of parsed modules: the specializer resolves device calls and `Device`
//! constexprs by name inside ONE `ast::Module`, so a variant's device functions must be
//! items of the kernel's module. Merging the parsed items (rather than pasting texts)
//! keeps each item's spans in its own text, so errors point at the user's line, and it
//! works the same whether a text comes from `include_str!` (today) or from the
//! `#[module]` macro's embedded template source (later): both are just module texts.
//!
//! Parsed modules hold `syn` trees whose spans are not `Send`, so they are cached per
//! thread, keyed by a content hash of the text (never by names or paths).

use std::cell::RefCell;
use std::rc::Rc;

use attn_dsl::ast::Module;
use attn_dsl::frontend::parse_module_str;
use attn_dsl::template::Template;
use thiserror::Error;

/// Why a module could not be loaded or merged.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ModuleLoadError {
    #[error("{file}: no `mod {module} {{ .. }}` in the file text")]
    ModuleNotFound { module: String, file: String },
    #[error("{file}:{line}: {message}")]
    Parse {
        file: String,
        line: usize,
        message: String,
    },
    #[error("`{name}` is defined in both `{base}` and `{extension}`; rename one (merged modules share one namespace)")]
    DuplicateItem {
        name: String,
        base: String,
        extension: String,
    },
}

/// A parsed DSL module with the identity of the text(s) it was parsed from.
#[derive(Clone)]
pub struct DslModule {
    module: Rc<Module>,
    /// blake3 of the source text(s), in merge order: the module's identity in caches.
    source_hash: String,
    /// Where the texts came from, for messages (`file` labels joined with ` + `).
    label: String,
}

impl DslModule {
    /// The parsed items.
    pub fn module(&self) -> &Module {
        &self.module
    }

    /// Content hash of the text(s) (hex); equal texts give equal hashes in every process.
    pub fn source_hash(&self) -> &str {
        &self.source_hash
    }

    /// The origin of the text(s), for messages.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// This module plus the items of `extension` (a user's device functions). A name
    /// defined in both is an error: silently shadowing a shipped mask would be a trap.
    pub fn merged_with(&self, extension: &DslModule) -> Result<DslModule, ModuleLoadError> {
        let mut items = self.module.items.clone();
        for item in &extension.module.items {
            if self.module.item(&item.name()).is_some() {
                return Err(ModuleLoadError::DuplicateItem {
                    name: item.name(),
                    base: self.label.clone(),
                    extension: extension.label.clone(),
                });
            }
            items.push(item.clone());
        }
        let hash =
            blake3::hash(format!("{}+{}", self.source_hash, extension.source_hash).as_bytes());
        Ok(DslModule {
            module: Rc::new(Module { items }),
            source_hash: hash.to_hex().to_string(),
            label: format!("{} + {}", self.label, extension.label),
        })
    }
}

thread_local! {
    /// Parsed texts of this thread, by content hash (a handful per process).
    static PARSED: RefCell<Vec<(String, Rc<Module>)>> = const { RefCell::new(Vec::new()) };
}

/// The text of `mod <module_name> { .. }` inside a Rust file, from the `pub mod` /
/// `mod` line on, preceded by as many newlines as the file has above it, so that DSL
/// line numbers in errors are the file's. Whatever precedes the module (`use` lines,
/// the `#[module]` attribute) is dropped.
pub fn module_text(
    file_text: &str,
    module_name: &str,
    file: &str,
) -> Result<String, ModuleLoadError> {
    let start = ["pub mod ", "mod "].iter().find_map(|prefix| {
        let needle = format!("{prefix}{module_name}");
        file_text.match_indices(&needle).map(|(i, _)| i).find(|&i| {
            let after = file_text[i + needle.len()..].trim_start();
            let at_line_start = file_text[..i].ends_with('\n') || i == 0;
            at_line_start && after.starts_with('{')
        })
    });
    let start = start.ok_or_else(|| ModuleLoadError::ModuleNotFound {
        module: module_name.to_string(),
        file: file.to_string(),
    })?;
    let rest = &file_text[start..];
    let end = module_end(rest).ok_or_else(|| ModuleLoadError::Parse {
        file: file.to_string(),
        line: file_text[..start].matches('\n').count() + 1,
        message: format!("`mod {module_name}` has no balanced `{{ .. }}` body"),
    })?;
    let lines_above = file_text[..start].matches('\n').count();
    Ok(format!("{}{}", "\n".repeat(lines_above), &rest[..end]))
}

/// Byte offset just past the module's closing brace in `text` (which starts at `mod`),
/// found by lexing (so braces in strings and comments do not count).
fn module_end(text: &str) -> Option<usize> {
    let tokens: proc_macro2::TokenStream = text.parse().ok()?;
    let body = tokens.into_iter().find_map(|tt| match tt {
        proc_macro2::TokenTree::Group(g) if g.delimiter() == proc_macro2::Delimiter::Brace => {
            Some(g)
        }
        _ => None,
    })?;
    let end = body.span_close().end();
    byte_offset(text, end.line, end.column)
}

/// The byte offset of 1-based `line`, 0-based char `column` in `text`.
fn byte_offset(text: &str, line: usize, column: usize) -> Option<usize> {
    let line_start: usize = text
        .split_inclusive('\n')
        .take(line.checked_sub(1)?)
        .map(str::len)
        .sum();
    let line_text = text.get(line_start..)?;
    let within = line_text
        .char_indices()
        .nth(column)
        .map_or(line_text.len(), |(i, _)| i);
    Some(line_start + within)
}

/// Parses `mod <module_name>` of a Rust file's text (see [`module_text`]).
pub fn module_from_file_text(
    file_text: &str,
    module_name: &str,
    file: &str,
) -> Result<DslModule, ModuleLoadError> {
    module_from_source(&module_text(file_text, module_name, file)?, file)
}

/// Parses the module a `#[module]` macro embedded as `template`, its text padded back to its
/// file lines so that errors name the lines of the file that defines it.
pub fn module_from_template(template: &Template) -> Result<DslModule, ModuleLoadError> {
    let offset = "\n".repeat(template.line_offset() as usize);
    module_from_source(&format!("{offset}{}", template.source()), template.file())
}

/// Parses a module text (`mod name { .. }` or a sequence of `#[device]`/`#[kernel]`
/// functions), once per thread per distinct text. `label` names it in messages.
pub fn module_from_source(text: &str, label: &str) -> Result<DslModule, ModuleLoadError> {
    let source_hash = blake3::hash(text.as_bytes()).to_hex().to_string();
    let cached = PARSED.with(|c| {
        c.borrow()
            .iter()
            .find(|(h, _)| *h == source_hash)
            .map(|(_, m)| m.clone())
    });
    let module = match cached {
        Some(m) => m,
        None => {
            let parsed = parse_module_str(text).map_err(|e| ModuleLoadError::Parse {
                file: label.to_string(),
                line: e.span.start().line,
                message: e.message,
            })?;
            let m = Rc::new(parsed);
            PARSED.with(|c| c.borrow_mut().push((source_hash.clone(), m.clone())));
            m
        }
    };
    Ok(DslModule {
        module,
        source_hash,
        label: label.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "//! doc\nuse x::module;\n\n#[module]\npub mod demo {\n    #[device]\n    fn one() -> i32 { 1 }\n}\n\npub fn rust_after() -> &'static str { \"}\" }\n";

    #[test]
    fn module_text_keeps_file_lines() {
        let text = module_text(FILE, "demo", "demo.rs").unwrap();
        assert!(text.starts_with("\n\n\n\npub mod demo"));
        assert!(text.ends_with("fn one() -> i32 { 1 }\n}"), "{text:?}");
    }

    #[test]
    fn missing_module_is_named() {
        let err = module_text(FILE, "other", "demo.rs").unwrap_err();
        assert_eq!(
            err.to_string(),
            "demo.rs: no `mod other { .. }` in the file text"
        );
    }

    #[test]
    fn merge_rejects_duplicate_names() {
        let a = module_from_file_text(FILE, "demo", "a.rs").unwrap();
        let b = module_from_source("#[device] fn one() -> i32 { 2 }", "b.rs").unwrap();
        let err = a.merged_with(&b).err().unwrap();
        assert!(err
            .to_string()
            .contains("`one` is defined in both `a.rs` and `b.rs`"));
    }

    #[test]
    fn merge_appends_items_and_changes_identity() {
        let a = module_from_file_text(FILE, "demo", "a.rs").unwrap();
        let b = module_from_source("#[device] fn two() -> i32 { 2 }", "b.rs").unwrap();
        let m = a.merged_with(&b).unwrap();
        assert!(m.module().item("one").is_some() && m.module().item("two").is_some());
        assert_ne!(m.source_hash(), a.source_hash());
    }
}
