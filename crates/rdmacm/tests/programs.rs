//! Unmodified Debian programs (rdmacm-utils 44.0) through the drop-in
//! librdmacm.so.1 and libibverbs.so.1: every one binds (they are linked
//! BIND_NOW, so a missing symbol or version node stops them at load); servers
//! and clients connect as two processes, each with a loopback address of its
//! own (`SOFTVERBS_ADDR`), through IBTA CM on QP1: `rping` (its data checked
//! with `-v`), `ucmatose`, `rdma_server`/`rdma_client`; a connect to a port
//! nobody listens on ends REJECTED (invalid service ID) instead of hanging,
//! and `udaddy` (RDMA_PS_UDP) resolves its peer through SIDR.

mod common;

use std::process::{Command, Output};
use testkit::{
    finish_within, text, wait_device, wait_device_gone, wait_tcp_listen, KillOnDrop, Netns,
};

/// `args` through the drop-in libraries, bounded by 30 s (a hang is a
/// failure, not a stuck suite); on a device at `addr` if given, in network
/// namespace `ns` if given.
fn cmd(ns: Option<&str>, addr: Option<&str>, args: &[&str]) -> Command {
    let mut c = match ns {
        Some(ns) => Netns::exec(ns, 30, args),
        None => testkit::timeout(30, args),
    };
    c.env("LD_LIBRARY_PATH", common::lib_dir())
        .env("SOFTVERBS_LOG", "warn");
    if let Some(addr) = addr {
        c.env("SOFTVERBS_ADDR", addr);
    }
    c
}

fn run(args: &[&str]) -> Output {
    cmd(None, None, args).output().unwrap()
}

#[test]
fn every_rdmacm_utils_program_binds() {
    for prog in [
        "ucmatose",
        "rdma_client",
        "rdma_server",
        "rdma_xclient",
        "rdma_xserver",
        "rping",
        "udaddy",
        "mckey",
        "cmtime",
        "riostream",
        "rstream",
        "rcopy",
        "udpong",
    ] {
        if !common::have(prog) {
            return;
        }
        let out = run(&[prog, "-h"]);
        let t = text(&out);
        assert_ne!(out.status.code(), Some(127), "{prog} did not load:\n{t}");
        assert!(
            !t.contains("symbol lookup error") && !t.contains("not found"),
            "{prog}: loader error:\n{t}"
        );
        assert!(
            t.to_lowercase().contains("usage") || t.contains(&format!("{prog} -")),
            "{prog} -h printed no usage:\n{t}"
        );
    }
}

fn run_at(addr: &str, args: &[&str]) -> Output {
    cmd(None, Some(addr), args).output().unwrap()
}

