//! The host's import rules (issue 51), read from its sources (`host/src`):
//!
//! 1. Its top-level modules stand in the layer order of [`LAYERS`] (docs/ARCHITECTURE.md,
//!    "Layers"): a module imports only modules of the layers below its own.
//! 2. No import circle between files: files import each other in one direction only, a
//!    `mod.rs` and the files under it included (what both need goes in a file of its own).
//! 3. A module's insides ([`INSIDES`]) are imported only by files of that module: another
//!    module uses what it offers (the engine's keyvalue bindings call `state::kv`, never
//!    `state::log`'s slots).
//!
//! An import is any path through `crate::`, `super::` or `self::` (in `use` lines, with
//! their `{…}` groups, and inline), outside comments and the `#[cfg(test)]` module at the
//! end of a file; it names the longest module prefix that is a file. A `mod.rs` naming a
//! child it declares without `self::` (`kafka::KafkaSink` in `sink/mod.rs`: a module
//! assembling its parts) is not counted.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The host's top-level modules from the bottom layer up; modules of one layer import
/// nothing of each other.
const LAYERS: &[&[&str]] = &[
    // Leaves: the shared types and the plumbing everything reports into.
    &["message", "redact", "metrics", "sigpipe", "thp"],
    &["ack", "jsonl", "config"],
    // librdkafka plumbing.
    &["kafka"],
    &["schema"],
    &["state"],
    // wasmtime: components, instances, the keyvalue capability.
    &["engine"],
    &["rollout"],
    &["reload"],
    &["admin"],
    &["chain"],
    &["report"],
    &["source", "sink"],
    &["runtime"],
    &["cli"],
];

/// Files that are the insides of their top-level module: only that module's files import
/// them.
const INSIDES: &[&str] = &["state::log"];

/// A module path: `["runtime", "lanes"]` for `runtime/lanes.rs`, `["runtime"]` for
/// `runtime/mod.rs`, `[]` for `lib.rs` and `main.rs`.
type ModPath = Vec<String>;

fn mod_path(rel: &Path) -> ModPath {
    let mut parts: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|l| l == "mod") {
        parts.pop();
    }
    if parts.len() == 1 && (parts[0] == "lib" || parts[0] == "main") {
        parts.clear();
    }
    parts
}

/// Every `.rs` file under `root`: its module path and its text.
fn sources(root: &Path) -> BTreeMap<ModPath, (PathBuf, String)> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let p = e.expect("dir entry").path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p.strip_prefix(root).expect("under root").to_path_buf();
                let text = std::fs::read_to_string(&p).expect("source");
                out.insert(mod_path(&rel), (rel, text));
            }
        }
    }
    out
}

/// The text without comments and without the `#[cfg(test)] mod …` at its end.
fn code_of(text: &str) -> String {
    let body = match text.find("#[cfg(test)]\nmod ") {
        Some(i) => &text[..i],
        None => text,
    };
    body.lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths `text` names after `base` and `::` (a `{…}` group or one path).
fn paths_after(base: &[String], text: &str, out: &mut Vec<Vec<String>>) {
    let t = text.trim_start();
    if let Some(group) = t.strip_prefix('{') {
        let mut depth = 0;
        let mut item = String::new();
        let mut items = Vec::new();
        for c in group.chars() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => break,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    items.push(std::mem::take(&mut item));
                    continue;
                }
                _ => {}
            }
            item.push(c);
        }
        items.push(item);
        for it in items {
            let it = it.trim();
            let mut segs = Vec::new();
            let mut rest = it;
            loop {
                let end = rest
                    .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len());
                if end == 0 {
                    break;
                }
                segs.push(rest[..end].to_owned());
                rest = rest[end..].trim_start();
                match rest.strip_prefix("::") {
                    Some(r) if r.trim_start().starts_with('{') => {
                        let mut b = base.to_vec();
                        b.append(&mut segs);
                        paths_after(&b, r, out);
                        break;
                    }
                    Some(r) => rest = r.trim_start(),
                    None => break,
                }
            }
            if !segs.is_empty() {
                let mut p = base.to_vec();
                p.extend(segs);
                out.push(p);
            }
        }
        return;
    }
    let end = t
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(t.len());
    let mut p = base.to_vec();
    p.extend(
        t[..end]
            .split("::")
            .filter(|s| !s.is_empty())
            .map(str::to_owned),
    );
    out.push(p);
}

