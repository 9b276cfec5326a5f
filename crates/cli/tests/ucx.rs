//! UCX through `softverbs exec`, restricted to softverbs' transports (rc_verbs,
//! ud_verbs: no shared memory, no TCP): `ucx_info -d` finds the device;
//! `ucx_perftest` tag latency, put bandwidth and atomics between two
//! processes, on loopback addresses and between two network namespaces, each
//! run's captures showing the traffic went through softverbs.

use std::process::Command;

mod common;
use common::pcap::{inter_host_records, pcap_records, pcap_roce, RoceRecord};
use common::{exec_sh, have, lib_dir, two_hosts, BIN, HOSTS};

/// Iterations of every ucx_perftest run: each process's capture must hold at
/// least this many records.
const ITERS: usize = 500;

/// UCX finds the device only through the view: rc_verbs and ud_verbs on softverbs0:1.
#[test]
fn ucx_info_lists_the_device() {
    let Some(lib) = lib_dir() else { return };
    if !have("ucx_info") {
        return;
    }
    let out = exec_sh(&lib, &[], &[], "ucx_info -d");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let section = text
        .split("# Memory domain:")
        .find(|s| s.trim_start().starts_with("softverbs0"))
        .expect("ucx_info -d lists no softverbs0 memory domain");
    for tl in ["rc_verbs", "ud_verbs"] {
        assert!(
            section.contains(&format!("Transport: {tl}")),
            "no {tl} on softverbs0:\n{section}"
        );
    }
    assert!(section.contains("Device: softverbs0:1"));
}

/// ucx_perftest between two processes, each under `softverbs exec` on an
/// address of its own, UCX restricted to rc_verbs and ud_verbs (no shared
/// memory, no TCP): the test completes and every process's capture shows the
/// traffic went through softverbs.
fn ucx_perftest(test: &str, addrs: [&str; 2], port: u16) {
    ucx_perftest_in(test, &[], addrs, port, [None, None], "127.0.0.1");
}

