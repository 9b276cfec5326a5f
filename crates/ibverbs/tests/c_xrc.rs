//! XRC through the C ABI, driven by a C program built against the system
//! `<infiniband/verbs.h>` (`tests/c/xrc_checks.c`): XRC domains shared by
//! file with the kernel's errno for each oflags case, XRC SRQs and their
//! numbers, XRC_SEND / XRC_RECV QPs, messages routed to the SRQ each WR
//! names (both ways of naming it), `ibv_open_qp`, `ibv_close_xrcd` while
//! used, an SRQ of another domain refused, and the target QP's event on the
//! async fd of each context that holds it, created or opened (spec/xrc.md).

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

/// XRC domains across processes (spec/xrc-processes.md), through the C ABI
/// (`tests/c/xrc_processes.c`): two processes on one address open an XRC
/// domain on one file; the second cannot `ibv_open_qp` the first's target QP
/// (EINVAL, the reason logged), its SRQ number differs from the first's,
/// and a message it sends through the first's target QP naming its own SRQ
/// is an invalid request, never delivered into the first's SRQ.
#[test]
fn xrc_domains_are_not_shared_between_processes() {
    use common::Side;
    if !common::have_verbs_h() {
        return;
    }
    let exe = common::compile_c("xrc_processes");
    let file = std::env::temp_dir().join(format!("softverbs-xrcd-procs-{}", std::process::id()));
    std::fs::write(&file, b"").unwrap();
    let path = file.to_str().unwrap();
    let envs = [("SOFTVERBS_ADDR", "127.34.13.1"), ("SOFTVERBS_LOG", "warn")];
    let mut owner = Side::spawn(&exe, &["owner", path], &envs);
    let first = owner.line();
    assert!(first.starts_with("QPN "), "owner said {first:?}");
    let mut opener = Side::spawn(&exe, &["opener", path], &envs);
    opener.say(&first);
    let send = opener.line();
    assert!(send.starts_with("SEND "), "opener said {send:?}");
    owner.say(&send);
    let ready = owner.line();
    assert_eq!(ready.trim(), "READY");
    opener.say(&ready);
    let done = opener.line();
    assert_eq!(done.trim(), "DONE");
    owner.say(&done);
    owner.hang_up();
    opener.hang_up();
    let (a, b) = (opener.line(), owner.line());
    let ((oa, ea), (ob, eb)) = (opener.finish(), owner.finish());
    assert!(oa && a.trim() == "ok", "opener: {a}\n{ea}");
    assert!(ob && b.trim() == "ok", "owner: {b}\n{eb}");
    assert!(
        ea.contains("ibv_open_qp") || ea.contains("open_qp"),
        "the refusal is logged:\n{ea}"
    );
    assert!(
        ea.contains("XRC domains are not shared between processes"),
        "the reason names the limitation:\n{ea}"
    );
    let _ = std::fs::remove_file(&exe);
    let _ = std::fs::remove_file(&file);
}
