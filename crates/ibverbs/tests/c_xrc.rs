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

/// XRC domains across processes (spec/xrc-processes.md), through the C ABI
/// (`tests/c/xrc_processes.c`): two processes on one address open an XRC
/// domain on one file; the second cannot `ibv_open_qp` the first's target QP
/// (EINVAL, the reason logged), its SRQ number differs from the first's,
/// and a message it sends through the first's target QP naming its own SRQ
/// is an invalid request, never delivered into the first's SRQ.
#[test]
fn xrc_domains_are_not_shared_between_processes() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command, Stdio};
    if !common::have_verbs_h() {
        return;
    }
    let exe = common::compile_c("xrc_processes");
    let file = std::env::temp_dir().join(format!("softverbs-xrcd-procs-{}", std::process::id()));
    std::fs::write(&file, b"").unwrap();
    let spawn = |mode: &str| {
        Command::new("timeout")
            .arg("60")
            .arg(&exe)
            .arg(mode)
            .arg(&file)
            .env("LD_LIBRARY_PATH", common::lib_dir())
            .env("SOFTVERBS_ADDR", "127.34.13.1")
            .env("SOFTVERBS_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut owner = spawn("owner");
    let mut owner_out = BufReader::new(owner.stdout.take().unwrap());
    let mut owner_in = owner.stdin.take().unwrap();
    let line = |r: &mut BufReader<std::process::ChildStdout>| {
        let mut s = String::new();
        r.read_line(&mut s).unwrap();
        s
    };
    let first = line(&mut owner_out);
    assert!(first.starts_with("QPN "), "owner said {first:?}");
    let mut opener = spawn("opener");
    let mut opener_out = BufReader::new(opener.stdout.take().unwrap());
    let mut opener_in = opener.stdin.take().unwrap();
    opener_in.write_all(first.as_bytes()).unwrap();
    let send = line(&mut opener_out);
    assert!(send.starts_with("SEND "), "opener said {send:?}");
    owner_in.write_all(send.as_bytes()).unwrap();
    let ready = line(&mut owner_out);
    assert_eq!(ready.trim(), "READY");
    opener_in.write_all(ready.as_bytes()).unwrap();
    let done = line(&mut opener_out);
    assert_eq!(done.trim(), "DONE");
    owner_in.write_all(done.as_bytes()).unwrap();
    drop((owner_in, opener_in));
    let (a, b) = (line(&mut opener_out), line(&mut owner_out));
    let (oa, ob) = (
        opener.wait_with_output().unwrap(),
        owner.wait_with_output().unwrap(),
    );
    let (ea, eb) = (
        String::from_utf8_lossy(&oa.stderr),
        String::from_utf8_lossy(&ob.stderr),
    );
    assert!(oa.status.success() && a.trim() == "ok", "opener: {a}\n{ea}");
    assert!(ob.status.success() && b.trim() == "ok", "owner: {b}\n{eb}");
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
