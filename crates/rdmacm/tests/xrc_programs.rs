//! XRC through rdma_cm with unmodified Debian programs (rdmacm-utils 44.0):
//! `rdma_xserver -c x` listens for XRC (RDMA_PS_IB, IBV_QPT_XRC_RECV): its
//! connection gets an XRC_RECV QP and an XRC SRQ in the device's XRC domain,
//! and it sends the SRQ number in the REP's private data; `rdma_xclient -c x`
//! connects an XRC_SEND QP over IBTA CM (transport 3, XRC) and sends one
//! message naming that SRQ, which the server receives through the SRQ's CQ
//! (spec/xrc.md). Two processes, each with a loopback address of its own.

mod common;

use std::process::{Command, Stdio};
use testkit::{text, wait_device};

/// `prog args` at `addr`, bounded by timeout(1).
fn command(addr: &str, args: &[&str]) -> Command {
    let mut c = testkit::timeout(30, args);
    c.env("LD_LIBRARY_PATH", common::lib_dir())
        .env("SOFTVERBS_ADDR", addr)
        .env("SOFTVERBS_LOG", "warn");
    c
}

/// Starts the server, then the client (again while it is refused because the
/// server is not listening yet, at most 40 times); both outputs.
fn pair(srv_addr: &str, server: &[&str], cli_addr: &str, client: &[&str]) -> (String, String) {
    let srv = command(srv_addr, server)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_device(srv_addr);
    let mut cli = String::new();
    for _ in 0..40 {
        std::thread::sleep(std::time::Duration::from_millis(250));
        let out = command(cli_addr, client).output().unwrap();
        cli = text(&out);
        let refused = cli.contains("REJECTED") || cli.contains("refused");
        if out.status.success() || !refused {
            break;
        }
    }
    let srv = srv.wait_with_output().unwrap();
    (text(&srv), cli)
}

fn no_refusals(who: &str, t: &str) {
    let r: Vec<&str> = t.lines().filter(|l| l.contains(" refused (")).collect();
    assert!(
        r.is_empty(),
        "{who}: unexpected refusals:\n{}",
        r.join("\n")
    );
}

fn run(mode: &str, srv: &str, cli: &str, port: &str) {
    if !common::have("rdma_xserver") {
        return;
    }
    let (s, c) = pair(
        srv,
        &["rdma_xserver", "-c", mode, "-p", port],
        cli,
        &["rdma_xclient", "-c", mode, "-s", srv, "-p", port],
    );
    assert!(
        s.contains("rdma_xserver: end 0"),
        "server:\n{s}\nclient:\n{c}"
    );
    assert!(
        c.contains("rdma_xclient: end 0"),
        "client:\n{c}\nserver:\n{s}"
    );
    no_refusals("rdma_xserver", &s);
    no_refusals("rdma_xclient", &c);
}

#[test]
fn rdma_xserver_and_xclient_over_xrc() {
    run("x", "127.0.63.1", "127.0.63.2", "7491");
}

#[test]
fn rdma_xserver_and_xclient_over_rc() {
    run("r", "127.0.64.1", "127.0.64.2", "7492");
}
