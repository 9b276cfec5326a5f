//! The layering promise of rdmacm's module doc (lib.rs), checked against the
//! sources (`testkit::layering`): every module stands on the floor lib.rs
//! draws and imports only the floors below, no circle of imports among the
//! library's files (a `mod.rs` that reaches into its own children counts as
//! importing them), the ground floor imports nothing of the crate, an id and
//! its channel know nothing of the connection manager, and the CM's tables
//! (softcm::state), which QPs ask, know nothing that makes ids or QPs.

use std::collections::BTreeSet;
use std::path::Path;
use testkit::layering::{assert_floors, assert_no_circles, graph, reach, Graph};

fn src() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The ground floor: C mirrors, errno and registries, addresses, the port
/// table and the rate table.
const GROUND: &[&str] = &["ffi", "util", "net", "ports", "rate"];

/// The connection manager and what reaches it.
const CM: &[&str] = &["cm", "conn", "softcm", "softcm::pump", "softcm::state"];

#[test]
fn the_floors_drawn_in_lib_rs_are_the_imports() {
    assert_floors(&src());
}

#[test]
fn no_circle_of_imports_among_rdmacm_files() {
    assert_no_circles(&src(), 15, &[]);
}

#[test]
fn the_ground_floor_imports_nothing() {
    let g: Graph = graph(&src());
    for m in GROUND {
        assert_eq!(g[*m], BTreeSet::new(), "{m} imports nothing of the crate");
    }
}

#[test]
fn ids_and_channels_know_nothing_of_the_cm_and_its_tables_make_nothing() {
    let g: Graph = graph(&src());
    for m in ["id", "channel"] {
        let r = reach(&g, m);
        for c in CM {
            assert!(!r.contains(*c), "{m} reaches {c}");
        }
    }
    let r = reach(&g, "softcm::state");
    for above in ["qp", "softcm::pump", "softcm", "conn"] {
        assert!(!r.contains(above), "softcm::state reaches {above}");
    }
    assert!(g["qp"].contains("softcm::state"), "QPs ask the CM's tables");
}
