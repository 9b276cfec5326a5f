//! Memory verbs through the C ABI, driven by a C program built against the
//! system `<infiniband/verbs.h>` (`tests/c/memory_checks.c`): `ibv_rereg_mr`
//! with each flag, each return code and errno, and remote access through the
//! re-registered region.

mod common;

#[test]
fn c_program_drives_memory_verbs() {
    if !common::have_verbs_h() {
        return;
    }
    let out = common::run_c_program("memory_checks");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "memory_checks failed ({}):\n{stderr}",
        out.status
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
    // Each refusal is logged with its reason in words.
    for why in [
        "ibv_rereg_mr refused (EINVAL): flags 0x8 has bits beyond IBV_REREG_MR_FLAGS_SUPPORTED",
        "needs a non-NULL addr and a non-zero length",
        "access is non-zero but flags lack IBV_REREG_MR_CHANGE_ACCESS",
        "rereg_mr refused (EINVAL): rereg_mr: flags name no change",
        "REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE",
    ] {
        assert!(stderr.contains(why), "{why:?} not in the log:\n{stderr}");
    }
}
