//! The layering promise of the safe API (lib.rs's `# Layers` drawing),
//! checked against the sources (`testkit::layering`): every module stands on
//! the floor lib.rs draws and imports only the floors below, so there is no
//! circle of imports (a name the crate root re-exports counts as its module).

use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn no_circle_of_imports_among_softverbs_files() {
    testkit::layering::assert_no_circles(&src(), 20, &[]);
}

#[test]
fn the_floors_drawn_in_lib_rs_are_the_imports() {
    testkit::layering::assert_floors(&src());
}
