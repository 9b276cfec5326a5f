//! Fuzzes a live RC queue pair in RTS: the input is a sequence of actions —
//! structured packets (any opcode, PSNs near the ones the QP expects, header
//! fields from the input, correct ICRC), raw garbage datagrams, small
//! post_send / post_recv, exchanges with a real peer (with drops), and time
//! advancing with timers.
//!
//! Invariants: no panic, no hang; every WR completes at most once (and only
//! WRs that were posted); memory outside the registered ranges is never
//! touched; the QP states move only RTS → ERR; after `handle_timeout(now)`
//! nothing is due at `now` any more.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proto::engine::{CqHandle, QpHandle};
use proto::memory::{Memory, VecMemory};
use proto::testing;
use proto::wr::{
    AtomicTarget, ImmData, RdmaTarget, RecvWr, SendFlags, SendWr, Sge, WrOpcode, WrTarget,
};
use proto::{Engine, Gid, Mtu, QpCap, QpState, QpType};
use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use wire::{
    aeth, atomic_ack_eth, atomic_eth, bth, deth, ieth, immdt, reth, Encap, HeaderSet, Opcode,
    TransportRepr,
};

const BASE: u64 = 0x10000;
const MEM: usize = 64 * 1024;
/// The registered range: [BASE + MR_OFF, + MR_LEN); the rest is a guard.
const MR_OFF: u64 = 16 * 1024;
const MR_LEN: u64 = 32 * 1024;
const GUARD: u8 = 0xee;
const MTU: u32 = 1024;

struct Input<'a> {
    d: &'a [u8],
    i: usize,
}

impl Input<'_> {
    fn u8(&mut self) -> u8 {
        let b = self.d.get(self.i).copied().unwrap_or(0);
        self.i += 1;
        b
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | u64::from(self.u32()) << 32
    }
    fn done(&self) -> bool {
        self.i >= self.d.len()
    }
}

struct Side {
    e: Engine,
    mem: VecMemory,
    ip: IpAddr,
    qp: QpHandle,
    qpn: u32,
    cq: CqHandle,
    lkey: u32,
    rkey: u32,
    sends: HashSet<u64>,
    recvs: HashSet<u64>,
    state: QpState,
}

impl Side {
    fn new(ip: &str) -> Side {
        let ip: IpAddr = ip.parse().unwrap();
        let (mut e, pd, cq) = testing::device(format!("fz-{ip}"), ip, Mtu::Mtu1024, 4096).unwrap();
        let mr = e.reg_mr(pd, BASE + MR_OFF, MR_LEN, 0xf).unwrap().1;
        let (lkey, rkey) = (mr.lkey, mr.rkey);
        let cap = QpCap {
            max_send_wr: 32,
            max_recv_wr: 32,
            max_send_sge: 2,
            max_recv_sge: 2,
            max_inline_data: 64,
        };
        let (qp, qpn) = testing::create_qp(&mut e, pd, cq, QpType::Rc, cap, false).unwrap();
        let mem = VecMemory::new(BASE, MEM);
        mem.write(BASE, &[GUARD; MEM]);
        Side {
            e,
            mem,
            ip,
            qp,
            qpn,
            cq,
            lkey,
            rkey,
            sends: HashSet::new(),
            recvs: HashSet::new(),
            state: QpState::Reset,
        }
    }

    fn connect(&mut self, peer_qpn: u32, peer_ip: IpAddr, p: [u8; 4]) {
        let c = testing::Connect {
            rq_psn: 0xfffff0,
            sq_psn: 0xfffff0,
            min_rnr_timer: p[0] & 31,
            timeout: p[1] % 20,
            retry_cnt: p[2] & 7,
            rnr_retry: p[3] & 7,
            ..testing::Connect::rc(peer_qpn, Gid::from(peer_ip))
        };
        testing::connect(&mut self.e, self.qp, QpType::Rc, &c).unwrap();
        self.state = QpState::Rts;
    }

    /// Completions: each for a WR posted and not completed yet.
    fn poll(&mut self) {
        let mut out = Vec::new();
        self.e.poll_cq(self.cq, 4096, &mut out).unwrap();
        for wc in out {
            let set = if wc.opcode.is_recv() {
                &mut self.recvs
            } else {
                &mut self.sends
            };
            assert!(
                set.remove(&wc.wr_id),
                "completion for a WR not outstanding (twice?): {wc:?}"
            );
        }
        let now = self.e.qp(self.qp).unwrap().ctl.state();
        let legal = now == self.state || (self.state == QpState::Rts && now == QpState::Err);
        assert!(legal, "QP moved {:?} -> {now:?}", self.state);
        self.state = now;
    }

    fn guard_intact(&self) {
        let lo = self.mem.snapshot(BASE, MR_OFF as usize);
        let hi_at = BASE + MR_OFF + MR_LEN;
        let hi = self.mem.snapshot(hi_at, MEM - (MR_OFF + MR_LEN) as usize);
        assert!(
            lo.iter().chain(&hi).all(|&b| b == GUARD),
            "memory outside the MR was written"
        );
    }
}

