//! The layering promise of a crate, checked against its sources: a file
//! imports only what sits below it, so the files' imports form no circle.
//!
//! [`graph`] reads every `.rs` file under a `src` directory and lists, for each
//! module, the modules of the same crate it names (`crate::…`, `super::…`, and
//! a parent naming its own child as `child::…`). Unit tests (`#[cfg(test)]
//! mod tests` and after) and comments import nothing. [`circles`] gives the
//! groups of modules that reach each other.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module → the modules of the crate it imports (`""` is the crate root).
pub type Graph = BTreeMap<String, BTreeSet<String>>;

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
        } else if p.extension().is_some_and(|x| x == "rs")
            // A unit-test file (`mod tests;` in its own file) is test code.
            && p.file_stem().is_some_and(|s| s != "tests")
        {
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

/// Names the crate root re-exports from its own modules (`pub use m::A;`,
/// `pub use m::{A, B};`), so `crate::A` counts as importing `m`.
fn root_reexports(root: &str, mods: &BTreeSet<String>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for stmt in root.split(';') {
        let Some(path) = stmt.trim().strip_prefix("pub use ") else {
            continue;
        };
        let path: String = path.chars().filter(|c| !c.is_whitespace()).collect();
        let (module, names) = match path.split_once("::{") {
            Some((m, rest)) => (m.to_string(), rest.trim_end_matches('}').to_string()),
            None => match path.rsplit_once("::") {
                Some((m, n)) => (m.to_string(), n.to_string()),
                None => continue,
            },
        };
        if !mods.contains(&module) {
            continue;
        }
        for name in names.split(',').filter(|n| !n.is_empty() && *n != "*") {
            let shown = name.rsplit_once("as").map_or(name, |(_, a)| a);
            out.insert(shown.to_string(), module.clone());
        }
    }
    out
}

/// True if `code` holds `path` as a whole path (not preceded by a path
/// character, not followed by an identifier character).
fn names_item(code: &str, path: &str) -> bool {
    code.match_indices(path).any(|(i, _)| {
        let before = code[..i].chars().next_back();
        let after = code[i + path.len()..].chars().next();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
            && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

/// The import graph of the crate whose sources are under `src`.
pub fn graph(src: &Path) -> Graph {
    let mut files = BTreeMap::new();
    sources(src, src, &mut files);
    let mods: BTreeSet<String> = files.keys().cloned().collect();
    let reexports = root_reexports(files.get("").map_or("", String::as_str), &mods);
    let mut g = Graph::new();
    for (m, code) in &files {
        let parent = m.rsplit_once("::").map_or("", |(p, _)| p);
        let mut deps = refs(code, "crate::", "", &mods);
        // `crate::Name`, a name the root re-exports, imports its module.
        for (name, module) in &reexports {
            if names_item(code, &format!("crate::{name}")) {
                deps.insert(module.clone());
            }
        }
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

/// Everything `m` reaches through imports.
pub fn reach(g: &Graph, m: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo: Vec<String> = g.get(m).into_iter().flatten().cloned().collect();
    while let Some(n) = todo.pop() {
        if seen.insert(n.clone()) {
            todo.extend(g.get(&n).into_iter().flatten().cloned());
        }
    }
    seen
}

/// The circles of `g`: each group of modules that reach one another, once.
pub fn circles(g: &Graph) -> Vec<BTreeSet<String>> {
    let mut out: Vec<BTreeSet<String>> = Vec::new();
    for m in g.keys() {
        let from_m = reach(g, m);
        if !from_m.contains(m) || out.iter().any(|c| c.contains(m)) {
            continue;
        }
        out.push(
            from_m
                .iter()
                .filter(|n| reach(g, n).contains(m))
                .cloned()
                .collect(),
        );
    }
    out
}

/// Asserts that the crate whose sources are under `src` has at least
/// `min_files` modules and no circle of imports outside `known` (a circle may
/// lie only inside one of those groups); names each circle it finds.
pub fn assert_no_circles(src: &Path, min_files: usize, known: &[&[&str]]) {
    let g = graph(src);
    assert!(g.len() >= min_files, "found the sources: {:?}", g.keys());
    let bad: Vec<_> = circles(&g)
        .into_iter()
        .filter(|c| {
            !known
                .iter()
                .any(|k| c.iter().all(|n| k.contains(&n.as_str())))
        })
        .collect();
    assert!(
        bad.is_empty(),
        "circles of imports (a file may import only what sits below it): {bad:?}\nthe graph: {g:#?}"
    );
}

/// The floors a crate's module doc draws: the first ```` ```text ```` block
/// after the `# Layers` heading of `src/lib.rs`, top floor first. Each line
/// names the modules of one floor (its leading words that are modules of
/// `g`); the rest of the line describes them.
pub fn floors(src: &Path, g: &Graph) -> Vec<Vec<String>> {
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("read lib.rs");
    let doc: Vec<&str> = lib
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("//!"))
        .map(str::trim)
        .collect();
    let heading = doc
        .iter()
        .position(|l| *l == "# Layers")
        .expect("lib.rs's module doc has a `# Layers` section");
    let open = heading
        + doc[heading..]
            .iter()
            .position(|l| *l == "```text")
            .expect("the `# Layers` section draws the floors in a text block");
    doc[open + 1..]
        .iter()
        .take_while(|l| **l != "```")
        .map(|l| {
            l.split_whitespace()
                .take_while(|w| g.contains_key(*w))
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .filter(|f| !f.is_empty())
        .collect()
}

/// Asserts that the floors drawn in `src/lib.rs` ([`floors`]) are the
/// crate's: every module stands on exactly one floor and imports only
/// modules of the floors below its own.
pub fn assert_floors(src: &Path) {
    let g = graph(src);
    let drawn = floors(src, &g);
    let mut floor_of = BTreeMap::new();
    for (i, floor) in drawn.iter().enumerate() {
        for m in floor {
            assert!(
                floor_of.insert(m.as_str(), i).is_none(),
                "{m} is drawn twice in lib.rs's floors"
            );
        }
    }
    let missing: Vec<_> = g
        .keys()
        .filter(|m| !m.is_empty() && !floor_of.contains_key(m.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "modules missing from lib.rs's floors: {missing:?}"
    );
    for (m, deps) in g.iter().filter(|(m, _)| !m.is_empty()) {
        for d in deps {
            assert!(
                floor_of[d.as_str()] > floor_of[m.as_str()],
                "{m} imports {d}, which lib.rs draws on the same floor or above it"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_made_up_circle_is_found_and_a_line_is_not() {
        let mut g = Graph::new();
        g.insert("a".into(), ["b".to_string()].into());
        g.insert("b".into(), ["a".to_string()].into());
        g.insert("c".into(), ["a".to_string()].into());
        let c = circles(&g);
        assert_eq!(c, vec![BTreeSet::from(["a".to_string(), "b".to_string()])]);
        assert!(reach(&g, "c").contains("b"));
    }

    #[test]
    fn imports_are_read_from_the_code_not_comments_or_tests() {
        let dir = std::env::temp_dir().join(format!("layering-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("x")).unwrap();
        std::fs::write(
            dir.join("lib.rs"),
            "mod a; mod x; mod w;\npub use w::{W, V as U};",
        )
        .unwrap();
        std::fs::write(
            dir.join("a.rs"),
            "use crate::x::y::Z;\n// crate::b\nfn g(_: crate::Wide) {}",
        )
        .unwrap();
        std::fs::write(dir.join("w.rs"), "").unwrap();
        std::fs::write(dir.join("x/z.rs"), "fn f(_: crate::U) {}").unwrap();
        std::fs::write(dir.join("x/mod.rs"), "pub mod y; fn f() { y::g() }").unwrap();
        std::fs::write(
            dir.join("x/y.rs"),
            "use super::Q;\n#[cfg(test)]\nmod tests { use crate::a::A; }",
        )
        .unwrap();
        let g = graph(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(g["a"], BTreeSet::from(["x::y".to_string()]));
        assert_eq!(g["x"], BTreeSet::from(["x::y".to_string()]));
        assert_eq!(g["x::y"], BTreeSet::from(["x".to_string()]));
        assert_eq!(circles(&g).len(), 1);
        // `crate::U` is w's `V` re-exported at the root; `crate::Wide` is not `W`.
        assert_eq!(g["x::z"], BTreeSet::from(["w".to_string()]));
        assert_eq!(
            root_reexports("pub use w::{W, V as U};", &BTreeSet::from(["w".into()])).len(),
            2
        );
    }
    #[test]
    fn the_drawn_floors_are_checked_against_the_imports() {
        let dir = std::env::temp_dir().join(format!("floors-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a.rs"), "use crate::b::B;").unwrap();
        std::fs::write(dir.join("b.rs"), "pub struct B;").unwrap();
        std::fs::write(dir.join("c.rs"), "").unwrap();
        let lib = |picture: &str| {
            let doc: String = picture.lines().map(|l| format!("//! {l}\n")).collect();
            format!("//! A crate.\n//!\n//! # Layers\n//!\n//! ```text\n{doc}//! ```\nmod a;\n")
        };
        let check = |picture: &str| {
            std::fs::write(dir.join("lib.rs"), lib(picture)).unwrap();
            std::panic::catch_unwind(|| assert_floors(&dir)).is_ok()
        };
        let right = check("a  the top, on b\nb  c   the ground");
        let upside_down = check("b  c\na  a on b");
        let same_floor = check("a  b\nc");
        let missing = check("a\nb");
        let g = graph(&dir);
        std::fs::write(dir.join("lib.rs"), lib("a  the a\nb c")).unwrap();
        let drawn = floors(&dir, &g);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(right, "a over b and c holds");
        assert!(!upside_down, "b drawn over a, which imports it");
        assert!(!same_floor, "a beside b, which it imports");
        assert!(!missing, "c is not drawn");
        assert_eq!(
            drawn,
            vec![vec!["a".to_string()], vec!["b".into(), "c".into()]]
        );
    }
}
