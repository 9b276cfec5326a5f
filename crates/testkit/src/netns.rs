//! Network namespaces joined by a veth pair: the "two hosts" of the tests
//! that run RDMA programs across a real (virtual) link. Needs root
//! (`ip netns add`); [`Netns::create`] answers `None` where namespaces cannot
//! be made, and the caller skips.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// `ip ARGS...`, bounded by 20 s; whether it succeeded.
pub fn ip(args: &[&str]) -> bool {
    Command::new("timeout")
        .arg("20")
        .arg("ip")
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Namespaces with a veth pair between the first and the last (inside the
/// first when there is one), deleted with anything left running in them (by
/// PID, `ip netns pids`) when dropped.
pub struct Netns {
    pub names: Vec<String>,
    /// The two ends of the veth pair: `links[0]` in the first namespace,
    /// `links[1]` in the last.
    pub links: [String; 2],
}

impl Netns {
    /// `n` empty namespaces named `{tag}{i}{pid}{k}` (`k` counts the sets this
    /// process made, so tests of one binary may run at once), with a veth
    /// pair: one end in the first, the other in the last (the same one when
    /// `n` is 1), each up, `lo` up. `None` when namespaces cannot be made
    /// (not root, no `ip`). `tag` is at most 4 characters: an interface name
    /// has at most 15.
    pub fn create(tag: &str, n: usize) -> Option<Netns> {
        assert!((1..=9).contains(&n), "1 to 9 namespaces, not {n}");
        assert!(tag.len() <= 4, "tag {tag:?}: at most 4 characters");
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let id = format!(
            "{}{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let ns = Netns {
            names: (0..n).map(|i| format!("{tag}{i}{id}")).collect(),
            links: [format!("{tag}a{id}"), format!("{tag}b{id}")],
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

    /// Two namespaces whose veth ends have `addrs[0]` and `addrs[1]` (IPv4,
    /// one /24): two hosts on one link.
    pub fn pair(tag: &str, addrs: [&str; 2]) -> Option<Netns> {
        let ns = Netns::create(tag, 2)?;
        ns.addr(0, &format!("{}/24", addrs[0]));
        ns.addr(1, &format!("{}/24", addrs[1]));
        Some(ns)
    }

    /// The namespace holding link `i` (0: the first end, 1: the other).
    pub fn of_link(&self, i: usize) -> &str {
        &self.names[if i == 0 { 0 } else { self.names.len() - 1 }]
    }

    /// Adds `addr` (with its prefix) to link `i`, in its namespace; IPv6
    /// without duplicate address detection.
    pub fn addr(&self, i: usize, addr: &str) {
        let mut args = vec![
            "-n",
            self.of_link(i),
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

    /// Routes `prefix` (e.g. the multicast 224.0.0.0/4 or ff00::/8) through
    /// link `i`, in its namespace.
    pub fn route(&self, i: usize, prefix: &str) {
        let mut args = vec!["-n", self.of_link(i)];
        if prefix.contains(':') {
            args.push("-6");
        }
        args.extend(["route", "add", prefix, "dev", &self.links[i]]);
        assert!(ip(&args), "ip {}", args.join(" "));
    }

    /// Routes `prefix` through link `i` with `src` as the preferred source
    /// address (what the kernel, and so a connection manager resolving a
    /// route, picks as the local address towards `prefix`).
    pub fn route_from(&self, i: usize, prefix: &str, src: &str) {
        let args = [
            "-n",
            self.of_link(i),
            "route",
            "add",
            prefix,
            "dev",
            &self.links[i],
            "src",
            src,
        ];
        assert!(ip(&args), "ip {}", args.join(" "));
    }

    /// The MAC address of link `i`.
    pub fn mac(&self, i: usize) -> String {
        let o = Command::new("timeout")
            .args(["20", "ip", "-n", self.of_link(i), "link", "show"])
            .arg(&self.links[i])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        let at = text.find("link/ether ").expect("a MAC") + "link/ether ".len();
        text[at..at + 17].to_owned()
    }

    /// `args` in namespace `ns` (a name of [`Netns::names`]), bounded by
    /// `secs` seconds: `timeout SECS ip netns exec NS ARGS...` (the
    /// environment set on the command reaches the program).
    pub fn exec(ns: &str, secs: u32, args: &[&str]) -> Command {
        let mut c = Command::new("timeout");
        c.arg(secs.to_string())
            .args(["ip", "netns", "exec", ns])
            .args(args);
        c
    }
}

impl Drop for Netns {
    /// Ends what the test left running in the namespaces (by PID), then
    /// deletes them; deleting a namespace removes its end of the veth pair,
    /// and so the pair.
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
            let _ = ip(&["netns", "delete", n]);
        }
    }
}
