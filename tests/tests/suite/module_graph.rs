//! Every workspace crate's modules depend on one another without a cycle, at every level of nesting: a newcomer can
//! read them from the leaves up, and no two modules can each assume the other is already built (the gateway's
//! `config` and `source` once did, and built every source twice). The crates depend on one another the same way,
//! and the crates and modules that are leaves stay leaves.
//!
//! A module depends on another when its code names it: `crate::a::b::...`, `super::...`, `self::...`, a child
//! module by its name, or a name it imported, in a `use` or a path. The dependency counts at the level where the two
//! part: between the two children of their nearest common ancestor that hold them. A `pub use` re-export counts as
//! the module it re-exports. Test code (`#[cfg(test)]`) is left out: tests may reach anywhere. Paths inside macro
//! invocations are not read.
//!
//! A module's own file (`lib.rs`, `mod.rs`, `a.rs` for `a/`) and its children may name each other: the file holds
//! the type or trait its children are the parts of (the signature crate's `Scheme` in `lib.rs`, which every scheme
//! module implements and which names the fetched-key capability of `fetched`), as `mod.rs` files do across the
//! workspace. What must not happen is two siblings needing each other, directly or through their parent's
//! re-exports; a child's use of its parent still counts for the leaf check.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

use syn::visit::Visit;

/// The name of a crate root's own items in the leaf check's report.
const ROOT_SELF: &str = "(lib.rs)";

/// Sibling cycles found when nested modules were first checked (issue 46), in crates whose rework was under way at
/// the time; each is to be broken, and then removed from here (the test fails while one is listed but gone).
const KNOWN_CYCLES: &[&str] = &[];

/// Crates that name no other workspace crate, even in tests: each is one contract and knows no runtime.
/// (`signature`: the provider schemes.)
const LEAF_CRATES: &[&str] = &["hookline-record", "hookline-signature"];

/// Modules that name no other module of their crate: the cross-cutting leaves every other module may use.
const LEAF_MODULES: &[(&str, &[&str])] = &[
    ("signature", &["error", "identity"]),
    ("common", &["time", "signals", "prometheus_text", "predicate", "peer", "metrics_catalog"]),
];

#[test]
fn no_crate_has_a_module_cycle_at_any_level() {
    let crates = workspace_crates();
    for expected in ["common", "signature", "gateway", "consumer", "dlq-replayer", "reconciler", "bench", "tests"] {
        assert!(crates.iter().any(|(name, _)| name == expected), "{expected}: no src/lib.rs found");
    }
    let mut cycles = Vec::new();
    for (name, src) in crates {
        let graph = ModuleGraph::of_crate(&src);
        for (level, cycle) in graph.cycles() {
            let place = if level.is_empty() { String::new() } else { format!(" (in {})", level.join("::")) };
            cycles.push(format!("{name}{place}: {}", cycle.join(" -> ")));
        }
    }
    let new: Vec<&String> = cycles.iter().filter(|cycle| !KNOWN_CYCLES.contains(&cycle.as_str())).collect();
    let gone: Vec<&&str> = KNOWN_CYCLES.iter().filter(|known| !cycles.iter().any(|cycle| cycle == *known)).collect();
    assert!(
        new.is_empty(),
        "module cycles:\n{}",
        new.iter().map(|cycle| cycle.as_str()).collect::<Vec<_>>().join("\n")
    );
    assert!(gone.is_empty(), "broken cycles still listed in KNOWN_CYCLES (remove them): {gone:?}");
}

#[test]
fn the_leaf_modules_name_no_other_module() {
    let crates: BTreeMap<String, PathBuf> = workspace_crates().into_iter().collect();
    let mut problems = Vec::new();
    for (name, leaves) in LEAF_MODULES {
        let graph = ModuleGraph::of_crate(crates.get(*name).unwrap_or_else(|| panic!("no crate `{name}`")));
        for leaf in *leaves {
            let named = graph.named_outside(&[leaf.to_string()]);
            assert!(graph.modules.contains_key(&vec![leaf.to_string()]), "{name}: no module `{leaf}`");
            if !named.is_empty() {
                problems.push(format!("{name}::{leaf} names {}", named.join(", ")));
            }
        }
    }
    assert!(problems.is_empty(), "leaf modules that name others:\n{}", problems.join("\n"));
}

