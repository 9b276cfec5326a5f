//! Network namespaces a test creates (root only) and child processes of the
//! test binary that run inside them: `run_child` starts this binary again
//! with `SV_NETNS_CHILD` naming the test to run, behind a prefix
//! (`ip netns exec NS`, `setpriv ...`), bounded by `timeout`.
#![allow(dead_code)]

use std::process::Command;

/// The variable that tells a child which test it is.
pub const CHILD: &str = "SV_NETNS_CHILD";

/// The test this process runs as a child, if it is one.
pub fn child() -> Option<String> {
    std::env::var(CHILD).ok()
}

/// True if this process runs as root.
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// True if `tool` is on PATH.
pub fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs this binary's test `name` as a child behind `prefix`, with `env`,
/// bounded by 60 s; its output.
pub fn run_child(prefix: &[&str], name: &str, env: &[(&str, String)]) -> std::process::Output {
    let exe = std::env::current_exe().unwrap();
    let mut c = Command::new("timeout");
    c.arg("60").args(prefix).arg(&exe);
    c.args(["--exact", name, "--nocapture", "--test-threads=1"]);
    c.env(CHILD, name);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// Asserts that a child succeeded and printed `marker`.
pub fn assert_child(o: &std::process::Output, marker: &str) {
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && out.contains(marker),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// `ip ARGS...`, bounded; whether it succeeded.
pub fn ip(args: &[&str]) -> bool {
    Command::new("timeout")
        .arg("20")
        .arg("ip")
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Namespaces (and the veth pair between them, or inside the first),
/// deleted with anything left running in them (by PID) when dropped.
pub struct Netns {
    pub names: Vec<String>,
    pub links: [String; 2],
}

impl Netns {
    /// Empty namespaces named `{tag}{i}{pid}` with a veth pair: one end in
    /// the first, the other in the last (the same one when `n` is 1), each
    /// up, `lo` up. `None` when namespaces cannot be made (not root).
    pub fn create(tag: &str, n: usize) -> Option<Netns> {
        let pid = std::process::id();
        let ns = Netns {
            names: (0..n).map(|i| format!("{tag}{i}{pid}")).collect(),
            links: [format!("{tag}a{pid}"), format!("{tag}b{pid}")],
        };
        if !ip(&["netns", "add", &ns.names[0]]) {
            return None;
        }
        for name in &ns.names[1..] {
            assert!(ip(&["netns", "add", name]), "netns add {name}");
        }
        let (a, b) = (ns.names[0].as_str(), ns.names[n - 1].as_str());
        let (va, vb) = (ns.links[0].as_str(), ns.links[1].as_str());
        let link = [
            "link", "add", va, "netns", a, "type", "veth", "peer", "name", vb, "netns", b,
        ];
        assert!(ip(&link), "ip {}", link.join(" "));
        for (name, dev) in [(a, va), (b, vb), (a, "lo"), (b, "lo")] {
            assert!(
                ip(&["-n", name, "link", "set", dev, "up"]),
                "{dev} up in {name}"
            );
        }
        Some(ns)
    }

    /// Adds `addr` (with its prefix) to link `i` (0: the first end, 1: the
    /// other), in its namespace; IPv6 without duplicate address detection.
    pub fn addr(&self, i: usize, addr: &str) {
        let ns = &self.names[if i == 0 { 0 } else { self.names.len() - 1 }];
        let mut args = vec![
            "-n",
            ns.as_str(),
            "addr",
            "add",
            addr,
            "dev",
            &self.links[i],
        ];
        if addr.contains(':') {
            args.push("nodad");
        }
        assert!(ip(&args), "ip {}", args.join(" "));
    }

    /// The MAC address of link `i`.
    pub fn mac(&self, i: usize) -> String {
        let ns = &self.names[if i == 0 { 0 } else { self.names.len() - 1 }];
        let o = Command::new("timeout")
            .args(["20", "ip", "-n", ns, "link", "show", &self.links[i]])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        let at = text.find("link/ether ").expect("a MAC") + "link/ether ".len();
        text[at..at + 17].to_owned()
    }
}

impl Drop for Netns {
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
