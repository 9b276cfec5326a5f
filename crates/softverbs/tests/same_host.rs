//! The same-host path (`sv_io`'s `shm` module, on by default,
//! `SOFTVERBS_SHM=0` turns it off) between two processes: RC WRITE, READ and
//! SEND of 64 KiB and UD SENDs go through the shared rings (the counters
//! prove it: no socket send or receive call at all; RC datagrams skip the
//! ICRC check, UD ones do not), data intact; with the path off on one end
//! both go by UDP; faults (corruption caught by the ICRC too) and capture work
//! on it (the capture's packets carry valid ICRCs, and tshark finds nothing
//! malformed); a peer killed in the middle of a stream of WRITEs leaves the
//! survivor with `RETRY_EXC_ERR`, not a hang.
//!
//! Both ends are this test binary run again with `SV_SAME_HOST` set (the
//! `peer` entry point); the test relays their QP numbers and keys and reads
//! their counters. Children are ended only by their PID (`Child::kill`).
mod pair;
mod tshark;

use pair::*;
use softverbs::*;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const CHILD_VAR: &str = "SV_SAME_HOST";
const DEADLINE: Duration = Duration::from_secs(60);
const MR_LEN: usize = 1 << 20;
const BIG: usize = 64 << 10;
/// Where the server keeps what the client READs.
const READ_AT: usize = 512 << 10;
/// Where the client's SENDs land at the server.
const SEND_AT: usize = 768 << 10;
const UD_AT: usize = 960 << 10;
const UD_LEN: usize = 1000;

fn line(lines: &mut std::io::Lines<std::io::StdinLock<'_>>, prefix: &str) -> Vec<u64> {
    let l = lines
        .next()
        .and_then(Result::ok)
        .unwrap_or_else(|| panic!("no {prefix} line"));
    let rest = l.strip_prefix(prefix).unwrap_or_else(|| panic!("{l:?}"));
    rest.split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect()
}

fn say(text: &str) {
    println!("{text}");
    std::io::stdout().flush().unwrap();
}

/// The counters once they stopped moving (at most 2 s): a late ACK may be
/// on its way, and a datagram counted but not yet captured (the progress
/// thread does one after the other) would make the snapshot disagree with
/// itself.
fn counters_line(what: &str, side: &Side) -> String {
    let mut all = side.ctx.counters();
    for _ in 0..40 {
        std::thread::sleep(Duration::from_millis(50));
        let again = side.ctx.counters();
        if again == all {
            break;
        }
        all = again;
    }
    let (c, e) = (all.io, all.engine);
    format!(
        "{what} shm_sent={} shm_received={} shm_fallbacks={} send_calls={} recv_calls={} \
         fault_drops={} pcap_records={} datagrams_sent={} datagrams_received={} \
         fault_corruptions={} drop_icrc={} icrc_unchecked={} caller_datagrams={} \
         poll_receive_datagrams={} packets_sent={} runs_sent={} runs_received={}",
        c.shm_datagrams_sent,
        c.shm_datagrams_received,
        c.shm_fallbacks,
        c.send_calls,
        c.recv_calls,
        c.fault_drops,
        c.pcap_records,
        c.datagrams_sent,
        c.datagrams_received,
        c.fault_corruptions,
        e.drop_icrc,
        e.icrc_unchecked,
        c.caller_datagrams,
        c.poll_receive_datagrams,
        e.qps.packets_sent,
        e.qps.runs_sent,
        e.qps.runs_received,
    )
}

