//! The library's dynamic exports against spec/ibverbs-abi.md §1.1: the SONAME,
//! every version node, and every default-version symbol of Debian's
//! libibverbs.so.1 (rdma-core 44) with its node; besides them only softverbs'
//! private interface (`SOFTVERBS_PRIVATE_1`, the rows of exports.txt), never
//! in an rdma-core node.

mod common;

use softverbs_cabi_build::elf;
use std::collections::BTreeSet;

/// The rows of spec §1.1: each version node with its default-version symbols.
fn spec_table() -> Vec<(String, Vec<String>)> {
    let spec = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../spec/ibverbs-abi.md"
    ))
    .unwrap();
    elf::spec_table(&spec, "### 1.1", "###", "| IBVERBS_")
}

/// `symbol@@NODE` for every default-version export the spec lists.
fn spec_exports() -> BTreeSet<String> {
    elf::default_exports(&spec_table())
}

/// The private node and its `symbol@@NODE` exports, from exports.txt.
const PRIVATE_NODE: &str = "SOFTVERBS_PRIVATE_1";
fn private_exports() -> BTreeSet<String> {
    let table =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/exports.txt")).unwrap();
    table
        .lines()
        .filter(|l| l.starts_with(PRIVATE_NODE))
        .map(|l| {
            let sym = l.split_whitespace().nth(1).unwrap();
            format!("{sym}@@{PRIVATE_NODE}")
        })
        .collect()
}

#[test]
fn exports_cover_the_spec_list_with_versions() {
    if !common::have("readelf") {
        return;
    }
    let want = spec_exports();
    assert_eq!(
        want.len(),
        146,
        "the spec lists 146 default-version symbols"
    );

    let have = elf::defined_syms(&common::lib_path());
    // The private interface is checked on its own: present, in its node only.
    let private = private_exports();
    assert!(
        !private.is_empty(),
        "exports.txt lists the private interface"
    );
    let missing_private: Vec<_> = private.difference(&have).collect();
    assert!(
        missing_private.is_empty(),
        "missing private exports: {missing_private:?}"
    );
    assert!(
        want.iter().all(|s| !s.starts_with("softverbs_")),
        "no softverbs_ symbol in an rdma-core node"
    );
    let have: BTreeSet<String> = have.difference(&private).cloned().collect();
    // Exactly the rdma-core set besides.
    let missing: Vec<_> = want.difference(&have).collect();
    let extra: Vec<_> = have.difference(&want).collect();
    assert!(missing.is_empty(), "missing exports: {missing:?}");
    assert!(
        extra.is_empty(),
        "exports the real library does not have (or unversioned): {extra:?}"
    );
}

#[test]
fn soname_and_version_nodes() {
    if !common::have("readelf") {
        return;
    }
    let lib = common::lib_path();
    let dynamic = elf::readelf(&lib, &["-d"]);
    assert!(
        dynamic.contains("Library soname: [libibverbs.so.1]"),
        "SONAME:\n{dynamic}"
    );
    let (defs, _) = elf::version_sections(&lib);
    let nodes = spec_table();
    assert_eq!(nodes.len(), 13, "the spec lists 13 version nodes");
    for (node, _) in &nodes {
        assert!(
            elf::defines_node(&defs, node),
            "version node {node} not defined:\n{defs}"
        );
    }
    assert!(
        elf::defines_node(&defs, PRIVATE_NODE),
        "private node {PRIVATE_NODE} not defined:\n{defs}"
    );
    // rust-lld records no parent links between the nodes (rdma-core's GNU ld
    // build does); the loader checks node names only, so programs are unaffected.
}
