//! The layering of ARCHITECTURE.md ("Layering"), checked from the code, not
//! from its text: every module of the library is found from `src/lib.rs`
//! as the compiler finds it (`mod` declarations, `#[path]`), parsed with
//! `syn`, and every path it names — a `use`, a fully qualified call, a
//! type, a path inside a macro's tokens, through `super::`, `self::`, a
//! child module, an alias or another module's `pub use` — is resolved to
//! the module it reaches. A path that reaches a module its room may not
//! import fails the test, however it was spelled. Comments and doc
//! comments are not code and name nothing; items only compiled for tests
//! (`#[cfg(test)]`, the `testkit` feature) are left out, as the rules are
//! about what ships.

use proc_macro2::{TokenStream, TokenTree};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use syn::visit::Visit;

/// A module's path from the crate root (`["gateway", "stages"]`).
type ModPath = Vec<String>;

/// What a room may not import.
enum Forbid {
    /// Every module of the crate but these (and the room itself).
    AllBut(&'static [&'static str]),
    /// These modules (prefixes: `gateway::json` is `["gateway", "json"]`).
    These(&'static [&'static str]),
}

/// One rule of ARCHITECTURE.md's layering, found there by its id after
/// `**Invariant:**`.
struct Rule {
    id: &'static str,
    /// The rooms it binds (module prefixes, `::`-separated); empty: all.
    rooms: &'static [&'static str],
    /// Rooms among those it does not bind.
    except: &'static [&'static str],
    forbid: Forbid,
}

const COMPILER: &[&str] = &[
    "syntax",
    "check",
    "codegen",
    "lint",
    "mutate",
    "guarantee",
    "compile",
    "scenarios",
];

const RULES: &[Rule] = &[
    Rule {
        id: "base-imports-nothing",
        rooms: &["base"],
        except: &[],
        forbid: Forbid::AllBut(&["base"]),
    },
    Rule {
        id: "helpers-from-base",
        rooms: &[],
        except: &[],
        forbid: Forbid::These(&["gateway::json"]),
    },
    Rule {
        id: "runtime-reads-no-compiler",
        rooms: &[
            "bundle",
            "gateway",
            "store",
            "serve",
            "mcp::proxy",
            "mcp::session",
            "mcp::transport",
        ],
        except: &[],
        forbid: Forbid::These(COMPILER),
    },
    Rule {
        id: "library-reads-no-cli",
        rooms: &[],
        except: &["cli"],
        forbid: Forbid::These(&["cli"]),
    },
    Rule {
        id: "serve-reads-no-cli",
        rooms: &["serve"],
        except: &[],
        forbid: Forbid::These(&["cli"]),
    },
    Rule {
        id: "demo-from-demo-and-cli",
        rooms: &[],
        except: &["demo", "cli"],
        forbid: Forbid::These(&["demo"]),
    },
];

fn segs(s: &str) -> Vec<String> {
    s.split("::").map(String::from).collect()
}

fn starts_with(path: &[String], prefix: &[String]) -> bool {
    path.len() >= prefix.len() && path[..prefix.len()] == *prefix
}

impl Rule {
    fn binds(&self, room: &[String]) -> bool {
        let any = |list: &[&str]| list.iter().any(|r| starts_with(room, &segs(r)));
        (self.rooms.is_empty() || any(self.rooms)) && !any(self.except)
    }

    /// Whether `room` may not reach `target` (a path from the crate root).
    fn forbids(&self, room: &[String], target: &[String]) -> bool {
        if target.is_empty() || !self.binds(room) {
            return false;
        }
        match &self.forbid {
            Forbid::AllBut(allowed) => !allowed.iter().any(|a| starts_with(target, &segs(a))),
            Forbid::These(bad) => bad.iter().any(|b| starts_with(target, &segs(b))),
        }
    }
}

/// A module's source, as the compiler reaches it.
struct Module {
    path: ModPath,
    file: PathBuf,
    ast: syn::File,
}

fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.meta.require_list().is_ok_and(|l| {
                let t = l.tokens.to_string();
                // `test`, `any(test, feature = "testkit")`; never `not(test)`
                !t.contains("not") && (t.split(|c: char| !c.is_alphanumeric()).any(|w| w == "test"))
            })
    })
}

fn path_attr(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find_map(|a| match &a.meta {
        syn::Meta::NameValue(nv) if nv.path.is_ident("path") => match &nv.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    })
}

/// Every module of the crate below `root` (`src/lib.rs`), test-only ones
/// left out.
fn modules(root: &Path) -> Vec<Module> {
    let mut out = vec![];
    let dir = root.parent().expect("src").to_path_buf();
    load(root, vec![], dir, &mut out);
    out
}

fn load(file: &Path, path: ModPath, dir: PathBuf, out: &mut Vec<Module>) {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let ast = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let here = file.parent().expect("a folder").to_path_buf();
    children(&ast.items, &path, &dir, &here, out);
    out.push(Module {
        path,
        file: file.to_path_buf(),
        ast,
    });
}

/// The out-of-line modules `items` declare (inline ones are walked with
/// their parent's file).
/// A `#[path]` is read from the folder of the file that holds it (`here`).
fn children(items: &[syn::Item], path: &ModPath, dir: &Path, here: &Path, out: &mut Vec<Module>) {
    for item in items {
        let syn::Item::Mod(m) = item else { continue };
        if is_test_only(&m.attrs) {
            continue;
        }
        let name = m.ident.to_string();
        let mut child = path.clone();
        child.push(name.clone());
        match &m.content {
            Some((_, inner)) => children(inner, &child, &dir.join(&name), here, out),
            None => {
                let file = match path_attr(&m.attrs) {
                    Some(p) => here.join(p),
                    None if dir.join(format!("{name}.rs")).is_file() => {
                        dir.join(format!("{name}.rs"))
                    }
                    None => dir.join(&name).join("mod.rs"),
                };
                load(&file, child, dir.join(&name), out);
            }
        }
    }
}

/// One module's names: aliases brought in by `use` (to paths from the
/// crate root) and its child modules.
#[derive(Clone, Default)]
struct Scope {
    module: ModPath,
    aliases: HashMap<String, ModPath>,
    children: HashSet<String>,
}

impl Scope {
    /// `path` as written, from the crate root; `None` when it names
    /// something outside the crate (another crate, a local, a prelude item).
    fn resolve(&self, path: &[String]) -> Option<ModPath> {
        let (first, rest) = path.split_first()?;
        let mut base = match first.as_str() {
            "crate" => vec![],
            "self" => self.module.clone(),
            "super" => {
                let mut m = self.module.clone();
                m.pop();
                let mut rest = rest;
                while rest.first().map(String::as_str) == Some("super") {
                    m.pop();
                    rest = &rest[1..];
                }
                m.extend(rest.iter().cloned());
                return Some(m);
            }
            // the library by name (doc tests, the binary)
            "intentplane" => vec![],
            name if self.aliases.contains_key(name) => self.aliases[name].clone(),
            name if self.children.contains(name) => {
                let mut m = self.module.clone();
                m.push(name.to_string());
                m
            }
            _ => return None,
        };
        base.extend(rest.iter().cloned());
        Some(base)
    }
}

/// Each `(alias, path as written)` a use tree brings in; a glob's alias
/// is `*`.
fn flatten(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<(String, Vec<String>)>) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            flatten(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let name = n.ident.to_string();
            if name == "self" {
                out.push((prefix.last().cloned().unwrap_or_default(), prefix.clone()));
            } else {
                let mut p = prefix.clone();
                p.push(name.clone());
                out.push((name, p));
            }
        }
        syn::UseTree::Rename(r) => {
            let mut p = prefix.clone();
            let name = r.ident.to_string();
            if name != "self" {
                p.push(name);
            }
            out.push((r.rename.to_string(), p));
        }
        syn::UseTree::Glob(_) => out.push(("*".into(), prefix.clone())),
        syn::UseTree::Group(g) => {
            for t in &g.items {
                flatten(t, prefix, out);
            }
        }
    }
}