/// [`ucx_perftest`], each side optionally in a network namespace, the client
/// reaching the server's out-of-band port at `server`.
fn ucx_perftest_in(
    test: &str,
    extra: &[&str],
    addrs: [&str; 2],
    port: u16,
    netns: [Option<&str>; 2],
    server_ip: &str,
) -> Option<Vec<Vec<RoceRecord>>> {
    let lib = lib_dir()?;
    if !have("ucx_perftest") {
        return None;
    }
    let dir = std::env::temp_dir().join(format!(
        "softverbs-ucx-{test}-{}-{}",
        addrs[0],
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let run = |addr: &str, peer: Option<&str>, ns: Option<&str>| {
        let mut c = Command::new("timeout");
        c.arg("60");
        if let Some(ns) = ns {
            c.args(["ip", "netns", "exec", ns]);
        }
        c.args([BIN, "exec", "--lib-dir"])
            .arg(&lib)
            .args(["--", "ucx_perftest", "-t", test, "-n", &ITERS.to_string()])
            .args(["-p", &port.to_string()])
            .args(extra)
            .args(peer)
            .env("SOFTVERBS_ADDR", addr)
            .env("SOFTVERBS_PCAP", dir.join(format!("{addr}.pcap")))
            .env("UCX_TLS", "rc_verbs,ud_verbs")
            .env("UCX_NET_DEVICES", "softverbs0:1")
            .current_dir("/");
        c
    };
    let server = run(addrs[0], None, netns[0])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The server listens on its out-of-band port once it has started: until
    // then the client's connect is refused (ucx_perftest says so on stdout),
    // and it tries again (bounded).
    let mut client = run(addrs[1], Some(server_ip), netns[1]).output().unwrap();
    for _ in 0..40 {
        if client.status.success()
            || !String::from_utf8_lossy(&client.stdout).contains("Connection refused")
        {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
        client = run(addrs[1], Some(server_ip), netns[1]).output().unwrap();
    }
    let server = server.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&client.stdout);
    eprintln!("{text}{}", String::from_utf8_lossy(&client.stderr));
    assert!(
        client.status.success() && server.status.success(),
        "{test}: {:?} {:?}",
        client.status,
        server.status
    );
    assert!(text.contains("Final:"), "{test}: no result line");
    let mut captures = Vec::new();
    for addr in addrs {
        let path = dir.join(format!("{addr}.pcap"));
        let n = pcap_records(&path);
        assert!(
            n >= ITERS,
            "{test}: only {n} RoCE datagrams captured on {addr}"
        );
        captures.push(pcap_roce(&path));
    }
    let _ = std::fs::remove_dir_all(&dir);
    Some(captures)
}

/// UCT-level fetch-and-add on rc_verbs: the captures show real RDMA atomics
/// (FETCH_ADD, opcode 0x14, answered by ATOMIC_ACKNOWLEDGE, 0x12).
#[test]
fn ucx_atomic_fetch_add_is_an_rdma_atomic() {
    let port = 35000 + (std::process::id() % 5000) as u16;
    let extra = ["-d", "softverbs0:1", "-x", "rc_verbs"];
    let addrs = ["127.0.9.41", "127.0.9.42"];
    let Some(captures) = ucx_perftest_in("fadd", &extra, addrs, port, [None, None], "127.0.0.1")
    else {
        return;
    };
    let count = |op: u8| {
        captures
            .iter()
            .flatten()
            .filter(|r| r.bth.first() == Some(&op))
            .count()
    };
    assert!(count(0x14) >= 500, "FETCH_ADD requests: {}", count(0x14));
    assert!(
        count(0x12) >= 500,
        "ATOMIC_ACKNOWLEDGE responses: {}",
        count(0x12)
    );
}

#[test]
fn ucx_tag_latency_over_softverbs() {
    ucx_perftest(
        "tag_lat",
        ["127.0.9.21", "127.0.9.22"],
        20000 + (std::process::id() % 5000) as u16,
    );
}

#[test]
fn ucx_put_bandwidth_over_softverbs() {
    ucx_perftest(
        "ucp_put_bw",
        ["127.0.9.31", "127.0.9.32"],
        25000 + (std::process::id() % 5000) as u16,
    );
}

/// Open MPI 4.1 with `--mca pml ucx`, 4 ranks under one `softverbs exec` (one
/// "host": the ranks share its address), UCX on rc_verbs/ud_verbs only: the
/// ucx_perftest tag latency between two "hosts": network namespaces joined by
/// a veth pair, each process on its namespace's address.
#[test]
fn ucx_tag_latency_between_two_network_namespaces() {
    if !have("ip") {
        return;
    }
    let Some(ns) = two_hosts() else {
        eprintln!("skipping: network namespaces need root");
        return;
    };
    let names = [Some(ns.names[0].as_str()), Some(ns.names[1].as_str())];
    let port = 30000 + (std::process::id() % 5000) as u16;
    ucx_perftest_in("tag_lat", &[], HOSTS, port, names, HOSTS[0]);
}

/// [`ucx_perftest_in`] between two fresh network namespaces (server on the
/// first); the namespaces live until the captures are read. None: skipped.
fn ucx_perftest_between_namespaces(
    test: &str,
    extra: &[&str],
    port: u16,
) -> Option<Vec<Vec<RoceRecord>>> {
    if !have("ip") {
        return None;
    }
    let Some(ns) = two_hosts() else {
        eprintln!("skipping: network namespaces need root");
        return None;
    };
    let names = [Some(ns.names[0].as_str()), Some(ns.names[1].as_str())];
    ucx_perftest_in(test, extra, HOSTS, port, names, HOSTS[0])
}

/// Records of one capture with BTH opcode in `ops`, sent from address `from`
/// to address `to`.
fn sent(capture: &[RoceRecord], ops: std::ops::RangeInclusive<u8>, from: &str, to: &str) -> usize {
    let ip = |s: &str| s.parse::<std::net::Ipv4Addr>().unwrap().octets();
    capture
        .iter()
        .filter(|r| r.bth.first().is_some_and(|op| ops.contains(op)))
        .filter(|r| (r.src, r.dst) == (ip(from), ip(to)))
        .count()
}

/// `ucp_put_bw` between two "hosts" (network namespaces joined by a veth
/// pair): the server's capture shows the client's puts arriving from the other
/// host as RC RDMA WRITEs (opcodes 0x06..=0x0b), at least one per iteration.
#[test]
fn ucx_put_bandwidth_between_two_network_namespaces() {
    let port = 40000 + (std::process::id() % 5000) as u16;
    let Some(captures) = ucx_perftest_between_namespaces("ucp_put_bw", &[], port) else {
        return;
    };
    let [server, client] = HOSTS;
    let writes = sent(&captures[0], 0x06..=0x0b, client, server);
    assert!(writes >= ITERS, "RDMA WRITEs from the client: {writes}");
}

/// UCT-level atomics on rc_verbs between two "hosts": fetch-and-add and
/// compare-and-swap cross from the client's namespace to the server's as real
/// RDMA atomics (FETCH_ADD 0x14, CMP_SWAP 0x13), each answered by an
/// ATOMIC_ACKNOWLEDGE (0x12) going back.
#[test]
fn ucx_atomics_between_two_network_namespaces() {
    let extra = ["-d", "softverbs0:1", "-x", "rc_verbs"];
    let [server, client] = HOSTS;
    for (k, (test, op)) in [("fadd", 0x14), ("cswap", 0x13)].into_iter().enumerate() {
        let port = 45000 + (std::process::id() % 5000) as u16 + k as u16;
        let Some(captures) = ucx_perftest_between_namespaces(test, &extra, port) else {
            return;
        };
        let requests = sent(&captures[0], op..=op, client, server);
        let acks = sent(&captures[0], 0x12..=0x12, server, client);
        assert!(requests >= ITERS, "{test}: {requests} atomic requests");
        assert!(acks >= ITERS, "{test}: {acks} ATOMIC_ACKNOWLEDGEs");
    }
}

/// UCP atomics (`ucp_fadd`, `ucp_add`) between two "hosts". UCP puts atomics
/// on a transport only if it offers every 64-bit operation the AMO feature
/// asks for (openucx/ucx `src/ucp/wireup/select.c`,
/// `UCP_WIREUP_CHECK_AMO_FLAGS`: add, and, or, xor, swap, cswap and their
/// fetching forms); verbs atomics are only fetch-and-add and compare-and-swap,
/// so over rc_verbs (softverbs, as rxe) UCP emulates them with active
/// messages to the target's worker. The runs complete, and their requests and
/// replies cross between the hosts through softverbs (at least one record per
/// iteration each way, counted once in the server's capture).
#[test]
fn ucx_ucp_atomics_between_two_network_namespaces() {
    for (k, test) in ["ucp_fadd", "ucp_add"].into_iter().enumerate() {
        let port = 50000 + (std::process::id() % 5000) as u16 + k as u16;
        let Some(captures) = ucx_perftest_between_namespaces(test, &[], port) else {
            return;
        };
        let between = inter_host_records(&captures[..1], HOSTS);
        assert!(between >= 2 * ITERS, "{test}: {between} inter-host records");
    }
}
