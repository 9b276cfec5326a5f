//! The test harness: two engines with their own memory on a perfect virtual
//! network, a virtual clock, and an optional filter dropping A's packets.
#![allow(dead_code, unused_imports)]

pub use proto::datapath::Event;
pub use proto::device::DeviceConfig;
pub use proto::engine::{CqHandle, PdHandle, QpCreate, QpHandle};
pub use proto::memory::{Memory, VecMemory};
pub use proto::qp::create::QpRequest;
pub use proto::wc::{WcOpcode, WcStatus, WorkCompletion};
pub use proto::wr::{
    AtomicTarget, ImmData, RdmaTarget, RecvWr, SendFlags, SendWr, Sge, UdTarget, WrOpcode, WrTarget,
};
pub use proto::*;
pub use std::net::{IpAddr, SocketAddr};

pub const BASE: u64 = 0x10_0000;
pub const MEM: usize = 1 << 20;

pub struct Node {
    pub e: Engine,
    pub mem: VecMemory,
    pub ip: IpAddr,
    pub pd: PdHandle,
    pub cq: CqHandle,
}

impl Node {
    pub fn new(ip: &str) -> Node {
        let ip: IpAddr = ip.parse().unwrap();
        let (e, pd, cq) =
            proto::testing::device(format!("t-{ip}"), ip, Mtu::Mtu1024, 4096).unwrap();
        Node {
            e,
            mem: VecMemory::new(BASE, MEM),
            ip,
            pd,
            cq,
        }
    }

    /// An MR over `[BASE + off, + len)`; returns (lkey, rkey).
    pub fn mr(&mut self, off: u64, len: u64, access: u32) -> (u32, u32) {
        let (_, m) = self.e.reg_mr(self.pd, BASE + off, len, access).unwrap();
        (m.lkey, m.rkey)
    }

    pub fn qp(&mut self, t: QpType) -> (QpHandle, u32) {
        let cap = QpCap {
            max_send_wr: 256,
            max_recv_wr: 256,
            max_send_sge: 4,
            max_recv_sge: 4,
            max_inline_data: 256,
        };
        proto::testing::create_qp(&mut self.e, self.pd, self.cq, t, cap, true).unwrap()
    }

    pub fn gid(&self) -> Gid {
        Gid::from(self.ip)
    }

    /// Where its RoCEv2 datagrams come from and go to (UDP port 4791).
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::new(self.ip, 4791)
    }

    pub fn poll(&mut self) -> Vec<WorkCompletion> {
        let mut out = Vec::new();
        self.e.poll_cq(self.cq, 1024, &mut out).unwrap();
        out
    }

    pub fn state(&self, qp: QpHandle) -> QpState {
        self.e.qp(qp).unwrap().ctl.state()
    }
}

pub type DropFn = Box<dyn FnMut(&[u8]) -> bool>;

pub struct Net {
    pub a: Node,
    pub b: Node,
    pub now: u64,
    /// Drops chosen packets from A, to exercise recovery paths.
    pub drop_from_a: Option<DropFn>,
    /// Drops chosen packets from B.
    pub drop_from_b: Option<DropFn>,
}

impl Net {
    pub fn new() -> Net {
        Net {
            a: Node::new("127.0.0.1"),
            b: Node::new("127.0.0.2"),
            now: 0,
            drop_from_a: None,
            drop_from_b: None,
        }
    }

    /// One exchange round without timers: everything A sends reaches B, then
    /// everything B sends reaches A.
    pub fn pump_once(&mut self) -> bool {
        let mut buf = vec![0u8; 9000];
        let mut moved = false;
        for from_a in [true, false] {
            let (src, dst) = if from_a {
                (&mut self.a, &mut self.b)
            } else {
                (&mut self.b, &mut self.a)
            };
            while let Some(t) = src.e.poll_transmit(self.now, &src.mem, &mut buf) {
                moved = true;
                assert_eq!(t.to.ip(), dst.ip, "packet addressed to the peer");
                let filter = if from_a {
                    &mut self.drop_from_a
                } else {
                    &mut self.drop_from_b
                };
                let dropped = filter.as_mut().is_some_and(|f| f(&buf[..t.len]));
                if dropped {
                    continue;
                }
                let (from, to) = (src.addr(), dst.addr());
                dst.e
                    .handle_datagram(self.now, from, to, &buf[..t.len], &dst.mem);
            }
        }
        moved
    }

