//! What the build scripts of the drop-in C libraries (`crates/ibverbs`,
//! `crates/rdmacm`) share: turning an exports table into versioned exports,
//! and making a link stub of a library the C ABI crate links against.
//!
//! An exports table (`exports.txt`) has one line per default-version export,
//! `NODE symbol module`, `#` comments allowed. From it, [`versioned_exports`]
//! writes the linker version script (the nodes) and, per module of `src/`, the
//! `.symver` directives giving each symbol its default version: with rust-lld,
//! rustc's own anonymous version script otherwise leaves every export
//! unversioned (spec/ibverbs-abi.md §4). Each module includes its directives
//! with `include!(concat!(env!("OUT_DIR"), "/symver_<module>.rs"))`.
//!
//! [`link_stub`] builds, with the C compiler, a shared object with the same
//! SONAME, version nodes and symbols as a table describes and empty bodies, so
//! that a cdylib can link against a sibling drop-in library (recording
//! `DT_NEEDED` and the symbol versions) without linking its code; the real
//! library is found by the loader at run time.
#![forbid(unsafe_code)]

pub mod elf;
pub mod layout;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One row of an exports table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Export {
    /// The version node (`IBVERBS_1.1`, `RDMACM_1.0`, …).
    pub node: String,
    /// The symbol.
    pub symbol: String,
    /// The module of `src/` that defines it.
    pub module: String,
}

/// A library's version nodes and name.
#[derive(Debug, Clone, Copy)]
pub struct Library<'a> {
    /// The SONAME, e.g. `libibverbs.so.1`.
    pub soname: &'a str,
    /// Nodes in order, each inheriting from the one before (as rdma-core's).
    pub chained: &'a [&'a str],
    /// Nodes that stand alone (private interfaces).
    pub standalone: &'a [&'a str],
}

impl Library<'_> {
    fn knows(&self, node: &str) -> bool {
        self.chained.contains(&node) || self.standalone.contains(&node)
    }

    /// The base of the file name: `libibverbs` for `libibverbs.so.1`.
    fn stem(&self) -> &str {
        self.soname.split(".so").next().unwrap_or(self.soname)
    }
}

/// rdma-core 44's libibverbs (spec/ibverbs-abi.md §1.1) and the private
/// interface our drop-in adds for the other drop-in libraries.
pub const LIBIBVERBS: Library<'static> = Library {
    soname: "libibverbs.so.1",
    chained: &[
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
    ],
    standalone: &["IBVERBS_PRIVATE_34", "SOFTVERBS_PRIVATE_1"],
};

/// rdma-core 44's librdmacm (spec/rdmacm-abi.md §1).
pub const LIBRDMACM: Library<'static> = Library {
    soname: "librdmacm.so.1",
    chained: &["RDMACM_1.0", "RDMACM_1.1", "RDMACM_1.2", "RDMACM_1.3"],
    standalone: &[],
};

/// Reads an exports table; panics (failing the build) on a malformed line.
pub fn read_exports(path: &Path) -> Vec<Export> {
    let table =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    table
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
            [node, symbol, module] => Export {
                node: node.into(),
                symbol: symbol.into(),
                module: module.into(),
            },
            _ => panic!(
                "{}: `NODE symbol module` per line, not {l:?}",
                path.display()
            ),
        })
        .collect()
}

/// The linker version script for `exports`: every node of `lib` with its
/// symbols, chained nodes naming their parent, everything else local.
pub fn version_script(lib: &Library, exports: &[Export]) -> String {
    for e in exports {
        assert!(
            lib.knows(&e.node),
            "unknown version node {} for {}",
            e.node,
            e.symbol
        );
    }
    let mut map = String::new();
    let mut parent: Option<&str> = None;
    for (i, node) in lib.chained.iter().chain(lib.standalone).enumerate() {
        writeln!(map, "{node} {{\n  global:").unwrap();
        for e in exports.iter().filter(|e| e.node == *node) {
            writeln!(map, "    {};", e.symbol).unwrap();
        }
        if i == 0 {
            map.push_str("  local: *;\n");
        }
        if lib.chained.contains(node) {
            match parent {
                Some(p) => writeln!(map, "}} {p};").unwrap(),
                None => map.push_str("};\n"),
            }
            parent = Some(node);
        } else {
            map.push_str("};\n");
        }
    }
    map
}

