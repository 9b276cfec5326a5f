//! Memory windows and IBA 1.5 ATOMIC WRITE through the C ABI, driven by a C
//! program built against the system `<infiniband/verbs.h>`
//! (`tests/c/mw_checks.c`, spec/memory-windows.md): type 1 and type 2
//! windows, local and remote invalidation, zero-based windows, and the bad
//! inputs with their errno or completion status, each refusal logged with its
//! reason in words.

mod common;

#[test]
fn c_program_drives_memory_windows_and_atomic_write() {
    if !common::have_verbs_h() {
        return;
    }
    let out = common::run_c_program("mw_checks");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "mw_checks failed ({}):\n{stderr}",
        out.status
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
    for why in [
        "ibv_alloc_mw refused (EINVAL): type 3 is not IBV_MW_TYPE_1",
        "memory window(s) are bound to this region",
        "memory window(s) were allocated on this protection domain",
        "IBV_WR_ATOMIC_WRITE: wr.rdma.remote_addr",
        "IBV_WR_ATOMIC_WRITE: the local buffer must be exactly 8 bytes",
        "ibv_wr_flush is not in this library's ibv_qp_ex",
    ] {
        assert!(stderr.contains(why), "{why:?} not in the log:\n{stderr}");
    }
}
