//! Waiting, bounded (10 s, then a panic), for what another process does:
//! a device binding its RoCEv2 port, a server listening on TCP.

use std::process::Command;
use std::time::Duration;

/// The RoCEv2 UDP port, 4791, as /proc/net/udp writes it.
const ROCE_PORT: &str = "12B7";

/// `addr:4791` as /proc/net/udp writes a local address.
fn udp_entry(addr: &str) -> String {
    let ip: std::net::Ipv4Addr = addr
        .parse()
        .unwrap_or_else(|e| panic!("{addr:?}: not an IPv4 address: {e}"));
    format!("{:08X}:{ROCE_PORT}", u32::from_le_bytes(ip.octets()))
}

/// /proc/net/udp of this network namespace, or of `ns`.
fn udp_table(ns: Option<&str>) -> String {
    match ns {
        None => std::fs::read_to_string("/proc/net/udp").unwrap_or_default(),
        Some(ns) => Command::new("timeout")
            .args(["10", "ip", "netns", "exec", ns, "cat", "/proc/net/udp"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default(),
    }
}

/// Polls `done` every 100 ms, at most 100 times; whether it became true.
fn poll(mut done: impl FnMut() -> bool) -> bool {
    for _ in 0..100 {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// Waits until a device has bound UDP port 4791 at the IPv4 `addr` (a unicast
/// address, or a multicast group a device joined) in this network namespace,
/// so that a client's first datagram finds it.
pub fn wait_device(addr: &str) {
    wait_device_in(None, addr);
}

/// [`wait_device`] in network namespace `ns` (None: this one).
pub fn wait_device_in(ns: Option<&str>, addr: &str) {
    let want = udp_entry(addr);
    assert!(
        poll(|| udp_table(ns).contains(&want)),
        "no device came up at {addr} (namespace {ns:?})"
    );
}

/// Waits until no socket is bound to UDP port 4791 at `addr` in this network
/// namespace (every device on that address closed).
pub fn wait_device_gone(addr: &str) {
    wait_device_gone_in(None, addr);
}

/// [`wait_device_gone`] in network namespace `ns` (None: this one).
pub fn wait_device_gone_in(ns: Option<&str>, addr: &str) {
    let want = udp_entry(addr);
    assert!(
        poll(|| !udp_table(ns).contains(&want)),
        "a device at {addr} did not close (namespace {ns:?})"
    );
}

/// Whether `table` (/proc/net/tcp or tcp6) has a socket listening (state 0A)
/// on `port`.
fn listens(table: &str, port: u16) -> bool {
    let want = format!(":{port:04X}");
    table.lines().skip(1).any(|l| {
        let cols: Vec<&str> = l.split_whitespace().collect();
        cols.len() > 3 && cols[1].ends_with(&want) && cols[3] == "0A"
    })
}

/// Waits until a TCP socket listens on `port` in this network namespace.
pub fn wait_tcp_listen(port: u16) {
    wait_tcp_listen_in(None, port);
}

/// [`wait_tcp_listen`] in network namespace `ns` (None: this one).
pub fn wait_tcp_listen_in(ns: Option<&str>, port: u16) {
    let table = |f: &str| match ns {
        None => std::fs::read_to_string(f).unwrap_or_default(),
        Some(ns) => Command::new("timeout")
            .args(["10", "ip", "netns", "exec", ns, "cat", f])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default(),
    };
    assert!(
        poll(|| ["/proc/net/tcp", "/proc/net/tcp6"]
            .iter()
            .any(|f| listens(&table(f), port))),
        "nothing listens on TCP port {port} (namespace {ns:?})"
    );
}

/// Whether the process `pid` has a TCP socket listening on `port`, in its own
/// network namespace (`/proc/<pid>/net/tcp{,6}`). Probing by connecting would
/// take the server's only connection.
pub fn listening(pid: u32, port: u16) -> bool {
    ["tcp", "tcp6"].iter().any(|f| {
        listens(
            &std::fs::read_to_string(format!("/proc/{pid}/net/{f}")).unwrap_or_default(),
            port,
        )
    })
}
