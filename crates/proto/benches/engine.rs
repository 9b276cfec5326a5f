//! The engine's own cost per packet and per message, with no I/O: two
//! engines (two devices, as two hosts would have) with RC QPs connected to
//! RTS through `proto::testing`, every datagram one side emits handed in
//! memory to the other side's `handle_datagram`, until the initiator's
//! completion (and the responder's, for SEND) is polled. The `_batched`
//! cases move them as a driver's batches do: each side's packets taken by
//! bursts (`Engine::poll_transmit_burst`, 16 a turn, 64 a batch) and
//! handed over as one socket read (`Engine::handle_batch`).
//!
//! Each benchmark counts the datagrams one message takes (both directions,
//! ACKs and READ responses included) before it is timed, and tells criterion
//! that many "elements" per iteration: criterion's `time` is ns per message,
//! its `thrpt` is packets per second (ns/packet = 1e9 / thrpt), and the
//! packet count is printed once per benchmark.
//!
//! Run: `cargo bench -p softverbs-proto --bench engine`
//! (`cargo check -p softverbs-proto --all-targets` compiles it).
//!
//! Counting instead of timing (for a machine shared with other work): with
//! `ENGINE_BENCH_ITERS=N` the program runs each case N times after its
//! warm-up, with no criterion, in `Pair::message` calls only; under
//! `valgrind --tool=callgrind --toggle-collect='*Pair*message*'` (one case:
//! `ENGINE_BENCH_CASE=rc_write_64B`) the
//! instructions collected divided by N are the instructions per iteration, a
//! figure the load of the machine does not move.

use std::hint::black_box;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
use proto::datapath::TxClaims;
use proto::handle::{CqHandle, PdHandle, QpHandle};
use proto::intact::IntactPeer;
use proto::memory::VecMemory;
use proto::output::{Room, Transmit};
use proto::testing::Batch;
use proto::wc::{WcStatus, WorkCompletion};
use proto::wr::{
    AtomicTarget, ImmData, RdmaTarget, RecvWr, SendFlags, SendWr, Sge, WrOpcode, WrTarget,
};
use proto::{AccessFlags, Engine, Gid, Mtu, QpCap, QpType};

const BASE: u64 = 0x10_0000;
const MEM: usize = 1 << 20;

struct Node {
    e: Engine,
    mem: VecMemory,
    ip: IpAddr,
    cq: CqHandle,
    pd: PdHandle,
    wcs: Vec<WorkCompletion>,
}

impl Node {
    fn new(ip: &str, mtu: Mtu) -> Node {
        let ip: IpAddr = ip.parse().expect("a literal address");
        let (e, pd, cq) =
            proto::testing::device(format!("bench-{ip}"), ip, mtu, 4096).expect("device");
        Node {
            e,
            mem: VecMemory::new(BASE, MEM),
            ip,
            cq,
            pd,
            wcs: Vec::with_capacity(64),
        }
    }

    /// Polls the CQ; returns how many completions were reaped, all of which
    /// must be successful (a failing benchmark must not report a figure).
    fn reap(&mut self) -> usize {
        self.wcs.clear();
        self.e.poll_cq(self.cq, 64, &mut self.wcs).expect("poll_cq");
        for wc in &self.wcs {
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        }
        self.wcs.len()
    }
}

/// Two devices, one RC QP each, connected at `mtu` (perftest over softverbs
/// on loopback runs at 4096).
struct Pair {
    a: Node,
    b: Node,
    qa: QpHandle,
    qb: QpHandle,
    /// The QPNs of `qa` and `qb`.
    qpns: (u32, u32),
    lkey_a: u32,
    lkey_b: u32,
    rkey_b: u32,
    now: u64,
    buf: Vec<u8>,
    /// Datagrams moved since the last reset.
    packets: u64,
    /// Moved as a driver's batches: a QP's packets in bursts
    /// (`Engine::poll_transmit_burst`), taken as a socket read's batch
    /// (`Engine::handle_batch`).
    batched: Option<Batch>,
}

