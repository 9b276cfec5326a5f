//! A C program built against the system `<infiniband/verbs.h>` and linked to
//! this library (so its symbol versions are checked at link and load time)
//! drives the ABI as C programs do: bad input, every posting path of the
//! header, `ibv_cq_ex`, completion channels with poll(2), async events
//! (`tests/c/api_checks.c`).

mod common;

#[test]
fn c_program_drives_the_abi() {
    if !common::have_verbs_h() {
        return;
    }
    // Bounded: a hang is a failure, not a stuck suite.
    let out = common::run_c_program("api_checks");
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

/// A receiver that polls its last message and calls `exit(3)` at once,
/// closing nothing (`tests/c/exit_ack.c`), over UDP: the ACK its poll left
/// for its next post leaves at exit (spec/rc-reliability.md §3), so the
/// sender's SEND completes with success, not `RETRY_EXC_ERR`. Runs until a
/// receiver's log shows the ACK was still waiting at its exit (at most 8
/// runs), and the sender succeeds in every run.
#[test]
fn a_receiver_that_exits_at_once_still_acks_its_last_message() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command, Stdio};
    if !common::have_verbs_h() {
        return;
    }
    let exe = common::compile_c("exit_ack");
    let spawn = |mode: &str, addr: &str| {
        Command::new("timeout")
            .arg("60")
            .arg(&exe)
            .arg(mode)
            .env("LD_LIBRARY_PATH", common::lib_dir())
            .env("SOFTVERBS_ADDR", addr)
            .env("SOFTVERBS_SHM", "0")
            .env("SOFTVERBS_LOG", "debug")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let line = |r: &mut BufReader<std::process::ChildStdout>| {
        let mut s = String::new();
        r.read_line(&mut s).unwrap();
        s
    };
    let mut flushed = 0;
    for _ in 0..8 {
        let mut rx = spawn("receiver", "127.34.14.1");
        let mut tx = spawn("sender", "127.34.14.2");
        let (mut rx_out, mut rx_in) = (
            BufReader::new(rx.stdout.take().unwrap()),
            rx.stdin.take().unwrap(),
        );
        let (mut tx_out, mut tx_in) = (
            BufReader::new(tx.stdout.take().unwrap()),
            tx.stdin.take().unwrap(),
        );
        let hello = line(&mut rx_out);
        assert!(hello.starts_with("QPN "), "receiver said {hello:?}");
        tx_in.write_all(hello.as_bytes()).unwrap();
        let back = line(&mut tx_out);
        assert!(back.starts_with("QPN "), "sender said {back:?}");
        rx_in.write_all(back.as_bytes()).unwrap();
        let ready = line(&mut rx_out);
        assert_eq!(ready.trim(), "READY");
        tx_in.write_all(ready.as_bytes()).unwrap();
        drop((rx_in, tx_in));
        let (got, ok) = (line(&mut rx_out), line(&mut rx_out));
        let sent = line(&mut tx_out);
        let (ro, to) = (
            rx.wait_with_output().unwrap(),
            tx.wait_with_output().unwrap(),
        );
        let (re, te) = (
            String::from_utf8_lossy(&ro.stderr),
            String::from_utf8_lossy(&to.stderr),
        );
        assert!(
            ro.status.success() && got.trim() == "GOT" && ok.trim() == "ok",
            "receiver: {got}{ok}\n{re}"
        );
        assert!(
            to.status.success() && sent.trim() == "ok",
            "sender: {sent}\n{te}"
        );
        if re.contains("at exit, the progress thread sent what a poll had left") {
            flushed += 1;
            break;
        }
    }
    let _ = std::fs::remove_file(&exe);
    assert!(
        flushed > 0,
        "no receiver's ACK was still waiting at its exit in 8 runs"
    );
}
