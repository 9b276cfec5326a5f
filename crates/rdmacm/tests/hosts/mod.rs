//! Two hosts for the rdmacm-utils programs: two network namespaces joined by a
//! veth pair (testkit), each program's server in one and its client in the
//! other, both through the drop-in librdmacm.so.1 and libibverbs.so.1 with a
//! device at their host's address, optionally with `SOFTVERBS_FAULTS` on both
//! sides. Shared by netns_programs.rs (a clean link) and lossy_programs.rs
//! (5 % loss, duplication and reordering): the same programs, the same
//! checks of what each prints.
#![allow(dead_code)]

use std::process::{Command, Stdio};
use testkit::{text, KillOnDrop, Netns};

use crate::common;

/// How many address pairs (lanes) the hosts have: lane `k` is
/// `10.81.0.{2k+1}` on the first host and `10.81.0.{2k+2}` on the second, so
/// programs running at once each have addresses of their own (no sharing
/// of an address between processes that start and end at different times).
pub const LANES: usize = 10;

/// Every program a suite runs.
pub const PROGRAMS: [&str; 10] = [
    "udaddy",
    "mckey",
    "rdma_server",
    "rdma_xserver",
    "cmtime",
    "ib_write_bw",
    "ib_send_lat",
    "ib_read_bw",
    "qperf",
    "stdbuf",
];

pub struct Hosts {
    pub ns: Netns,
    /// `SOFTVERBS_FAULTS` of every program, if any.
    pub faults: Option<String>,
}

impl Hosts {
    /// The two namespaces with [`LANES`] addresses each, IPv4 multicast routed
    /// over the veth in both (mckey's group traffic crosses the link); `None`
    /// (the test skips) when a program is missing or namespaces cannot be
    /// made. Each test file makes its own pair of namespaces, so the files may
    /// use the same addresses.
    pub fn new(tag: &str, faults: Option<&str>) -> Option<Hosts> {
        if !PROGRAMS.iter().all(|p| common::have(p)) || !common::have("ip") {
            return None;
        }
        let Some(ns) = Netns::create(tag, 2) else {
            eprintln!("skipping: network namespaces need root");
            return None;
        };
        let addr = |k: usize, host: usize| format!("10.81.0.{}", 2 * k + host + 1);
        for k in 0..LANES {
            for host in 0..2 {
                ns.addr(host, &format!("{}/24", addr(k, host)));
            }
        }
        // Towards the peer's address of a lane, the lane's own address is
        // the source (not the link's first address): the client's device
        // is the one a route to its server resolves to.
        for k in 1..LANES {
            for host in 0..2 {
                ns.route_from(host, &addr(k, 1 - host), &addr(k, host));
            }
        }
        ns.route(0, "224.0.0.0/4");
        ns.route(1, "224.0.0.0/4");
        Some(Hosts {
            ns,
            faults: faults.map(str::to_owned),
        })
    }

    /// Lane `k` with its server on host `s` (0 or 1), its client on the other.
    pub fn lane(&self, k: usize, s: usize) -> Lane<'_> {
        assert!(k < LANES && s < 2);
        Lane {
            h: self,
            s,
            addrs: [0, 1].map(|host| format!("10.81.0.{}", 2 * k + host + 1)),
        }
    }
}

/// One program's two ends: the server on host `s`, the client on `1 - s`,
/// each with its address of the lane.
pub struct Lane<'a> {
    pub h: &'a Hosts,
    pub s: usize,
    pub addrs: [String; 2],
}

