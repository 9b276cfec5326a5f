//! A C program built against the system `<rdma/rdma_cma.h>` and linked to the
//! drop-in librdmacm.so.1 and libibverbs.so.1 (so symbol versions are checked
//! at link and load time) drives the library as C programs do
//! (`tests/c/cm_checks.c`): event channels and their fds, ids in each port
//! space, binding and EADDRINUSE, address and route resolution on loopback
//! with `id->verbs` usable for verbs, an unreachable address, QPs on ids in
//! the state rdma-core leaves them, synchronous ids, ack accounting, migrate,
//! getaddrinfo, create_ep, event names, destroyed ids, and the calls that
//! answer ENOSYS until the CM protocol is attached.

mod common;

use std::process::Command;

#[test]
fn c_program_drives_the_cm_abi() {
    if !common::have_header("rdma/rdma_cma.h", "librdmacm-dev") {
        return;
    }
    let dir = common::lib_dir();
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/c/cm_checks.c");
    let exe = std::env::temp_dir().join(format!("softverbs-cm-checks-{}", std::process::id()));
    let cc = Command::new("cc")
        .args(["-std=gnu11", "-Wall", "-O1", "-pthread", "-o"])
        .arg(&exe)
        .arg(src)
        .arg(dir.join("librdmacm.so.1"))
        .arg(dir.join("libibverbs.so.1"))
        .output()
        .unwrap();
    assert!(
        cc.status.success(),
        "cc failed:\n{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    // Bounded: a hang is a failure, not a stuck suite.
    let out = Command::new("timeout")
        .arg("60")
        .arg(&exe)
        .env("LD_LIBRARY_PATH", &dir)
        .env("SOFTVERBS_LOG", "warn")
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&exe);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "cm_checks failed ({}):\n{stderr}",
        out.status
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
    // Refusals are logged with their reason in words.
    for needle in [
        "rdma_bind_addr refused (EADDRINUSE): port",
        "rdma_disconnect refused (EINVAL): the id has no connection",
        "rsocket refused (ENOSYS)",
        "is not a live rdma_cm_id of this library",
    ] {
        assert!(stderr.contains(needle), "log lacks {needle:?}:\n{stderr}");
    }
}