    /// B's packets one at a time, A answering everything it wants after each
    /// (the simulator's kind of interleaving), B's `drop_nth` packet (1-based)
    /// lost; no timers. Bounded by `rounds`. Returns (A's packets, B's packets).
    pub fn lockstep(&mut self, rounds: u32, drop_nth: u32) -> (u32, u32) {
        let (from_a, from_b) = (self.a.addr(), self.b.addr());
        let mut buf = vec![0u8; 9000];
        let (mut sent_a, mut sent_b) = (0u32, 0u32);
        for _ in 0..rounds {
            while let Some(tx) = self.a.e.poll_transmit(self.now, &self.a.mem, &mut buf) {
                sent_a += 1;
                self.b
                    .e
                    .handle_datagram(self.now, from_a, from_b, &buf[..tx.len], &self.b.mem);
            }
            let Some(tx) = self.b.e.poll_transmit(self.now, &self.b.mem, &mut buf) else {
                break;
            };
            sent_b += 1;
            if sent_b != drop_nth {
                self.a
                    .e
                    .handle_datagram(self.now, from_b, from_a, &buf[..tx.len], &self.a.mem);
            }
        }
        (sent_a, sent_b)
    }

    /// Moves packets until both sides are quiet, firing timers as virtual time
    /// advances. Bounded in rounds.
    pub fn run(&mut self) {
        for _ in 0..100_000 {
            if self.pump_once() {
                continue;
            }
            let next = [self.a.e.poll_timeout(), self.b.e.poll_timeout()]
                .into_iter()
                .flatten()
                .min();
            match next {
                Some(t) => {
                    self.now = self.now.max(t);
                    self.a.e.handle_timeout(self.now);
                    self.b.e.handle_timeout(self.now);
                }
                None => return,
            }
        }
        panic!("the network never went quiet");
    }
}

pub fn modify(n: &mut Node, qp: QpHandle, attr: QpAttr, mask: AttrMask) {
    n.e.modify_qp(qp, &attr, mask).unwrap();
}

/// RC transport settings of a connected pair.
#[derive(Debug, Clone, Copy)]
pub struct Params {
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
}

impl Default for Params {
    fn default() -> Params {
        Params {
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
        }
    }
}

/// Brings a connected pair to RTS.
pub fn connect(net: &mut Net, t: QpType) -> (QpHandle, u32, QpHandle, u32) {
    connect_with(net, t, Params::default())
}

/// Brings a connected pair to RTS with `p` on both sides.
pub fn connect_with(net: &mut Net, t: QpType, p: Params) -> (QpHandle, u32, QpHandle, u32) {
    let (qa, na) = net.a.qp(t);
    let (qb, nb) = net.b.qp(t);
    let (ga, gb) = (net.a.gid(), net.b.gid());
    for (node, qp, peer, dgid) in [(&mut net.a, qa, nb, gb), (&mut net.b, qb, na, ga)] {
        up_with(node, qp, t, peer, dgid, p);
    }
    (qa, na, qb, nb)
}

pub fn up(node: &mut Node, qp: QpHandle, t: QpType, peer: u32, dgid: Gid) {
    up_with(node, qp, t, peer, dgid, Params::default())
}

pub fn up_with(node: &mut Node, qp: QpHandle, t: QpType, peer: u32, dgid: Gid, p: Params) {
    let c = proto::testing::Connect {
        peer_qpn: peer,
        peer_gid: dgid,
        access: AccessFlags::QP_SUPPORTED,
        qkey: 0x1111,
        path_mtu: Mtu::Mtu1024,
        rq_psn: 100,
        sq_psn: 100,
        max_rd_atomic: 4,
        max_dest_rd_atomic: 4,
        min_rnr_timer: p.min_rnr_timer,
        timeout: p.timeout,
        retry_cnt: p.retry_cnt,
        rnr_retry: p.rnr_retry,
    };
    proto::testing::connect(&mut node.e, qp, t, &c).unwrap();
}

