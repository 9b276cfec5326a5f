//! Several processes on one address, as on a RoCE NIC: two and three member
//! processes share one loopback address (each opens the device there, so each
//! binds UDP port 4791 of it) and talk RC to a hub on another address. Each
//! datagram must reach the process that owns its destination QP: every member
//! checks that each echo it gets is its own message, in order, and that its
//! engine dropped nothing for want of a QP (a misrouted datagram would be
//! exactly that). QPNs are distinct across the members. A member crashes
//! (SIGKILL) in the middle and a new one takes its slot: the survivors' and
//! the newcomer's traffic stays intact, through forwarding where the kernel's
//! socket order no longer matches the slots.
//!
//! The members are this test binary run again with `SV_SHARED_CHILD` set (the
//! `member` entry point); the hub is the test itself. Children are killed only
//! by their PID (`Child::kill`), when the test crashes one on purpose or a
//! deadline passes.
mod pair;

use pair::*;
use softverbs::*;
use std::io::{BufRead, BufReader, Write};
use std::net::IpAddr;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const CHILD_VAR: &str = "SV_SHARED_CHILD";
const DEADLINE: Duration = Duration::from_secs(60);
const MSG: usize = 64;

/// The member process: `SV_SHARED_CHILD=<shared ip>,<hub ip>,<id>,<rounds>,<pause>`:
/// before round `pause` it waits for the hub's `GO`.
#[test]
fn member() {
    let Ok(spec) = std::env::var(CHILD_VAR) else {
        return;
    };
    let f: Vec<&str> = spec.split(',').collect();
    let (ip, hub_ip): (IpAddr, IpAddr) = (f[0].parse().unwrap(), f[1].parse().unwrap());
    let (id, rounds): (u8, u32) = (f[2].parse().unwrap(), f[3].parse().unwrap());
    let pause: u32 = f[4].parse().unwrap();
    let cfg = DeviceConfig {
        name: "shared".into(),
        addrs: vec![ip],
        active_mtu: Mtu::Mtu1024,
    };
    let side = Side::new(Device::with_config(cfg).open().unwrap(), 4096);
    let qp = side.pd.create_rc_qp(&side.init()).unwrap();
    println!("QPN={}", qp.qp_num());
    std::io::stdout().flush().unwrap();
    let mut lines = BufReader::new(std::io::stdin()).lines();
    let peer: u32 = lines
        .next()
        .and_then(Result::ok)
        .and_then(|l| l.strip_prefix("PEER=").map(|p| p.parse().unwrap()))
        .expect("the hub's QPN");
    rc_connect(&qp, Gid::from(hub_ip), peer, &RcOpts::default());
    let (mr, lkey) = (&side.mr, side.mr.lkey());
    let sge = |off: u64| {
        [Sge {
            addr: mr.addr() + off,
            length: MSG as u32,
            lkey,
        }]
    };
    for seq in 0..rounds {
        if seq == pause {
            let go = lines.next().and_then(Result::ok);
            assert_eq!(go.as_deref(), Some("GO"), "member {id}: the hub's go");
        }
        let mut msg = vec![id; MSG];
        msg[1..5].copy_from_slice(&seq.to_le_bytes());
        assert!(mr.write(MSG, &msg));
        let (rs, ss) = (sge(0), sge(MSG as u64));
        qp.post_recv(&recv_wr(u64::from(seq), &rs)).unwrap();
        let wr = send_wr(u64::from(seq), WrOpcode::Send, &ss, WrTarget::None, SIG);
        qp.post_send(&wr).unwrap();
        let s = wait(&side.scq, 1);
        assert_eq!(s[0].status, WcStatus::Success, "member {id} send {seq}");
        let r = wait(&side.rcq, 1);
        assert_eq!(r[0].status, WcStatus::Success, "member {id} receive {seq}");
        assert_eq!(
            read(mr, 0, MSG),
            msg,
            "member {id}: echo {seq} is not its own message"
        );
    }
    let c = side.ctx.counters();
    assert_eq!(
        c.engine.drop_no_qp, 0,
        "member {id}: datagrams for QPs it does not have"
    );
    println!(
        "DONE forwarded={} forwards_received={} forward_drops={}",
        c.io.forwarded, c.io.forwards_received, c.io.forward_drops
    );
    std::io::stdout().flush().unwrap();
    // Stay a member of the address until the hub says so (or closes the pipe).
    let _ = lines.next();
}

/// One member process as the hub sees it.
struct Member {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    qpn: u32,
    id: u8,
}

