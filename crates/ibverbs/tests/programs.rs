//! Unmodified Debian RDMA programs on the drop-in library: `ibv_devices`,
//! `ibv_devinfo`, the `ibv_*_pingpong` examples, perftest and pyverbs, server
//! and client as two processes on this host (and, as root, in two network
//! namespaces joined by a veth pair).
//!
//! Every process is bounded by a timeout and killed by PID on failure. The
//! tests run one at a time (each pair busy-polls; on a 2-core machine two
//! pairs at once would only starve each other). Each process gets its own
//! device address from its PID; the TCP port of each exchange is a free
//! ephemeral port. perftest figures are printed to stderr (`--nocapture`).

mod common;

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use testkit::{listening, Netns};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How the library reaches the program.
#[derive(Clone, Copy, Debug)]
enum PickUp {
    LibraryPath,
    Preload,
}

fn lib_env(how: PickUp) -> (&'static str, OsString) {
    match how {
        PickUp::LibraryPath => ("LD_LIBRARY_PATH", common::lib_dir().into_os_string()),
        PickUp::Preload => ("LD_PRELOAD", common::lib_path().into_os_string()),
    }
}

/// A free TCP port for one server/client exchange.
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    l.local_addr().unwrap().port()
}

/// What a finished process left.
struct Finished {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl Finished {
    fn all(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

/// A running process, killed by PID (and reaped) if dropped unfinished.
struct Proc {
    what: String,
    child: Child,
    out: Option<JoinHandle<String>>,
    err: Option<JoinHandle<String>>,
}

fn reader(mut r: impl Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = r.read_to_end(&mut b);
        String::from_utf8_lossy(&b).into_owned()
    })
}

impl Proc {
    fn spawn(what: &str, mut cmd: Command) -> Proc {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("{what}: spawn failed: {e}"));
        let out = Some(reader(child.stdout.take().unwrap()));
        let err = Some(reader(child.stderr.take().unwrap()));
        Proc {
            what: what.to_string(),
            child,
            out,
            err,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits until the process exits; kills it (by PID) at `deadline`.
    fn finish(mut self, deadline: Instant) -> Result<Finished, String> {
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if Instant::now() >= deadline => break None,
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => panic!("{}: wait failed: {e}", self.what),
            }
        };
        if status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let stdout = self.out.take().unwrap().join().unwrap_or_default();
        let stderr = self.err.take().unwrap().join().unwrap_or_default();
        match status {
            Some(status) => Ok(Finished {
                status,
                stdout,
                stderr,
            }),
            None => Err(format!(
                "{} timed out and was killed\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
                self.what
            )),
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.running() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A program run: argv plus environment, optionally inside a namespace.
#[derive(Clone)]
struct Prog {
    argv: Vec<String>,
    env: Vec<(String, OsString)>,
    netns: Option<String>,
}

impl Prog {
    fn new(how: PickUp, argv: &[&str]) -> Prog {
        let (k, v) = lib_env(how);
        Prog {
            argv: argv.iter().map(std::string::ToString::to_string).collect(),
            env: vec![(k.to_string(), v)],
            netns: None,
        }
    }

    fn arg(mut self, a: impl Into<String>) -> Prog {
        self.argv.push(a.into());
        self
    }

    fn env(mut self, k: &str, v: impl Into<OsString>) -> Prog {
        self.env.push((k.to_string(), v.into()));
        self
    }

    fn command(&self) -> Command {
        match &self.netns {
            None => {
                let mut c = Command::new(&self.argv[0]);
                c.args(&self.argv[1..]);
                for (k, v) in &self.env {
                    c.env(k, v);
                }
                c
            }
            Some(ns) => {
                // `ip netns exec` and `env` exec in place: the PID stays the program's.
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, "env"]);
                for (k, v) in &self.env {
                    let mut kv = OsString::from(format!("{k}="));
                    kv.push(v);
                    c.arg(kv);
                }
                c.args(&self.argv);
                c
            }
        }
    }

    fn name(&self) -> String {
        self.argv.join(" ")
    }
}

/// Runs one program to completion; panics if it fails or times out.
fn run(p: &Prog, timeout: Duration) -> Finished {
    let f = Proc::spawn(&p.name(), p.command())
        .finish(Instant::now() + timeout)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        f.status.success(),
        "{} failed ({})\n--- stdout\n{}\n--- stderr\n{}",
        p.name(),
        f.status,
        f.stdout,
        f.stderr
    );
    f
}

