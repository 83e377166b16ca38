//! Every relative link in the README, ARCHITECTURE.md, docs/*.md, docs/benchmarks/*.md and docs/configuration/*.md
//! points at a file that exists, and every `#anchor` names a heading of the page it points into, so nothing the
//! README dropped is out of reach.
//! Needs no broker: it reads the markdown only.

use std::{
    collections::HashSet,
    path::{Path, PathBuf},
};

fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the tests crate lives in the repository").to_path_buf()
}

/// The pages whose links are checked.
fn pages(root: &Path) -> Vec<PathBuf> {
    let mut pages = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    let mut docs: Vec<PathBuf> = ["docs", "docs/benchmarks", "docs/configuration"]
        .into_iter()
        .flat_map(|dir| std::fs::read_dir(root.join(dir)).unwrap_or_else(|error| panic!("{dir}/: {error}")))
        .map(|entry| entry.expect("a docs/ entry").path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// The lines of a page outside fenced code blocks.
fn prose_lines(text: &str) -> Vec<&str> {
    let mut in_fence = false;
    let mut lines = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
        } else if !in_fence {
            lines.push(line);
        }
    }
    lines
}

/// `line` without its inline code spans, which may hold `](` that is not a link.
fn without_code_spans(line: &str) -> String {
    line.split('`').step_by(2).collect::<Vec<_>>().join(" ")
}

/// The targets of the inline links and images of a page, in order.
fn link_targets(text: &str) -> Vec<String> {
    let mut targets = Vec::new();
    for line in prose_lines(text) {
        let line = without_code_spans(line);
        let mut rest = line.as_str();
        while let Some(start) = rest.find("](") {
            let after = &rest[start + 2..];
            let Some(end) = after.find(')') else { break };
            targets.push(after[..end].trim().to_owned());
            rest = &after[end + 1..];
        }
    }
    targets
}

/// GitHub's anchor for a heading: lowercase; letters, digits, `-` and `_` kept, spaces made `-`, the rest dropped;
/// a repeated heading gets `-1`, `-2`, ...
fn anchors(text: &str) -> HashSet<String> {
    let mut anchors = HashSet::new();
    for line in prose_lines(text) {
        let Some(title) = line.strip_prefix('#') else { continue };
        let title = title.trim_start_matches('#');
        if !title.starts_with(' ') {
            continue;
        }
        let slug: String = title
            .trim()
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        let mut candidate = slug.clone();
        let mut repeat = 0;
        while !anchors.insert(candidate.clone()) {
            repeat += 1;
            candidate = format!("{slug}-{repeat}");
        }
    }
    anchors
}

#[test]
fn every_relative_link_and_anchor_in_the_docs_resolves() {
    let root = repository_root();
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages(&root) {
        let text = std::fs::read_to_string(&page).expect("a page");
        let name = page.strip_prefix(&root).unwrap_or(&page).display().to_string();
        for target in link_targets(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, anchor) = target.split_once('#').unwrap_or((target.as_str(), ""));
            let file = if path.is_empty() { page.clone() } else { page.parent().expect("a folder").join(path) };
            if !file.exists() {
                broken.push(format!("{name}: `{target}`: no file {}", file.display()));
                continue;
            }
            if anchor.is_empty() {
                continue;
            }
            if file.extension().is_none_or(|extension| extension != "md") {
                broken.push(format!("{name}: `{target}`: an anchor into a file that is not markdown"));
                continue;
            }
            let linked = std::fs::read_to_string(&file).expect("the linked page");
            if !anchors(&linked).contains(anchor) {
                broken.push(format!("{name}: `{target}`: no heading with anchor #{anchor}"));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    assert!(checked > 50, "only {checked} relative links found: is the link scanner still finding links?");
}

#[test]
fn anchors_follow_githubs_rules() {
    let page =
        "# The `[kafka]` table\n## Example: gateway.toml\n```sh\n# not a heading\n```\n## Example: gateway.toml\n";
    let found = anchors(page);
    for expected in ["the-kafka-table", "example-gatewaytoml", "example-gatewaytoml-1"] {
        assert!(found.contains(expected), "{expected} not in {found:?}");
    }
    assert_eq!(found.len(), 3, "{found:?}");
    assert_eq!(
        link_targets("see [a](x.md#b) and `[c](not-a-link)` and ![d](e.png)\n```\n[f](g)\n```"),
        ["x.md#b", "e.png"]
    );
}