impl Member {
    fn spawn(ip: IpAddr, hub: IpAddr, id: u8, rounds: u32, pause: u32) -> Member {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "member", "--nocapture", "--test-threads=1"])
            .env(CHILD_VAR, format!("{ip},{hub},{id},{rounds},{pause}"))
            // The members' traffic must reach them by UDP through the
            // address's socket owner (what this file tests): the same-host
            // path, which would carry it straight to each member's ring, is
            // off in the members (the hub's offers are then refused).
            .env("SOFTVERBS_SHM", "0")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut m = Member {
            child,
            stdin,
            lines,
            qpn: 0,
            id,
        };
        let line = m.expect("QPN=");
        m.qpn = line.parse().unwrap();
        m
    }

    /// The rest of the first line starting with `prefix` (bounded wait).
    fn expect(&mut self, prefix: &str) -> String {
        let deadline = Instant::now() + DEADLINE;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    // The harness may have printed "test member ... " first on the line.
                    if let Some((_, rest)) = l.split_once(prefix) {
                        return rest.trim().to_string();
                    }
                }
                Err(_) => break,
            }
        }
        let _ = self.child.kill();
        panic!("member {} never printed {prefix}", self.id);
    }

    fn tell(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// `forwarded`, `forwards_received`, `forward_drops` of its DONE line.
    fn done(&mut self) -> [u64; 3] {
        let line = self.expect("DONE ");
        let v: Vec<u64> = line
            .split_whitespace()
            .map(|kv| kv.split('=').nth(1).unwrap().parse().unwrap())
            .collect();
        [v[0], v[1], v[2]]
    }

    /// Lets it leave and checks it succeeded.
    fn finish(mut self) {
        self.tell("EXIT");
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "member {}: {status}", self.id);
                return;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("member {} did not exit", self.id);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// The hub: one RC QP per member, echoing every message back on its QP.
struct Hub {
    side: Side,
    qps: Vec<(QueuePair<Rc>, u8)>,
    echoed: Vec<u32>,
}

const RECVS: u64 = 8;

impl Hub {
    fn new(ip: IpAddr, net: u8) -> Hub {
        // One device name per test: a process's devices are shared by name.
        let cfg = DeviceConfig {
            name: format!("hub{net}"),
            addrs: vec![ip],
            active_mtu: Mtu::Mtu1024,
        };
        let side = Side::new(Device::with_config(cfg).open().unwrap(), 1 << 16);
        Hub {
            side,
            qps: Vec::new(),
            echoed: Vec::new(),
        }
    }

    /// Connects a new QP to `m` and tells `m` its number.
    fn connect(&mut self, m: &mut Member, member_ip: IpAddr) {
        let qp = self.side.pd.create_rc_qp(&self.side.init()).unwrap();
        rc_connect(&qp, Gid::from(member_ip), m.qpn, &RcOpts::default());
        let i = self.qps.len() as u64;
        for k in 0..RECVS {
            self.post_recv(&qp, i * RECVS + k);
        }
        m.tell(&format!("PEER={}", qp.qp_num()));
        self.qps.push((qp, m.id));
        self.echoed.push(0);
    }

    fn post_recv(&self, qp: &QueuePair<Rc>, slot: u64) {
        let sge = [Sge {
            addr: self.side.mr.addr() + slot * MSG as u64,
            length: MSG as u32,
            lkey: self.side.mr.lkey(),
        }];
        qp.post_recv(&recv_wr(slot, &sge)).unwrap();
    }

    /// Echoes what arrived; returns after `until` holds or the deadline.
    fn serve(&mut self, until: impl Fn(&[u32]) -> bool) {
        let deadline = Instant::now() + DEADLINE;
        let mut wcs = Vec::new();
        while !until(&self.echoed) {
            assert!(
                Instant::now() < deadline,
                "hub: echoed only {:?}",
                self.echoed
            );
            let mut sent = Vec::new();
            self.side.scq.poll(64, &mut sent); // echo completions: retired, nothing to check
            wcs.clear();
            if self.side.rcq.poll(64, &mut wcs) == 0 {
                std::thread::sleep(Duration::from_micros(50));
                continue;
            }
            for wc in &wcs {
                self.echo(wc);
            }
        }
    }

    fn echo(&mut self, wc: &WorkCompletion) {
        let i = (wc.wr_id / RECVS) as usize;
        if wc.status != WcStatus::Success {
            return; // the QP of a crashed member, flushed
        }
        let (qp, id) = &self.qps[i];
        assert_eq!(qp.qp_num(), wc.qp_num);
        let off = wc.wr_id as usize * MSG;
        let msg = read(&self.side.mr, off, MSG);
        assert_eq!(
            msg[0], *id,
            "a message from member {} on member {id}'s QP",
            msg[0]
        );
        let send_off = (1 << 15) + off;
        assert!(self.side.mr.write(send_off, &msg));
        let sge = [Sge {
            addr: self.side.mr.addr() + send_off as u64,
            length: MSG as u32,
            lkey: self.side.mr.lkey(),
        }];
        let flags = SIG;
        qp.post_send(&send_wr(
            wc.wr_id,
            WrOpcode::Send,
            &sge,
            WrTarget::None,
            flags,
        ))
        .unwrap();
        self.post_recv(qp, wc.wr_id);
        self.echoed[i] += 1;
    }
}

/// Two distinct loopback addresses of this process (the hub's and the shared one).
fn addrs(net: u8) -> (IpAddr, IpAddr) {
    (
        private_addr(&format!("127.7.{net}.1")),
        private_addr(&format!("127.7.{net}.2")),
    )
}

fn slot(qpn: u32) -> u32 {
    qpn >> 17
}

fn run_members(n: u8, net: u8) {
    let (hub_ip, ip) = addrs(net);
    let mut hub = Hub::new(hub_ip, net);
    const ROUNDS: u32 = 200;
    let mut members: Vec<Member> = (0..n)
        .map(|id| Member::spawn(ip, hub_ip, id, ROUNDS, ROUNDS))
        .collect();
    let mut qpns: Vec<u32> = members.iter().map(|m| m.qpn).collect();
    qpns.sort_unstable();
    qpns.dedup();
    assert_eq!(
        qpns.len(),
        n as usize,
        "QPNs on one address must be distinct"
    );
    let mut slots: Vec<u32> = members.iter().map(|m| slot(m.qpn)).collect();
    slots.sort_unstable();
    slots.dedup();
    assert_eq!(slots.len(), n as usize, "one slot per process");
    for m in &mut members {
        hub.connect(m, ip);
    }
    hub.serve(|e| e.iter().all(|&k| k == ROUNDS));
    for m in &mut members {
        m.done();
    }
    for m in members {
        m.finish();
    }
}

#[test]
fn two_processes_share_one_address() {
    run_members(2, 20);
}

#[test]
fn three_processes_share_one_address() {
    run_members(3, 21);
}

/// Three members; the one in slot 0 (socket 0 of the group) crashes mid-stream,
/// so the kernel moves the last socket (slot 2) into its place; then a new
/// member claims the freed slot 0 and joins as the last socket. From then on the
/// kernel's order no longer matches the slots: slot 2's traffic is steered to
/// the newcomer and slot 0's to the slot-2 process, which forward it. Everyone
/// alive still gets exactly its own messages.
#[test]
fn a_crash_and_a_newcomer_do_not_misroute() {
    let (hub_ip, ip) = addrs(22);
    let mut hub = Hub::new(hub_ip, 22);
    const ROUNDS: u32 = 150;
    const PAUSE: u32 = 60;
    let mut members: Vec<Member> = (0..3)
        .map(|id| Member::spawn(ip, hub_ip, id, ROUNDS, PAUSE))
        .collect();
    for m in &mut members {
        hub.connect(m, ip);
    }
    let victim = members
        .iter()
        .position(|m| slot(m.qpn) == 0)
        .expect("a member in slot 0");
    // Crash it in the middle of its stream, once the others wait at the
    // pause: they go on only once the newcomer is in, so that traffic for
    // slot 2 comes while the kernel's order no longer matches the slots.
    hub.serve(|e| e[victim] >= 30 && (0..e.len()).all(|i| i == victim || e[i] == PAUSE));
    let mut dead = members.remove(victim);
    dead.child.kill().unwrap();
    dead.child.wait().unwrap();
    // As an application would: the connection to the dead process is torn down.
    let err = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    hub.qps[victim].0.modify(&err, AttrMask::STATE).unwrap();
    // A newcomer takes the freed slot; everyone runs to the end.
    let mut late = Member::spawn(ip, hub_ip, 3, ROUNDS, ROUNDS);
    assert_eq!(slot(late.qpn), 0, "the newcomer claims the freed slot");
    hub.connect(&mut late, ip);
    for m in &mut members {
        m.tell("GO");
    }
    let live: Vec<usize> = (0..hub.qps.len()).filter(|&i| i != victim).collect();
    hub.serve(|e| live.iter().all(|&i| e[i] == ROUNDS));
    let mut forwarded = 0;
    for m in &mut members {
        forwarded += m.done()[0];
    }
    let [late_forwarded, late_received, _] = late.done();
    assert!(
        late_received > 0,
        "slot 0's traffic reaches the newcomer through the slot-2 process"
    );
    assert!(
        late_forwarded > 0,
        "the newcomer (last socket) forwards slot 2's traffic"
    );
    assert!(forwarded > 0);
    for m in members {
        m.finish();
    }
    late.finish();
}