struct World {
    a: Side,
    b: Side,
    now: u64,
    next_id: u64,
    buf: Vec<u8>,
}

impl World {
    /// Delivers what each side sends to the other, dropping by `mask` bits.
    fn exchange(&mut self, mut mask: u64) {
        for _ in 0..64 {
            let mut moved = false;
            for a_to_b in [true, false] {
                let (src, dst) = if a_to_b {
                    (&mut self.a, &mut self.b)
                } else {
                    (&mut self.b, &mut self.a)
                };
                for _ in 0..64 {
                    let Some(t) = src.e.poll_transmit(self.now, &src.mem, &mut self.buf) else {
                        break;
                    };
                    moved = true;
                    let drop = mask & 1 == 1;
                    mask = mask.rotate_right(1);
                    if !drop {
                        let (f, to) =
                            (SocketAddr::new(src.ip, 4791), SocketAddr::new(dst.ip, 4791));
                        dst.e
                            .handle_datagram(self.now, f, to, &self.buf[..t.len], &dst.mem);
                    }
                }
            }
            self.a.poll();
            self.b.poll();
            if !moved {
                break;
            }
        }
    }

    fn advance(&mut self, ns: u64) {
        let next = [self.a.e.poll_timeout(), self.b.e.poll_timeout()]
            .into_iter()
            .flatten()
            .min();
        self.now = match next {
            Some(t) if ns & 1 == 1 => self.now.max(t),
            _ => self.now + ns,
        };
        for s in [&mut self.a, &mut self.b] {
            s.e.handle_timeout(self.now);
            assert!(
                s.e.poll_timeout().is_none_or(|t| t > self.now),
                "a timer still due after handle_timeout"
            );
        }
        self.a.poll();
        self.b.poll();
    }

    fn post_send(&mut self, c: &mut Input) {
        let ops = proto::testing::RC_OPCODES;
        let op = ops[usize::from(c.u8()) % ops.len()];
        let from_a = c.u8() & 1 == 0;
        let len = u32::from(c.u16()) % 3000;
        let len = if op.is_atomic() { 8 } else { len };
        let off = u64::from(c.u16()) % (MR_LEN + 64);
        let roff = u64::from(c.u16()) % (MR_LEN + 64);
        let flags = SendFlags(u32::from(c.u8() & 0x7));
        let (side, peer_rkey) = if from_a {
            (&mut self.a, self.b.rkey)
        } else {
            (&mut self.b, self.a.rkey)
        };
        let rkey = if c.u8() < 240 { peer_rkey } else { c.u32() };
        let remote = BASE + MR_OFF + roff;
        let target = match op {
            WrOpcode::Send | WrOpcode::SendWithImm => WrTarget::None,
            WrOpcode::AtomicFetchAndAdd | WrOpcode::AtomicCmpAndSwp => {
                WrTarget::Atomic(AtomicTarget {
                    remote_addr: remote & !7,
                    compare_add: c.u64(),
                    swap: c.u64(),
                    rkey,
                })
            }
            _ => WrTarget::Rdma(RdmaTarget {
                remote_addr: remote,
                rkey,
            }),
        };
        let sge = [Sge {
            addr: BASE + MR_OFF + off,
            length: len,
            lkey: side.lkey,
        }];
        self.next_id += 1;
        let wr = SendWr {
            wr_id: self.next_id,
            opcode: op,
            flags,
            sg_list: &sge,
            imm_data: ImmData::from_value(7),
            target,
        };
        let inline = flags
            .contains(SendFlags::INLINE)
            .then(|| vec![0x5a; len as usize]);
        // A refusal at post time is fine; an accepted WR must complete at most once.
        // (Unsignaled WRs complete only in error; either way at most once.)
        if side.e.post_send(side.qp, &wr, inline.as_deref()).is_ok() {
            side.sends.insert(self.next_id);
        }
        side.poll();
    }

    fn post_recv(&mut self, c: &mut Input) {
        let from_a = c.u8() & 1 == 0;
        let side = if from_a { &mut self.a } else { &mut self.b };
        let off = u64::from(c.u16()) % MR_LEN;
        let len = u32::from(c.u16()) % 4096;
        let lkey = if c.u8() < 250 { side.lkey } else { c.u32() };
        self.next_id += 1;
        let sge = [Sge {
            addr: BASE + MR_OFF + off,
            length: len.min((MR_LEN - off) as u32),
            lkey,
        }];
        if side
            .e
            .post_recv(
                side.qp,
                &RecvWr {
                    wr_id: self.next_id,
                    sg_list: &sge,
                },
            )
            .is_ok()
        {
            side.recvs.insert(self.next_id);
        }
        side.poll();
    }