/// Writes the version script and each module's `.symver` file into
/// `OUT_DIR`, and tells cargo to link the cdylib with them and the SONAME.
/// Call from a build script; `table` is relative to the crate.
pub fn versioned_exports(lib: &Library, table: &str) {
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("run by cargo"));
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("run by cargo"));
    let exports = read_exports(&dir.join(table));
    let map_path = out.join(format!("{}.map", lib.stem()));
    std::fs::write(&map_path, version_script(lib, &exports)).unwrap();

    // `.symver` must sit in the codegen unit that defines the symbol, so each
    // module includes the directives for the exports it defines; a wrong
    // module is a link error.
    let mut modules: Vec<&str> = exports.iter().map(|e| e.module.as_str()).collect();
    modules.sort_unstable();
    modules.dedup();
    for module in modules {
        let mut asm = String::from("std::arch::global_asm!(\n");
        for e in exports.iter().filter(|e| e.module == module) {
            writeln!(asm, "    \".symver {0}, {0}@@{1}\",", e.symbol, e.node).unwrap();
        }
        asm.push_str(");\n");
        std::fs::write(out.join(format!("symver_{module}.rs")), asm).unwrap();
    }

    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        map_path.display()
    );
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{}", lib.soname);
    println!("cargo:rerun-if-changed={table}");
    println!("cargo:rerun-if-changed=build.rs");
}

/// Builds a link stub of `lib` from its exports table (absolute path) with the
/// C compiler (`$CC`, else `cc`) into `OUT_DIR/stub-<name>/lib<link_name>.so`
/// and tells cargo to link the package's library target against it
/// (`-l<link_name>`): the result records `DT_NEEDED <soname>` and the
/// versions of the symbols it uses, and contains none of the stub's code.
pub fn link_stub(lib: &Library, table: &Path, link_name: &str) {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("run by cargo"));
    let dir = out.join(format!("stub-{}", lib.stem()));
    std::fs::create_dir_all(&dir).unwrap();
    let exports = read_exports(table);
    let mut c = String::from("/* Link stub: names and versions only; never loaded. */\n");
    for e in &exports {
        writeln!(c, "void {}(void) {{}}", e.symbol).unwrap();
    }
    let (src, map) = (dir.join("stub.c"), dir.join("stub.map"));
    std::fs::write(&src, c).unwrap();
    std::fs::write(&map, version_script(lib, &exports)).unwrap();
    let so = dir.join(format!("lib{link_name}.so"));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args(["-shared", "-fPIC", "-nostdlib", "-o"])
        .arg(&so)
        .arg(&src)
        .arg(format!("-Wl,-soname,{}", lib.soname))
        .arg(format!("-Wl,--version-script={}", map.display()))
        .status()
        .unwrap_or_else(|e| panic!("running {cc} for the {} link stub: {e}", lib.soname));
    assert!(
        status.success(),
        "{cc} failed to build the {} link stub",
        lib.soname
    );
    println!("cargo:rustc-link-search=native={}", dir.display());
    println!("cargo:rustc-link-lib=dylib={link_name}");
    println!("cargo:rerun-if-changed={}", table.display());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(node: &str, symbol: &str) -> Export {
        Export {
            node: node.into(),
            symbol: symbol.into(),
            module: "m".into(),
        }
    }

    #[test]
    fn chained_nodes_name_their_parent_and_standalone_ones_do_not() {
        let lib = Library {
            soname: "libx.so.1",
            chained: &["X_1.0", "X_1.1"],
            standalone: &["X_PRIVATE"],
        };
        let map = version_script(
            &lib,
            &[row("X_1.0", "a"), row("X_1.1", "b"), row("X_PRIVATE", "p")],
        );
        assert_eq!(
            map,
            "X_1.0 {\n  global:\n    a;\n  local: *;\n};\n\
             X_1.1 {\n  global:\n    b;\n} X_1.0;\n\
             X_PRIVATE {\n  global:\n    p;\n};\n"
        );
    }

    #[test]
    #[should_panic(expected = "unknown version node X_2 for c")]
    fn an_unknown_node_fails_the_build() {
        let lib = Library {
            soname: "libx.so.1",
            chained: &["X_1.0"],
            standalone: &[],
        };
        version_script(&lib, &[row("X_2", "c")]);
    }
}
