//! What the rdmacm tests share: the directory holding both drop-in libraries,
//! and whether a tool they need is installed.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The directory holding `librdmacm.so.1` and `libibverbs.so.1`:
/// `SOFTVERBS_LIBIBVERBS_DIR` (the release build `scripts/build-ibverbs.sh`
/// makes, with both libraries; the test script sets it), else the libraries
/// cargo built next to this test (debug).
pub fn lib_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("SOFTVERBS_LIBIBVERBS_DIR") {
        let d = PathBuf::from(d);
        assert!(
            d.join("librdmacm.so.1").exists(),
            "{} lacks librdmacm.so.1",
            d.display()
        );
        return d;
    }
    let exe = std::env::current_exe().expect("test executable path");
    let target = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target/<profile>/deps");
    let dir = target.join("rdmacm-test");
    std::fs::create_dir_all(&dir).unwrap();
    for (so, link) in [
        ("librdmacm.so", "librdmacm.so.1"),
        ("libibverbs.so", "libibverbs.so.1"),
    ] {
        let so = freshest(&[target.join("deps").join(so), target.join(so)]);
        assert!(
            so.exists(),
            "{} not built: `cargo build -p softverbs-ibverbs -p softverbs-rdmacm` (cargo test --workspace does)",
            so.display()
        );
        let link = dir.join(link);
        // Tests of one binary run in parallel: make the link under a name of
        // this thread's own and rename it into place (atomic, no EEXIST race).
        let tmp = dir.join(format!(
            ".{}.{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&so, &tmp).unwrap();
        std::fs::rename(&tmp, &link).unwrap();
    }
    dir
}

/// The newest existing file of `paths` (cargo refreshes the copy in
/// target/<profile> only on `cargo build`; deps/ may be newer), else the first.
fn freshest(paths: &[PathBuf]) -> PathBuf {
    paths
        .iter()
        .filter_map(|p| Some((std::fs::metadata(p).ok()?.modified().ok()?, p)))
        .max_by_key(|(t, _)| *t)
        .map_or_else(|| paths[0].clone(), |(_, p)| p.clone())
}

/// The drop-in librdmacm itself.
pub fn lib_path() -> PathBuf {
    lib_dir().join("librdmacm.so.1")
}

/// True if `tool` runs; otherwise the test skips, or fails when the suite
/// requires every tool (`SOFTVERBS_REQUIRE_TOOLS=1`, as under CI).
pub fn have(tool: &str) -> bool {
    let ok = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        required(&format!("{tool} is not installed"));
    }
    ok
}

/// True if a header (e.g. `rdma/rdma_cma.h` from librdmacm-dev) and a C
/// compiler are installed.
pub fn have_header(header: &str, package: &str) -> bool {
    if !Path::new("/usr/include").join(header).exists() {
        required(&format!(
            "/usr/include/{header} is not installed ({package})"
        ));
        return false;
    }
    have("cc")
}

fn required(why: &str) {
    assert!(
        std::env::var_os("SOFTVERBS_REQUIRE_TOOLS").is_none(),
        "{why}, and the suite requires it"
    );
    eprintln!("skipping: {why}");
}