impl Lane<'_> {
    /// The server's address.
    pub fn srv(&self) -> &str {
        &self.addrs[self.s]
    }

    /// The client's address.
    pub fn cli(&self) -> &str {
        &self.addrs[1 - self.s]
    }

    /// The server's namespace.
    pub fn srv_ns(&self) -> &str {
        &self.h.ns.names[self.s]
    }

    fn env(&self, c: &mut Command, host: usize) {
        c.env("LD_LIBRARY_PATH", common::lib_dir())
            .env("SOFTVERBS_ADDR", &self.addrs[host])
            .env("SOFTVERBS_LOG", "warn");
        if let Some(f) = &self.h.faults {
            c.env("SOFTVERBS_FAULTS", f);
        }
    }

    /// `args` as the client, bounded by `secs` seconds, its output
    /// line-buffered (`stdbuf -oL`: what it printed before a timeout is
    /// kept); what it printed and whether it exited 0.
    pub fn client(&self, secs: u32, args: &[&str]) -> (String, bool) {
        let host = 1 - self.s;
        let mut argv = vec!["stdbuf", "-oL"];
        argv.extend(args);
        let mut c = Netns::exec(&self.h.ns.names[host], secs, &argv);
        self.env(&mut c, host);
        let o = c.output().unwrap();
        (text(&o), o.status.success())
    }

    /// `args` started as the server, its output line-buffered and piped; it
    /// is killed by PID when dropped (`ip netns exec` and `stdbuf` exec in
    /// place: the PID is the program's).
    pub fn server(&self, args: &[&str]) -> KillOnDrop {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", self.srv_ns(), "stdbuf", "-oL"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        self.env(&mut c, self.s);
        KillOnDrop(c.spawn().unwrap())
    }

    /// Waits until a device is up at `addr` (or has joined the group
    /// `addr`) in the server's namespace.
    pub fn wait_server(&self, addr: &str) {
        testkit::wait_device_in(Some(self.srv_ns()), addr);
    }

    /// Starts `server`, then runs `client` (again while it is refused because
    /// the server is not listening yet, at most 20 times, each bounded by
    /// 30 s); then gives the server `grace` seconds to end by itself (1 s
    /// when the client failed). Returns (server output, client output,
    /// whether the client exited 0).
    pub fn pair(&self, server: &[&str], client: &[&str], grace: u64) -> (String, String, bool) {
        let mut srv = self.server(server);
        self.wait_server(self.srv());
        let (mut c, mut c_ok) = (String::new(), false);
        for _ in 0..20 {
            std::thread::sleep(std::time::Duration::from_millis(250));
            (c, c_ok) = self.client(30, client);
            if c_ok || !refused(&c) {
                break;
            }
        }
        let (s_out, _) = srv.finish_within(if c_ok { grace } else { 1 });
        (s_out, c, c_ok)
    }
}

/// Whether a client was refused because its server was not listening yet:
/// REJECTED (perftest names the event by its number) or UNREACHABLE.
pub fn refused(t: &str) -> bool {
    t.contains("REJECTED")
        || t.contains("Unexpected CM event bl blka 8")
        || t.contains("UNREACHABLE")
}

/// Asserts that `t` contains every one of `wants`.
pub fn has_all(who: &str, t: &str, wants: &[&str]) {
    for w in wants {
        assert!(t.contains(w), "{who}: no {w:?} in:\n{t}");
    }
}

/// Refusals (` refused (` lines of the library's log) other than the EBUSY
/// ones a program's own teardown order causes (it destroys a CQ, channel or
/// PD its QPs or MRs still use: rdma-core refuses those too).
pub fn no_refusals(who: &str, t: &str) {
    let r: Vec<&str> = t
        .lines()
        .filter(|l| l.contains(" refused ("))
        .filter(|l| {
            !(l.contains("destroy_cq refused (EBUSY)")
                || l.contains("ibv_destroy_comp_channel refused (EBUSY)")
                || l.contains("dealloc_pd refused (EBUSY)"))
        })
        .collect();
    assert!(
        r.is_empty(),
        "{who}: unexpected refusals:\n{}",
        r.join("\n")
    );
}

/// udaddy (RDMA_PS_UDP: SIDR_REQ/SIDR_REP, then `messages` datagrams each
/// way).
///
/// With faults, udaddy's datagrams are lost as UD datagrams are (nothing
/// resends them, with any stack) and a side missing one waits for it: what
/// must hold then is that the SIDR exchange resolves despite lost MADs (the
/// client starts its transfers only once its connection is ESTABLISHED) and
/// the server receives; the client is given 12 s, and the run must be
/// complete (both sides' status 0) whenever the client exits by itself.
pub fn udaddy(l: &Lane, messages: &str) {
    let lossy = l.h.faults.is_some();
    let mut srv = l.server(&["udaddy", "-b", l.srv(), "-C", messages]);
    l.wait_server(l.srv());
    let (cli, c_ok) = l.client(
        if lossy { 12 } else { 30 },
        &["udaddy", "-s", l.srv(), "-C", messages],
    );
    let (srv, _) = srv.finish_within(if c_ok { 10 } else { 1 });
    let connected = ["udaddy: connecting", "initiating data transfers"];
    has_all("udaddy client", &cli, &connected);
    has_all("udaddy server", &srv, &["receiving data transfers"]);
    no_refusals("udaddy client", &cli);
    no_refusals("udaddy server", &srv);
    if !lossy || c_ok {
        for (who, t) in [("udaddy server", &srv), ("udaddy client", &cli)] {
            has_all(who, t, &["data transfers complete", "return status 0"]);
        }
        has_all("udaddy server", &srv, &["sending replies"]);
        assert!(c_ok, "udaddy client:\n{cli}");
    }
}

