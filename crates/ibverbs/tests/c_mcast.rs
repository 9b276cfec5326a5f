//! UD multicast through the C ABI across processes (`tests/c/mcast_checks.c`):
//! three receiving processes, two of them sharing one address
//! (spec/shared-address.md) and one on another, each with two UD QPs attached
//! to the group; a fourth process sends to the group. Every QP of every
//! process receives exactly one copy of each SEND; bad input gets EINVAL and
//! ibv_destroy_qp EBUSY while attached.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

const COUNT: &str = "5";

/// A group of this test process alone (other runs of the suite on the host
/// may use the same loopback addresses at the same time).
fn group() -> String {
    let pid = std::process::id();
    format!("239.20.{}.{}", (pid >> 8) as u8, pid as u8)
}

fn run(exe: &std::path::Path, role: &str, addr: &str) -> Child {
    Command::new("timeout")
        .arg("60")
        .arg(exe)
        .args([role, &group(), COUNT])
        .env("LD_LIBRARY_PATH", common::lib_dir())
        .env("SOFTVERBS_ADDR", addr)
        .env("SOFTVERBS_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn finish(name: &str, child: Child, first_line: &str) {
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{name} failed ({}):\n{first_line}{stdout}\n{stderr}",
        out.status
    );
    assert_eq!(stdout.trim(), "ok", "{name}: {stderr}");
}

#[test]
fn every_process_and_qp_gets_one_copy() {
    if !common::have_verbs_h() {
        return;
    }
    let exe = common::compile_c("mcast_checks");
    let mut receivers = Vec::new();
    for addr in ["127.32.0.1", "127.32.0.1", "127.32.0.2"] {
        let mut child = run(&exe, "recv", addr);
        // Each attached its QPs before it says "ready".
        let mut line = String::new();
        let stdout = child.stdout.as_mut().unwrap();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        if line.trim() != "ready" {
            finish(addr, child, &line);
            panic!("receiver on {addr} did not get ready");
        }
        receivers.push((addr, child));
    }
    let sender = run(&exe, "send", "127.32.0.3");
    finish("sender", sender, "");
    for (addr, child) in receivers {
        finish(addr, child, "");
    }
    let _ = std::fs::remove_file(&exe);
}
