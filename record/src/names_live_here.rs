//! Only `record` names a record header: this test reads every Rust file of the workspace outside `record/` and
//! fails on a header name spelled as a string literal (every value of [`crate::header`]) or on a path into the
//! header module (`wire::header`, `hookline_record::header`, a `use` that brings `header` out of `wire`).
//! Tests that forge hostile records name headers through the explicit escape hatch [`crate::raw`], which this
//! test allows.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace root").to_path_buf()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if path.is_dir() {
            if !(name.starts_with('.') || name == "target" || name == "node_modules") {
                rust_files(&path, out);
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

/// Every header name and prefix of the header module, as written in its source.
fn header_names() -> Vec<String> {
    let source = include_str!("header.rs");
    source
        .lines()
        .filter_map(|line| {
            let line = line.trim();
            let rest = line.strip_prefix("pub const ")?;
            let value = rest.split_once("= \"")?.1;
            Some(value.trim_end_matches("\";").to_owned())
        })
        .collect()
}

/// Why `text` names a record header, if it does.
fn names_a_header(text: &str, names: &[String]) -> Option<String> {
    for name in names {
        // A prefix of ours (`hookline-retry-`) also when a literal starts with it; `http-` only as itself, as
        // other names start so too (`http-ceiling`).
        let prefix_used = name.starts_with("hookline-") && name.ends_with('-') && text.contains(&format!("\"{name}"));
        if text.contains(&format!("\"{name}\"")) || prefix_used {
            return Some(format!("the literal \"{name}\""));
        }
    }
    for path in ["wire::header", "hookline_record::header", "record::header::"] {
        if text.contains(path) {
            return Some(format!("the path {path}"));
        }
    }
    // `use ...::wire::{..., header, ...}`, over lines.
    let mut rest = text;
    while let Some(start) = rest.find("wire::{") {
        let group = &rest[start..];
        let end = group.find('}').unwrap_or(group.len());
        if group[..end].split(|c: char| !(c.is_alphanumeric() || c == '_')).any(|word| word == "header") {
            return Some("a use of wire::{header}".to_owned());
        }
        rest = &group[end..];
    }
    None
}

#[test]
fn only_record_names_a_record_header() {
    let root = workspace();
    let names = header_names();
    assert!(names.len() > 30, "the header module's names were read: {names:?}");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let mut naming = BTreeSet::new();
    for file in files {
        let relative = file.strip_prefix(&root).expect("under the root").to_string_lossy().replace('\\', "/");
        if relative.starts_with("record/") {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("read a source file");
        if let Some(why) = names_a_header(&text, &names) {
            naming.insert((relative, why));
        }
    }
    let naming: Vec<String> = naming.iter().map(|(file, why)| format!("{file}: {why}")).collect();
    assert!(
        naming.is_empty(),
        "files outside record name a record header (use the record crate's types):\n{}",
        naming.join("\n")
    );
}

/// The detector itself: each way of naming a header is caught, and the allowed escape hatch is not.
#[test]
fn every_way_of_naming_a_header_is_caught() {
    let names = header_names();
    let event_id = format!("\"{}\"", crate::header::EVENT_ID);
    for text in [
        format!("let id = headers.get({event_id});"),
        "use hookline_common::wire::header;".to_owned(),
        "let name = hookline_record::header::SOURCE;".to_owned(),
        "use hookline_common::wire::{\n    EventMeta,\n    header,\n};".to_owned(),
        format!("let prefix = \"{}x\";", crate::header::retry::PREFIX),
    ] {
        assert!(names_a_header(&text, &names).is_some(), "not caught: {text}");
    }
    for text in ["use hookline_record::raw;", "let x = raw::EVENT_ID;", "let ceiling = \"http-ceiling\";"] {
        assert_eq!(names_a_header(text, &names), None, "caught wrongly: {text}");
    }
}
