//! Within each crate, the top-level modules depend on one another without a cycle: a newcomer can read them
//! from the leaves up, and no two modules can each assume the other is already built (the gateway's `config` and
//! `source` once did, and built every source twice).
//!
//! A module depends on another when its code names it: `crate::other::...` or `super::other::...` from a top-level
//! module's file, in a `use` or a path. An item defined in `lib.rs` counts as the crate root, a node of its own;
//! `pub use` re-exports in `lib.rs` count as the module they re-export. Test code (`#[cfg(test)]`) is left out:
//! tests may reach anywhere. Paths inside macro invocations are not read.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

use syn::visit::Visit;

/// The crates whose module graphs must be trees, by directory.
const CRATES: &[&str] = &["common", "gateway", "consumer", "dlq-replayer", "reconciler", "bench", "tests"];

/// The node for items defined in `lib.rs` itself.
const ROOT: &str = "(lib.rs)";

#[test]
fn no_crate_has_a_module_cycle() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace root");
    let mut cycles = Vec::new();
    for name in CRATES {
        let graph = ModuleGraph::of_crate(&workspace.join(name).join("src"));
        assert!(
            graph.edges.len() > 1 || *name == "tests",
            "{name}: no modules found; is the crate laid out as src/lib.rs?"
        );
        if let Some(cycle) = graph.cycle() {
            cycles.push(format!("{name}: {}", cycle.join(" -> ")));
        }
    }
    assert!(cycles.is_empty(), "module cycles:\n{}", cycles.join("\n"));
}

#[test]
fn the_check_finds_a_cycle_through_a_re_export_and_a_super_path() {
    let directory = std::env::temp_dir().join(format!("hookline-module-graph-{}", std::process::id()));
    std::fs::create_dir_all(&directory).expect("temp dir");
    std::fs::write(directory.join("lib.rs"), "mod a;\nmod b;\nmod c;\npub use crate::c::Thing;\n").expect("write");
    std::fs::write(directory.join("a.rs"), "use crate::b::B;\npub struct A;\n").expect("write");
    std::fs::write(directory.join("b.rs"), "pub struct B(super::Thing);\n").expect("write");
    std::fs::write(directory.join("c.rs"), "pub struct Thing;\nfn f() -> crate::a::A { todo!() }\n").expect("write");
    let cycle = ModuleGraph::of_crate(&directory).cycle();
    std::fs::remove_dir_all(&directory).expect("clean up");
    assert_eq!(cycle.expect("a cycle").len(), 4, "a -> b -> c -> a");
}

#[derive(Debug, Default)]
struct ModuleGraph {
    /// Module name to the modules (or [`ROOT`]) it names.
    edges: BTreeMap<String, BTreeSet<String>>,
}

impl ModuleGraph {
    fn of_crate(src: &Path) -> Self {
        let lib = parse(&src.join("lib.rs"));
        let mut modules = Vec::new();
        let mut re_exports = BTreeMap::new();
        let mut root_items = Vec::new();
        for item in &lib.items {
            match item {
                syn::Item::Mod(module) if is_test(&module.attrs) => {}
                syn::Item::Mod(module) => modules.push(module.ident.to_string()),
                syn::Item::Use(item_use) if matches!(item_use.vis, syn::Visibility::Public(_)) => {
                    for (target, exported) in use_targets(&item_use.tree, false, true) {
                        re_exports.insert(exported, target);
                    }
                }
                other => root_items.push(other.clone()),
            }
        }
        let module_names: BTreeSet<String> = modules.iter().cloned().collect();
        // A module, the module a re-export comes from, the root for an item defined in lib.rs, or nothing for a
        // re-export of another crate's item.
        let resolve = |name: &String| -> Option<String> {
            if module_names.contains(name) {
                Some(name.clone())
            } else {
                match re_exports.get(name) {
                    Some(target) => module_names.contains(target).then(|| target.clone()),
                    None => Some(ROOT.to_owned()),
                }
            }
        };
        let mut graph = Self::default();
        let mut root_refs = References { root_file: true, ..References::default() };
        for item in &root_items {
            root_refs.visit_item(item);
        }
        // Unprefixed paths in lib.rs name other crates too: only its own modules count there.
        let root_targets = root_refs.names.iter().filter(|name| module_names.contains(*name)).filter_map(resolve);
        graph.add(ROOT, root_targets);
        for module in &modules {
            let mut refs = References::default();
            for (file, top_level) in module_files(src, module) {
                refs.super_is_root = top_level;
                refs.visit_file(&parse(&file));
            }
            graph.add(module, refs.names.iter().filter_map(resolve));
        }
        graph
    }

    fn add(&mut self, from: &str, to: impl Iterator<Item = String>) {
        let targets = self.edges.entry(from.to_owned()).or_default();
        targets.extend(to.filter(|target| target != from));
    }

    /// One cycle, as the path that closes it (first node repeated at the end), if there is any.
    fn cycle(&self) -> Option<Vec<String>> {
        let mut done = BTreeSet::new();
        for start in self.edges.keys() {
            let mut path = Vec::new();
            if let Some(cycle) = self.visit(start, &mut path, &mut done) {
                return Some(cycle);
            }
        }
        None
    }

