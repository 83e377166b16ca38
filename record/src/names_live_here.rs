//! Only `record` names a record header: this test reads every Rust file of the workspace outside `record/` and
//! fails on a header name spelled as a string literal (every value of [`crate::header`]) or on a path into the
//! header module (`wire::header`, `hookline_record::header`, a `use` that brings `header` out of `wire`).
//! Tests that forge hostile records name headers through the explicit escape hatch [`crate::raw`], which this
//! test allows.
//!
//! [`NOT_YET_MOVED`] lists, by name, the files that still name headers because their crate has not been moved
//! onto the record types yet. It may only shrink: a file missing from it fails, and so does a listed file that no
//! longer names one (remove it from the list).

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
};

/// Files that still name record headers, each to be moved onto the record crate's types (issue 46).
const NOT_YET_MOVED: &[&str] = &[
    "bench/src/naive_consumer.rs",
    "common/examples/record_mac_cost.rs",
    "common/src/config/record_auth.rs",
    "common/src/record_auth.rs",
    "common/src/record_auth/tests.rs",
    "common/src/telemetry/traces.rs",
    "common/src/wire/record_view.rs",
    "consumer/src/handler/http.rs",
    "consumer/src/pipeline/mod.rs",
    "consumer/src/service.rs",
    "reconciler/src/index.rs",
    "tests/tests/suite/consumer.rs",
    "tests/tests/suite/consumer_concurrency.rs",
    "tests/tests/suite/consumer_services.rs",
    "tests/tests/suite/forward_signed.rs",
    "tests/tests/suite/gateway_fetched_keys.rs",
    "tests/tests/suite/gateway_identity.rs",
    "tests/tests/suite/gateway_public_key_schemes.rs",
    "tests/tests/suite/gateway_status.rs",
    "tests/tests/suite/nothing_stalls.rs",
    "tests/tests/suite/pipeline.rs",
    "tests/tests/suite/postgres_error_redaction.rs",
    "tests/tests/suite/postgres_handler.rs",
    "tests/tests/suite/postgres_inbox.rs",
    "tests/tests/suite/reconciler.rs",
    "tests/tests/suite/record_auth.rs",
    "tests/tests/suite/route_filters.rs",
    "tests/tests/suite/route_hold.rs",
    "tests/tests/traces.rs",
    "tests/tests/traces_collector.rs",
    "tests/tests/traces_off.rs",
];

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
    let listed: BTreeSet<&str> = NOT_YET_MOVED.iter().copied().collect();
    let new: Vec<String> = naming
        .iter()
        .filter(|(file, _)| !listed.contains(file.as_str()))
        .map(|(file, why)| format!("{file}: {why}"))
        .collect();
    assert!(
        new.is_empty(),
        "files outside record name a record header (use the record crate's types):\n{}",
        new.join("\n")
    );
    let moved: Vec<&str> =
        listed.iter().copied().filter(|file| !naming.iter().any(|(naming, _)| naming == file)).collect();
    assert!(moved.is_empty(), "no longer naming a header: remove from NOT_YET_MOVED: {moved:?}");
}