/// Starts `server` at `srv_addr`, then runs `client` at `cli_addr` (again
/// while it is refused because the server is not listening yet, at most 40
/// times); returns both outputs.
fn pair(srv_addr: &str, server: &[&str], cli_addr: &str, client: &[&str]) -> (String, String) {
    let srv = cmd(None, Some(srv_addr), server)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_device(srv_addr);
    let mut cli = String::new();
    for _ in 0..40 {
        std::thread::sleep(std::time::Duration::from_millis(250));
        let out = run_at(cli_addr, client);
        cli = text(&out);
        // perftest names a REJECTED event by its number.
        let refused = cli.contains("REJECTED")
            || cli.contains("Unexpected CM event bl blka 8")
            || cli.contains("UNREACHABLE")
            || cli.contains("refused")
            || cli.contains("Connection refused");
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

/// rping's `-v` lines: `rdma-ping-N: ` then characters from 'A' + N on,
/// cycling through 'A'..='z' (rping.c: `c++; if (c > 122) c = 65`, and the
/// start advances the same way each ping). The first 20 are checked.
fn rping_lines(t: &str, prefix: &str, count: usize) {
    for n in 0..count {
        let head = format!("{prefix}rdma-ping-{n}: ");
        let want: String = (0..20)
            .map(|i| char::from(65 + ((n + i) % 58) as u8))
            .collect();
        let got = t
            .lines()
            .find_map(|l| l.strip_prefix(&head))
            .unwrap_or_else(|| panic!("no line {head:?} in:\n{t}"));
        assert!(got.starts_with(&want), "ping {n}: {got:?}, want {want:?}…");
    }
}

fn rping(count: &str, n: usize, srv: &str, cli: &str, port: &str) {
    if !common::have("rping") {
        return;
    }
    let (s, c) = pair(
        srv,
        &["rping", "-s", "-a", srv, "-p", port, "-v", "-C", count],
        cli,
        &["rping", "-c", "-a", srv, "-p", port, "-v", "-C", count],
    );
    rping_lines(&c, "ping data: ", n);
    rping_lines(&s, "server ping data: ", n);
    assert!(s.contains("server DISCONNECT EVENT"), "server:\n{s}");
    no_refusals("rping -c", &c);
}

#[test]
fn rping_client_and_server_connect_and_verify_10() {
    rping("10", 10, "127.0.21.1", "127.0.21.2", "7471");
}

#[test]
fn rping_client_and_server_connect_and_verify_100() {
    rping("100", 100, "127.0.22.1", "127.0.22.2", "7472");
}

#[test]
fn ucmatose_client_and_server_transfer_and_disconnect() {
    if !common::have("ucmatose") {
        return;
    }
    let (s, c) = pair(
        "127.0.23.1",
        &["ucmatose", "-b", "127.0.23.1", "-p", "7473"],
        "127.0.23.2",
        &["ucmatose", "-s", "127.0.23.1", "-p", "7473"],
    );
    for (who, t) in [("server", &s), ("client", &c)] {
        assert!(t.contains("data transfers complete"), "{who}:\n{t}");
        assert!(t.contains("return status 0"), "{who}:\n{t}");
        no_refusals(who, t);
    }
    assert!(s.contains("disconnected"), "server:\n{s}");
}

#[test]
fn ucmatose_ten_connections() {
    if !common::have("ucmatose") {
        return;
    }
    let (s, c) = pair(
        "127.0.24.1",
        &["ucmatose", "-b", "127.0.24.1", "-p", "7474", "-c", "10"],
        "127.0.24.2",
        &["ucmatose", "-s", "127.0.24.1", "-p", "7474", "-c", "10"],
    );
    for (who, t) in [("server", &s), ("client", &c)] {
        assert!(t.contains("data transfers complete"), "{who}:\n{t}");
        assert!(t.contains("return status 0"), "{who}:\n{t}");
        no_refusals(who, t);
    }
}

#[test]
fn rdma_server_and_client_exchange_a_message() {
    if !common::have("rdma_server") {
        return;
    }
    let (s, c) = pair(
        "127.0.25.1",
        &["rdma_server", "-s", "127.0.25.1", "-p", "7475"],
        "127.0.25.2",
        &["rdma_client", "-s", "127.0.25.1", "-p", "7475"],
    );
    assert!(s.contains("rdma_server: end 0"), "server:\n{s}");
    assert!(c.contains("rdma_client: end 0"), "client:\n{c}");
    no_refusals("rdma_server", &s);
    no_refusals("rdma_client", &c);
}

/// A connect to a port nobody listens on (the address has a device, with a
/// listener on another port) ends REJECTED with status 8 (invalid service ID),
/// and rping exits: its CQ thread, blocked in ibv_get_cq_event, is cancelled.
#[test]
fn rping_to_a_port_nobody_listens_on_is_rejected() {
    if !common::have("rping") {
        return;
    }
    // rping itself (no timeout(1) in between), so that the guard's kill ends
    // the server and not only a wrapper.
    let _server = background(
        "127.0.26.1",
        "rping",
        &["-s", "-a", "127.0.26.1", "-p", "7476", "-C", "1"],
    );
    wait_device("127.0.26.1");
    let mut t = String::new();
    for _ in 0..40 {
        std::thread::sleep(std::time::Duration::from_millis(250));
        let out = run_at(
            "127.0.26.2",
            &["rping", "-c", "-a", "127.0.26.1", "-p", "7477", "-C", "1"],
        );
        t = text(&out);
        assert_ne!(out.status.code(), Some(124), "rping -c hung:\n{t}");
        if t.contains("RDMA_CM_EVENT_REJECTED") {
            assert!(!out.status.success());
            break;
        }
    }
    assert!(
        t.contains("cma event RDMA_CM_EVENT_REJECTED, error 8"),
        "{t}"
    );
}

/// RDMA_PS_UDP: the client's rdma_connect is a SIDR_REQ, the server's
/// rdma_accept the SIDR_REP with its QP number and Q_Key; the client's
/// ESTABLISHED carries them and the address vector, and the datagrams go
/// both ways (udaddy's default port, 7174).
#[test]
fn udaddy_client_and_server_resolve_through_sidr_and_exchange_datagrams() {
    if !common::have("udaddy") {
        return;
    }
    let (s, c) = pair(
        "127.0.27.1",
        &["udaddy", "-b", "127.0.27.1", "-c", "2"],
        "127.0.27.2",
        &["udaddy", "-s", "127.0.27.1", "-c", "2"],
    );
    for (who, t) in [("server", &s), ("client", &c)] {
        assert!(t.contains("data transfers complete"), "{who}:\n{t}");
        assert!(t.contains("return status 0"), "{who}:\n{t}");
        no_refusals(who, t);
    }
    assert!(s.contains("sending replies"), "server:\n{s}");
}

/// `mckey` (RDMA_PS_UDP multicast) as two processes: the receiver joins the
/// group (MULTICAST_JOIN with the IPv4-mapped MGID, its QP attached), the
/// sender joins and sends 5 datagrams to the group address vector the join
/// gave (QPN 0xFFFFFF, RDMA_UDP_QKEY); the receiver ends only when all 5
/// arrived. Both leave the group and exit 0.
#[test]
fn mckey_receiver_and_sender_exchange_datagrams_through_a_group() {
    if !common::have("mckey") {
        return;
    }
    let group = "239.1.44.1";
    let recv = cmd(
        None,
        Some("127.0.44.1"),
        &["mckey", "-m", group, "-b", "127.0.44.1", "-C", "5"],
    )
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    // The receiver's QP is attached once its device holds the group socket
    // (port 4791 bound on the group); the sender sends 3 s after its own
    // join (mckey's pause).
    wait_device(group);
    let s = text(&run_at(
        "127.0.44.2",
        &["mckey", "-m", group, "-b", "127.0.44.2", "-s", "-C", "5"],
    ));
    let r = text(&recv.wait_with_output().unwrap());
    let joined = format!("mckey: joined dgid: ::ffff:{group} mlid 0x0 sl 0");
    for (who, t) in [("receiver", &r), ("sender", &s)] {
        assert!(t.contains(&joined), "{who}:\n{t}");
        assert!(t.contains("data transfers complete"), "{who}:\n{t}");
        assert!(t.contains("return status 0"), "{who}:\n{t}");
        assert!(!t.contains("failure leaving"), "{who}:\n{t}");
        no_refusals(who, t);
    }
    assert!(r.contains("receiving data transfers"), "receiver:\n{r}");
    assert!(s.contains("initiating data transfers"), "sender:\n{s}");
}

/// One perftest run: the server (its own process, killed if it outlives the
/// 30 s bound, or 1 s after a failed client), then the client once its device is up and 1 s has passed
/// (the server's listen); both outputs.
fn perftest_once(prog: &str, srv: &str, cli: &str, port: &str) -> (String, String) {
    let server = Command::new(prog)
        .args(["-R", "-n", "100", "-p", port])
        .env("LD_LIBRARY_PATH", common::lib_dir())
        .env("SOFTVERBS_ADDR", srv)
        .env("SOFTVERBS_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut server = KillOnDrop(server);
    wait_device(srv);
    std::thread::sleep(std::time::Duration::from_secs(1));
    let client = run_at(cli, &[prog, "-R", "-n", "100", "-p", port, srv]);
    // A failed client leaves the server waiting: a short grace only.
    let grace = if client.status.success() { 30 } else { 1 };
    (server.finish_within(grace).0, text(&client))
}

/// A perftest pair over rdma_cm (`-R`: the connection and the exchange of
/// buffer addresses through the CM's private data), 100 iterations: both
/// sides print the rdma_cm data-exchange method, the peer's GID and their
/// result row.
///
/// perftest -R connects twice: a control connection, then the data QP's.
/// Its server destroys its listener once the control connection is
/// accepted and listens again only after setting up its resources, while
/// the client connects the data QP as soon as its own are ready: a REQ that
/// comes first is rejected (reason 8, no listener), as the kernel's CM does
/// (cm.c `cm_match_req`), and perftest gives up. That race is perftest's;
/// such a run is started again (fresh server and client), at most 4 times.
fn perftest(prog: &str, srv: &str, cli: &str, port: &str, row: &str) {
    if !common::have(prog) {
        return;
    }
    let (mut s, mut c) = (String::new(), String::new());
    for _ in 0..4 {
        (s, c) = perftest_once(prog, srv, cli, port);
        if !(c.contains("RDMA_CM_EVENT_REJECTED") || c.contains("Unexpected CM event bl blka 8")) {
            break;
        }
    }
    let peer_gid = |ip: &str| {
        let o: Vec<String> = ip.split('.').map(|b| format!("{b:0>2}")).collect();
        format!("GID: 00:00:00:00:00:00:00:00:00:00:255:255:{}", o.join(":"))
    };
    for (who, t, peer) in [("server", &s, cli), ("client", &c, srv)] {
        assert!(
            t.contains("Data ex. method : rdma_cm"),
            "{prog} {who}:\n{t}"
        );
        assert!(t.contains("rdma_cm QPs\t : ON"), "{prog} {who}:\n{t}");
        assert!(
            t.contains(&peer_gid(peer)),
            "{prog} {who}: no peer GID:\n{t}"
        );
        assert!(
            t.lines().any(|l| l.trim_start().starts_with(row)),
            "{prog} {who}: no result row {row:?}:\n{t}"
        );
        no_refusals(who, t);
    }
}

#[test]
fn ib_write_bw_over_rdma_cm() {
    perftest(
        "ib_write_bw",
        "127.0.45.1",
        "127.0.45.2",
        "18611",
        "65536      100",
    );
}

#[test]
fn ib_read_bw_over_rdma_cm() {
    perftest(
        "ib_read_bw",
        "127.0.45.3",
        "127.0.45.4",
        "18612",
        "65536      100",
    );
}

#[test]
fn ib_send_lat_over_rdma_cm() {
    perftest(
        "ib_send_lat",
        "127.0.45.5",
        "127.0.45.6",
        "18613",
        "2       100",
    );
}

/// qperf with the connection manager (`-cm1`; without it qperf addresses the
/// peer by LID, which RoCE refuses: no GRH): its control connection is TCP,
/// its RC QPs connect through the drop-in librdmacm, each test runs 1 s and
/// prints its result. qperf's server forks a child per test that exits
/// without destroying its ids: the library's exit hook sends the DREQ/DREP
/// the kernel sends when the rdma_cm file closes, or the client would wait
/// for DISCONNECTED until its DREQ times out. One test per client run, one
/// right after the other: a server child that opens the device while the
/// previous one is still exiting shares the address with it (slot 1), and
/// the client's REQ reaches it through the listener registry (spec/cm.md §8).
#[test]
fn qperf_rc_bw_and_rc_lat_over_rdma_cm() {
    if !common::have("qperf") {
        return;
    }
    let _server = background("127.0.49.1", "qperf", &["-lp", "19811"]);
    wait_tcp_listen(19811);
    for (test, want) in [
        ("rc_bw", "rc_bw:\n    bw  ="),
        ("rc_lat", "rc_lat:\n    latency  ="),
    ] {
        let out = run_at(
            "127.0.49.2",
            &[
                "qperf",
                "127.0.49.1",
                "-lp",
                "19811",
                "-t",
                "1",
                "-cm1",
                test,
            ],
        );
        let t = text(&out);
        assert!(out.status.success(), "qperf {test} failed:\n{t}");
        assert!(t.contains(want), "{t}");
        // qperf's rd_close deallocates its PD before it deregisters the MR:
        // EBUSY, as with rdma-core. Nothing else is refused.
        let others: Vec<&str> = t
            .lines()
            .filter(|l| l.contains(" refused (") && !l.contains("dealloc_pd refused (EBUSY)"))
            .collect();
        assert!(
            others.is_empty(),
            "qperf {test}: unexpected refusals:\n{}",
            others.join("\n")
        );
    }
}

/// Refusals other than the EBUSY ones a program's own teardown order causes
/// (it destroys a CQ, channel or PD its QPs or MRs still use: rdma-core
/// refuses those too).
fn refusals_beyond_teardown(t: &str) -> Vec<&str> {
    t.lines()
        .filter(|l| l.contains(" refused ("))
        .filter(|l| {
            !(l.contains("destroy_cq refused (EBUSY)")
                || l.contains("ibv_destroy_comp_channel refused (EBUSY)")
                || l.contains("dealloc_pd refused (EBUSY)"))
        })
        .collect()
}

/// cmtime with 10 connections: the client's every step (create id, resolve
/// addr and route, create QP, connect, disconnect, destroy) completes and it
/// prints its step table; the server (which runs until killed, by design)
/// accepts, and disconnects each connection when the client's DREQ comes.
/// cmtime hands one `ibv_qp_init_attr` to every rdma_create_qp, and rdma-core
/// writes the first id's CQs back into it, so the later QPs share them and
/// the first id's CQ destroy is refused (EBUSY), as with rdma-core.
#[test]
fn cmtime_ten_connections() {
    if !common::have("cmtime") {
        return;
    }
    let _server = background(
        "127.0.50.1",
        "cmtime",
        &["-b", "127.0.50.1", "-c", "10", "-p", "7490"],
    );
    wait_device("127.0.50.1");
    let mut c = String::new();
    for _ in 0..40 {
        std::thread::sleep(std::time::Duration::from_millis(250));
        let out = run_at(
            "127.0.50.2",
            &["cmtime", "-s", "127.0.50.1", "-c", "10", "-p", "7490"],
        );
        c = text(&out);
        assert_ne!(out.status.code(), Some(124), "cmtime -s hung:\n{c}");
        if !c.contains("RDMA_CM_EVENT_REJECTED") {
            assert!(out.status.success(), "cmtime -s failed:\n{c}");
            break;
        }
    }
    for step in [
        "creating id",
        "resolving address",
        "resolving route",
        "creating qp",
        "connecting",
        "disconnecting",
        "destroying id",
    ] {
        assert!(c.contains(step), "client lacks {step:?}:\n{c}");
    }
    for row in ["connect      :", "disconnect   :", "destroy      :"] {
        assert!(c.contains(row), "client lacks {row:?}:\n{c}");
    }
    assert!(!c.contains("event: RDMA_CM_EVENT"), "{c}");
    let r = refusals_beyond_teardown(&c);
    assert!(r.is_empty(), "unexpected refusals:\n{}", r.join("\n"));
}

/// [`pair`] across two network namespaces: the server in `srv.0` at `srv.1`,
/// the client in `cli.0` at `cli.1` (again while refused, at most 40 times).
fn pair_ns(
    srv: (&str, &str),
    server: &[&str],
    cli: (&str, &str),
    client: &[&str],
) -> (String, String) {
    let s = cmd(Some(srv.0), Some(srv.1), server)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    testkit::wait_device_in(Some(srv.0), srv.1);
    let mut c = String::new();
    for _ in 0..40 {
        std::thread::sleep(std::time::Duration::from_millis(250));
        let out = cmd(Some(cli.0), Some(cli.1), client).output().unwrap();
        c = text(&out);
        let refused = c.contains("REJECTED") || c.contains("UNREACHABLE");
        if out.status.success() || !refused {
            break;
        }
    }
    (text(&s.wait_with_output().unwrap()), c)
}

/// rping (data checked, -C 10) and ucmatose between two network namespaces
/// joined by a veth pair, each way: real RoCEv2 between two addresses of a
/// link, the CM's MADs to QP1 included.
#[test]
fn rping_and_ucmatose_between_two_network_namespaces_each_way() {
    if !common::have("rping") || !common::have("ucmatose") || !common::have("ip") {
        return;
    }
    let [a, b] = ["10.78.0.1", "10.78.0.2"];
    let Some(ns) = Netns::pair("svx", [a, b]) else {
        eprintln!("skipping: network namespaces need root");
        return;
    };
    let (na, nb) = (ns.names[0].as_str(), ns.names[1].as_str());
    for ((sn, sa), (cn, ca)) in [((na, a), (nb, b)), ((nb, b), (na, a))] {
        let (s, c) = pair_ns(
            (sn, sa),
            &["rping", "-s", "-a", sa, "-p", "7511", "-v", "-C", "10"],
            (cn, ca),
            &["rping", "-c", "-a", sa, "-p", "7511", "-v", "-C", "10"],
        );
        rping_lines(&c, "ping data: ", 10);
        rping_lines(&s, "server ping data: ", 10);
        assert!(
            s.contains("server DISCONNECT EVENT"),
            "server in {sn}:\n{s}"
        );
        no_refusals("rping -c", &c);
        let (s, c) = pair_ns(
            (sn, sa),
            &["ucmatose", "-b", sa, "-p", "7512"],
            (cn, ca),
            &["ucmatose", "-s", sa, "-p", "7512"],
        );
        for (who, t) in [("server", &s), ("client", &c)] {
            assert!(
                t.contains("data transfers complete"),
                "{who} ({sn} serves):\n{t}"
            );
            assert!(t.contains("return status 0"), "{who} ({sn} serves):\n{t}");
            no_refusals(who, t);
        }
    }
}

/// The same programs on loopback with 5 % loss, 5 % duplication and 5 %
/// reordering on every datagram of both sides (SOFTVERBS_FAULTS, fixed
/// seeds; CM MADs included): connections still form (the CM resends
/// unanswered REQ/REP, answers duplicates as the standard says) and the data
/// arrives intact (RC retransmission; rping checks every byte with -v); the
/// client tears down and exits 0.
///
/// Not asserted: the server's DISCONNECTED. When the client's DREQ is lost
/// and the client destroys its id at once (rping and ucmatose do), nothing
/// resends it, as on Linux (cm.c `cm_destroy_id`: DREQ_SENT cancels the
/// DREQ and enters TimeWait). So the server is given 3 s, then ended.
#[test]
fn rping_and_ucmatose_with_loss_duplication_and_reordering() {
    if !common::have("rping") || !common::have("ucmatose") || !common::have("stdbuf") {
        return;
    }
    for (i, seed) in [3u32].into_iter().enumerate() {
        let (sa, ca) = (
            format!("127.0.52.{}", 2 * i + 1),
            format!("127.0.52.{}", 2 * i + 2),
        );
        let f = format!("loss=0.05,dup=0.05,reorder=0.05,seed={seed}");
        let run = |addr: &str, args: &[&str]| {
            // Not through timeout(1): the server is ended by PID.
            let mut c = Command::new("stdbuf");
            c.arg("-oL")
                .args(args)
                .env("LD_LIBRARY_PATH", common::lib_dir())
                .env("SOFTVERBS_ADDR", addr)
                .env("SOFTVERBS_LOG", "warn")
                .env("SOFTVERBS_FAULTS", &f)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            c
        };
        let client = |args: &[&str]| {
            let mut c = run(&ca, args);
            let out = c.spawn().unwrap();
            finish_within(out, 30)
        };
        let srv = run(
            &sa,
            &["rping", "-s", "-a", &sa, "-p", "7521", "-v", "-C", "5"],
        )
        .spawn()
        .unwrap();
        wait_device(&sa);
        std::thread::sleep(std::time::Duration::from_millis(500));
        let (c, c_ok) = client(&["rping", "-c", "-a", &sa, "-p", "7521", "-v", "-C", "5"]);
        let (s, _) = finish_within(srv, 3);
        rping_lines(&c, "ping data: ", 5);
        rping_lines(&s, "server ping data: ", 5);
        assert!(c_ok, "seed {seed}: rping -c did not exit 0:\n{c}");
        wait_device_gone(&sa);
        let srv = run(&sa, &["ucmatose", "-b", &sa, "-p", "7522", "-C", "5"])
            .spawn()
            .unwrap();
        wait_device(&sa);
        std::thread::sleep(std::time::Duration::from_millis(500));
        let (c, c_ok) = client(&["ucmatose", "-s", &sa, "-p", "7522", "-C", "5"]);
        let (s, _) = finish_within(srv, 3);
        assert!(c_ok, "seed {seed}: ucmatose -s did not exit 0:\n{c}");
        assert!(
            c.contains("data transfers complete"),
            "seed {seed} client:\n{c}"
        );
        assert!(c.contains("return status 0"), "seed {seed} client:\n{c}");
        assert!(
            s.contains("data transfers complete"),
            "seed {seed} server:\n{s}"
        );
        wait_device_gone(&sa);
    }
}

/// An rping server listening on `port` at `addr`, for as long as the test
/// holds it: started first, it holds slot 0 of the address (QP1's slot).
fn slot0_holder(addr: &str, port: &str) -> KillOnDrop {
    let child = background(addr, "rping", &["-s", "-a", addr, "-p", port, "-C", "1"]);
    wait_device(addr);
    child
}

/// `prog args` in the background on a device at `addr`, its output
/// discarded, killed when the test drops it. Started directly (no timeout(1)
/// in between), so that the kill ends the program and not only a wrapper.
fn background(addr: &str, prog: &str, args: &[&str]) -> KillOnDrop {
    let child = Command::new(prog)
        .args(args)
        .env("LD_LIBRARY_PATH", common::lib_dir())
        .env("SOFTVERBS_ADDR", addr)
        .env("SOFTVERBS_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    KillOnDrop(child)
}

/// CM on a shared address (spec/cm.md §8): each address already has a
/// process in slot 0 (an rping server on another port), so the rping server
/// and client under test each get slot 1 of their address. The client's REQ
/// reaches slot 0 of the server's address, which forwards it to the process
/// registered for the service ID; the REP, RTU, DREQ and DREP name comm IDs
/// of slot 1 and are forwarded to it on both addresses. Without the
/// forwarding the REQ is refused (invalid service ID) and the REP dropped.
#[test]
fn rping_between_two_second_processes_of_shared_addresses() {
    if !common::have("rping") {
        return;
    }
    let (srv, cli) = ("127.0.73.1", "127.0.73.2");
    let mut holders = [slot0_holder(srv, "7301"), slot0_holder(cli, "7302")];
    let (s, c) = pair(
        srv,
        &["rping", "-s", "-a", srv, "-p", "7303", "-v", "-C", "10"],
        cli,
        &["rping", "-c", "-a", srv, "-p", "7303", "-v", "-C", "10"],
    );
    rping_lines(&c, "ping data: ", 10);
    rping_lines(&s, "server ping data: ", 10);
    assert!(s.contains("server DISCONNECT EVENT"), "server:\n{s}");
    no_refusals("rping -c", &c);
    for h in &mut holders {
        assert!(
            h.0.try_wait().unwrap().is_none(),
            "a slot-0 holder left early: the processes under test were not slot 1"
        );
    }
}

/// Two servers on one address listen on one port: the second is refused
/// (EADDRINUSE), as the kernel refuses a second bind of the port.
#[test]
fn a_second_listener_on_a_port_of_a_shared_address_is_refused() {
    if !common::have("rping") {
        return;
    }
    let srv = "127.0.73.3";
    let _holder = slot0_holder(srv, "7304");
    let out = run_at(srv, &["rping", "-s", "-a", srv, "-p", "7304", "-C", "1"]);
    let t = text(&out);
    assert!(
        t.contains("rdma_listen: Address already in use"),
        "a second listener on 7304 was not refused (status {:?}):\n{t}",
        out.status
    );
}

/// The rsocket programs of rdmacm-utils (rstream, riostream, rcopy's server,
/// udpong) start, and their first `rsocket()` answers ENOSYS with the reason
/// logged: rsockets are not implemented (README), and a program learns so at
/// once instead of hanging or crashing.
#[test]
fn rsocket_programs_learn_enosys_with_a_logged_reason() {
    for (prog, args) in [
        ("rstream", &["-s", "127.0.91.1"][..]),
        ("riostream", &["-s", "127.0.91.1"][..]),
        ("rcopy", &[][..]),
        ("udpong", &["-b", "127.0.91.1"][..]),
    ] {
        if !common::have(prog) {
            return;
        }
        let mut argv = vec![prog];
        argv.extend(args);
        let out = run_at("127.0.91.1", &argv);
        let t = text(&out);
        assert_ne!(out.status.code(), Some(124), "{prog} hung:\n{t}");
        assert!(
            t.contains("rsocket refused (ENOSYS): rsockets (rdma-core's socket protocol over RDMA) are not implemented"),
            "{prog}: no logged reason:\n{t}"
        );
        assert!(
            t.contains("rsocket failed: Function not implemented"),
            "{prog}: did not see ENOSYS:\n{t}"
        );
    }
}

/// A pcap of an unmodified rping's connection (SOFTVERBS_PCAP on the
/// server, which records what it sends and receives, and answers the
/// client's DREQ before it exits: the client may close its device before
/// the DREP arrives) decodes in tshark as
/// InfiniBand CM on QP1: ConnectRequest, ConnectReply, ReadyToUse,
/// DisconnectRequest and DisconnectReply, each with the attribute ID of its
/// message, and no frame is marked malformed or with an expert error.
#[test]
fn an_rping_connection_captured_decodes_as_infiniband_cm_in_tshark() {
    if !common::have("rping") || !common::have("tshark") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("sv-rping-pcap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("server.pcap");
    let (srv, cli) = ("127.0.92.1", "127.0.92.2");
    let server = cmd(
        None,
        Some(srv),
        &["rping", "-s", "-a", srv, "-p", "7492", "-C", "3"],
    )
    .env("SOFTVERBS_PCAP", &pcap)
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    let mut server = KillOnDrop(server);
    wait_device(srv);
    std::thread::sleep(std::time::Duration::from_millis(250));
    let out = cmd(
        None,
        Some(cli),
        &["rping", "-c", "-a", srv, "-p", "7492", "-C", "3"],
    )
    .output()
    .unwrap();
    // The capture is complete once the server's device closes (it exits
    // after its DISCONNECTED).
    let (s, s_ok) = server.finish_within(20);
    assert!(s_ok, "rping -s did not exit 0:\n{s}");
    assert!(
        out.status.success(),
        "rping -c:\n{}\nserver:\n{s}",
        text(&out)
    );
    let tshark = |args: &[&str]| {
        let o = testkit::timeout(60, &["tshark", "-r"])
            .arg(&pcap)
            .args(["-d", "udp.port==4791,infiniband"])
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "tshark: {}", text(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let bad = tshark(&["-Y", "_ws.malformed || _ws.expert.severity >= 0x00800000"]);
    assert!(bad.trim().is_empty(), "malformed or error frames:\n{bad}");
    let mads = tshark(&[
        "-Y",
        "infiniband.bth.destqp == 1",
        "-T",
        "fields",
        "-e",
        "infiniband.mad.attributeid",
        "-e",
        "_ws.col.Info",
    ]);
    let _ = std::fs::remove_dir_all(&dir);
    for (id, title) in [
        ("0x0010", "ConnectRequest"),
        ("0x0013", "ConnectReply"),
        ("0x0014", "ReadyToUse"),
        ("0x0015", "DisconnectRequest"),
        ("0x0016", "DisconnectReply"),
    ] {
        assert!(
            mads.lines()
                .any(|l| l.starts_with(id) && l.contains(&format!("CM: {title}"))),
            "no {title} ({id}) decoded in:\n{mads}"
        );
    }
}

/// A connect to an address where nothing answers (no device runs at
/// 127.0.93.9) ends in RDMA_CM_EVENT_UNREACHABLE with ETIMEDOUT once the CM
/// has sent the REQ 1 + 15 times, each attempt waiting 2 × 2^(18−8) +
/// 2^(20−8) ms = 6.1 s (spec/cm.md §4.2–4.3, rdma_cm's timing on RoCE), as
/// with the kernel: about 100 s of waiting (the other tests of this file run
/// meanwhile). The same path with short timeouts is in softverbs' cm.rs
/// (`silence_is_unreachable_after_the_retries`) and proto's cm_retries.rs.
#[test]
fn a_connect_nobody_answers_is_unreachable_after_the_cm_retries() {
    if !common::have("rping") {
        return;
    }
    let t0 = std::time::Instant::now();
    let out = testkit::timeout(
        150,
        &["rping", "-c", "-a", "127.0.93.9", "-p", "7493", "-C", "1"],
    )
    .env("LD_LIBRARY_PATH", common::lib_dir())
    .env("SOFTVERBS_ADDR", "127.0.93.1")
    .env("SOFTVERBS_LOG", "warn")
    .output()
    .unwrap();
    let t = text(&out);
    assert_ne!(out.status.code(), Some(124), "rping -c hung:\n{t}");
    assert!(
        t.contains("cma event RDMA_CM_EVENT_UNREACHABLE, error -110"),
        "{t}"
    );
    let secs = t0.elapsed().as_secs();
    assert!(
        secs >= 90,
        "UNREACHABLE after {secs} s, before the retries ran out:\n{t}"
    );
}
