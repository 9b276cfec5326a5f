//! The versioned exports of librdmacm.so.1 from `exports.txt`, and the link
//! to libibverbs.so.1: against a stub made from crates/ibverbs/exports.txt
//! (same SONAME, nodes and symbols, no code), so the library records
//! `DT_NEEDED libibverbs.so.1` and the versions of the verbs it calls while
//! the verbs themselves come, at run time, from the one drop-in libibverbs of
//! the process (crates/cabi-build explains both helpers).
use softverbs_cabi_build::{link_stub, versioned_exports, LIBIBVERBS, LIBRDMACM};

fn main() {
    versioned_exports(&LIBRDMACM, "exports.txt");
    let dir = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    link_stub(&LIBIBVERBS, &dir.join("../ibverbs/exports.txt"), "ibverbs");
}
