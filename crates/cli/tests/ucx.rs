//! UCX through `softverbs exec`, restricted to softverbs' transports (rc_verbs,
//! ud_verbs: no shared memory, no TCP): `ucx_info -d` finds the device;
//! `ucx_perftest` tag latency, put bandwidth and atomics between two
//! processes, on loopback addresses and between two network namespaces, each
//! run's captures showing the traffic went through softverbs.

use std::process::Command;

mod common;
use common::pcap::{pcap_bth_opcodes, pcap_records};
use common::{exec_sh, have, lib_dir, BIN};
mod netns;
use netns::Netns;

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
) -> Option<Vec<Vec<u8>>> {
    let lib = lib_dir()?;
    if !have("ucx_perftest") {
        return None;
    }
    const ITERS: usize = 500;
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
    let mut opcodes = Vec::new();
    for addr in addrs {
        let path = dir.join(format!("{addr}.pcap"));
        let n = pcap_records(&path);
        assert!(
            n >= ITERS,
            "{test}: only {n} RoCE datagrams captured on {addr}"
        );
        opcodes.push(pcap_bth_opcodes(&path));
    }
    let _ = std::fs::remove_dir_all(&dir);
    Some(opcodes)
}

/// UCT-level fetch-and-add on rc_verbs: the captures show real RDMA atomics
/// (FETCH_ADD, opcode 0x14, answered by ATOMIC_ACKNOWLEDGE, 0x12).
#[test]
fn ucx_atomic_fetch_add_is_an_rdma_atomic() {
    let port = 35000 + (std::process::id() % 5000) as u16;
    let extra = ["-d", "softverbs0:1", "-x", "rc_verbs"];
    let addrs = ["127.0.9.41", "127.0.9.42"];
    let Some(ops) = ucx_perftest_in("fadd", &extra, addrs, port, [None, None], "127.0.0.1") else {
        return;
    };
    let count = |op: u8| ops.iter().flatten().filter(|&&o| o == op).count();
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
    let Some(ns) = Netns::create() else {
        eprintln!("skipping: network namespaces need root");
        return;
    };
    let names = [Some(ns.names[0].as_str()), Some(ns.names[1].as_str())];
    let port = 30000 + (std::process::id() % 5000) as u16;
    ucx_perftest_in("tag_lat", &[], Netns::ADDRS, port, names, Netns::ADDRS[0]);
}
