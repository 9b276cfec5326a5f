//! The versioned exports of libibverbs.so.1 from `exports.txt` (version node,
//! symbol, defining module): the linker version script and each module's
//! `.symver` directives (the shared helper in crates/cabi-build explains why).
fn main() {
    softverbs_cabi_build::versioned_exports(&softverbs_cabi_build::LIBIBVERBS, "exports.txt");
}