/// A driver's batch (sv_io's `DriverOptions::batch` default).
const SLOTS: usize = 64;
/// A turn's packets at most (sv_io's `batch::BURST`).
const BURST: usize = 16;

impl Pair {
    fn new(mtu: Mtu) -> Pair {
        let mut a = Node::new("127.0.0.1", mtu);
        let mut b = Node::new("127.0.0.2", mtu);
        let cap = QpCap {
            max_send_wr: 256,
            max_recv_wr: 256,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 64,
        };
        let (qa, na) =
            proto::testing::create_qp(&mut a.e, a.pd, a.cq, QpType::Rc, cap, true).expect("qp a");
        let (qb, nb) =
            proto::testing::create_qp(&mut b.e, b.pd, b.cq, QpType::Rc, cap, true).expect("qp b");
        let (ga, gb) = (Gid::from(a.ip), Gid::from(b.ip));
        for (n, q, peer, gid) in [(&mut a, qa, nb, gb), (&mut b, qb, na, ga)] {
            let c = proto::testing::Connect {
                path_mtu: mtu,
                max_rd_atomic: 16,
                max_dest_rd_atomic: 16,
                retry_cnt: 7,
                rnr_retry: 7,
                ..proto::testing::Connect::rc(peer, gid)
            };
            proto::testing::connect(&mut n.e, q, QpType::Rc, &c).expect("connect");
        }
        let all = (AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC)
            .0;
        let (_, ma) = a.e.reg_mr(a.pd, BASE, MEM as u64, all).expect("mr a");
        let lkey_a = ma.lkey;
        let (_, mb) = b.e.reg_mr(b.pd, BASE, MEM as u64, all).expect("mr b");
        let (lkey_b, rkey_b) = (mb.lkey, mb.rkey);
        Pair {
            a,
            b,
            qa,
            qb,
            qpns: (na, nb),
            lkey_a,
            lkey_b,
            rkey_b,
            now: 0,
            buf: vec![0; 9216],
            packets: 0,
            batched: None,
        }
    }

    /// [`Pair::new`] moving datagrams as a driver's batches.
    fn batched(mtu: Mtu) -> Pair {
        Pair {
            batched: Some(Batch::new(SLOTS)),
            ..Pair::new(mtu)
        }
    }

    /// Moves every ready datagram A→B then B→A; true if any moved.
    fn pump_once(&mut self) -> bool {
        let mut moved = false;
        for from_a in [true, false] {
            moved |= match self.batched.take() {
                Some(mut batch) => {
                    let moved = self.pump_batches(from_a, &mut batch);
                    self.batched = Some(batch);
                    moved
                }
                None => self.pump_datagrams(from_a),
            };
        }
        moved
    }

    /// The sending and the receiving node, and their addresses.
    fn sides(&mut self, from_a: bool) -> (&mut Node, &mut Node, (SocketAddr, SocketAddr)) {
        let (src, dst) = if from_a {
            (&mut self.a, &mut self.b)
        } else {
            (&mut self.b, &mut self.a)
        };
        let ends = (SocketAddr::new(src.ip, 4791), SocketAddr::new(dst.ip, 4791));
        (src, dst, ends)
    }

    /// One side's datagrams to the other, one a call; true if any moved.
    fn pump_datagrams(&mut self, from_a: bool) -> bool {
        let (now, mut moved) = (self.now, false);
        let mut buf = std::mem::take(&mut self.buf);
        let (src, dst, (from, to)) = self.sides(from_a);
        let mut n = 0;
        while let Some(t) = src.e.poll_transmit(now, &src.mem, &mut buf) {
            moved = true;
            n += 1;
            dst.e
                .handle_datagram(now, from, to, &buf[..t.len], &dst.mem);
        }
        self.packets += n;
        self.buf = buf;
        moved
    }

