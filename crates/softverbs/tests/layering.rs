//! The layering promise of the safe API (lib.rs's picture), checked against
//! the sources (`testkit::layering`): no circle of imports among its files,
//! a name the crate root re-exports counting as its module.

#[test]
fn no_circle_of_imports_among_softverbs_files() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    testkit::layering::assert_no_circles(&src, 20, &[]);
}