/// One end: `SV_SAME_HOST=<role>,<own ip>,<scenario>` (role `server` or
/// `client`; scenario `ops`, `rc` (ops without UD, whose losses nobody
/// repairs) or `stream`).
#[test]
fn peer() {
    let Ok(spec) = std::env::var(CHILD_VAR) else {
        return;
    };
    let f: Vec<&str> = spec.split(',').collect();
    let (role, ip, scenario) = (f[0], f[1].parse::<IpAddr>().unwrap(), f[2]);
    let cfg = DeviceConfig {
        name: format!("shm-{role}"),
        addrs: vec![ip],
        active_mtu: Mtu::Mtu4096,
    };
    let side = Side::new(Device::with_config(cfg).open().unwrap(), MR_LEN);
    let rc = side.pd.create_rc_qp(&side.init()).unwrap();
    let ud = ud_qp(&side);
    say(&format!(
        "INFO {} {} {} {}",
        rc.qp_num(),
        ud.qp_num(),
        side.mr.addr(),
        side.mr.rkey()
    ));
    let mut lines = std::io::stdin().lines();
    // The peer: its address (as u32), RC QPN, UD QPN, MR address, rkey.
    let p = line(&mut lines, "PEER ");
    let peer_ip = IpAddr::from(std::net::Ipv4Addr::from(p[0] as u32));
    let opts = RcOpts {
        timeout: 12,
        mtu: Mtu::Mtu4096,
        ..RcOpts::default()
    };
    rc_connect(&rc, Gid::from(peer_ip), p[1] as u32, &opts);
    let remote = |off: usize| RdmaTarget {
        remote_addr: p[3] + off as u64,
        rkey: p[4] as u32,
    };
    match (role, scenario) {
        ("server", _) => serve(&side, &rc, &ud, scenario == "ops", &mut lines),
        ("client", "ops" | "rc") => {
            warm_up(&side, &rc, &remote);
            say(&counters_line("BASE", &side));
            let _ = line(&mut lines, "RUN");
            let ah = side
                .pd
                .create_ah(&AhAttr::roce(Gid::from(peer_ip), 0))
                .unwrap();
            let ud = (scenario == "ops").then_some((&ud, &ah, p[2] as u32));
            operations(&side, &rc, ud, remote);
            say(&counters_line("COUNTERS", &side));
        }
        ("client", "stream") => stream(&side, &rc, remote, &mut lines),
        other => panic!("unknown role {other:?}"),
    }
    // Stay until told (or the pipe closes).
    let _ = lines.next();
}

