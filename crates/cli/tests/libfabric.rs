//! libfabric through `softverbs exec`: `fi_info -p verbs` (the MSG domain on a
//! non-loopback address, the datagram domain everywhere), and `fi_pingpong`
//! over MSG endpoints (rdma_cm) and RDM endpoints (`verbs;ofi_rxm`), data
//! checked, through softverbs.

use std::path::Path;
use std::process::Command;

mod common;
use common::pcap::{inter_host_records, pcap_roce, RoceRecord};
use common::{exec_sh, have, lib_dir, two_hosts, BIN, HOSTS};
use testkit::Netns;

/// libfabric's verbs provider lists a device's MSG (rdma_cm) domain only for
/// an address of a non-loopback interface (prov/verbs `vrb_getifaddrs` skips
/// `IFF_LOOPBACK`; spec/libfabric.md): on a namespace's veth address
/// `fi_info` shows `softverbs0` as an FI_EP_MSG domain over rdma_cm and,
/// through ofi_rxm, as FI_EP_RDM; on a loopback address only the datagram
/// domain `softverbs0-dgram`.
#[test]
fn libfabric_lists_the_devices_domains() {
    let Some(lib) = lib_dir() else { return };
    if !have("fi_info") || !have("ip") {
        return;
    }
    let on_lo = exec_sh(&lib, &[], &[], "fi_info -p verbs");
    assert!(on_lo.status.success(), "fi_info on loopback");
    let text = String::from_utf8_lossy(&on_lo.stdout);
    assert!(text.contains("domain: softverbs0-dgram"), "{text}");
    assert!(!text.contains("FI_EP_MSG"), "{text}");
    let Some(ns) = two_hosts() else {
        eprintln!("skipping: network namespaces need root");
        return;
    };
    let fi_info = |prov: &str, extra: &[&str]| {
        let out = Command::new("timeout")
            .args([
                "60",
                "ip",
                "netns",
                "exec",
                &ns.names[0],
                BIN,
                "exec",
                "--lib-dir",
            ])
            .arg(&lib)
            .args(["--", "fi_info", "-p", prov])
            .args(extra)
            .env("SOFTVERBS_ADDR", HOSTS[0])
            .current_dir("/")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        eprintln!("{text}{}", String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "fi_info -p {prov}");
        text
    };
    let text = fi_info("verbs", &[]);
    let msg = text
        .split("provider: ")
        .find(|s| s.contains("type: FI_EP_MSG"))
        .expect("no FI_EP_MSG entry");
    assert!(msg.contains("domain: softverbs0\n"), "{msg}");
    assert!(msg.contains("protocol: FI_PROTO_RDMA_CM_IB_RC"), "{msg}");
    assert!(text.contains("domain: softverbs0-dgram"), "{text}");
    // ofi_rxm asks for MSG endpoints: with no source address the verbs
    // provider binds "localhost", which no RDMA device owns (ENODEV, as on a
    // kernel RDMA stack); given the device's address, it answers.
    let text = fi_info("verbs;ofi_rxm", &["-s", HOSTS[0]]);
    let rdm = text
        .split("provider: ")
        .find(|s| s.starts_with("verbs;ofi_rxm") && s.contains("type: FI_EP_RDM"))
        .expect("no verbs;ofi_rxm FI_EP_RDM entry");
    assert!(rdm.contains("domain: softverbs0\n"), "{rdm}");
}

