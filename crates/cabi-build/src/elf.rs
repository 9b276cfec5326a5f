//! What the export tests of the drop-in libraries share: the version table a
//! spec file lists, and what `readelf` says a built library exports.
//!
//! A spec's table has one row per version node, `| NODE | … | `sym`, `sym`… |`:
//! the node in the first cell, the default-version symbols in backquotes in
//! the third (spec/ibverbs-abi.md §1.1, spec/rdmacm-abi.md §1).

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

/// The rows of the table between `start` and the next `end` marker in `spec`
/// whose lines begin with `row_prefix`: each node with its default-version
/// symbols.
pub fn spec_table(
    spec: &str,
    start: &str,
    end: &str,
    row_prefix: &str,
) -> Vec<(String, Vec<String>)> {
    let section = spec
        .split(start)
        .nth(1)
        .unwrap_or_else(|| panic!("spec has no section {start:?}"));
    let section = section.split(end).next().unwrap_or(section);
    section
        .lines()
        .filter(|l| l.starts_with(row_prefix))
        .map(|row| {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let syms = cells[3]
                .split('`')
                .skip(1)
                .step_by(2)
                .map(String::from)
                .collect();
            (cells[1].to_string(), syms)
        })
        .collect()
}

/// `symbol@@NODE` for every default-version export of a table.
pub fn default_exports(table: &[(String, Vec<String>)]) -> BTreeSet<String> {
    table
        .iter()
        .flat_map(|(node, syms)| syms.iter().map(move |s| format!("{s}@@{node}")))
        .collect()
}

/// `readelf ARGS LIB`'s output; panics (a test failure) if it fails.
pub fn readelf(lib: &Path, args: &[&str]) -> String {
    let out = Command::new("readelf")
        .args(args)
        .arg(lib)
        .output()
        .expect("readelf (binutils) runs");
    assert!(
        out.status.success(),
        "readelf {args:?} {} failed",
        lib.display()
    );
    String::from_utf8(out.stdout).expect("readelf prints UTF-8")
}

/// `(Ndx, name)` of every GLOBAL dynamic symbol (`UND` for imports).
pub fn dyn_syms(lib: &Path) -> Vec<(String, String)> {
    readelf(lib, &["-W", "--dyn-syms"])
        .lines()
        .filter_map(|line| {
            // Num: Value Size Type Bind Vis Ndx Name
            let f: Vec<&str> = line.split_whitespace().collect();
            (f.len() >= 8 && f[4] == "GLOBAL").then(|| (f[6].to_string(), f[7].to_string()))
        })
        .collect()
}

/// The names a library defines (`name@@NODE` for a versioned one).
pub fn defined_syms(lib: &Path) -> BTreeSet<String> {
    dyn_syms(lib)
        .into_iter()
        .filter(|(ndx, _)| ndx != "UND")
        .map(|(_, n)| n)
        .collect()
}

/// The library's version sections: (definitions, needs).
pub fn version_sections(lib: &Path) -> (String, String) {
    let versions = readelf(lib, &["-V"]);
    let defs = versions
        .split("Version definition section")
        .nth(1)
        .expect(".gnu.version_d present");
    let (defs, needs) = defs
        .split_once("Version needs section")
        .unwrap_or((defs, ""));
    (defs.to_string(), needs.to_string())
}

/// True if the version definitions name `node`.
pub fn defines_node(defs: &str, node: &str) -> bool {
    defs.lines()
        .any(|l| l.split_whitespace().last() == Some(node))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_row_gives_its_node_and_symbols() {
        let spec = "## 1. Exports\n| NODE | n | syms |\n|---|---|---|\n\
                    | LIB_1.0 | 2 | `a`, `b` |\n| LIB_1.1 | 1 | `c` |\n## 2. Next\n| LIB_9 | 1 | `z` |\n";
        let t = spec_table(spec, "## 1.", "## 2.", "| LIB_");
        assert_eq!(
            t,
            [
                (
                    "LIB_1.0".to_string(),
                    vec!["a".to_string(), "b".to_string()]
                ),
                ("LIB_1.1".to_string(), vec!["c".to_string()]),
            ]
        );
        let e = default_exports(&t);
        assert!(e.contains("a@@LIB_1.0") && e.contains("c@@LIB_1.1") && e.len() == 3);
    }
}