    /// One side's datagrams to the other as a driver's batches: filled by
    /// bursts, the claims let go, taken in one call; true if any moved.
    fn pump_batches(&mut self, from_a: bool, batch: &mut Batch) -> bool {
        let (now, mut n) = (self.now, 0);
        let (src, dst, ends) = self.sides(from_a);
        loop {
            batch.start(SLOTS);
            let mut claims = TxClaims::default();
            while src
                .e
                .poll_transmit_burst(now, &src.mem, &mut claims, batch, BURST)
                > 0
            {}
            src.e.release_claims(&mut claims);
            if batch.built.is_empty() {
                break;
            }
            n += batch.built.len() as u64;
            dst.e
                .handle_batch(now, ends, &mut batch.datagrams(), &dst.mem);
        }
        self.packets += n;
        n > 0
    }

    /// Pumps (firing timers in virtual time when the wire is quiet) until
    /// A has reaped `want_a` completions and B `want_b`. Bounded in rounds.
    fn run_until(&mut self, want_a: usize, want_b: usize) {
        let (mut got_a, mut got_b) = (0, 0);
        for _ in 0..10_000 {
            let moved = self.pump_once();
            got_a += self.a.reap();
            got_b += self.b.reap();
            if got_a >= want_a && got_b >= want_b {
                return;
            }
            if !moved {
                let next = [self.a.e.poll_timeout(), self.b.e.poll_timeout()]
                    .into_iter()
                    .flatten()
                    .min();
                let Some(t) = next else {
                    panic!("quiet with {got_a}/{want_a} and {got_b}/{want_b} completions");
                };
                self.now = self.now.max(t);
                self.a.e.handle_timeout(self.now);
                self.b.e.handle_timeout(self.now);
            }
        }
        panic!("never completed: {got_a}/{want_a}, {got_b}/{want_b}");
    }

    /// Posts `depth` messages of `op` and `size` bytes from A (and as many
    /// receives at B for SEND), then runs until all complete.
    fn message(&mut self, op: WrOpcode, size: u32, depth: usize) {
        let recv = op == WrOpcode::Send;
        if recv {
            let sg = [Sge {
                addr: BASE + 0x8_0000,
                length: size,
                lkey: self.lkey_b,
            }];
            for i in 0..depth {
                let wr = RecvWr {
                    wr_id: i as u64,
                    sg_list: &sg,
                };
                self.b.e.post_recv(self.qb, &wr).expect("post_recv");
            }
        }
        let sg = [Sge {
            addr: BASE,
            length: if op == WrOpcode::AtomicFetchAndAdd {
                8
            } else {
                size
            },
            lkey: self.lkey_a,
        }];
        let target = match op {
            WrOpcode::Send => WrTarget::None,
            WrOpcode::AtomicFetchAndAdd => WrTarget::Atomic(AtomicTarget {
                remote_addr: BASE + 0x4_0000,
                compare_add: 1,
                swap: 0,
                rkey: self.rkey_b,
            }),
            _ => WrTarget::Rdma(RdmaTarget {
                remote_addr: BASE + 0x4_0000,
                rkey: self.rkey_b,
            }),
        };
        for i in 0..depth {
            let wr = SendWr {
                wr_id: i as u64,
                opcode: op,
                flags: SendFlags::SIGNALED,
                sg_list: &sg,
                imm_data: ImmData::from_value(0),
                target,
            };
            self.a
                .e
                .post_send(self.qa, black_box(&wr), None)
                .expect("post_send");
        }
        self.run_until(depth, if recv { depth } else { 0 });
    }
}

/// A same-host ring to one peer, in memory: room for up to four datagrams
/// (what `Engine::transmit_posted_through` and a receive's responses take
/// at most), handed over by `Pair::hop`.
struct Way {
    to: SocketAddr,
    bufs: Vec<Vec<u8>>,
    lens: Vec<usize>,
}

impl Way {
    fn new(to: IpAddr) -> Way {
        Way {
            to: SocketAddr::new(to, 4791),
            bufs: vec![vec![0; 9216]; 4],
            lens: Vec::with_capacity(4),
        }
    }
}

