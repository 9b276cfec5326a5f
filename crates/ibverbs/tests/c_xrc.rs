//! XRC through the C ABI, driven by a C program built against the system
//! `<infiniband/verbs.h>` (`tests/c/xrc_checks.c`): XRC domains shared by
//! file with the kernel's errno for each oflags case, XRC SRQs and their
//! numbers, XRC_SEND / XRC_RECV QPs, messages routed to the SRQ each WR
//! names (both ways of naming it), `ibv_open_qp`, `ibv_close_xrcd` while
//! used, and an SRQ of another domain refused (spec/xrc.md).

mod common;

#[test]
fn c_program_drives_xrc() {
    if !common::have_verbs_h() {
        return;
    }
    let out = common::run_c_program("xrc_checks");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "xrc_checks failed ({}):\n{stderr}",
        out.status
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
    // Each refusal is logged with its reason in words.
    for why in [
        "has no XRC domain and oflags lack O_CREAT",
        "O_EXCL, but the file",
        "comp_mask must include IBV_XRCD_INIT_ATTR_FD and IBV_XRCD_INIT_ATTR_OFLAGS",
        "is not an open file descriptor",
        "an XRC SRQ needs IBV_SRQ_INIT_ATTR_XRCD and IBV_SRQ_INIT_ATTR_CQ",
        "comp_mask must include IBV_QP_OPEN_ATTR_NUM, _XRCD and _TYPE",
        "close_xrcd refused (EBUSY)",
    ] {
        assert!(stderr.contains(why), "{why:?} not in the log:\n{stderr}");
    }
}