#[test]
fn the_crates_depend_on_one_another_without_a_cycle_and_leaves_stay_leaves() {
    let workspace = workspace_root();
    let mut graph = Graph::default();
    let mut problems = Vec::new();
    for member in members() {
        let manifest = read_toml(&workspace.join(&member).join("Cargo.toml"));
        let package = manifest["package"]["name"].as_str().expect("a package name").to_owned();
        let mut named = BTreeSet::new();
        for table in ["dependencies", "dev-dependencies", "build-dependencies"] {
            let dependencies = manifest.get(table).and_then(toml::Value::as_table).into_iter().flatten();
            named.extend(dependencies.map(|(dependency, _)| dependency.clone()).filter(|d| d.starts_with("hookline-")));
        }
        if LEAF_CRATES.contains(&package.as_str()) && !named.is_empty() {
            problems.push(format!("{package} is a leaf crate but names {named:?}"));
        }
        graph.edges.entry(package).or_default().extend(named);
    }
    for leaf in LEAF_CRATES {
        assert!(graph.edges.contains_key(*leaf), "no workspace crate {leaf}");
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // Dev-dependencies too: cargo allows a test of `a` to depend on `b` that depends on `a`, and such a test then
    // links two copies of `a`.
    assert_eq!(graph.cycle(), None, "workspace crates depend on one another in a cycle");
}

#[test]
fn the_check_finds_a_cycle_through_a_re_export_and_a_super_path() {
    let directory = scratch("top");
    write(&directory, "lib.rs", "mod a;\nmod b;\nmod c;\npub use crate::c::Thing;\n");
    write(&directory, "a.rs", "use crate::b::B;\npub struct A;\n");
    write(&directory, "b.rs", "pub struct B(super::Thing);\n");
    write(&directory, "c.rs", "pub struct Thing;\nfn f() -> crate::a::A { todo!() }\n");
    let cycles = ModuleGraph::of_crate(&directory).cycles();
    std::fs::remove_dir_all(&directory).expect("clean up");
    assert_eq!(cycles.len(), 1, "{cycles:?}");
    assert_eq!(cycles[0].1.len(), 4, "a -> b -> c -> a: {cycles:?}");
}

#[test]
fn the_check_finds_cycles_between_nested_modules() {
    let directory = scratch("nested");
    // `outer`'s children `x` and `y` name each other: `x` (from its child `deep`) by `super::super::`, `y` by a
    // crate path through a re-export in `outer/mod.rs`.
    write(&directory, "other.rs", "pub fn f() {}\n");
    std::fs::create_dir_all(directory.join("outer").join("x")).expect("dir");
    write(&directory, "outer/mod.rs", "mod x;\nmod y;\npub use self::x::X;\npub fn g() { crate::other::f() }\n");
    write(&directory, "outer/x.rs", "mod deep;\npub struct X;\n");
    write(&directory, "outer/x/deep.rs", "pub fn h() -> super::super::y::Y { todo!() }\n");
    write(&directory, "outer/y.rs", "pub struct Y(crate::outer::X);\n");
    // And an inline module whose children name each other through its re-export: `leaf` returns `super::T`, which
    // is `twig`'s, and `twig` calls `leaf`. That `inner::g` calls `leaf::f`, which returns `inner`'s own `U`, is
    // no cycle: a parent and its child may name each other.
    let inner = "mod inner {\n    mod leaf;\n    mod twig;\n    pub use twig::T;\n    pub struct U;\n    \
                 pub fn g() { leaf::f(); }\n}\n";
    write(&directory, "lib.rs", &format!("mod outer;\nmod other;\n{inner}"));
    std::fs::create_dir_all(directory.join("inner")).expect("dir");
    write(&directory, "inner/leaf.rs", "pub fn f() -> super::U { super::U }\npub fn t() -> super::T { todo!() }\n");
    write(&directory, "inner/twig.rs", "pub struct T;\npub fn h() { super::leaf::f(); }\n");
    let graph = ModuleGraph::of_crate(&directory);
    let cycles = graph.cycles();
    std::fs::remove_dir_all(&directory).expect("clean up");
    let found: BTreeSet<(String, usize)> =
        cycles.iter().map(|(level, cycle)| (level.join("::"), cycle.len())).collect();
    assert_eq!(found, BTreeSet::from([("outer".to_owned(), 3), ("inner".to_owned(), 3)]), "{cycles:?}");
    // The parent's call into `other` is a dependency of `outer` at the top, and no cycle there.
    assert_eq!(graph.named_outside(&["outer".to_owned()]), vec!["other".to_owned()]);
}

fn scratch(name: &str) -> PathBuf {
    let directory = std::env::temp_dir().join(format!("hookline-module-graph-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&directory);
    std::fs::create_dir_all(&directory).expect("temp dir");
    directory
}

fn write(directory: &Path, file: &str, text: &str) {
    std::fs::write(directory.join(file), text).expect("write");
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace root").to_path_buf()
}

fn read_toml(file: &Path) -> toml::Value {
    let text = std::fs::read_to_string(file).unwrap_or_else(|error| panic!("read {}: {error}", file.display()));
    toml::from_str(&text).unwrap_or_else(|error| panic!("parse {}: {error}", file.display()))
}

/// The workspace members, as the root Cargo.toml lists them.
fn members() -> Vec<String> {
    let manifest = read_toml(&workspace_root().join("Cargo.toml"));
    let members = manifest["workspace"]["members"].as_array().expect("workspace.members");
    members.iter().map(|member| member.as_str().expect("a member path").to_owned()).collect()
}

/// Each member with a library, by its directory's last component, with its `src`.
fn workspace_crates() -> Vec<(String, PathBuf)> {
    let workspace = workspace_root();
    members()
        .into_iter()
        .map(|member| workspace.join(member).join("src"))
        .filter(|src| src.join("lib.rs").is_file())
        .map(|src| {
            let name = src.parent().and_then(Path::file_name).expect("a member directory").to_string_lossy().into();
            (name, src)
        })
        .collect()
}

/// A directed graph of named nodes.
#[derive(Debug, Default)]
struct Graph {
    edges: BTreeMap<String, BTreeSet<String>>,
}

impl Graph {
    fn add(&mut self, from: &str, to: &str) {
        if from != to {
            self.edges.entry(from.to_owned()).or_default().insert(to.to_owned());
        }
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

/// A module's path from the crate root (empty for the root).
type ModPath = Vec<String>;

/// What one module holds, as read from its file (or its inline block). (No `Debug`: `syn` is built without it.)
#[derive(Default)]
struct Module {
    /// Its items other than child modules and test code.
    items: Vec<syn::Item>,
    children: BTreeSet<String>,
    /// Names its `use` items bring in, to the absolute path they name (`None`: another crate's).
    imports: BTreeMap<String, Option<ModPath>>,
}

#[derive(Default)]
struct ModuleGraph {
    modules: BTreeMap<ModPath, Module>,
    /// For each module with children, the graph between its children.
    levels: BTreeMap<ModPath, Graph>,
    /// Every module to the modules it names, outside itself and its descendants.
    named: BTreeMap<ModPath, BTreeSet<ModPath>>,
}

impl ModuleGraph {
    fn of_crate(src: &Path) -> Self {
        let mut graph = Self::default();
        graph.load(Vec::new(), &parse(&src.join("lib.rs")).items, src.to_path_buf());
        let paths: Vec<ModPath> = graph.modules.keys().cloned().collect();
        for path in paths {
            let mut references = References::default();
            for item in &graph.modules[&path].items {
                references.visit_item(item);
            }
            for raw in references.paths {
                let Some(absolute) = graph.absolute(&path, &raw) else { continue };
                let Some(target) = graph.resolve(&absolute, 0) else { continue };
                graph.add_edge(&path, &target);
            }
            // A private `use` is also a dependency of the module that writes it; a `pub use` only a re-export.
            for target in references.private_uses {
                let Some(absolute) = graph.absolute(&path, &target) else { continue };
                let Some(target) = graph.resolve(&absolute, 0) else { continue };
                graph.add_edge(&path, &target);
            }
        }
        graph
    }

    /// Reads module `path` from `items`; its `mod x;` children live in `directory`.
    fn load(&mut self, path: ModPath, items: &[syn::Item], directory: PathBuf) {
        let mut module = Module::default();
        for item in items {
            match item {
                syn::Item::Mod(child) if is_test(&child.attrs) => {}
                syn::Item::Mod(child) => {
                    let name = child.ident.to_string();
                    module.children.insert(name.clone());
                    let child_directory = directory.join(&name);
                    let mut child_path = path.clone();
                    child_path.push(name.clone());
                    match &child.content {
                        Some((_, inline)) => self.load(child_path, inline, child_directory),
                        None => {
                            let flat = directory.join(format!("{name}.rs"));
                            let file = if flat.is_file() { flat } else { child_directory.join("mod.rs") };
                            self.load(child_path, &parse(&file).items, child_directory);
                        }
                    }
                }
                syn::Item::Use(item_use) if is_test(&item_use.attrs) => {}
                syn::Item::Use(item_use) if item_use.leading_colon.is_some() => {}
                syn::Item::Use(item_use) => {
                    let mut imports = Vec::new();
                    use_paths(&item_use.tree, &mut Vec::new(), &mut imports);
                    for (alias, target) in imports {
                        if let Some(alias) = alias {
                            module.imports.insert(alias, Some(target));
                        }
                    }
                    module.items.push(item.clone());
                }
                other => module.items.push(other.clone()),
            }
        }
        // Imports hold paths as written; they are made absolute when read (`absolute`, `resolve`).
        self.modules.insert(path, module);
    }

    /// `raw` as written in module `from`, as a path from the crate root; `None` for another crate's path.
    fn absolute(&self, from: &ModPath, raw: &[String]) -> Option<ModPath> {
        self.absolute_at(from, raw, 0)
    }

    fn absolute_at(&self, from: &ModPath, raw: &[String], depth: usize) -> Option<ModPath> {
        let first = raw.first()?;
        if depth > 8 {
            return None;
        }
        match first.as_str() {
            "crate" => Some(raw[1..].to_vec()),
            "super" => {
                let supers = raw.iter().take_while(|segment| *segment == "super").count();
                let base = from.len().checked_sub(supers)?;
                Some(from[..base].iter().chain(&raw[supers..]).cloned().collect())
            }
            "self" => Some(from.iter().chain(&raw[1..]).cloned().collect()),
            name if self.modules.get(from).is_some_and(|module| module.children.contains(name)) => {
                Some(from.iter().chain(raw).cloned().collect())
            }
            // A name the module imported (`use crate::config; config::Thing`): where the import points.
            name => {
                let module = self.modules.get(from)?;
                let import = module.imports.get(name)?.as_ref()?;
                let target = self.absolute_at(from, import, depth + 1)?;
                Some(target.into_iter().chain(raw[1..].iter().cloned()).collect())
            }
        }
    }

    /// The module that holds the item at `absolute`, following re-exports.
    fn resolve(&self, absolute: &[String], depth: usize) -> Option<ModPath> {
        if depth > 8 {
            return None;
        }
        let mut module: ModPath = Vec::new();
        for (index, segment) in absolute.iter().enumerate() {
            let mut child = module.clone();
            child.push(segment.clone());
            if self.modules.contains_key(&child) {
                module = child;
                continue;
            }
            // A name the module re-exports or imports: where it comes from.
            match self.modules.get(&module).and_then(|holder| holder.imports.get(segment)) {
                Some(Some(import)) => {
                    let target = self.absolute(&module, import)?;
                    let rest = absolute[index + 1..].iter().cloned();
                    return self.resolve(&target.into_iter().chain(rest).collect::<Vec<_>>(), depth + 1);
                }
                Some(None) => return None,
                None => break,
            }
        }
        Some(module)
    }

    /// Records that module `from` names module `to`, at the level where they part.
    fn add_edge(&mut self, from: &ModPath, to: &ModPath) {
        let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
        if common == from.len() && common == to.len() {
            return;
        }
        // Between siblings only: a parent's own items and its children may name each other (see the top).
        if let (Some(from_child), Some(to_child)) = (from.get(common), to.get(common)) {
            self.levels.entry(from[..common].to_vec()).or_default().add(from_child, to_child);
        }
        if !to.starts_with(from) {
            self.named.entry(from.clone()).or_default().insert(to.clone());
        }
    }

    /// Each level's cycle, if any: (the parent module, the cycle).
    fn cycles(&self) -> Vec<(ModPath, Vec<String>)> {
        self.levels.iter().filter_map(|(level, graph)| Some((level.clone(), graph.cycle()?))).collect()
    }

    /// The modules that `module` or any module inside it names, outside it (and not its own ancestors' items).
    fn named_outside(&self, module: &[String]) -> Vec<String> {
        let mut named = BTreeSet::new();
        for (from, targets) in self.named.range(module.to_vec()..) {
            if !from.starts_with(module) {
                break;
            }
            for target in targets.iter().filter(|target| !target.starts_with(module)) {
                named.insert(if target.is_empty() { ROOT_SELF.to_owned() } else { target.join("::") });
            }
        }
        named.into_iter().collect()
    }
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

/// Every `use` tree as (the name it brings in, if any, the path it names): `use a::{b, c as d, e::*}` gives
/// (b, a::b), (d, a::c) and (none, a::e).
fn use_paths(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<(Option<String>, Vec<String>)>) {
    match tree {
        syn::UseTree::Path(path) => {
            prefix.push(path.ident.to_string());
            use_paths(&path.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(name) => {
            let ident = name.ident.to_string();
            if ident == "self" {
                out.push((prefix.last().cloned(), prefix.clone()));
            } else {
                out.push((Some(ident.clone()), prefix.iter().cloned().chain([ident]).collect()));
            }
        }
        syn::UseTree::Rename(rename) => {
            let ident = rename.ident.to_string();
            let target = if ident == "self" { prefix.clone() } else { prefix.iter().cloned().chain([ident]).collect() };
            out.push((Some(rename.rename.to_string()), target));
        }
        syn::UseTree::Glob(_) => out.push((None, prefix.clone())),
        syn::UseTree::Group(group) => group.items.iter().for_each(|item| use_paths(item, prefix, out)),
    }
}

/// The paths of at least two segments a module's code writes, and the paths of its private `use` items.
#[derive(Debug, Default)]
struct References {
    paths: Vec<Vec<String>>,
    private_uses: Vec<Vec<String>>,
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
        if matches!(item_use.vis, syn::Visibility::Inherited) && item_use.leading_colon.is_none() {
            let mut imports = Vec::new();
            use_paths(&item_use.tree, &mut Vec::new(), &mut imports);
            self.private_uses.extend(imports.into_iter().map(|(_, path)| path));
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.segments.len() >= 2 && path.leading_colon.is_none() {
            self.paths.push(path.segments.iter().map(|segment| segment.ident.to_string()).collect());
        }
        syn::visit::visit_path(self, path);
    }
}