impl Room for Way {
    fn room(&mut self, to: SocketAddr, _qpn: u32) -> Option<&mut [u8]> {
        let n = self.lens.len();
        (to == self.to && n < self.bufs.len()).then(|| &mut self.bufs[n][..])
    }

    fn publish(&mut self, t: &Transmit) {
        self.lens.push(t.len);
    }
}

impl Pair {
    /// One hop of a same-host `ib_write_lat` (spec/performance.md §25,
    /// §27): A posts a signalled 2-byte WRITE straight into its send queue
    /// and builds it into B's ring (`post_send_through`), B takes it and
    /// builds its ACK straight back (`handle_local_datagram` with room), A
    /// takes the ACK, and A's completion is polled. Both peers are reached
    /// intact, as on the rings.
    fn hop(&mut self, h: &mut Hop) {
        let sg = [Sge {
            addr: BASE,
            length: 2,
            lkey: self.lkey_a,
        }];
        let wr = SendWr {
            wr_id: 7,
            opcode: WrOpcode::RdmaWrite,
            flags: SendFlags::SIGNALED,
            sg_list: &sg,
            imm_data: ImmData::from_value(0),
            target: WrTarget::Rdma(RdmaTarget {
                remote_addr: BASE + 0x4_0000,
                rkey: self.rkey_b,
            }),
        };
        let (a, b, now) = (&mut self.a, &mut self.b, self.now);
        let (at_a, at_b) = (SocketAddr::new(a.ip, 4791), SocketAddr::new(b.ip, 4791));
        let Hop { to_b, to_a } = h;
        // As the drop-in library posts to an idle queue with a ring to its
        // peer: straight into the send queue and the ring.
        let sent =
            a.e.post_send_through(self.qa, black_box(&wr), None, now, &a.mem, to_b);
        let sent = sent.map(|r| r.expect("post"));
        assert_eq!(sent, Some(1), "the WRITE goes straight into the ring");
        for (buf, &len) in to_b.bufs.iter().zip(&to_b.lens) {
            b.e.handle_local_datagram(now, at_a, at_b, &buf[..len], &b.mem, Some(to_a));
        }
        for (buf, &len) in to_a.bufs.iter().zip(&to_a.lens) {
            a.e.handle_local_datagram(now, at_b, at_a, &buf[..len], &a.mem, None);
        }
        self.packets += (to_b.lens.len() + to_a.lens.len()) as u64;
        assert_eq!(to_a.lens.len(), 1, "the ACK comes straight back");
        to_b.lens.clear();
        to_a.lens.clear();
        assert_eq!(a.reap(), 1, "the WRITE completes");
    }

    /// What [`Pair::hop`] needs, with each device reaching the other intact.
    fn hop_setup(&self) -> Hop {
        let (na, nb) = self.qpns;
        for (n, peer, qpn) in [(&self.a, self.b.ip, nb), (&self.b, self.a.ip, na)] {
            n.e.set_intact_peers(&[IntactPeer {
                ip: peer,
                qpns: (qpn, qpn),
            }]);
        }
        Hop {
            to_b: Way::new(self.b.ip),
            to_a: Way::new(self.a.ip),
        }
    }
}

/// The rings between A and B, for [`Pair::hop`].
struct Hop {
    to_b: Way,
    to_a: Way,
}

/// The name of the same-host hop case, which `Pair::hop` runs.
const HOP: &str = "rc_write_2B_hop";

