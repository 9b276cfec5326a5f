//! Turns `exports.txt` (version node, symbol, defining module) into the linker
//! version script (the nodes) and `.symver` directives giving each symbol its
//! default version: with rust-lld, rustc's own anonymous version script
//! otherwise leaves every export unversioned (spec/ibverbs-abi.md §4).
use std::fmt::Write as _;

/// Version nodes in order, each inheriting from the one before (as rdma-core's);
/// the private node stands alone.
const NODES: [&str; 12] = [
    "IBVERBS_1.0",
    "IBVERBS_1.1",
    "IBVERBS_1.5",
    "IBVERBS_1.6",
    "IBVERBS_1.7",
    "IBVERBS_1.8",
    "IBVERBS_1.9",
    "IBVERBS_1.10",
    "IBVERBS_1.11",
    "IBVERBS_1.12",
    "IBVERBS_1.13",
    "IBVERBS_1.14",
];
const PRIVATE: &str = "IBVERBS_PRIVATE_34";

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap();
    let out = std::env::var("OUT_DIR").unwrap();
    let table = std::fs::read_to_string(format!("{dir}/exports.txt")).unwrap();
    let exports: Vec<(&str, &str, &str)> = table
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
            [node, sym, module] => (node, sym, module),
            _ => panic!("exports.txt: `NODE symbol module` per line, not {l:?}"),
        })
        .collect();
    for (node, sym, _) in &exports {
        assert!(
            NODES.contains(node) || *node == PRIVATE,
            "unknown version node {node} for {sym}"
        );
    }

    let mut map = String::new();
    let mut parent: Option<&str> = None;
    for node in NODES.iter().copied().chain([PRIVATE]) {
        writeln!(map, "{node} {{\n  global:").unwrap();
        for (_, sym, _) in exports.iter().filter(|e| e.0 == node) {
            writeln!(map, "    {sym};").unwrap();
        }
        if node == PRIVATE {
            map.push_str("  local: *;\n};\n");
        } else {
            match parent {
                Some(p) => writeln!(map, "}} {p};").unwrap(),
                None => map.push_str("};\n"),
            }
            parent = Some(node);
        }
    }
    std::fs::write(format!("{out}/libibverbs.map"), map).unwrap();

    // `.symver` must sit in the codegen unit that defines the symbol, so each
    // module includes the directives for the exports it defines
    // (`symver_<module>.rs`); a wrong module is a link error.
    let mut modules: Vec<&str> = exports.iter().map(|e| e.2).collect();
    modules.sort_unstable();
    modules.dedup();
    for module in modules {
        let mut asm = String::from("std::arch::global_asm!(\n");
        for (node, sym, _) in exports.iter().filter(|e| e.2 == module) {
            writeln!(asm, "    \".symver {sym}, {sym}@@{node}\",").unwrap();
        }
        asm.push_str(");\n");
        std::fs::write(format!("{out}/symver_{module}.rs"), asm).unwrap();
    }

    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={out}/libibverbs.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libibverbs.so.1");
    println!("cargo:rerun-if-changed=exports.txt");
    println!("cargo:rerun-if-changed=build.rs");
}
