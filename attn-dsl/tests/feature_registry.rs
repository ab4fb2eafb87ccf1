//! Every feature switch the code reads is registered (`on("…")` in exactly one of
//! `features::SHIPPED` and `features::OPT_IN`, whose table gives its default; `disabled` /
//! `enabled` for the names in both), so `attn features` lists it and the environment check
//! accepts it; a switch read under a misspelt name would otherwise never turn on. Reads the
//! sources of this crate and of the runtime.

use attn_dsl::features::{OPT_IN, SHIPPED};
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The names the sources pass to `call("…")`.
fn names_read_by(call: &str, files: &[PathBuf]) -> Vec<(String, PathBuf)> {
    let pattern = format!("{call}(\"");
    let mut names = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(f).expect("read source");
        for (at, _) in text.match_indices(&pattern) {
            // `disabled(` also ends in `abled(`: only whole calls.
            let before = text[..at].chars().last();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let rest = &text[at + pattern.len()..];
            let name = &rest[..rest.find('"').expect("closing quote")];
            names.push((name.to_string(), f.clone()));
        }
    }
    names
}

#[test]
fn every_switch_the_code_reads_is_registered() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    rust_files(&root.join("../attn-runtime/src"), &mut files);
    let in_table = |table: &[(&str, &str)], name: &str| table.iter().any(|(n, _)| *n == name);
    // `on("…")`: a feature of exactly one table (its default is that table's).
    let read = names_read_by("on", &files);
    assert!(read.len() >= 20, "on: too few calls found: {read:?}");
    for (name, file) in read {
        assert!(
            in_table(SHIPPED, &name) != in_table(OPT_IN, &name),
            "{}: on(\"{name}\") is not in exactly one table of features.rs",
            file.display()
        );
    }
    // `enabled` / `disabled`: the names in both tables, read with the meaning they say.
    for (call, table) in [("enabled", OPT_IN), ("disabled", SHIPPED)] {
        for (name, file) in names_read_by(call, &files) {
            assert!(
                in_table(table, &name),
                "{}: {call}(\"{name}\") is not registered in features.rs",
                file.display()
            );
        }
    }
}