    /// A packet "from B" to A, built from the input with a correct ICRC.
    fn inject(&mut self, c: &mut Input) {
        let Ok(opcode) = Opcode::new(c.u8()) else {
            return;
        };
        let q = self.a.e.qp(self.a.qp).unwrap();
        let base = match c.u8() % 3 {
            0 => q.epsn(),
            1 => q.una(),
            _ => q.sq_psn(),
        };
        let delta = i32::from(c.u8() as i8);
        let psn = base.wrapping_add(delta as u32);
        let dest = if c.u8() < 240 {
            self.a.qpn
        } else {
            c.u32() & 0xff_ffff
        };
        let flags = c.u8();
        let mut r = TransportRepr::new(bth::Repr {
            opcode,
            solicited: flags & 1 != 0,
            mig_req: false,
            pad_count: 0,
            pkey: wire::PKey::DEFAULT,
            fecn: false,
            becn: false,
            dest_qp: wire::Qpn::from_masked(dest),
            ack_req: flags & 2 != 0,
            psn,
        });
        let h = opcode.headers();
        let rkey = if c.u8() < 200 { self.a.rkey } else { c.u32() };
        if h.contains(HeaderSet::RETH) {
            r.reth = Some(reth::Repr {
                va: BASE + MR_OFF + u64::from(c.u16()),
                rkey: wire::Rkey(rkey),
                dma_len: u32::from(c.u16()),
            });
        }
        if h.contains(HeaderSet::ATOMIC_ETH) {
            r.atomic_eth = Some(atomic_eth::Repr {
                va: BASE + MR_OFF + u64::from(c.u16()),
                rkey: wire::Rkey(rkey),
                swap_add: c.u64(),
                compare: c.u64(),
            });
        }
        if h.contains(HeaderSet::AETH) {
            let syndrome =
                aeth::Syndrome::from_byte(c.u8()).unwrap_or(aeth::Syndrome::ack_unlimited());
            r.aeth = Some(aeth::Repr {
                syndrome,
                msn: wire::Msn::from_masked(c.u32()),
            });
        }
        if h.contains(HeaderSet::ATOMIC_ACK_ETH) {
            r.atomic_ack_eth = Some(atomic_ack_eth::Repr { orig: c.u64() });
        }
        if h.contains(HeaderSet::IMMDT) {
            r.immdt = Some(immdt::Repr { imm: c.u32() });
        }
        if h.contains(HeaderSet::IETH) {
            r.ieth = Some(ieth::Repr {
                rkey: wire::Rkey(c.u32()),
            });
        }
        if h.contains(HeaderSet::DETH) {
            r.deth = Some(deth::Repr {
                qkey: wire::Qkey(c.u32()),
                src_qp: wire::Qpn::from_masked(c.u32()),
            });
        }
        let n = match c.u8() % 4 {
            0 => 0,
            1 => MTU as usize,
            _ => usize::from(c.u16()) % (MTU as usize + 8),
        };
        let n = if opcode.has_payload() { n } else { 0 };
        r.payload_len = n;
        let payload = vec![c.u8(); n];
        let Some(encap) = Encap::from_addrs(self.b.ip, self.a.ip, 4791) else {
            return;
        };
        let Ok(len) = r.emit(&mut self.buf, &payload, &encap) else {
            return;
        };
        let (f, to) = (
            SocketAddr::new(self.b.ip, 4791),
            SocketAddr::new(self.a.ip, 4791),
        );
        self.a
            .e
            .handle_datagram(self.now, f, to, &self.buf[..len], &self.a.mem);
        self.a.poll();
    }

    fn garbage(&mut self, c: &mut Input) {
        let n = usize::from(c.u8());
        let bytes: Vec<u8> = (0..n).map(|_| c.u8()).collect();
        let (f, to) = (
            SocketAddr::new(self.b.ip, 4791),
            SocketAddr::new(self.a.ip, 4791),
        );
        self.a
            .e
            .handle_datagram(self.now, f, to, &bytes, &self.a.mem);
        self.a.poll();
    }
}

fuzz_target!(|data: &[u8]| {
    let mut c = Input { d: data, i: 0 };
    let mut a = Side::new("127.0.0.1");
    let mut b = Side::new("127.0.0.2");
    let p = [c.u8(), c.u8(), c.u8(), c.u8()];
    let (na, nb, ia, ib) = (a.qpn, b.qpn, a.ip, b.ip);
    a.connect(nb, ib, p);
    b.connect(na, ia, p);
    let mut w = World {
        a,
        b,
        now: 0,
        next_id: 0,
        buf: vec![0; 9000],
    };
    let mut steps = 0;
    while !c.done() && steps < 2000 {
        steps += 1;
        match c.u8() % 8 {
            0 | 1 => w.inject(&mut c),
            2 => w.garbage(&mut c),
            3 => w.post_send(&mut c),
            4 => w.post_recv(&mut c),
            5 => {
                let m = c.u64();
                w.exchange(m)
            }
            _ => {
                let ns = u64::from(c.u32());
                w.advance(ns)
            }
        }
    }
    // Settle: exchange without loss and let timers run, bounded.
    for _ in 0..200 {
        w.exchange(0);
        if w.a.e.poll_timeout().is_none() && w.b.e.poll_timeout().is_none() {
            break;
        }
        w.advance(1);
    }
    w.a.guard_intact();
    w.b.guard_intact();
});