/// mckey (RDMA_PS_UDP multicast) across the link: the receiver (the lane's
/// server) joins `group` and ends when all `count` datagrams arrived; the
/// sender joins and sends them to the group's address vector. Both print
/// the group's MGID. With faults a lost datagram leaves the receiver waiting
/// (UD, as for udaddy): the joins and the sender must complete, and the
/// receiver, given 10 s, must have completed if it exited.
pub fn mckey(l: &Lane, group: &str, count: &str) {
    let mut recv = l.server(&["mckey", "-m", group, "-b", l.srv(), "-C", count]);
    // Its QP is attached once its device holds the group socket; the sender
    // sends 3 s after its own join (mckey's pause).
    l.wait_server(group);
    let (snd, snd_ok) = l.client(
        30,
        &["mckey", "-m", group, "-b", l.cli(), "-s", "-C", count],
    );
    let (r, r_ok) = recv.finish_within(10);
    let joined = format!("mckey: joined dgid: ::ffff:{group} mlid 0x0 sl 0");
    let done = ["data transfers complete", "return status 0"];
    has_all(
        "mckey sender",
        &snd,
        &[&joined, "initiating data transfers"],
    );
    has_all("mckey sender", &snd, &done);
    has_all("mckey receiver", &r, &[&joined, "receiving data transfers"]);
    if l.h.faults.is_none() || r_ok {
        has_all("mckey receiver", &r, &done);
        assert!(r_ok, "mckey receiver:\n{r}");
    }
    for (who, t) in [("mckey receiver", &r), ("mckey sender", &snd)] {
        assert!(!t.contains("failure leaving"), "{who}:\n{t}");
        no_refusals(who, t);
    }
    assert!(snd_ok, "mckey sender:\n{snd}");
}

/// rdma_server/rdma_client (rdma_verbs.h's synchronous calls: one SEND each
/// way, then both disconnect). The server is given 120 s to end. With faults
/// two waits can add up, as with any stack: the client's ACK of the server's
/// SEND may be lost after the client has gone, so the send completes only
/// when its retries run out (8 × 2.1 s, rdma_cm's local ACK timeout on
/// RoCE); and a synchronous `rdma_disconnect` waits for DISCONNECTED
/// (rdma-core's `ucma_complete`), which, when the DREQ or DREP is lost and
/// the client's process (and so its CM) has exited, comes only when the
/// DREQ's retries run out (about 65 s; measured 66 s under load). A kernel
/// CM would still answer that DREQ after its process exited; ours lives in
/// the process (README, limits).
pub fn rdma_server(l: &Lane, port: &str) {
    let (srv, cli, c_ok) = l.pair(
        &["rdma_server", "-s", l.srv(), "-p", port],
        &["rdma_client", "-s", l.srv(), "-p", port],
        120,
    );
    has_all("rdma_server", &srv, &["rdma_server: end 0"]);
    has_all("rdma_client", &cli, &["rdma_client: end 0"]);
    assert!(c_ok, "rdma_client:\n{cli}");
    no_refusals("rdma_server", &srv);
    no_refusals("rdma_client", &cli);
}

/// rdma_xserver/rdma_xclient over XRC (`-c x`): an XRC_SEND QP connects to an
/// XRC_RECV QP and the message arrives through the server's XRC SRQ (the
/// server given 120 s to end, as rdma_server).
pub fn rdma_xserver(l: &Lane, port: &str) {
    let (srv, cli, c_ok) = l.pair(
        &["rdma_xserver", "-c", "x", "-p", port],
        &["rdma_xclient", "-c", "x", "-s", l.srv(), "-p", port],
        120,
    );
    has_all("rdma_xserver", &srv, &["rdma_xserver: end 0"]);
    has_all("rdma_xclient", &cli, &["rdma_xclient: end 0"]);
    assert!(c_ok, "rdma_xclient:\n{cli}");
    no_refusals("rdma_xserver", &srv);
    no_refusals("rdma_xclient", &cli);
}