/// The files `here` imports (module paths present in `files`), itself left out.
fn imports(here: &ModPath, code: &str, files: &BTreeSet<ModPath>) -> BTreeSet<ModPath> {
    let mut named = Vec::new();
    let bytes = code.as_bytes();
    for (i, _) in code.match_indices("::") {
        // The word before this `::`.
        let start = code[..i]
            .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
            .map_or(0, |s| s + 1);
        let word = &code[start..i];
        // Only a path's first segment: not preceded by `::` itself.
        if start >= 2 && &bytes[start - 2..start] == b"::" {
            continue;
        }
        let mut base: Vec<String> = match word {
            "crate" => Vec::new(),
            "self" => here.clone(),
            "super" => here[..here.len().saturating_sub(1)].to_vec(),
            _ => continue,
        };
        let mut rest = &code[i + 2..];
        while let Some(r) = rest.strip_prefix("super::") {
            base.pop();
            rest = r;
        }
        paths_after(&base, rest, &mut named);
    }
    named
        .into_iter()
        .filter_map(|p| {
            (0..=p.len())
                .rev()
                .map(|k| p[..k].to_vec())
                .find(|prefix| files.contains(prefix))
        })
        .filter(|m| m != here)
        .collect()
}

/// The file graph of the sources under `root`.
fn graph(
    root: &Path,
) -> (
    BTreeMap<ModPath, BTreeSet<ModPath>>,
    BTreeMap<ModPath, PathBuf>,
) {
    let src = sources(root);
    let files: BTreeSet<ModPath> = src.keys().cloned().collect();
    let mut g = BTreeMap::new();
    let mut paths = BTreeMap::new();
    for (m, (rel, text)) in &src {
        g.insert(m.clone(), imports(m, &code_of(text), &files));
        paths.insert(m.clone(), rel.clone());
    }
    (g, paths)
}

/// Imports against [`LAYERS`]: one line each, naming the file and both modules.
fn layer_violations(root: &Path, layers: &[&[&str]]) -> Vec<String> {
    let (g, paths) = graph(root);
    let layer = |m: &str| layers.iter().position(|l| l.contains(&m));
    let mut out = BTreeSet::new();
    for (from, tos) in &g {
        let Some(a) = from.first() else { continue };
        let Some(la) = layer(a) else {
            out.insert(format!(
                "module `{a}` ({}) is in no layer: add it to LAYERS (tests/tests/layers.rs) and docs/ARCHITECTURE.md",
                paths[from].display()
            ));
            continue;
        };
        for to in tos {
            let Some(b) = to.first() else { continue };
            if a == b {
                continue;
            }
            let why = match layer(b) {
                Some(lb) if lb < la => continue,
                Some(lb) => format!(
                    "host/src/{}: `{a}` imports `{}`, which is {} it in the layer order",
                    paths[from].display(),
                    to.join("::"),
                    if lb == la { "beside" } else { "above" }
                ),
                None => format!("module `{b}` is in no layer"),
            };
            out.insert(why);
        }
    }
    out.into_iter().collect()
}

/// Imports of another module's insides (one of `insides`), one line each.
fn inside_violations(root: &Path, insides: &[&str]) -> Vec<String> {
    let (g, paths) = graph(root);
    let mut out = BTreeSet::new();
    for (from, tos) in &g {
        for to in tos {
            let name = to.join("::");
            if insides.contains(&name.as_str()) && from.first() != to.first() {
                out.insert(format!(
                    "host/src/{}: imports `{name}`, the insides of `{}`",
                    paths[from].display(),
                    to[0]
                ));
            }
        }
    }
    out.into_iter().collect()
}

