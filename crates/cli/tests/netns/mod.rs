//! Two network namespaces joined by a veth pair: the "two hosts" of the
//! tests that run RDMA programs across a real (virtual) link. Shared by the
//! test files that need it (crates/cli/tests/{ucx,mpi,libfabric}.rs; crates/rdmacm/tests
//! includes it by path). Needs root (`ip netns add`); `create` answers
//! `None` where namespaces cannot be made, and the caller skips.
#![allow(dead_code)]

use std::process::Command;

/// Two network namespaces joined by a veth pair (deleted on drop).
pub struct Netns {
    pub names: [String; 2],
}

impl Netns {
    pub const ADDRS: [&'static str; 2] = ["10.78.0.1", "10.78.0.2"];

    pub fn create() -> Option<Netns> {
        let ip = |args: &[&str]| {
            let o = Command::new("timeout")
                .arg("20")
                .arg("ip")
                .args(args)
                .output();
            o.is_ok_and(|o| o.status.success())
        };
        // Unique per test: tests of this file run concurrently.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let k = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let pid = format!("{}{k}", std::process::id());
        let ns = Netns {
            names: [format!("svxA{pid}"), format!("svxB{pid}")],
        };
        if !ip(&["netns", "add", &ns.names[0]]) {
            return None; // not root: no namespaces here
        }
        let (a, b) = (ns.names[0].as_str(), ns.names[1].as_str());
        let (va, vb) = (format!("svxa{pid}"), format!("svxb{pid}"));
        let (aa, ab) = (
            format!("{}/24", Self::ADDRS[0]),
            format!("{}/24", Self::ADDRS[1]),
        );
        let steps: [&[&str]; 8] = [
            &["netns", "add", b],
            &[
                "link", "add", &va, "netns", a, "type", "veth", "peer", "name", &vb, "netns", b,
            ],
            &["-n", a, "addr", "add", &aa, "dev", &va],
            &["-n", b, "addr", "add", &ab, "dev", &vb],
            &["-n", a, "link", "set", &va, "up"],
            &["-n", b, "link", "set", &vb, "up"],
            &["-n", a, "link", "set", "lo", "up"],
            &["-n", b, "link", "set", "lo", "up"],
        ];
        for step in steps {
            assert!(ip(step), "ip {}", step.join(" "));
        }
        Some(ns)
    }
}

impl Drop for Netns {
    /// Ends what the test left running in the namespaces (e.g. an orted after a
    /// timeout; by PID: `ip netns pids`), then deletes them.
    fn drop(&mut self) {
        for n in &self.names {
            let pids = Command::new("timeout")
                .args(["20", "ip", "netns", "pids", n])
                .output();
            for pid in pids
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default()
                .split_whitespace()
            {
                let _ = Command::new("kill").args(["-KILL", pid]).output();
            }
            let _ = Command::new("timeout")
                .args(["20", "ip", "netns", "delete", n])
                .output();
        }
    }
}
