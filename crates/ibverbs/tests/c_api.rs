//! A C program built against the system `<infiniband/verbs.h>` and linked to
//! this library (so its symbol versions are checked at link and load time)
//! drives the ABI as C programs do: bad input, every posting path of the
//! header, `ibv_cq_ex`, completion channels with poll(2), async events
//! (`tests/c/api_checks.c`).

mod common;

use std::process::Command;

#[test]
fn c_program_drives_the_abi() {
    if !common::have_verbs_h() {
        return;
    }
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/c/api_checks.c");
    let exe = std::env::temp_dir().join(format!("softverbs-api-checks-{}", std::process::id()));
    let lib = common::lib_path();
    let cc = Command::new("cc")
        .args(["-std=gnu11", "-Wall", "-O1", "-o"])
        .arg(&exe)
        .arg(src)
        .arg(&lib)
        .output()
        .unwrap();
    assert!(
        cc.status.success(),
        "cc failed:\n{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    // Bounded: a hang is a failure, not a stuck suite.
    let out = Command::new("timeout")
        .arg("120")
        .arg(&exe)
        .env("LD_LIBRARY_PATH", common::lib_dir())
        .env("SOFTVERBS_LOG", "warn")
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&exe);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "api_checks failed ({}):\n{stderr}",
        out.status
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
    // Refusals are logged with their reason in words.
    assert!(
        stderr.contains("ibv_alloc_pd refused (EINVAL): the context pointer is NULL"),
        "log:\n{stderr}"
    );
    assert!(
        stderr.contains("DEST_QPN"),
        "the missing attribute is named:\n{stderr}"
    );
}
