//! The library's dynamic exports against spec/rdmacm-abi.md §1: the SONAME,
//! every version node, every default-version symbol of Debian's
//! librdmacm.so.1 (rdma-core 44) with its node and nothing else; and its link
//! to libibverbs.so.1 (DT_NEEDED, the verbs and the private node it needs).

mod common;

use softverbs_cabi_build::elf;
use std::collections::BTreeSet;

/// The rows of spec §1: each version node with its default-version symbols.
fn spec_table() -> Vec<(String, Vec<String>)> {
    let spec = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../spec/rdmacm-abi.md"
    ))
    .unwrap();
    elf::spec_table(&spec, "## 1.", "## 2.", "| RDMACM_")
}

fn spec_exports() -> BTreeSet<String> {
    elf::default_exports(&spec_table())
}

#[test]
fn exports_are_exactly_the_spec_list_with_versions() {
    if !common::have("readelf") {
        return;
    }
    let want = spec_exports();
    assert_eq!(want.len(), 68, "the spec lists 68 default-version symbols");
    let have = elf::defined_syms(&common::lib_path());
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
    let lib = common::lib_path();
    let dynamic = elf::readelf(&lib, &["-d"]);
    assert!(
        dynamic.contains("Library soname: [librdmacm.so.1]"),
        "SONAME:\n{dynamic}"
    );
    assert!(
        dynamic.contains("Shared library: [libibverbs.so.1]"),
        "DT_NEEDED libibverbs.so.1:\n{dynamic}"
    );
    let (defs, needs) = elf::version_sections(&lib);
    let nodes = spec_table();
    assert_eq!(nodes.len(), 4, "the spec lists 4 version nodes");
    for (node, _) in &nodes {
        assert!(
            elf::defines_node(&defs, node),
            "version node {node} not defined:\n{defs}"
        );
    }
    // The verbs come from libibverbs under rdma-core's nodes, the engine's
    // extras under the private node; nothing else is imported from it.
    let imports: Vec<String> = elf::dyn_syms(&lib)
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
