//! The `softverbs` binary end to end: `demo` starts a server process and runs
//! the client in its own, with real RoCEv2 traffic between them (two devices,
//! two loopback addresses, two UDP sockets), and must print its results.

use std::process::Command;

/// Runs `softverbs demo` with `SOFTVERBS_SHM=shm` on `port`: its output.
fn demo(shm: &str, port: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_softverbs"))
        .args(["demo", "--port", port])
        .env("SOFTVERBS_SHM", shm)
        .output()
        .expect("run softverbs demo");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "demo failed: {}\n{}",
        text,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("two processes on this host"), "{text}");
    text
}

/// The row starting with `row`, its numbers.
fn numbers(text: &str, row: &str) -> Vec<f64> {
    let line = text
        .lines()
        .find(|l| l.starts_with(row))
        .unwrap_or_else(|| panic!("no {row} row in:\n{text}"));
    line[row.len()..]
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect()
}

#[test]
fn demo_runs_between_two_processes() {
    // Over UDP (the same-host path off): every row measured, and the
    // socket's receive calls per datagram (the last column) are counted.
    let text = demo("0", "18611");
    for row in ["send latency (RC)", "RDMA WRITE bw", "RDMA READ bw"] {
        let last = *numbers(&text, row).last().unwrap();
        assert!(last > 0.0, "{row}: {text}");
    }
}

#[test]
fn demo_runs_between_two_processes_over_the_same_host_path() {
    // The path on (the default): the bandwidth rows measure, and the data
    // went through the shared rings: no socket call per datagram.
    let text = demo("1", "18671");
    assert!(numbers(&text, "send latency (RC)")[2] > 0.0, "{text}");
    for row in ["RDMA WRITE bw", "RDMA READ bw"] {
        let n = numbers(&text, row);
        let (bw, sends, recvs) = (n[2], n[n.len() - 2], n[n.len() - 1]);
        assert!(bw > 0.0, "{row}: {text}");
        assert!(
            sends < 0.1 && recvs < 0.1,
            "{row}: socket calls per datagram on the path: {text}"
        );
    }
}

#[test]
fn control_demo_explains_a_refused_modify() {
    let out = Command::new(env!("CARGO_BIN_EXE_softverbs"))
        .arg("control")
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert_eq!(text.matches("state RTS").count(), 2, "{text}");
    assert!(text.contains("missing: DEST_QPN"), "{text}");
}
