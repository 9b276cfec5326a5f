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
/// receiver's log shows the ACK was still waiting at its exit (at most 40
/// runs), and the sender succeeds in every run.
#[test]
fn a_receiver_that_exits_at_once_still_acks_its_last_message() {
    use common::Side;
    if !common::have_verbs_h() {
        return;
    }
    let exe = common::compile_c("exit_ack");
    let spawn = |mode: &str, addr: &str| {
        let envs = [
            ("SOFTVERBS_ADDR", addr),
            ("SOFTVERBS_SHM", "0"),
            ("SOFTVERBS_LOG", "debug"),
        ];
        Side::spawn(&exe, &[mode], &envs)
    };
    let mut flushed = 0;
    for _ in 0..40 {
        let (mut rx, mut tx) = (
            spawn("receiver", "127.34.14.1"),
            spawn("sender", "127.34.14.2"),
        );
        let hello = rx.line();
        assert!(hello.starts_with("QPN "), "receiver said {hello:?}");
        tx.say(&hello);
        let back = tx.line();
        assert!(back.starts_with("QPN "), "sender said {back:?}");
        rx.say(&back);
        let ready = rx.line();
        assert_eq!(ready.trim(), "READY");
        tx.say(&ready);
        rx.hang_up();
        tx.hang_up();
        let (got, ok, sent) = (rx.line(), rx.line(), tx.line());
        let ((rx_ok, re), (tx_ok, te)) = (rx.finish(), tx.finish());
        assert!(
            rx_ok && got.trim() == "GOT" && ok.trim() == "ok",
            "receiver: {got}{ok}\n{re}"
        );
        assert!(tx_ok && sent.trim() == "ok", "sender: {sent}\n{te}");
        if re.contains("at exit, the progress thread sent what a poll had left") {
            flushed += 1;
            break;
        }
    }
    let _ = std::fs::remove_file(&exe);
    assert!(
        flushed > 0,
        "no receiver's ACK was still waiting at its exit in 40 runs"
    );
}