/// Import circles between files (a `mod.rs` that uses a file under it, which uses the
/// `mod.rs` back, is one too), each as the files around it.
fn circles(root: &Path) -> Vec<Vec<String>> {
    let (g, paths) = graph(root);
    let edges: BTreeMap<&ModPath, Vec<&ModPath>> = g
        .iter()
        .filter(|(m, _)| !m.is_empty())
        .map(|(m, tos)| (m, tos.iter().filter(|t| !t.is_empty()).collect()))
        .collect();
    // Tarjan's strongly connected components.
    struct S<'a> {
        index: BTreeMap<&'a ModPath, usize>,
        low: BTreeMap<&'a ModPath, usize>,
        stack: Vec<&'a ModPath>,
        on: BTreeSet<&'a ModPath>,
        next: usize,
        out: Vec<Vec<&'a ModPath>>,
    }
    fn visit<'a>(v: &'a ModPath, e: &BTreeMap<&'a ModPath, Vec<&'a ModPath>>, s: &mut S<'a>) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on.insert(v);
        for &w in e.get(v).map(Vec::as_slice).unwrap_or_default() {
            if !s.index.contains_key(w) {
                visit(w, e, s);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if s.on.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(w);
                comp.push(w);
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                s.out.push(comp);
            }
        }
    }
    let mut s = S {
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !s.index.contains_key(*v) {
            visit(v, &edges, &mut s);
        }
    }
    s.out
        .into_iter()
        .map(|c| {
            let mut names: Vec<String> = c
                .into_iter()
                .map(|m| format!("host/src/{}", paths[m].display()))
                .collect();
            names.sort();
            names
        })
        .collect()
}

fn host_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn every_import_of_the_host_points_down_the_layer_order() {
    let bad = layer_violations(&host_src(), LAYERS);
    assert!(
        bad.is_empty(),
        "imports against the layer order:\n{}",
        bad.join("\n")
    );
}

#[test]
fn no_module_imports_the_insides_of_another() {
    let bad = inside_violations(&host_src(), INSIDES);
    assert!(
        bad.is_empty(),
        "imports of another module's insides:\n{}",
        bad.join("\n")
    );
}

#[test]
fn no_import_circle_between_the_hosts_files() {
    let found = circles(&host_src());
    assert!(
        found.is_empty(),
        "import circles:\n{}",
        found
            .iter()
            .map(|c| c.join(" → "))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// The checks find what they are for, on a small tree of their own: a module that imports
/// one above it, one of the same layer, two sibling files that import each other (through a
/// `use` group, `super::` and an inline path), a `mod.rs` and its child that import each
/// other, and nothing in comments or tests.
#[test]
fn the_checks_name_an_upward_import_and_a_circle() {
    let dir = tempfile::tempdir().expect("temp dir");
    let w = |rel: &str, text: &str| {
        let p = dir.path().join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("dirs");
        std::fs::write(p, text).expect("write");
    };
    w(
        "lib.rs",
        "pub mod low;\npub mod high;\npub mod side;\npub mod room;\n",
    );
    w(
        "room/mod.rs",
        "mod kid;\npub struct R;\npub fn f() { self::kid::g(); }\n",
    );
    w("room/kid.rs", "pub fn g() { let _ = super::R; }\n");
    w(
        "low/mod.rs",
        "mod a;\nmod b;\nuse crate::high::Thing; // crate::side::X in a comment\n",
    );
    w("low/a.rs", "use super::{b::B, Shared};\n");
    w("low/b.rs", "pub fn f() { let _ = crate::low::a::A; }\n");
    w(
        "high.rs",
        "use crate::low::Shared;\npub fn h() { crate::room::kid::g(); }\n#[cfg(test)]\nmod tests { use crate::side::Y; }\n",
    );
    w("side.rs", "use crate::{high::{Thing}, low};\n");
    let layers: &[&[&str]] = &[&["low", "room"], &["high", "side"]];
    let bad = layer_violations(dir.path(), layers);
    assert_eq!(
        bad,
        [
            "host/src/low/mod.rs: `low` imports `high`, which is above it in the layer order",
            "host/src/side.rs: `side` imports `high`, which is beside it in the layer order",
        ],
        "{bad:#?}"
    );
    assert_eq!(
        inside_violations(dir.path(), &["room::kid"]),
        ["host/src/high.rs: imports `room::kid`, the insides of `room`"]
    );
    let mut found = circles(dir.path());
    found.sort();
    assert_eq!(
        found,
        [
            ["host/src/high.rs", "host/src/low/mod.rs"],
            ["host/src/low/a.rs", "host/src/low/b.rs"],
            ["host/src/room/kid.rs", "host/src/room/mod.rs"]
        ]
    );
}