/// cmtime with `n` connections: the client's every step completes and it
/// prints its step table, with no error event; the server runs until killed
/// (by design).
pub fn cmtime(l: &Lane, port: &str, n: &str) {
    let (_, cli, c_ok) = l.pair(
        &["cmtime", "-b", l.srv(), "-c", n, "-p", port],
        &["cmtime", "-s", l.srv(), "-c", n, "-p", port],
        0,
    );
    assert!(c_ok, "cmtime -s failed:\n{cli}");
    has_all(
        "cmtime client",
        &cli,
        &[
            "creating id",
            "resolving address",
            "resolving route",
            "creating qp",
            "connecting",
            "disconnecting",
            "destroying id",
            "connect      :",
            "disconnect   :",
            "destroy      :",
        ],
    );
    assert!(!cli.contains("event: RDMA_CM_EVENT"), "{cli}");
    no_refusals("cmtime client", &cli);
}

/// A perftest pair over rdma_cm (`-R`) with `extra` arguments: both sides
/// print the rdma_cm data-exchange method, the peer's GID and their result
/// row (`row`: its first columns).
///
/// perftest -R's server destroys its listening id once the control
/// connection's request came and binds and listens again for the data QP
/// only after setting up its resources, while its client connects the data
/// QP at once: a REQ that comes while the port is bound by nobody is
/// rejected (reason 8, no listener), as with the kernel's CM, and perftest
/// gives up. Server captures show exactly that: control REQ/REP/RTU, the
/// listener destroyed, the data REQ and its REJ, and only then the server's
/// second rdma_bind_addr (about 1 ms later; 8 of 27 runs of ib_send_lat
/// under load). That race is perftest's; such a run is started again, at
/// most 8 times (see programs.rs `perftest`; with faults the race is won
/// less often). Each retry is printed.
pub fn perftest(l: &Lane, prog: &str, port: &str, extra: &[&str], row: &str) {
    let mut server: Vec<&str> = vec![prog, "-R", "-p", port];
    server.extend(extra);
    let mut client = server.clone();
    client.push(l.srv());
    let (mut srv, mut cli, mut c_ok) = (String::new(), String::new(), false);
    for attempt in 1..=8 {
        let mut p = l.server(&server);
        l.wait_server(l.srv());
        std::thread::sleep(std::time::Duration::from_secs(1));
        (cli, c_ok) = l.client(60, &client);
        srv = p.finish_within(if c_ok { 20 } else { 1 }).0;
        if !refused(&cli) {
            break;
        }
        eprintln!("{prog}: attempt {attempt} REJECTED (reason 8)");
    }
    assert!(c_ok, "{prog} client failed:\n{cli}\nserver:\n{srv}");
    let gid = |ip: &str| {
        let o: Vec<String> = ip.split('.').map(|b| format!("{b:0>2}")).collect();
        format!("GID: 00:00:00:00:00:00:00:00:00:00:255:255:{}", o.join(":"))
    };
    for (who, t, peer) in [("server", &srv, l.cli()), ("client", &cli, l.srv())] {
        let who = format!("{prog} {who}");
        has_all(
            &who,
            t,
            &[
                "Data ex. method : rdma_cm",
                "rdma_cm QPs\t : ON",
                &gid(peer),
            ],
        );
        assert!(
            t.lines().any(|l| l.trim_start().starts_with(row)),
            "{who}: no result row {row:?}:\n{t}"
        );
        no_refusals(&who, t);
    }
}

