//! The `softverbs` binary end to end: `demo` starts a server process and runs
//! the client in its own, with real RoCEv2 traffic between them (two devices,
//! two loopback addresses, two UDP sockets), and must print its results.

use std::process::Command;

#[test]
fn demo_runs_between_two_processes() {
    let out = Command::new(env!("CARGO_BIN_EXE_softverbs"))
        .args(["demo", "--port", "18611"])
        .output()
        .expect("run softverbs demo");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "demo failed: {}\n{}",
        text,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("two processes on this host"), "{text}");
    for row in ["send latency (RC)", "RDMA WRITE bw", "RDMA READ bw"] {
        let line = text
            .lines()
            .find(|l| l.starts_with(row))
            .unwrap_or_else(|| panic!("no {row} row in:\n{text}"));
        let last: f64 = line.split_whitespace().last().unwrap().parse().unwrap();
        assert!(last > 0.0, "{line}");
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