/// Every re-export of the crate: `(module, name)` to the path it names.
type Reexports = HashMap<(ModPath, String), ModPath>;

fn scope_of(module: &ModPath, items: &[syn::Item]) -> Scope {
    let mut scope = Scope {
        module: module.clone(),
        ..Scope::default()
    };
    for item in items {
        match item {
            syn::Item::Mod(m) if !is_test_only(&m.attrs) => {
                scope.children.insert(m.ident.to_string());
            }
            _ => {}
        }
    }
    // in two rounds: an alias may go through another (`use a; use a::b`)
    for _ in 0..2 {
        for item in items {
            let syn::Item::Use(u) = item else { continue };
            if is_test_only(&u.attrs) {
                continue;
            }
            let mut found = vec![];
            flatten(&u.tree, &mut vec![], &mut found);
            for (alias, written) in found {
                if alias == "*" || alias == "_" {
                    continue;
                }
                if let Some(p) = scope.resolve(&written) {
                    scope.aliases.insert(alias, p);
                }
            }
        }
    }
    scope
}

fn reexports(mods: &[Module]) -> Reexports {
    let mut out = Reexports::new();
    fn walk(module: &ModPath, items: &[syn::Item], out: &mut Reexports) {
        let scope = scope_of(module, items);
        for item in items {
            match item {
                syn::Item::Use(u) if !matches!(u.vis, syn::Visibility::Inherited) => {
                    let mut found = vec![];
                    flatten(&u.tree, &mut vec![], &mut found);
                    for (alias, written) in found {
                        if let Some(p) = scope.resolve(&written)
                            && alias != "*"
                        {
                            out.insert((module.clone(), alias), p);
                        }
                    }
                }
                syn::Item::Mod(m) if !is_test_only(&m.attrs) => {
                    if let Some((_, inner)) = &m.content {
                        let mut child = module.clone();
                        child.push(m.ident.to_string());
                        walk(&child, inner, out);
                    }
                }
                _ => {}
            }
        }
    }
    for m in mods {
        walk(&m.path, &m.ast.items, &mut out);
    }
    out
}

/// `path` followed through every re-export it starts with, to where the
/// item is defined.
fn through(reexports: &Reexports, path: ModPath) -> ModPath {
    let mut path = path;
    for _ in 0..16 {
        let hit = (1..=path.len()).rev().find_map(|n| {
            let (module, name) = path[..n].split_at(n - 1);
            reexports
                .get(&(module.to_vec(), name[0].clone()))
                .map(|target| (n, target.clone()))
        });
        match hit {
            Some((n, mut target)) if target != path[..n] => {
                target.extend(path[n..].iter().cloned());
                path = target;
            }
            _ => break,
        }
    }
    path
}

/// A path a room reaches that a rule forbids.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Breach {
    file: String,
    room: String,
    written: String,
    reaches: String,
    rule: &'static str,
}

struct Walker<'a> {
    file: &'a Path,
    scope: Scope,
    reexports: &'a Reexports,
    found: &'a mut BTreeSet<Breach>,
    /// Every `(room, path from the crate root)` a room reaches, as written
    /// and through re-exports.
    reached: &'a mut BTreeSet<(ModPath, ModPath)>,
}