/// qperf with the connection manager (`-cm1`): its server on the lane's
/// server host, the client's `rc_bw` and `rc_lat` (1 s each) print their
/// result. qperf's server forks a child per test, which opens the device,
/// binds an ephemeral port, sends the port to the client over TCP and only
/// then listens (qperf's rdma.c `cm_open_server`): the client's REQ may come
/// before the listen, and the CM holds it for the listen (spec/cm.md 8.4).
/// No retry: a REJECTED run fails. Each test starts only once the previous
/// child's device has closed.
pub fn qperf(l: &Lane, port: &str) {
    let mut srv = l.server(&["qperf", "-lp", port]);
    let ns = Some(l.srv_ns());
    testkit::wait_tcp_listen_in(ns, port.parse().unwrap());
    for (test, want) in [
        ("rc_bw", "rc_bw:\n    bw  ="),
        ("rc_lat", "rc_lat:\n    latency  ="),
    ] {
        testkit::wait_device_gone_in(ns, l.srv());
        let (t, ok) = l.client(
            30,
            &["qperf", l.srv(), "-lp", port, "-t", "1", "-cm1", test],
        );
        if !ok {
            let (srv, _) = srv.finish_within(0);
            panic!("qperf {test} failed:\n{t}\nserver:\n{srv}");
        }
        has_all(&format!("qperf {test}"), &t, &[want]);
        no_refusals(&format!("qperf {test}"), &t);
    }
}

/// Set, the lossy run includes qperf. Off by default: qperf's server child
/// exits as soon as it sees DISCONNECTED, and its CM (in the process) goes
/// with it. When its DREP to the client's DREQ is lost, nothing at that
/// address answers the client's resent DREQs (the kernel's CM outlives the
/// process and answers them), so the client waits for DISCONNECTED until its
/// DREQ retries run out (about 65 s), beyond the test's bound.
pub const LOSSY_QPERF: &str = "SOFTVERBS_TEST_LOSSY_QPERF";

/// Every program of the list (rping and ucmatose: programs.rs), each
/// on a lane of its own and all at once (their waits overlap; each has its
/// own addresses), the servers in alternating namespaces so that each
/// namespace serves and connects. `quick`: counts for a lossy link, where
/// each lost last packet costs a local ACK timeout (2.1 s, rdma_cm's on
/// RoCE) and each lost MAD a CM timeout (4-6 s).
pub fn every_program(h: &Hosts, quick: bool) {
    let t0 = std::time::Instant::now();
    let (bw, lat, cm): (&[&str], &[&str], &str) = if quick {
        (&["-n", "5", "-s", "1024"], &["-n", "5"], "4")
    } else {
        (&["-n", "20", "-s", "4096"], &["-n", "20"], "10")
    };
    let n = bw[1];
    let bw_row = format!("{}       {n}", bw[3]);
    let lat_row = format!("2       {n}");
    let timed = |what: &'static str, f: &(dyn Fn() + Sync)| {
        let t = std::time::Instant::now();
        f();
        eprintln!("{what}: {:.1} s", t.elapsed().as_secs_f64());
    };
    std::thread::scope(|sc| {
        sc.spawn(|| timed("udaddy", &|| udaddy(&h.lane(0, 0), "5")));
        sc.spawn(|| timed("mckey", &|| mckey(&h.lane(1, 1), "239.1.81.1", "5")));
        sc.spawn(|| timed("rdma_server", &|| rdma_server(&h.lane(2, 0), "7611")));
        sc.spawn(|| timed("rdma_xserver", &|| rdma_xserver(&h.lane(3, 1), "7612")));
        sc.spawn(|| timed("cmtime", &|| cmtime(&h.lane(4, 0), "7613", cm)));
        sc.spawn(|| {
            timed("ib_write_bw", &|| {
                perftest(&h.lane(5, 1), "ib_write_bw", "7614", bw, &bw_row);
            });
        });
        sc.spawn(|| {
            timed("ib_send_lat", &|| {
                perftest(&h.lane(6, 0), "ib_send_lat", "7615", lat, &lat_row);
            });
        });
        sc.spawn(|| {
            timed("ib_read_bw", &|| {
                perftest(&h.lane(7, 1), "ib_read_bw", "7616", bw, &bw_row);
            });
        });
        if !quick || std::env::var_os(LOSSY_QPERF).is_some() {
            sc.spawn(|| timed("qperf", &|| qperf(&h.lane(8, 0), "19821")));
        } else {
            eprintln!("qperf: not run with faults unless {LOSSY_QPERF} is set (see its doc)");
        }
    });
    eprintln!("all: {:.1} s", t0.elapsed().as_secs_f64());
}
