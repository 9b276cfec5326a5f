//! Memory verbs through the C ABI, driven by a C program built against the
//! system `<infiniband/verbs.h>` (`tests/c/memory_checks.c`): `ibv_rereg_mr`
//! with each flag, each return code and errno, and remote access through the
//! re-registered region; on-demand paging (caps, explicit and implicit
//! regions, unmapped and read-only pages, `ibv_advise_mr` and its errno);
//! device memory (allocation, copies, zero-based regions and their errno);
//! thread and parent domains; the CQ rules (resize below the owed
//! completions, RESET purging a QP's completions).

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
        "addr is NULL (only an implicit on-demand region, length SIZE_MAX with IBV_ACCESS_ON_DEMAND",
        "is not mapped writable in the process",
        "advise_mr refused (ENOENT): advise_mr: lkey",
        "advise_mr refused (EPERM): advise_mr: PREFETCH_WRITE on lkey",
        "must be multiples of 4 (device memory is accessed in 4-byte words)",
        "free_dm refused (EBUSY): free_dm: 1 memory region(s) still use this device memory",
        "a device-memory region (ibv_reg_dm_mr) cannot be re-registered",
        "ibv_dealloc_pd refused (EBUSY): 1 parent domain(s) stand on this protection domain",
        "a parent domain stands on a protection domain",
        "parent_domain is a protection domain, not a parent domain",
        "were created through this parent domain and still exist; destroy them first",
        "and 5 more that signaled send WRs in flight will add",
    ] {
        assert!(stderr.contains(why), "{why:?} not in the log:\n{stderr}");
    }
}
