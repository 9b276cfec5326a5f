//! The layering promise of `proto`'s module docs, checked against the
//! sources: no circle of imports among proto's files (a `mod.rs` that reaches
//! into its own children counts as importing them) except the known ones
//! listed below, the ground-floor `handle` imports nothing from the crate, and
//! nothing below the engine names the engine or the data path on it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Graph = BTreeMap<String, BTreeSet<String>>;

fn module_name(rel: &str) -> String {
    let m = rel.trim_end_matches(".rs");
    let m = m.strip_suffix("/mod").unwrap_or(m);
    if m == "lib" {
        return String::new();
    }
    m.replace('/', "::")
}

fn sources(dir: &Path, base: &Path, out: &mut BTreeMap<String, String>) {
    for e in std::fs::read_dir(dir).expect("src dir") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            sources(&p, base, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            let rel = p.strip_prefix(base).unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&p).expect("read source");
            // Unit tests may reach anywhere; only the code is layered.
            let code = text.split("#[cfg(test)]\nmod tests").next().unwrap();
            // Comments (doc links included) import nothing.
            let code: String = code
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n");
            out.insert(module_name(&rel), code);
        }
    }
}

/// Module paths that follow `prefix` in `code` (`prefix` not preceded by a
/// path character), resolved to the longest known module under `base`.
fn refs(code: &str, prefix: &str, base: &str, mods: &BTreeSet<String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in code.match_indices(prefix) {
        let before = code[..i].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let rest = &code[i + prefix.len()..];
        let path: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        let parts: Vec<&str> = path.split("::").filter(|p| !p.is_empty()).collect();
        let join = |k: usize| {
            let tail = parts[..k].join("::");
            if base.is_empty() {
                tail
            } else {
                format!("{base}::{tail}")
            }
        };
        match (1..=parts.len()).rev().map(join).find(|m| mods.contains(m)) {
            Some(m) => out.insert(m),
            None => out.insert(base.to_string()),
        };
    }
    out
}

fn graph() -> Graph {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = BTreeMap::new();
    sources(&src, &src, &mut files);
    let mods: BTreeSet<String> = files.keys().cloned().collect();
    let mut g = Graph::new();
    for (m, code) in &files {
        let parent = m.rsplit_once("::").map_or("", |(p, _)| p);
        let mut deps = refs(code, "crate::", "", &mods);
        deps.extend(refs(code, "super::", parent, &mods));
        // A parent that names its own child (`child::item`) imports it.
        for child in mods
            .iter()
            .filter(|c| c.rsplit_once("::").map(|(p, _)| p) == Some(m))
        {
            let name = child.rsplit("::").next().unwrap();
            let used = refs(code, &format!("{name}::"), "", &BTreeSet::new());
            if !used.is_empty() {
                deps.insert(child.clone());
            }
        }
        deps.remove(m);
        deps.remove("");
        g.insert(m.clone(), deps);
    }
    g
}

/// A circle through `m`, if any (depth-first search).
fn circle(
    g: &Graph,
    m: &str,
    path: &mut Vec<String>,
    done: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    if let Some(i) = path.iter().position(|p| p == m) {
        return Some(path[i..].to_vec());
    }
    if !done.insert(m.to_string()) {
        return None;
    }
    path.push(m.to_string());
    for d in g.get(m).into_iter().flatten() {
        if let Some(c) = circle(g, d, path, done) {
            return Some(c);
        }
    }
    path.pop();
    None
}

/// Everything `m` reaches through imports.
fn reach(g: &Graph, m: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo: Vec<String> = g.get(m).into_iter().flatten().cloned().collect();
    while let Some(n) = todo.pop() {
        if seen.insert(n.clone()) {
            todo.extend(g.get(&n).into_iter().flatten().cloned());
        }
    }
    seen
}

/// Circles that exist outside the data path and are not yet undone: the
/// error enum aggregates mr's (and dm's) leaf errors while mr builds `Error`s
/// and takes wr's `Sge`, wr uses error's `Errno` and carries qp::sgl's
/// `SglError`, which gathers over wr's `Sge` (memory windows, mr::mw, are
/// part of mr: the error enum aggregates theirs too, and wr's bind target is
/// theirs); the CM's `Outbox` lives in
/// cm/mod.rs beside the code that drives conn and sidr, which use it. A
/// circle may lie only inside one of these groups.
const KNOWN_CIRCLES: &[&[&str]] = &[
    &["error", "dm", "mr", "mr::mw", "wr", "wr::check", "qp::sgl"],
    &["cm", "cm::conn", "cm::sidr"],
];

/// Modules that sit on the engine: the engine's own child modules
/// (engine/xrc.rs), the data path's `impl Engine` and the feature-gated
/// test harness that drives an engine.
fn above_engine(m: &str) -> bool {
    m.is_empty()
        || m == "engine"
        || m.starts_with("engine::")
        || m == "testing"
        || m.starts_with("datapath")
}

#[test]
fn no_circle_of_imports_among_proto_files() {
    let g = graph();
    assert!(g.len() > 30, "found the sources: {:?}", g.keys());
    for m in g.keys() {
        let from_m = reach(&g, m);
        if !from_m.contains(m) {
            continue;
        }
        let circle: BTreeSet<&str> = from_m
            .iter()
            .filter(|n| reach(&g, n).contains(m))
            .map(String::as_str)
            .collect();
        let known = KNOWN_CIRCLES
            .iter()
            .any(|k| circle.iter().all(|n| k.contains(n)));
        assert!(known, "a circle of imports through {m}: {circle:?}");
    }
}

#[test]
fn handles_are_the_ground_floor_and_nothing_below_the_engine_names_it() {
    let g = graph();
    assert_eq!(
        g["handle"],
        BTreeSet::new(),
        "handle.rs imports nothing from the crate"
    );
    for (m, deps) in &g {
        if !above_engine(m) {
            for top in ["engine", "datapath"] {
                assert!(!deps.contains(top), "{m} (below the engine) imports {top}");
            }
        }
    }
}

#[test]
fn the_checker_sees_a_circle() {
    // The checker itself: a made-up circle is found.
    let mut g = Graph::new();
    g.insert("a".into(), ["b".to_string()].into());
    g.insert("b".into(), ["a".to_string()].into());
    assert!(circle(&g, "a", &mut Vec::new(), &mut BTreeSet::new()).is_some());
    assert!(reach(&g, "a").contains("a"));
}