/// (name, opcode, bytes, messages in flight per iteration, moved as a
/// driver's batches: [`Pair::batched`])
const CASES: [(&str, WrOpcode, u32, usize, bool); 12] = [
    ("rc_write_64B", WrOpcode::RdmaWrite, 64, 1, false),
    ("rc_write_64B_x32", WrOpcode::RdmaWrite, 64, 32, false),
    (
        "rc_write_64B_x32_batched",
        WrOpcode::RdmaWrite,
        64,
        32,
        true,
    ),
    ("rc_write_4KiB", WrOpcode::RdmaWrite, 4096, 1, false),
    ("rc_write_64KiB", WrOpcode::RdmaWrite, 65536, 1, false),
    (
        "rc_write_64KiB_batched",
        WrOpcode::RdmaWrite,
        65536,
        1,
        true,
    ),
    ("rc_send_64B", WrOpcode::Send, 64, 1, false),
    ("rc_read_4KiB", WrOpcode::RdmaRead, 4096, 1, false),
    ("rc_read_64KiB", WrOpcode::RdmaRead, 65536, 1, false),
    ("rc_fetch_add", WrOpcode::AtomicFetchAndAdd, 8, 1, false),
    (
        "rc_fetch_add_x16",
        WrOpcode::AtomicFetchAndAdd,
        8,
        16,
        false,
    ),
    (
        "rc_fetch_add_x16_batched",
        WrOpcode::AtomicFetchAndAdd,
        8,
        16,
        true,
    ),
];

/// The pair a case runs on.
fn pair(batched: bool) -> Pair {
    match batched {
        true => Pair::batched(Mtu::Mtu4096),
        false => Pair::new(Mtu::Mtu4096),
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("engine");
    g.measurement_time(Duration::from_secs(3));
    g.warm_up_time(Duration::from_secs(1));
    for (name, op, size, depth, batched) in CASES {
        let mut p = pair(batched);
        // Count the datagrams of one iteration (after a warm-up, so PSN
        // windows and timers are in their steady state).
        for _ in 0..4 {
            p.message(op, size, depth);
        }
        p.packets = 0;
        p.message(op, size, depth);
        let per_iter = p.packets;
        println!(
            "engine/{name}: {per_iter} datagrams per iteration of {depth} message(s) \
             ({:.2} per message); time = ns per iteration, thrpt = packets/s",
            per_iter as f64 / depth as f64
        );
        g.throughput(Throughput::Elements(per_iter));
        g.bench_function(BenchmarkId::from_parameter(name), |bch| {
            bch.iter(|| p.message(op, size, depth));
        });
    }
    let mut p = Pair::new(Mtu::Mtu4096);
    let mut h = p.hop_setup();
    println!("engine/{HOP}: 2 datagrams per iteration (the WRITE and its ACK)");
    g.throughput(Throughput::Elements(2));
    g.bench_function(BenchmarkId::from_parameter(HOP), |bch| {
        bch.iter(|| p.hop(&mut h));
    });
    g.finish();
}

/// `ENGINE_BENCH_ITERS=N`: each case (or only `ENGINE_BENCH_CASE`) N times,
/// untimed, for an instruction counter; prints the datagrams moved per case.
fn fixed(iters: u64) {
    let only = std::env::var("ENGINE_BENCH_CASE").ok();
    for (name, op, size, depth, batched) in CASES {
        if only.as_deref().is_some_and(|o| o != name) {
            continue;
        }
        let mut p = pair(batched);
        for _ in 0..4 {
            p.message(op, size, depth);
        }
        p.packets = 0;
        for _ in 0..iters {
            p.message(op, size, depth);
        }
        println!(
            "{name}: {iters} iterations, {} datagrams, {} messages",
            p.packets,
            iters * depth as u64
        );
    }
    if only.as_deref().is_none_or(|o| o == HOP) {
        let mut p = Pair::new(Mtu::Mtu4096);
        let mut h = p.hop_setup();
        for _ in 0..4 {
            p.hop(&mut h);
        }
        p.packets = 0;
        for _ in 0..iters {
            p.hop(&mut h);
        }
        println!("{HOP}: {iters} iterations, {} datagrams", p.packets);
    }
}

criterion_group!(benches, bench);

fn main() {
    match std::env::var("ENGINE_BENCH_ITERS").map(|v| v.parse::<u64>()) {
        Ok(Ok(n)) => fixed(n),
        _ => {
            benches();
            Criterion::default().configure_from_args().final_summary();
        }
    }
}