/// Runs `server` and, once it listens on `port`, `client`; both must exit 0
/// within `timeout`. Returns (server, client).
fn run_pair(server: &Prog, client: &Prog, port: u16, timeout: Duration) -> (Finished, Finished) {
    try_run_pair(server, client, port, timeout).unwrap_or_else(|e| panic!("{e}"))
}

/// [`run_pair`], with its failure as words instead of a panic.
fn try_run_pair(
    server: &Prog,
    client: &Prog,
    port: u16,
    timeout: Duration,
) -> Result<(Finished, Finished), String> {
    let deadline = Instant::now() + timeout;
    let mut s = Proc::spawn(&format!("server {}", server.name()), server.command());
    while !listening(s.pid(), port) {
        assert!(s.running(), "server exited before listening: {}", {
            let f = s.finish(deadline);
            f.map_or_else(|e| e, |f| format!("{}\n{}", f.status, f.all()))
        });
        assert!(
            Instant::now() < deadline,
            "server never listened on port {port}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let c = Proc::spawn(&format!("client {}", client.name()), client.command());
    let cf = c.finish(deadline);
    // A failed client leaves the server waiting: give it a short grace only.
    let sdead = if cf.as_ref().is_ok_and(|f| f.status.success()) {
        deadline
    } else {
        Instant::now() + Duration::from_secs(2)
    };
    let sf = s.finish(sdead);
    let show = |r: &Result<Finished, String>| match r {
        Ok(f) => format!(
            "exit {}\n--- stdout\n{}\n--- stderr\n{}",
            f.status, f.stdout, f.stderr
        ),
        Err(e) => e.clone(),
    };
    let ok = |r: &Result<Finished, String>| r.as_ref().is_ok_and(|f| f.status.success());
    if !(ok(&sf) && ok(&cf)) {
        return Err(format!(
            "{} failed\n=== server: {}\n=== client: {}",
            client.name(),
            show(&sf),
            show(&cf)
        ));
    }
    Ok((sf.unwrap(), cf.unwrap()))
}

fn tools(names: &[&str]) -> bool {
    names.iter().all(|t| common::have(t))
}

// ---------------------------------------------------------------- devices

#[test]
fn ibv_devices_lists_the_device() {
    if !tools(&["ibv_devices"]) {
        return;
    }
    let _g = serial();
    let f = run(
        &Prog::new(PickUp::LibraryPath, &["ibv_devices"]),
        Duration::from_secs(30),
    );
    let row = f
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("softverbs"))
        .unwrap_or_else(|| panic!("no softverbs device listed:\n{}", f.stdout));
    let guid = row.split_whitespace().nth(1).expect("a GUID column");
    assert_eq!(guid.len(), 16, "node GUID {guid:?}");
    assert!(
        u64::from_str_radix(guid, 16).is_ok_and(|g| g != 0),
        "node GUID {guid:?}"
    );
}

#[test]
fn ibv_devinfo_verbose_reports_an_active_roce_v2_port() {
    if !tools(&["ibv_devinfo"]) {
        return;
    }
    let _g = serial();
    for how in [PickUp::LibraryPath, PickUp::Preload] {
        let f = run(
            &Prog::new(how, &["ibv_devinfo", "-v"]),
            Duration::from_secs(30),
        );
        let o = &f.stdout;
        let has = |needle: &str| o.lines().any(|l| l.contains(needle));
        assert!(
            o.lines()
                .any(|l| l.starts_with("hca_id:") && l.contains("softverbs")),
            "{how:?}: no softverbs hca_id:\n{o}"
        );
        assert!(
            has("transport:") && has("InfiniBand (0)"),
            "{how:?}: transport\n{o}"
        );
        assert!(
            o.lines()
                .any(|l| l.contains("state:") && l.contains("PORT_ACTIVE (4)")),
            "{how:?}: port state\n{o}"
        );
        assert!(
            o.lines()
                .any(|l| l.trim_start().starts_with("link_layer:") && l.contains("Ethernet")),
            "{how:?}: link layer\n{o}"
        );
        let gid = o
            .lines()
            .find(|l| l.contains("GID[  0]:"))
            .unwrap_or_else(|| panic!("{how:?}: no GID[0] line\n{o}"));
        assert!(
            gid.contains("::ffff:") && gid.trim_end().ends_with(", RoCE v2"),
            "{how:?}: {gid}"
        );
        assert!(
            has("phys_state:") && has("LINK_UP (5)"),
            "{how:?}: phys_state\n{o}"
        );
    }
}

// ---------------------------------------------------------------- pingpong

/// "1000 iters in 0.30 seconds = 302.40 usec/iter" → (iters, usec/iter).
fn pingpong_iters(out: &str) -> Option<(u64, f64)> {
    let l = out.lines().find(|l| l.contains(" iters in "))?;
    let iters = l.split_whitespace().next()?.parse().ok()?;
    let usec = l
        .split('=')
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some((iters, usec))
}

fn pingpong(prog: &str, extra: &[&str], how: PickUp) {
    if !tools(&[prog]) {
        return;
    }
    let _g = serial();
    let port = free_port();
    let mut p = Prog::new(how, &[prog, "-g", "0", "-c", "-p", &port.to_string()]);
    for a in extra {
        p = p.arg(*a);
    }
    let client = p.clone().arg("127.0.0.1");
    let (s, c) = run_pair(&p, &client, port, Duration::from_secs(120));
    for (side, f) in [("server", &s), ("client", &c)] {
        let all = f.all();
        let (iters, usec) = pingpong_iters(&all)
            .unwrap_or_else(|| panic!("{prog} {extra:?} {side}: no \"iters in\" line:\n{all}"));
        assert_eq!(iters, 1000, "{prog} {extra:?} {side}: iterations\n{all}");
        assert!(usec > 0.0, "{prog} {extra:?} {side}: {usec} usec/iter");
        // -c (--chk) makes the program compare every received buffer.
        assert!(
            !all.to_lowercase().contains("invalid"),
            "{prog} {side}: data check failed\n{all}"
        );
        assert!(
            all.contains("GID ::ffff:"),
            "{prog} {side}: no IPv4-mapped GID\n{all}"
        );
        if side == "client" {
            eprintln!(
                "{prog} {}: {iters} iters, {usec:.1} usec/iter",
                extra.join(" ")
            );
        }
    }
}

#[test]
fn ibv_rc_pingpong() {
    pingpong("ibv_rc_pingpong", &[], PickUp::LibraryPath);
}

#[test]
fn ibv_rc_pingpong_events_preloaded() {
    pingpong("ibv_rc_pingpong", &["-e"], PickUp::Preload);
}

#[test]
fn ibv_rc_pingpong_new_send_api() {
    // -N: ibv_create_qp_ex, ibv_qp_to_qp_ex and the ibv_wr_* calls.
    pingpong("ibv_rc_pingpong", &["-N"], PickUp::LibraryPath);
}

#[test]
fn ibv_uc_pingpong() {
    pingpong("ibv_uc_pingpong", &[], PickUp::LibraryPath);
}

#[test]
fn ibv_uc_pingpong_events() {
    pingpong("ibv_uc_pingpong", &["-e"], PickUp::LibraryPath);
}

#[test]
fn ibv_ud_pingpong() {
    pingpong("ibv_ud_pingpong", &[], PickUp::LibraryPath);
}

#[test]
fn ibv_ud_pingpong_events() {
    pingpong("ibv_ud_pingpong", &["-e"], PickUp::LibraryPath);
}

#[test]
fn ibv_srq_pingpong() {
    pingpong("ibv_srq_pingpong", &[], PickUp::LibraryPath);
}

#[test]
fn ibv_srq_pingpong_events() {
    pingpong("ibv_srq_pingpong", &["-e"], PickUp::LibraryPath);
}

// ---------------------------------------------------------------- perftest

/// The numeric rows of perftest's result table (after the `#bytes` header):
/// each row's columns as numbers.
fn perftest_rows(out: &str) -> Vec<Vec<f64>> {
    let mut rows = Vec::new();
    let mut in_table = false;
    for l in out.lines() {
        let t = l.trim();
        if t.starts_with("#bytes") {
            in_table = true;
            continue;
        }
        if !in_table {
            continue;
        }
        let cols: Option<Vec<f64>> = t.split_whitespace().map(|c| c.parse().ok()).collect();
        if let Some(c) = cols.filter(|c| c.len() >= 5) {
            rows.push(c);
        }
    }
    rows
}

fn perftest(prog: &str, extra: &[&str], how: PickUp) -> Vec<Vec<f64>> {
    if !tools(&[prog]) {
        return Vec::new();
    }
    let _g = serial();
    let pair = || {
        let port = free_port();
        let mut p = Prog::new(how, &[prog, "-p", &port.to_string()]);
        for a in extra {
            p = p.arg(*a);
        }
        let client = p.clone().arg("127.0.0.1");
        try_run_pair(&p, &client, port, Duration::from_secs(180))
    };
    // perftest measures the CPU clock against gettimeofday before each
    // report and gives up ("Correlation coefficient r^2 ... < 0.9", "Can't
    // produce a report") when a busy machine preempts that measurement:
    // perftest's own failure, not the device's; that one is run once more.
    let (s, c) = match pair() {
        Err(e) if e.contains("Can't produce a report") => {
            eprintln!("{prog}: perftest could not measure the CPU clock; once more\n{e}");
            pair().unwrap_or_else(|e| panic!("{e}"))
        }
        r => r.unwrap_or_else(|e| panic!("{e}")),
    };
    let rows = perftest_rows(&c.stdout);
    assert!(
        !rows.is_empty(),
        "{prog} {extra:?}: no result rows\n{}",
        c.all()
    );
    let lat = prog.ends_with("_lat");
    for r in &rows {
        if lat {
            // #bytes #iterations t_min t_max t_typical t_avg t_stdev p99 p99.9
            assert!(r.len() >= 9, "{prog}: latency row {r:?}");
            assert!(
                r[2] > 0.0 && r[4] > 0.0 && r[5] > 0.0,
                "{prog}: latency row {r:?}"
            );
            assert!(
                r[2] <= r[4] && r[4] <= r[3],
                "{prog}: t_min <= t_typical <= t_max: {r:?}"
            );
            eprintln!(
                "perftest {prog} {}: {} B x {} iters: t_typical {:.2} us, t_avg {:.2} us, t_min {:.2} us, p99 {:.2} us",
                extra.join(" "),
                r[0],
                r[1],
                r[4],
                r[5],
                r[2],
                r[7]
            );
        } else {
            // #bytes #iterations BW_peak BW_average MsgRate. Tiny messages
            // (-a) print a bandwidth that rounds to 0.00 MB/s.
            assert!(r[4] > 0.0, "{prog}: bandwidth row {r:?}");
            assert!(r[0] < 4096.0 || r[3] > 0.0, "{prog}: bandwidth row {r:?}");
            eprintln!(
                "perftest {prog} {}: {} B x {} iters: BW average {:.2} MB/s, peak {:.2} MB/s, {:.6} Mpps",
                extra.join(" "),
                r[0],
                r[1],
                r[3],
                r[2],
                r[4]
            );
        }
    }
    // The server side ran to the end too (it prints the table for most tests).
    assert!(s.status.success());
    rows
}

#[test]
fn ib_write_bw() {
    let rows = perftest("ib_write_bw", &[], PickUp::LibraryPath);
    assert!(rows.is_empty() || rows[0][0] == 65536.0, "{rows:?}");
}

#[test]
fn ib_read_bw() {
    perftest("ib_read_bw", &[], PickUp::LibraryPath);
}

#[test]
fn ib_send_bw() {
    perftest("ib_send_bw", &[], PickUp::LibraryPath);
}

#[test]
fn ib_atomic_bw() {
    perftest("ib_atomic_bw", &[], PickUp::LibraryPath);
}

#[test]
fn ib_write_lat() {
    perftest("ib_write_lat", &[], PickUp::LibraryPath);
}

#[test]
fn ib_read_lat() {
    perftest("ib_read_lat", &[], PickUp::LibraryPath);
}

#[test]
fn ib_send_lat_preloaded() {
    perftest("ib_send_lat", &[], PickUp::Preload);
}

#[test]
fn ib_atomic_lat() {
    perftest("ib_atomic_lat", &[], PickUp::LibraryPath);
}

/// `-a`: every size from 2 B to 8 MiB (23 rows). The default 5000/1000
/// iterations per size would move ~80 GB; 20 per size keep it short.
fn all_sizes(prog: &str) {
    let rows = perftest(prog, &["-a", "-n", "20"], PickUp::LibraryPath);
    if rows.is_empty() {
        return;
    }
    let sizes: Vec<f64> = rows.iter().map(|r| r[0]).collect();
    let want: Vec<f64> = (1..=23).map(|k| f64::from(1u32 << k)).collect();
    assert_eq!(sizes, want, "{prog} -a: sizes");
}

#[test]
fn ib_write_bw_all_sizes() {
    all_sizes("ib_write_bw");
}

#[test]
fn ib_send_bw_all_sizes() {
    all_sizes("ib_send_bw");
}

#[test]
fn ib_write_bw_old_post_send() {
    let rows = perftest("ib_write_bw", &["--use_old_post_send"], PickUp::LibraryPath);
    assert!(rows.len() <= 1);
}

// ---------------------------------------------------------------- pyverbs

#[test]
fn pyverbs_rc_send_write_read() {
    let py = "/usr/bin/python3";
    if !std::path::Path::new(py).exists() {
        assert!(
            std::env::var_os("SOFTVERBS_REQUIRE_TOOLS").is_none(),
            "{py} is required"
        );
        eprintln!("skipping: no {py}");
        return;
    }
    let probe = Command::new(py)
        .args(["-c", "import pyverbs.device"])
        .output()
        .expect("run python3");
    if !probe.status.success() {
        assert!(
            std::env::var_os("SOFTVERBS_REQUIRE_TOOLS").is_none(),
            "pyverbs is required (python3-pyverbs)"
        );
        eprintln!("skipping: pyverbs not installed");
        return;
    }
    let _g = serial();
    let script: PathBuf = [env!("CARGO_MANIFEST_DIR"), "tests", "pyverbs_rc.py"]
        .iter()
        .collect();
    let p = Prog::new(PickUp::LibraryPath, &[py, script.to_str().unwrap()]);
    let f = run(&p, Duration::from_secs(120));
    assert!(
        f.stdout.contains("pyverbs rc: ok (softverbs"),
        "{}",
        f.all()
    );
    eprintln!("{}", f.stdout.trim());
}

// ---------------------------------------------------------------- two hosts

/// The addresses of the two hosts (the veth ends).
const ADDRS: [&str; 2] = ["10.77.0.1", "10.77.0.2"];

/// `argv` on host `i` of `ns`, at its address.
fn ns_prog(ns: &Netns, i: usize, argv: &[&str]) -> Prog {
    let mut p = Prog::new(PickUp::LibraryPath, argv).env("SOFTVERBS_ADDR", ADDRS[i]);
    p.netns = Some(ns.names[i].clone());
    p
}

#[test]
fn two_hosts_in_network_namespaces() {
    if !tools(&["ip", "ibv_rc_pingpong", "ib_write_bw"]) {
        return;
    }
    let _g = serial();
    let Some(ns) = Netns::pair("sv", ADDRS) else {
        assert!(
            std::env::var_os("SOFTVERBS_REQUIRE_TOOLS").is_none(),
            "network namespaces are required (run as root)"
        );
        eprintln!("skipping: cannot create network namespaces (not root)");
        return;
    };
    let peer = ADDRS[0];

    let port = free_port().to_string();
    let pp = ["ibv_rc_pingpong", "-g", "0", "-c", "-p", &port];
    let server = ns_prog(&ns, 0, &pp);
    let client = ns_prog(&ns, 1, &pp).arg(peer);
    let (s, c) = run_pair(
        &server,
        &client,
        port.parse().unwrap(),
        Duration::from_secs(120),
    );
    for (side, f, own, other) in [
        ("server", &s, ADDRS[0], ADDRS[1]),
        ("client", &c, ADDRS[1], ADDRS[0]),
    ] {
        let all = f.all();
        let (iters, usec) =
            pingpong_iters(&all).unwrap_or_else(|| panic!("{side}: no iters line\n{all}"));
        assert_eq!(iters, 1000, "{side}\n{all}");
        // Each side's GID carries its configured address, and it saw the other's.
        let addrs: HashMap<&str, String> = all
            .lines()
            .filter_map(|l| {
                let kind = if l.contains("local address") {
                    "local"
                } else if l.contains("remote address") {
                    "remote"
                } else {
                    return None;
                };
                Some((kind, l.rsplit("GID ").next()?.trim().to_string()))
            })
            .collect();
        assert_eq!(
            addrs.get("local").map(String::as_str),
            Some(format!("::ffff:{own}").as_str()),
            "{side}\n{all}"
        );
        assert_eq!(
            addrs.get("remote").map(String::as_str),
            Some(format!("::ffff:{other}").as_str()),
            "{side}\n{all}"
        );
        if side == "client" {
            eprintln!("two hosts: ibv_rc_pingpong {iters} iters, {usec:.1} usec/iter");
        }
    }

    let port = free_port().to_string();
    let bw = ["ib_write_bw", "-p", &port];
    let server = ns_prog(&ns, 0, &bw);
    let client = ns_prog(&ns, 1, &bw).arg(peer);
    let (_s, c) = run_pair(
        &server,
        &client,
        port.parse().unwrap(),
        Duration::from_secs(180),
    );
    let rows = perftest_rows(&c.stdout);
    assert!(
        rows.len() == 1 && rows[0][3] > 0.0,
        "ib_write_bw between namespaces:\n{}",
        c.all()
    );
    // 10.77.0.1 as the GID perftest printed: 00:..:255:255:10:77:00:01.
    assert!(c.stdout.contains(":255:255:10:77:00:01"), "{}", c.stdout);
    eprintln!(
        "perftest ib_write_bw (two namespaces, veth): {} B x {} iters: BW average {:.2} MB/s",
        rows[0][0], rows[0][1], rows[0][3]
    );
}
