//! The library's dynamic exports against spec/rdmacm-abi.md §1: the SONAME,
//! every version node, every default-version symbol of Debian's
//! librdmacm.so.1 (rdma-core 44) with its node and nothing else; and its link
//! to libibverbs.so.1 (DT_NEEDED, the verbs and the private node it needs).

mod common;

use std::collections::BTreeSet;
use std::process::Command;

/// The rows of spec §1: each version node with its default-version symbols.
fn spec_table() -> Vec<(String, Vec<String>)> {
    let spec = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../spec/rdmacm-abi.md"
    ))
    .unwrap();
    let table = spec
        .split("## 1.")
        .nth(1)
        .unwrap()
        .split("## 2.")
        .next()
        .unwrap();
    table
        .lines()
        .filter(|l| l.starts_with("| RDMACM_"))
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

fn spec_exports() -> BTreeSet<String> {
    spec_table()
        .into_iter()
        .flat_map(|(node, syms)| syms.into_iter().map(move |s| format!("{s}@@{node}")))
        .collect()
}

fn readelf(args: &[&str]) -> String {
    let out = Command::new("readelf")
        .args(args)
        .arg(common::lib_path())
        .output()
        .expect("readelf runs");
    assert!(out.status.success(), "readelf {args:?} failed");
    String::from_utf8(out.stdout).unwrap()
}

/// (Ndx, name) of every GLOBAL dynamic symbol.
fn dyn_syms() -> Vec<(String, String)> {
    readelf(&["-W", "--dyn-syms"])
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            (f.len() >= 8 && f[4] == "GLOBAL").then(|| (f[6].to_string(), f[7].to_string()))
        })
        .collect()
}

#[test]
fn exports_are_exactly_the_spec_list_with_versions() {
    if !common::have("readelf") {
        return;
    }
    let want = spec_exports();
    assert_eq!(want.len(), 68, "the spec lists 68 default-version symbols");
    let have: BTreeSet<String> = dyn_syms()
        .into_iter()
        .filter(|(ndx, _)| ndx != "UND")
        .map(|(_, n)| n)
        .collect();
    let missing: Vec<_> = want.difference(&have).collect();
    let extra: Vec<_> = have.difference(&want).collect();
    assert!(missing.is_empty(), "missing exports: {missing:?}");
    assert!(
        extra.is_empty(),
        "exports the real library does not have (or unversioned): {extra:?}"
    );
}

#[test]
fn exports_table_is_the_spec_table() {
    let table =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/exports.txt")).unwrap();
    let rows: BTreeSet<String> = table
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            format!("{}@@{}", f[1], f[0])
        })
        .collect();
    assert_eq!(
        rows,
        spec_exports(),
        "exports.txt and spec/rdmacm-abi.md §1 disagree"
    );
}

#[test]
fn soname_nodes_and_the_link_to_libibverbs() {
    if !common::have("readelf") {
        return;
    }
    let dynamic = readelf(&["-d"]);
    assert!(
        dynamic.contains("Library soname: [librdmacm.so.1]"),
        "SONAME:\n{dynamic}"
    );
    assert!(
        dynamic.contains("Shared library: [libibverbs.so.1]"),
        "DT_NEEDED libibverbs.so.1:\n{dynamic}"
    );
    let versions = readelf(&["-V"]);
    let defs = versions
        .split("Version definition section")
        .nth(1)
        .expect(".gnu.version_d present");
    let (defs, needs) = defs
        .split_once("Version needs section")
        .expect(".gnu.version_r present");
    let nodes = spec_table();
    assert_eq!(nodes.len(), 4, "the spec lists 4 version nodes");
    for (node, _) in &nodes {
        assert!(
            defs.lines()
                .any(|l| l.split_whitespace().last() == Some(node.as_str())),
            "version node {node} not defined:\n{defs}"
        );
    }
    // The verbs come from libibverbs under rdma-core's nodes, the engine's
    // extras under the private node; nothing else is imported from it.
    let imports: Vec<String> = dyn_syms()
        .into_iter()
        .filter(|(ndx, _)| ndx == "UND")
        .map(|(_, n)| n)
        .collect();
    for sym in [
        "ibv_open_device@IBVERBS_1.1",
        "ibv_create_qp@IBVERBS_1.1",
        "softverbs_query_addr@SOFTVERBS_PRIVATE_1",
    ] {
        assert!(
            imports.iter().any(|i| i == sym),
            "{sym} is not imported: {imports:?}"
        );
    }
    let bad: Vec<_> = imports
        .iter()
        .filter(|i| i.starts_with("softverbs_") && !i.ends_with("@SOFTVERBS_PRIVATE_1"))
        .collect();
    assert!(
        bad.is_empty(),
        "private functions outside the private node: {bad:?}"
    );
    assert!(
        needs.contains("libibverbs.so.1") && needs.contains("SOFTVERBS_PRIVATE_1"),
        "version needs:\n{needs}"
    );
}
