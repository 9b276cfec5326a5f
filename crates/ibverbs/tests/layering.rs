//! The layering promise of ibverbs' module doc (lib.rs), checked against the
//! sources (`testkit::layering`): every module stands on the floor lib.rs
//! draws and imports only the floors below, no circle of imports among the
//! library's files (a `mod.rs` that reaches into its own children counts as
//! importing them), the ground floor imports nothing of the crate, a context
//! stands on the ground floor alone, and the top floor (ops.rs: the context's
//! ops tables) is imported by nothing.

use std::collections::BTreeSet;
use std::path::Path;
use testkit::layering::{assert_floors, assert_no_circles, graph, Graph};

fn src() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The ground floor: the C mirrors, what every entry point shares (errno,
/// refusal logging, the checked pointer-to-block conversion), the signal
/// question of blocking calls and the private ABI's mirrors.
const GROUND: &[&str] = &["ffi", "util", "restart", "private_abi"];

#[test]
fn the_floors_drawn_in_lib_rs_are_the_imports() {
    assert_floors(&src());
}

#[test]
fn no_circle_of_imports_among_ibverbs_files() {
    assert_no_circles(&src(), 20, &[]);
}

#[test]
fn the_ground_floor_imports_nothing_and_contexts_stand_on_it() {
    let g: Graph = graph(&src());
    for m in GROUND {
        assert_eq!(g[*m], BTreeSet::new(), "{m} imports nothing of the crate");
    }
    let above_ground: Vec<_> = g["context"]
        .iter()
        .filter(|d| !GROUND.contains(&d.as_str()))
        .collect();
    assert!(
        above_ground.is_empty(),
        "context.rs imports only the ground floor, not {above_ground:?}"
    );
}

#[test]
fn nothing_imports_the_top_floor_and_qps_are_made_above_posting() {
    let g: Graph = graph(&src());
    for (m, deps) in &g {
        assert!(!deps.contains("ops"), "{m} imports ops.rs, the top floor");
        if m != "ops" {
            assert!(
                !deps.contains("qp::create"),
                "{m} imports qp::create (only the ops table names it)"
            );
        }
    }
    assert!(g["post"].contains("qp"), "post.rs stands on the QP block");
    assert!(
        !g["qp"].contains("post"),
        "the QP block (qp/mod.rs) sits below posting"
    );
}