/// `fi_pingpong` (libfabric-bin) with its server on the first namespace of
/// `ns` and its client on the namespace `hosts[1]` of `ns` (1: the other
/// "host"; 0: the same one, so both processes share the namespace's address,
/// its UDP port 4791 and its QPN slots), each under `softverbs exec` on its
/// namespace's address, with data checks (`-c`); returns each side's capture
/// (server first). fi_pingpong 1.17 has no source-address option: its verbs
/// server binds "localhost" (prov/verbs `vrb_get_rdmacm_rai`), which names the
/// device's address in the server's mount namespace here, as it must on any
/// host (spec/libfabric.md).
///
/// One ping-pong runs at a time: each spins two processes, and four of them
/// beside each other on two cores keep a process off its core for whole time
/// slices, which is what opens ofi_rxm's teardown race (spec/libfabric.md §6).
/// An RDM run that still meets that race (the ping-pong complete and every
/// message acknowledged, then one side hangs or reads a flushed completion at
/// teardown) runs once more; any other failure, or the race twice, fails.
fn fi_pingpong(
    ns: &Netns,
    client_host: usize,
    lib: &Path,
    tag: &str,
    args: &[&str],
    iters: usize,
) -> Vec<Vec<RoceRecord>> {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let rxm = args.iter().any(|a| a.contains("ofi_rxm"));
    for attempt in 1..=2 {
        let dir =
            std::env::temp_dir().join(format!("softverbs-fabric-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let hosts = dir.join("hosts");
        std::fs::write(&hosts, format!("{} localhost\n", HOSTS[0])).unwrap();
        let run = |side: usize, peer: Option<&str>| {
            let host = if side == 0 { 0 } else { client_host };
            let mut c = Command::new("timeout");
            c.args([
                "30",
                "ip",
                "netns",
                "exec",
                &ns.names[host],
                "unshare",
                "--mount",
                "sh",
                "-c",
            ])
            .arg(r#"mount --bind "$0" /etc/hosts && exec "$@""#)
            .arg(&hosts)
            .args([BIN, "exec", "--lib-dir"])
            .arg(lib)
            .args(["--", "fi_pingpong", "-I", &iters.to_string(), "-c"])
            .args(args)
            .args(peer)
            .env("SOFTVERBS_ADDR", HOSTS[host])
            .env("SOFTVERBS_PCAP", dir.join(format!("{side}.pcap")))
            .current_dir("/");
            c
        };
        let server = run(0, None)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // The server's control port opens once it has started: until then the
        // client's connect is refused, and it tries again (bounded).
        let mut client = run(1, Some(HOSTS[0])).output().unwrap();
        for _ in 0..40 {
            if client.status.success()
                || !String::from_utf8_lossy(&client.stderr).contains("Connection refused")
            {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(250));
            client = run(1, Some(HOSTS[0])).output().unwrap();
        }
        let server = server.wait_with_output().unwrap();
        let mut teardown = None;
        for (side, out) in [("server", &server), ("client", &client)] {
            let text = String::from_utf8_lossy(&out.stdout);
            eprintln!(
                "{side}: {:?}\n{text}{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            // "bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec", then one
            // line per size: every message sent was acknowledged.
            let result = text
                .lines()
                .find(|l| l.split_whitespace().nth(1) == Some(&iters.to_string()))
                .unwrap_or_else(|| {
                    panic!("{tag}: no result line from the {side} ({:?})", out.status)
                });
            assert_eq!(
                result.split_whitespace().nth(2),
                Some(format!("={iters}").as_str()),
                "{tag}: {result}"
            );
            if !out.status.success() {
                // The ping-pong completed; the failure came after it, at the
                // `fin` exchange and the disconnect: 124 is `timeout`'s, 125
                // fi_pingpong's for a flushed completion.
                assert!(
                    matches!(out.status.code(), Some(124 | 125)),
                    "{tag}: the {side} failed: {:?}",
                    out.status
                );
                teardown = Some(format!("the {side} failed at teardown ({:?})", out.status));
            }
        }
        let captures = (0..2)
            .map(|side| pcap_roce(&dir.join(format!("{side}.pcap"))))
            .collect();
        let _ = std::fs::remove_dir_all(&dir);
        match teardown {
            None => return captures,
            Some(race) if rxm && attempt == 1 => {
                eprintln!(
                    "{tag}: ofi_rxm's teardown race (spec/libfabric.md §6): {race}; once more"
                );
            }
            Some(race) => panic!("{tag}: {race} (run {attempt})"),
        }
    }
    unreachable!("the second run returns or panics")
}

/// `fi_pingpong -p verbs -e msg`: MSG endpoints connected by rdma_cm (our
/// librdmacm), between two network namespaces, data checked; the captures
/// show the ping-pong crossing between the namespaces' addresses as RC.
#[test]
fn libfabric_msg_pingpong_between_two_network_namespaces() {
    const ITERS: usize = 200;
    let Some(lib) = lib_dir() else { return };
    if !have("fi_pingpong") || !have("ip") || !have("unshare") {
        return;
    }
    let Some(ns) = two_hosts() else {
        eprintln!("skipping: network namespaces need root");
        return;
    };
    let args = ["-p", "verbs", "-e", "msg", "-S", "4096"];
    let captures = fi_pingpong(&ns, 1, &lib, "msg", &args, ITERS);
    let between = inter_host_records(&captures, HOSTS);
    assert!(between >= 2 * ITERS, "{between} inter-host records");
    let rc = captures.iter().flatten().filter(|r| r.is_rc()).count();
    assert!(rc >= 2 * ITERS, "{rc} RC records");
}

/// `fi_pingpong -p "verbs;ofi_rxm" -e rdm`: reliable datagram endpoints
/// (ofi_rxm over verbs MSG endpoints it connects itself through rdma_cm),
/// between two network namespaces, data checked, through softverbs.
#[test]
fn libfabric_rdm_pingpong_between_two_network_namespaces() {
    const ITERS: usize = 200;
    let Some(lib) = lib_dir() else { return };
    if !have("fi_pingpong") || !have("ip") || !have("unshare") {
        return;
    }
    let Some(ns) = two_hosts() else {
        eprintln!("skipping: network namespaces need root");
        return;
    };
    let args = ["-p", "verbs;ofi_rxm", "-e", "rdm", "-S", "4096"];
    let captures = fi_pingpong(&ns, 1, &lib, "rdm", &args, ITERS);
    let between = inter_host_records(&captures, HOSTS);
    assert!(between >= 2 * ITERS, "{between} inter-host records");
}

/// [`fi_pingpong`] with both processes on one address (the first namespace's),
/// as two processes of one host share a NIC: both open the device on that
/// address (UDP port 4791 shared, spec/shared-address.md), the client connects
/// to it through rdma_cm (the server's listener found by its service ID), and
/// the ping-pong runs with its data checked. The captures show RC traffic from
/// the address to itself, to QPs of two different slots (one per process).
fn fabric_on_one_address(tag: &str, args: &[&str]) {
    const ITERS: usize = 200;
    let Some(lib) = lib_dir() else { return };
    if !have("fi_pingpong") || !have("ip") || !have("unshare") {
        return;
    }
    let Some(ns) = two_hosts() else {
        eprintln!("skipping: network namespaces need root");
        return;
    };
    let captures = fi_pingpong(&ns, 0, &lib, tag, args, ITERS);
    let addr: [u8; 4] = HOSTS[0].parse::<std::net::Ipv4Addr>().unwrap().octets();
    for (side, capture) in ["server", "client"].iter().zip(&captures) {
        let rc: Vec<&RoceRecord> = capture
            .iter()
            .filter(|r| r.is_rc() && (r.src, r.dst) == (addr, addr))
            .collect();
        assert!(
            rc.len() >= 2 * ITERS,
            "{tag}: the {side} captured {} RC records on the shared address",
            rc.len()
        );
        let slots: std::collections::BTreeSet<u32> =
            rc.iter().map(|r| r.dest_qp() >> SLOT_SHIFT).collect();
        assert!(
            slots.len() >= 2,
            "{tag}: the {side}'s RC traffic names QPs of slots {slots:?} only"
        );
    }
}

/// QPNs of one process on a shared address: `slot << 17 | n`
/// (spec/shared-address.md §1).
const SLOT_SHIFT: u32 = 17;

/// `fi_pingpong -p verbs -e msg` between two processes on one address.
#[test]
fn libfabric_msg_pingpong_on_one_shared_address() {
    fabric_on_one_address("msg-shared", &["-p", "verbs", "-e", "msg", "-S", "4096"]);
}

/// `fi_pingpong -p "verbs;ofi_rxm" -e rdm` between two processes on one address.
#[test]
fn libfabric_rdm_pingpong_on_one_shared_address() {
    fabric_on_one_address(
        "rdm-shared",
        &["-p", "verbs;ofi_rxm", "-e", "rdm", "-S", "4096"],
    );
}