pub fn send_wr(wr_id: u64, opcode: WrOpcode, sg: &[Sge], target: WrTarget) -> SendWr<'_> {
    SendWr {
        wr_id,
        opcode,
        flags: SendFlags::SIGNALED,
        sg_list: sg,
        imm_data: ImmData::from_value(0xdead_beef),
        target,
    }
}

pub fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// The packets of a run datagram, emitted one by one as they would have
/// gone alone (unsealed: the peer is reached intact).
pub fn expand(datagram: &[u8], segs: proto::run::Segments) -> Vec<Vec<u8>> {
    let first = wire::TransportRepr::parse(datagram).expect("a run parses");
    let run = proto::run::Run::new(&first, first.payload(datagram), segs).expect("a valid run");
    let mut out = Vec::new();
    let mut r = first;
    for i in 0..run.len() {
        let payload = run.packet(i, &mut r);
        let at = r.header_len();
        let mut buf = vec![0u8; at + payload.len() + 3 + 4];
        buf[at..at + payload.len()].copy_from_slice(payload);
        let n = r.emit_in_place_unsealed(&mut buf).unwrap();
        buf.truncate(n);
        out.push(buf);
    }
    out
}

/// One side's transmit: everything it has now, each datagram handed to the
/// other side's same-host entry (a run taken apart into `sent`), except
/// the first run while `drop_run` holds (then cleared). How many runs.
pub fn transmit_local(
    from: &mut Node,
    to: &mut Node,
    now: u64,
    runs: bool,
    buf: &mut [u8],
    sent: &mut Vec<Vec<u8>>,
    drop_run: &mut bool,
) -> u32 {
    let (a, b) = (from.addr(), to.addr());
    let mut claims = proto::sched::TxClaims::default();
    let mut nruns = 0;
    loop {
        let t = match runs {
            true => from.e.poll_transmit_run(now, &from.mem, buf, &mut claims),
            false => from.e.poll_transmit(now, &from.mem, buf),
        };
        let Some(t) = t else { break };
        let bytes = &buf[..t.len];
        match t.segments {
            Some(segs) => {
                nruns += 1;
                sent.extend(expand(bytes, segs));
                if !std::mem::take(drop_run) {
                    to.e.handle_local_run(now, (a, b), bytes, segs.to_tag(), &to.mem, None);
                }
            }
            None => {
                sent.push(bytes.to_vec());
                to.e.handle_local_datagram(now, a, b, bytes, &to.mem, None);
            }
        }
    }
    from.e.release_claims(&mut claims);
    nruns
}

/// `n` one-packet (1 KiB) WRITEs from A's `lkey` region into B's `rkey`
/// region, posted on A's QP `qa`'s send ring as an application thread
/// posts (listed, not yet in the send queue or a ready queue), after the
/// turns the connection's moves left (they find nothing to send).
pub fn post_on_ring(net: &Net, qa: QpHandle, n: u64, lkey: u32, rkey: u32) {
    let mut buf = vec![0u8; 9000];
    assert!(net
        .a
        .e
        .poll_transmit(net.now, &net.a.mem, &mut buf)
        .is_none());
    post_writes(net, qa, n, lkey, rkey);
}

/// `n` one-packet (1 KiB) RDMA WRITEs of A's QP `qa` posted on its send
/// ring, whatever A has to send already.
pub fn post_writes(net: &Net, qa: QpHandle, n: u64, lkey: u32, rkey: u32) {
    let ring = net.a.e.send_ring(qa).unwrap();
    let sg = [Sge {
        addr: BASE,
        length: 1024,
        lkey,
    }];
    let t = WrTarget::Rdma(RdmaTarget {
        remote_addr: BASE,
        rkey,
    });
    for id in 0..n {
        ring.post(&send_wr(id, WrOpcode::RdmaWrite, &sg, t), None, 0)
            .unwrap();
    }
}
