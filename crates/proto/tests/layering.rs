//! The layering promise of `proto`'s module docs, checked against the
//! sources (`testkit::layering`): no circle of imports among proto's files
//! (a `mod.rs` that reaches into its own children counts as importing them,
//! a name the crate root re-exports counts as its module), the ground-floor
//! `handle` imports nothing from the crate, and nothing below the engine
//! names the engine or the data path on it.

use std::collections::BTreeSet;
use std::path::Path;
use testkit::layering::{assert_floors, assert_no_circles, graph, Graph};

fn src() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

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
fn the_floors_drawn_in_lib_rs_are_the_imports() {
    assert_floors(&src());
}

#[test]
fn no_circle_of_imports_among_proto_files() {
    assert_no_circles(&src(), 30, &[]);
}

#[test]
fn handles_are_the_ground_floor_and_nothing_below_the_engine_names_it() {
    let g: Graph = graph(&src());
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