impl Walker<'_> {
    fn check(&mut self, written: &[String]) {
        let Some(abs) = self.scope.resolve(written) else {
            return;
        };
        let reached = through(self.reexports, abs.clone());
        self.reached
            .insert((self.scope.module.clone(), abs.clone()));
        self.reached
            .insert((self.scope.module.clone(), reached.clone()));
        for target in [&abs, &reached] {
            for rule in RULES {
                if rule.forbids(&self.scope.module, target) {
                    self.found.insert(Breach {
                        file: self.file.display().to_string(),
                        room: self.scope.module.join("::"),
                        written: written.join("::"),
                        reaches: target.join("::"),
                        rule: rule.id,
                    });
                }
            }
        }
    }

    /// The `crate::…`, `super::…` and `self::…` paths in a macro's tokens.
    fn tokens(&mut self, tokens: TokenStream) {
        let flat: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < flat.len() {
            match &flat[i] {
                TokenTree::Group(g) => self.tokens(g.stream()),
                TokenTree::Ident(id)
                    if matches!(id.to_string().as_str(), "crate" | "super" | "self") =>
                {
                    let mut path = vec![id.to_string()];
                    let mut j = i + 1;
                    // `::` is two `:` puncts, then the next segment
                    while let (
                        Some(TokenTree::Punct(a)),
                        Some(TokenTree::Punct(b)),
                        Some(TokenTree::Ident(n)),
                    ) = (flat.get(j), flat.get(j + 1), flat.get(j + 2))
                    {
                        if a.as_char() != ':' || b.as_char() != ':' {
                            break;
                        }
                        path.push(n.to_string());
                        j += 3;
                    }
                    if path.len() > 1 {
                        self.check(&path);
                    }
                    i = j;
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
    }
}

fn written(p: &syn::Path) -> Vec<String> {
    p.segments.iter().map(|s| s.ident.to_string()).collect()
}

impl<'ast> Visit<'ast> for Walker<'_> {
    fn visit_item(&mut self, i: &'ast syn::Item) {
        let attrs = match i {
            syn::Item::Fn(x) => &x.attrs,
            syn::Item::Impl(x) => &x.attrs,
            syn::Item::Mod(x) => &x.attrs,
            syn::Item::Use(x) => &x.attrs,
            syn::Item::Struct(x) => &x.attrs,
            syn::Item::Enum(x) => &x.attrs,
            syn::Item::Const(x) => &x.attrs,
            syn::Item::Static(x) => &x.attrs,
            syn::Item::Trait(x) => &x.attrs,
            syn::Item::Type(x) => &x.attrs,
            syn::Item::Macro(x) => &x.attrs,
            _ => return syn::visit::visit_item(self, i),
        };
        if !is_test_only(attrs) {
            syn::visit::visit_item(self, i);
        }
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        // an out-of-line module is walked from its own file
        if let Some((_, items)) = &m.content {
            let mut module = self.scope.module.clone();
            module.push(m.ident.to_string());
            let outer = std::mem::replace(&mut self.scope, scope_of(&module, items));
            for item in items {
                self.visit_item(item);
            }
            self.scope = outer;
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let mut found = vec![];
        flatten(&u.tree, &mut vec![], &mut found);
        for (alias, path) in found {
            self.check(&path);
            // a `use` inside a function body names what follows it
            if alias != "*"
                && alias != "_"
                && let Some(abs) = self.scope.resolve(&path)
            {
                self.scope.aliases.insert(alias, abs);
            }
        }
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if !is_test_only(&f.attrs) {
            syn::visit::visit_impl_item_fn(self, f);
        }
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        self.check(&written(p));
        syn::visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.tokens(m.tokens.clone());
        syn::visit::visit_macro(self, m);
    }

    fn visit_attribute(&mut self, _: &'ast syn::Attribute) {
        // doc comments and attributes name no module
    }
}

/// What the crate's rooms reach: the paths that break a rule, and every
/// `(room, path)` reached.
fn walk_all(mods: &[Module]) -> (BTreeSet<Breach>, BTreeSet<(ModPath, ModPath)>) {
    let reexports = reexports(mods);
    let mut found = BTreeSet::new();
    let mut reached = BTreeSet::new();
    for m in mods {
        let mut w = Walker {
            file: &m.file,
            scope: scope_of(&m.path, &m.ast.items),
            reexports: &reexports,
            found: &mut found,
            reached: &mut reached,
        };
        for item in &m.ast.items {
            w.visit_item(item);
        }
    }
    (found, reached)
}

fn breaches(mods: &[Module]) -> BTreeSet<Breach> {
    walk_all(mods).0
}

/// The pairs of modules that import each other (neither inside the
/// other): a circle, where a change on one side is a change on both.
fn circles(mods: &[Module]) -> Vec<(String, String)> {
    let known: BTreeSet<ModPath> = mods.iter().map(|m| m.path.clone()).collect();
    let module_of = |path: &ModPath| -> Option<ModPath> {
        (1..=path.len())
            .rev()
            .map(|n| path[..n].to_vec())
            .find(|p| known.contains(p))
    };
    let edges: BTreeSet<(ModPath, ModPath)> = walk_all(mods)
        .1
        .into_iter()
        .filter_map(|(from, path)| Some((from.clone(), module_of(&path)?)))
        .filter(|(from, to)| !starts_with(from, to) && !starts_with(to, from))
        .collect();
    edges
        .iter()
        .filter(|(a, b)| a < b && edges.contains(&(b.clone(), a.clone())))
        .map(|(a, b)| (a.join("::"), b.join("::")))
        .collect()
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

#[test]
fn every_room_imports_only_what_its_layer_allows() {
    let mods = modules(&root().join("src/lib.rs"));
    assert!(mods.len() > 100, "found {} modules", mods.len());
    let found = breaches(&mods);
    let text: Vec<String> = found
        .iter()
        .map(|b| {
            format!(
                "{} ({}): `{}` reaches `{}`, which `{}` forbids",
                b.file.trim_start_matches(&format!("{}/", root().display())),
                b.room,
                b.written,
                b.reaches,
                b.rule
            )
        })
        .collect();
    assert!(text.is_empty(), "{}", text.join("\n"));
}

/// No two modules import each other: one side owns the type, the other
/// uses it (#38: `gateway::mandate` and `narrowing`, `pending` and
/// `render`, `serve::mandates` and `page` were such pairs).
#[test]
fn no_two_modules_import_each_other() {
    let mods = modules(&root().join("src/lib.rs"));
    let found = circles(&mods);
    assert!(
        found.is_empty(),
        "modules that import each other:\n{}",
        found
            .iter()
            .map(|(a, b)| format!("{a} <-> {b}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // and the check sees a circle
    let pair = crate_of(&[
        ("gateway::a", "use super::b::X; pub struct Y;"),
        (
            "gateway::b",
            "pub struct X; fn f(_: crate::gateway::a::Y) {}",
        ),
        ("gateway", "pub mod a; pub mod b;"),
    ]);
    assert_eq!(
        circles(&pair),
        vec![("gateway::a".to_string(), "gateway::b".to_string())]
    );
}

/// Each rule is in ARCHITECTURE.md, tagged, and each tagged layering rule
/// there is checked here.
#[test]
fn the_rules_are_architectures_own() {
    let arch = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let layering = &arch[arch.find("## Layering").expect("a Layering section")..];
    let layering = &layering[..layering[3..]
        .find("\n## ")
        .map_or(layering.len(), |i| i + 3)];
    let tagged: BTreeSet<&str> = layering
        .split("**Invariant:** `")
        .skip(1)
        .filter_map(|s| s.split('`').next())
        .collect();
    let mut ours: BTreeSet<&str> = RULES.iter().map(|r| r.id).collect();
    // checked by `no_two_modules_import_each_other`
    ours.insert("no-circles");
    assert_eq!(tagged, ours);
}

/// A synthetic crate: `(module path, source)`.
fn crate_of(files: &[(&str, &str)]) -> Vec<Module> {
    files
        .iter()
        .map(|(path, src)| Module {
            path: if path.is_empty() { vec![] } else { segs(path) },
            file: PathBuf::from(format!("{path}.rs")),
            ast: syn::parse_file(src).expect("parses"),
        })
        .collect()
}

/// The check sees an import to the compiler from the runtime however it
/// is spelled, and nothing in comments or tests.
#[test]
fn every_spelling_of_a_forbidden_import_is_found() {
    let bad = [
        "use crate::codegen::generate;",
        "use super::super::codegen::generate;",
        "fn f() { crate::codegen::generate(); }",
        "fn f() { let _ = super::super::codegen::X; }",
        "use crate::bundle::Table; fn f(_: Table) {}",
        "use crate as c; fn f() { c::codegen::generate(); }",
        "fn f() -> String { format!(\"{}\", crate::codegen::NAME) }",
        "use crate::{bundle, codegen::{self as g}}; fn f() { g::x(); }",
        "fn f() { use crate::codegen; codegen::x(); }",
    ];
    for src in bad {
        let mods = crate_of(&[
            ("gateway::stages", src),
            // a re-export of the compiler's type in an allowed room
            ("bundle", "pub use crate::codegen::Table;"),
        ]);
        let found: Vec<Breach> = breaches(&mods)
            .into_iter()
            .filter(|b| b.room == "gateway::stages")
            .collect();
        assert!(
            found
                .iter()
                .any(|b| b.rule == "runtime-reads-no-compiler" && b.reaches.starts_with("codegen")),
            "not found in `{src}`: {found:?}"
        );
    }
    let fine = [
        "//! see crate::codegen::generate\nfn f() {}",
        "/// uses `crate::codegen`\nfn f() {}",
        "#[cfg(test)]\nmod tests { use crate::codegen::generate; }",
        "#[cfg(any(test, feature = \"testkit\"))]\nfn f() { crate::compile::build(&[]); }",
        "use crate::bundle::format::Table; fn f(_: Table) {}",
        "fn f() { codegen::x(); }", // another crate's `codegen`
    ];
    for src in fine {
        let mods = crate_of(&[("gateway::stages", src)]);
        let found = breaches(&mods);
        assert!(found.is_empty(), "`{src}`: {found:?}");
    }
    // the base layer imports nothing; the library never the command line
    let mods = crate_of(&[
        ("base::json", "use crate::keys::Key;"),
        ("store", "fn f() { crate::cli::run(); }"),
        ("cli::token", "use crate::cli::bundle; use crate::demo::x;"),
        ("serve::api", "use crate::demo::story;"),
    ]);
    let rules: BTreeSet<(&str, &str)> = breaches(&mods)
        .iter()
        .map(|b| {
            (
                b.rule,
                if b.room.starts_with("base") {
                    "base"
                } else {
                    "other"
                },
            )
        })
        .collect();
    assert!(
        rules.contains(&("base-imports-nothing", "base")),
        "{rules:?}"
    );
    assert!(
        rules.contains(&("library-reads-no-cli", "other")),
        "{rules:?}"
    );
    assert!(
        rules.contains(&("demo-from-demo-and-cli", "other")),
        "{rules:?}"
    );
    assert!(
        !breaches(&mods).iter().any(|b| b.room.starts_with("cli")),
        "the command line may import anything"
    );
}

#[test]
fn a_module_is_found_where_the_compiler_finds_it() {
    let mods = modules(&root().join("src/lib.rs"));
    let paths: HashSet<String> = mods.iter().map(|m| m.path.join("::")).collect();
    for m in [
        "gateway::stages::provenance",
        "store::postgres",
        "mcp::proxy::elicit",
        "base",
    ] {
        assert!(paths.contains(m), "{m} not found");
    }
    // test-only modules are left out (`gateway::testkit`, a stage's tests)
    assert!(!paths.contains("gateway::testkit"));
    assert!(!paths.iter().any(|p| p.ends_with("::tests")));
}