    fn visit(&self, node: &str, path: &mut Vec<String>, done: &mut BTreeSet<String>) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|seen| seen == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in self.edges.get(node).into_iter().flatten() {
            if let Some(cycle) = self.visit(next, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
}

/// The files of top-level module `name`, each with whether `super` in it means the crate root.
fn module_files(src: &Path, name: &str) -> Vec<(PathBuf, bool)> {
    let flat = src.join(format!("{name}.rs"));
    let directory = src.join(name);
    let mut files = Vec::new();
    if flat.is_file() {
        files.push((flat, true));
    } else if directory.join("mod.rs").is_file() {
        files.push((directory.join("mod.rs"), true));
    }
    if directory.is_dir() {
        let mut stack = vec![directory];
        while let Some(folder) = stack.pop() {
            for entry in std::fs::read_dir(&folder).expect("read a module directory") {
                let path = entry.expect("a directory entry").path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|extension| extension == "rs")
                    && path.file_name().is_some_and(|file| file != "mod.rs")
                {
                    files.push((path, false));
                }
            }
        }
    }
    assert!(!files.is_empty(), "module `{name}` has no file under {}", src.display());
    files
}

fn parse(file: &Path) -> syn::File {
    let text = std::fs::read_to_string(file).unwrap_or_else(|error| panic!("read {}: {error}", file.display()));
    syn::parse_file(&text).unwrap_or_else(|error| panic!("parse {}: {error}", file.display()))
}

fn is_test(attributes: &[syn::Attribute]) -> bool {
    attributes.iter().any(|attribute| {
        attribute.path().is_ident("cfg")
            && attribute.parse_args::<syn::Meta>().is_ok_and(|meta| meta.path().is_ident("test"))
    })
}

/// The first segment after `crate::` (or after `super::` where that is the crate root) of every path and `use`.
#[derive(Debug, Default)]
struct References {
    names: BTreeSet<String>,
    super_is_root: bool,
    /// In `lib.rs`, where a path's first segment may be one of the crate's modules.
    root_file: bool,
}

impl<'ast> Visit<'ast> for References {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attributes = match item {
            syn::Item::Mod(module) => module.attrs.as_slice(),
            syn::Item::Fn(function) => function.attrs.as_slice(),
            syn::Item::Impl(block) => block.attrs.as_slice(),
            syn::Item::Use(item_use) => item_use.attrs.as_slice(),
            syn::Item::Struct(item_struct) => item_struct.attrs.as_slice(),
            syn::Item::Enum(item_enum) => item_enum.attrs.as_slice(),
            syn::Item::Const(item_const) => item_const.attrs.as_slice(),
            _ => &[],
        };
        if !is_test(attributes) {
            syn::visit::visit_item(self, item);
        }
    }

    fn visit_item_use(&mut self, item_use: &'ast syn::ItemUse) {
        if is_test(&item_use.attrs) {
            return;
        }
        let targets = use_targets(&item_use.tree, self.super_is_root, self.root_file);
        self.names.extend(targets.into_iter().map(|(target, _)| target));
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let mut segments = path.segments.iter().map(|segment| segment.ident.to_string());
        match (segments.next(), segments.next()) {
            (Some(first), Some(second)) if first == "crate" || (first == "super" && self.super_is_root) => {
                self.names.insert(second);
            }
            (Some(first), Some(_)) if self.root_file => {
                self.names.insert(first);
            }
            _ => {}
        }
        syn::visit::visit_path(self, path);
    }
}

/// For a `use` tree, each (first segment after the crate root, name it is imported as). `crate::` is the root;
/// so is `super::` when `super_is_root`, and so is every unprefixed path when `unprefixed_is_root` (in `lib.rs`).
fn use_targets(tree: &syn::UseTree, super_is_root: bool, unprefixed_is_root: bool) -> Vec<(String, String)> {
    let mut out = Vec::new();
    walk_use(tree, &Place::Start { super_is_root, unprefixed_is_root }, &mut out);
    out
}

/// Where a `use` tree walk stands.
enum Place {
    /// Before the first segment.
    Start { super_is_root: bool, unprefixed_is_root: bool },
    /// Just after the crate root.
    Root,
    /// Below the root's child `first`.
    Below(String),
}

fn walk_use(tree: &syn::UseTree, place: &Place, out: &mut Vec<(String, String)>) {
    match (place, tree) {
        (_, syn::UseTree::Group(group)) => group.items.iter().for_each(|item| walk_use(item, place, out)),
        (Place::Start { super_is_root, unprefixed_is_root }, syn::UseTree::Path(path)) => {
            let ident = path.ident.to_string();
            if ident == "crate" || (ident == "super" && *super_is_root) {
                walk_use(&path.tree, &Place::Root, out);
            } else if *unprefixed_is_root && ident != "self" && ident != "super" {
                walk_use(&path.tree, &Place::Below(ident), out);
            }
        }
        (Place::Start { .. }, _) => {}
        (Place::Root, syn::UseTree::Path(path)) => walk_use(&path.tree, &Place::Below(path.ident.to_string()), out),
        (Place::Root, syn::UseTree::Name(name)) => out.push((name.ident.to_string(), name.ident.to_string())),
        (Place::Root, syn::UseTree::Rename(rename)) => out.push((rename.ident.to_string(), rename.rename.to_string())),
        (Place::Root, syn::UseTree::Glob(_)) => {}
        (Place::Below(_), syn::UseTree::Path(path)) => walk_use(&path.tree, place, out),
        (Place::Below(first), syn::UseTree::Name(name)) => out.push((first.clone(), name.ident.to_string())),
        (Place::Below(first), syn::UseTree::Rename(rename)) => out.push((first.clone(), rename.rename.to_string())),
        (Place::Below(first), syn::UseTree::Glob(_)) => out.push((first.clone(), first.clone())),
    }
}