/// Small WRITEs until the path carries both directions (bounded; with the
/// path off it just ends), so what follows is measured on an established path.
fn warm_up(side: &Side, rc: &QueuePair<Rc>, remote: &impl Fn(usize) -> RdmaTarget) {
    let sg = [side.mr.sge(0, 8)];
    for i in 0..100 {
        let wr = send_wr(
            1000 + i,
            WrOpcode::RdmaWrite,
            &sg,
            WrTarget::Rdma(remote(0)),
            SIG,
        );
        rc.post_send(&wr).unwrap();
        assert_eq!(wait(&side.scq, 1)[0].status, WcStatus::Success);
        let c = side.ctx.counters().io;
        if c.shm_datagrams_sent > 0 && c.shm_datagrams_received > 0 {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn serve(
    side: &Side,
    rc: &QueuePair<Rc>,
    ud: &QueuePair<Ud>,
    with_ud: bool,
    lines: &mut std::io::Lines<std::io::StdinLock<'_>>,
) {
    assert!(side.mr.write(READ_AT, &pattern(BIG, 0x5a)));
    for i in 0..2 {
        let sg = [side.mr.sge(SEND_AT + i * BIG, BIG as u32)];
        rc.post_recv(&recv_wr(i as u64, &sg)).unwrap();
    }
    for i in 0..4 {
        let sg = [side.mr.sge(UD_AT + i * 2048, 2048)];
        ud.post_recv(&recv_wr(10 + i as u64, &sg)).unwrap();
    }
    say("READY");
    let _ = line(lines, "BASE");
    say(&counters_line("BASE", side));
    let _ = line(lines, "CHECK");
    // Two RC receives and four UD ones, all complete and intact.
    let wc = wait(&side.rcq, if with_ud { 6 } else { 2 });
    assert!(wc.iter().all(|w| w.status == WcStatus::Success), "{wc:?}");
    for i in 0..4 {
        assert_eq!(
            read(&side.mr, i * BIG, BIG),
            pattern(BIG, i as u8),
            "WRITE {i}"
        );
    }
    for i in 0..2 {
        let got = read(&side.mr, SEND_AT + i * BIG, BIG);
        assert_eq!(got, pattern(BIG, 0x10 + i as u8), "SEND {i}");
    }
    for i in 0..if with_ud { 4 } else { 0 } {
        let got = read(&side.mr, UD_AT + i * 2048 + 40, UD_LEN);
        assert_eq!(got, pattern(UD_LEN, 0x20 + i as u8), "UD SEND {i}");
    }
    say(&counters_line("COUNTERS", side));
}

fn operations(
    side: &Side,
    rc: &QueuePair<Rc>,
    ud: Option<(&QueuePair<Ud>, &AddressHandle, u32)>,
    remote: impl Fn(usize) -> RdmaTarget,
) {
    let mr = &side.mr;
    for i in 0..4 {
        assert!(mr.write(i * BIG, &pattern(BIG, i as u8)));
        let sg = [mr.sge(i * BIG, BIG as u32)];
        let wr = send_wr(
            i as u64,
            WrOpcode::RdmaWrite,
            &sg,
            WrTarget::Rdma(remote(i * BIG)),
            SIG,
        );
        rc.post_send(&wr).unwrap();
    }
    let sg = [mr.sge(READ_AT, BIG as u32)];
    let wr = send_wr(
        4,
        WrOpcode::RdmaRead,
        &sg,
        WrTarget::Rdma(remote(READ_AT)),
        SIG,
    );
    rc.post_send(&wr).unwrap();
    for i in 0..2 {
        let at = SEND_AT + i * BIG;
        assert!(mr.write(at, &pattern(BIG, 0x10 + i as u8)));
        let sg = [mr.sge(at, BIG as u32)];
        rc.post_send(&send_wr(
            5 + i as u64,
            WrOpcode::Send,
            &sg,
            WrTarget::None,
            SIG,
        ))
        .unwrap();
    }
    let wc = wait(&side.scq, 7);
    assert!(wc.iter().all(|w| w.status == WcStatus::Success), "{wc:?}");
    assert_eq!(read(mr, READ_AT, BIG), pattern(BIG, 0x5a), "READ");
    let Some((ud, ah, peer_ud)) = ud else { return };
    for i in 0..4 {
        let at = UD_AT + i * 2048;
        assert!(mr.write(at, &pattern(UD_LEN, 0x20 + i as u8)));
        let sg = [mr.sge(at, UD_LEN as u32)];
        let wr = send_wr(
            20 + i as u64,
            WrOpcode::Send,
            &sg,
            ah.ud(peer_ud, QKEY),
            SIG,
        );
        ud.post_send(&wr).unwrap();
        // One at a time: UD has no retransmission, and a receive is posted for each.
        let wc = wait(&side.scq, 1);
        assert_eq!(wc[0].status, WcStatus::Success);
    }
}

/// WRITEs, 16 in flight, until one fails: its status is printed.
fn stream(
    side: &Side,
    rc: &QueuePair<Rc>,
    remote: impl Fn(usize) -> RdmaTarget,
    lines: &mut std::io::Lines<std::io::StdinLock<'_>>,
) {
    let _ = line(lines, "GO");
    let sg = [side.mr.sge(0, 4096)];
    let post = |id: u64| {
        let wr = send_wr(id, WrOpcode::RdmaWrite, &sg, WrTarget::Rdma(remote(0)), SIG);
        rc.post_send(&wr).unwrap();
    };
    let mut next = 0u64;
    for _ in 0..16 {
        post(next);
        next += 1;
    }
    let mut done = 0u64;
    let start = Instant::now();
    loop {
        assert!(start.elapsed() < DEADLINE, "no error within {DEADLINE:?}");
        let wc = side.scq.wait(1, Duration::from_secs(1));
        let Some(w) = wc.first() else { continue };
        if w.status != WcStatus::Success {
            say(&format!("STATUS {:?} after {done}", w.status));
            say(&counters_line("COUNTERS", side));
            return;
        }
        done += 1;
        if done == 200 {
            say("STREAMING");
        }
        post(next);
        next += 1;
    }
}

/// One end as the test sees it.
struct End {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    info: Vec<u64>,
    ip: IpAddr,
}

impl End {
    fn spawn(role: &str, ip: IpAddr, scenario: &str, env: &[(&str, String)]) -> End {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", "peer", "--nocapture", "--test-threads=1"])
            .env(CHILD_VAR, format!("{role},{ip},{scenario}"))
            .env_remove("SOFTVERBS_SHM")
            .env_remove("SOFTVERBS_FAULTS")
            .env_remove("SOFTVERBS_PCAP")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut e = End {
            child,
            stdin,
            lines,
            info: Vec::new(),
            ip,
        };
        e.info = e
            .expect("INFO ")
            .split_whitespace()
            .map(|v| v.parse().unwrap())
            .collect();
        e
    }

    fn expect(&mut self, prefix: &str) -> String {
        let deadline = Instant::now() + DEADLINE;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    if let Some((_, rest)) = l.split_once(prefix) {
                        return rest.trim().to_string();
                    }
                }
                Err(_) => break,
            }
        }
        let _ = self.child.kill();
        panic!("{} never printed {prefix}", self.ip);
    }

    fn counters(&mut self, what: &str) -> HashMap<String, u64> {
        self.expect(what)
            .split_whitespace()
            .map(|kv| {
                let (k, v) = kv.split_once('=').unwrap();
                (k.to_string(), v.parse().unwrap())
            })
            .collect()
    }

    fn tell(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn introduce(&mut self, other: &End) {
        let IpAddr::V4(v4) = other.ip else {
            unreachable!()
        };
        let i = &other.info;
        self.tell(&format!(
            "PEER {} {} {} {} {}",
            u32::from(v4),
            i[0],
            i[1],
            i[2],
            i[3]
        ));
    }

    fn finish(mut self) {
        self.tell("EXIT");
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "{}: {status}", self.ip);
                return;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("{} did not exit", self.ip);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

type Counts = HashMap<String, u64>;

/// Runs `scenario` (`ops` or `rc`) with `env_server`/`env_client`: both ends'
/// counters, as (server, client), each (all, since the warm-up).
fn run_ops(
    net: u8,
    scenario: &str,
    env_server: &[(&str, String)],
    env_client: &[(&str, String)],
) -> ((Counts, Counts), (Counts, Counts)) {
    let (sip, cip) = (
        private_addr(&format!("127.7.{net}.1")),
        private_addr(&format!("127.7.{net}.2")),
    );
    let mut server = End::spawn("server", sip, scenario, env_server);
    let mut client = End::spawn("client", cip, scenario, env_client);
    server.introduce(&client);
    client.introduce(&server);
    server.expect("READY");
    let cb = client.counters("BASE ");
    server.tell("BASE");
    let sb = server.counters("BASE ");
    client.tell("RUN");
    let c = client.counters("COUNTERS ");
    server.tell("CHECK");
    let s = server.counters("COUNTERS ");
    server.finish();
    client.finish();
    let delta = |all: &Counts, base: &Counts| -> Counts {
        all.iter().map(|(k, v)| (k.clone(), v - base[k])).collect()
    };
    let (ds, dc) = (delta(&s, &sb), delta(&c, &cb));
    ((s, ds), (c, dc))
}

fn on() -> (&'static str, String) {
    ("SOFTVERBS_SHM", "1".into())
}

fn off() -> (&'static str, String) {
    ("SOFTVERBS_SHM", "0".into())
}

#[test]
fn with_it_on_rc_and_ud_go_through_the_shared_rings() {
    let ((s_all, s), (c_all, c)) = run_ops(24, "ops", &[on()], &[on()]);
    for (who, k) in [("server", &s_all), ("client", &c_all)] {
        assert_eq!(k["shm_fallbacks"], 0, "{who}: {k:?}");
    }
    // Once the path is up (after the warm-up), not one socket call.
    for (who, k) in [("server", &s), ("client", &c)] {
        assert!(k["shm_sent"] > 0 && k["shm_received"] > 0, "{who}: {k:?}");
        assert_eq!(
            (k["send_calls"], k["recv_calls"]),
            (0, 0),
            "{who} used the socket: {k:?}"
        );
    }
    // 4 WRITEs + 2 SENDs of 16 packets, the READ request, 4 UD SENDs;
    // the messages' packets partly in runs (proto::run), fewer datagrams.
    assert!(c["packets_sent"] >= 4 * 16 + 2 * 16 + 1 + 4, "{c:?}");
    assert!(
        c["runs_sent"] > 0 && c["shm_sent"] < c["packets_sent"],
        "{c:?}"
    );
    assert_eq!(c["runs_sent"], s["runs_received"], "{c:?} {s:?}");
    assert_eq!(c["shm_sent"], s["shm_received"], "nothing lost on the way");
    assert_eq!(s["shm_sent"], c["shm_received"]);
    // RC datagrams from the ring skip the ICRC check; nothing was dropped.
    for (who, k) in [("server", &s), ("client", &c)] {
        assert!(k["icrc_unchecked"] > 0, "{who}: {k:?}");
        assert_eq!(k["drop_icrc"], 0, "{who}: {k:?}");
    }
    // The UD SENDs were checked: fewer unchecked than received.
    assert!(s["icrc_unchecked"] < s["shm_received"], "{s:?}");
    // The application's posting thread wrote datagrams into the rings itself.
    assert!(c["caller_datagrams"] > 0, "{c:?}");
}

#[test]
fn on_by_default_and_off_by_the_environment() {
    // Neither end sets SOFTVERBS_SHM: the path carries the data.
    let ((_, s), (_, c)) = run_ops(25, "ops", &[], &[]);
    for (who, k) in [("server", &s), ("client", &c)] {
        assert!(k["shm_sent"] > 0 && k["shm_received"] > 0, "{who}: {k:?}");
    }
    // Both set SOFTVERBS_SHM=0: no path is opened or offered, both go by UDP.
    let ((s, _), (c, _)) = run_ops(23, "ops", &[off()], &[off()]);
    for (who, k) in [("server", &s), ("client", &c)] {
        assert_eq!((k["shm_sent"], k["shm_received"]), (0, 0), "{who}: {k:?}");
        assert!(k["send_calls"] > 0 && k["recv_calls"] > 0, "{who}: {k:?}");
    }
}

#[test]
fn a_peer_without_the_path_gets_udp() {
    // The client asks; the server has no path open: refused, UDP, data intact.
    let ((s, _), (c, _)) = run_ops(26, "ops", &[off()], &[on()]);
    assert!(c["shm_fallbacks"] >= 1, "{c:?}");
    assert_eq!((c["shm_sent"], s["shm_received"]), (0, 0));
    assert!(c["send_calls"] > 0);
}

#[test]
fn faults_apply_on_the_path() {
    let faults = (
        "SOFTVERBS_FAULTS",
        "loss=0.03,dup=0.02,reorder=0.02,corrupt=0.02,seed=5".to_string(),
    );
    let ((_, s), (_, c)) = run_ops(27, "rc", &[on(), faults.clone()], &[on(), faults]);
    assert!(s["fault_drops"] + c["fault_drops"] > 0, "{s:?} {c:?}");
    // Corruption on the path is caught as on a wire: with corruption
    // configured, no datagram skips the ICRC check, and every corrupted one
    // is dropped for it (a flipped bit in the ICRC's own bytes, or in a
    // datagram dropped by another fault first, is not seen twice).
    let corrupted = s["fault_corruptions"] + c["fault_corruptions"];
    assert!(corrupted > 0, "{s:?} {c:?}");
    for k in [&s, &c] {
        assert_eq!(k["icrc_unchecked"], 0, "{k:?}");
        assert_eq!(k["runs_sent"], 0, "faults: every packet alone, {k:?}");
    }
    assert!(s["drop_icrc"] + c["drop_icrc"] > 0, "{s:?} {c:?}");
    for k in [&s, &c] {
        assert!(k["shm_sent"] > 0 && k["shm_received"] > 0, "{k:?}");
        assert_eq!(k["send_calls"], 0, "{k:?}");
    }
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sv-same-host-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn a_capture_of_the_path_holds_valid_rocev2() {
    let (ps, pc) = (tmp("server.pcap"), tmp("client.pcap"));
    let pcap = |p: &PathBuf| ("SOFTVERBS_PCAP", p.display().to_string());
    let ((s, _), (c, _)) = run_ops(28, "ops", &[on(), pcap(&ps)], &[on(), pcap(&pc)]);
    assert!(s["shm_sent"] > 0 && c["shm_sent"] > 0);
    for k in [&s, &c] {
        assert_eq!(
            k["runs_sent"], 0,
            "a capture sees every packet alone, {k:?}"
        );
    }
    for (p, k) in [(&ps, &s), (&pc, &c)] {
        let bytes = std::fs::read(p).unwrap();
        let reader = wire::pcap::PcapReader::new(&bytes).unwrap();
        let mut n = 0u64;
        for rec in reader {
            let rec = rec.unwrap();
            let (encap, transport) = wire::encap::parse_frame(rec.data).unwrap();
            wire::icrc::verify(&encap, transport).unwrap();
            n += 1;
        }
        // Every datagram counted when the end printed its counters is in
        // the file (a late ACK may follow them).
        let want = k["datagrams_sent"] + k["datagrams_received"];
        assert_eq!(k["pcap_records"], want, "{}", p.display());
        assert!(
            n >= want && n > 0,
            "{}: {n} records, {want} counted",
            p.display()
        );
        if tshark::available() {
            let d = tshark::decode(p);
            assert_eq!(d.len() as u64, n);
            assert!(
                d.iter().all(|x| !x.malformed && x.opcode.is_some()),
                "{d:?}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(ps.parent().unwrap());
}

#[test]
fn a_killed_peer_leaves_retry_exceeded_not_a_hang() {
    let (sip, cip) = (private_addr("127.7.29.1"), private_addr("127.7.29.2"));
    let mut server = End::spawn("server", sip, "stream", &[on()]);
    let mut client = End::spawn("client", cip, "stream", &[on()]);
    server.introduce(&client);
    client.introduce(&server);
    server.expect("READY");
    client.tell("GO");
    client.expect("STREAMING");
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    let status = client.expect("STATUS ");
    let k = client.counters("COUNTERS ");
    assert!(status.starts_with("RetryExcErr"), "{status}");
    assert!(
        // 200 WRITEs completed before the kill; the first few went by UDP
        // while the server accepted the ring.
        k["shm_sent"] >= 100,
        "the stream went through the path: {k:?}"
    );
    client.finish();
}
