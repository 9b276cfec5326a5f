//! Two engines on a perfect virtual network: every operation of every
//! transport, byte for byte, and the error cases with the status and QP state
//! the spec gives.

use proto::datapath::Event;
use proto::device::DeviceConfig;
use proto::engine::{CqHandle, PdHandle, QpCreate, QpHandle};
use proto::memory::{Memory, VecMemory};
use proto::qp::create::QpRequest;
use proto::wc::{WcOpcode, WcStatus, WorkCompletion};
use proto::wr::{
    AtomicTarget, ImmData, RdmaTarget, RecvWr, SendFlags, SendWr, Sge, UdTarget, WrOpcode, WrTarget,
};
use proto::*;
use std::net::{IpAddr, SocketAddr};

const BASE: u64 = 0x10_0000;
const MEM: usize = 1 << 20;

struct Node {
    e: Engine,
    mem: VecMemory,
    ip: IpAddr,
    pd: PdHandle,
    cq: CqHandle,
}

impl Node {
    fn new(ip: &str) -> Node {
        let ip: IpAddr = ip.parse().unwrap();
        let cfg = DeviceConfig {
            name: format!("t-{ip}"),
            addrs: vec![ip],
            active_mtu: Mtu::Mtu1024,
        };
        let mut e = Engine::new(&cfg);
        let ctx = e.open_context();
        let pd = e.alloc_pd(ctx).unwrap();
        let (cq, _) = e.create_cq(ctx, 4096, 0).unwrap();
        Node {
            e,
            mem: VecMemory::new(BASE, MEM),
            ip,
            pd,
            cq,
        }
    }

    /// An MR over `[BASE + off, + len)`; returns (lkey, rkey).
    fn mr(&mut self, off: u64, len: u64, access: u32) -> (u32, u32) {
        let (_, m) = self.e.reg_mr(self.pd, BASE + off, len, access).unwrap();
        (m.lkey, m.rkey)
    }

    fn qp(&mut self, t: QpType) -> (QpHandle, u32) {
        let req = QpRequest {
            qp_type: t.raw(),
            cap: QpCap {
                max_send_wr: 256,
                max_recv_wr: 256,
                max_send_sge: 4,
                max_recv_sge: 4,
                max_inline_data: 256,
            },
            comp_mask: 1,
            ..QpRequest::default()
        };
        let c = QpCreate {
            pd: self.pd,
            send_cq: Some(self.cq),
            recv_cq: Some(self.cq),
            srq: None,
            req,
            sq_sig_all: true,
        };
        let q = self.e.create_qp(&c).unwrap();
        (q.handle, q.qpn)
    }

    fn gid(&self) -> Gid {
        Gid::from(self.ip)
    }

    fn poll(&mut self) -> Vec<WorkCompletion> {
        let mut out = Vec::new();
        self.e.poll_cq(self.cq, 1024, &mut out).unwrap();
        out
    }

    fn state(&self, qp: QpHandle) -> QpState {
        self.e.qp(qp).unwrap().ctl.state()
    }
}

type DropFn = Box<dyn FnMut(&[u8]) -> bool>;

struct Net {
    a: Node,
    b: Node,
    now: u64,
    /// Drop every n-th packet from A (0 = none), to exercise recovery paths.
    drop_from_a: Option<DropFn>,
}

impl Net {
    fn new() -> Net {
        Net {
            a: Node::new("127.0.0.1"),
            b: Node::new("127.0.0.2"),
            now: 0,
            drop_from_a: None,
        }
    }

    /// Moves packets until both sides are quiet, firing timers as virtual time
    /// advances. Bounded in rounds.
    fn run(&mut self) {
        let mut buf = vec![0u8; 9000];
        for _ in 0..100_000 {
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
                    if from_a {
                        if let Some(f) = self.drop_from_a.as_mut() {
                            if f(&buf[..t.len]) {
                                continue;
                            }
                        }
                    }
                    let from = SocketAddr::new(src.ip, 4791);
                    let to = SocketAddr::new(dst.ip, 4791);
                    dst.e
                        .handle_datagram(self.now, from, to, &buf[..t.len], &dst.mem);
                }
            }
            if moved {
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

fn modify(n: &mut Node, qp: QpHandle, attr: QpAttr, mask: AttrMask) {
    n.e.modify_qp(qp, &attr, mask).unwrap();
}

/// Brings a connected pair to RTS.
fn connect(net: &mut Net, t: QpType) -> (QpHandle, u32, QpHandle, u32) {
    let (qa, na) = net.a.qp(t);
    let (qb, nb) = net.b.qp(t);
    let (ga, gb) = (net.a.gid(), net.b.gid());
    for (node, qp, peer, dgid) in [(&mut net.a, qa, nb, gb), (&mut net.b, qb, na, ga)] {
        up(node, qp, t, peer, dgid);
    }
    (qa, na, qb, nb)
}

fn up(node: &mut Node, qp: QpHandle, t: QpType, peer: u32, dgid: Gid) {
    use AttrMask as M;
    let init = QpAttr {
        qp_state: 1,
        port_num: 1,
        qp_access_flags: 0xf,
        qkey: 0x1111,
        ..QpAttr::default()
    };
    let mask = if t == QpType::Ud {
        M::STATE | M::PKEY_INDEX | M::PORT | M::QKEY
    } else {
        M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS
    };
    modify(node, qp, init, mask);
    let rtr = QpAttr {
        qp_state: 2,
        ah_attr: AhAttr::roce(dgid, 0),
        path_mtu: Mtu::Mtu1024 as u32,
        dest_qp_num: peer,
        rq_psn: 100,
        max_dest_rd_atomic: 4,
        min_rnr_timer: 1,
        ..QpAttr::default()
    };
    let mask = match t {
        QpType::Ud => M::STATE,
        QpType::Uc => M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN,
        _ => {
            M::STATE
                | M::AV
                | M::PATH_MTU
                | M::DEST_QPN
                | M::RQ_PSN
                | M::MAX_DEST_RD_ATOMIC
                | M::MIN_RNR_TIMER
        }
    };
    modify(node, qp, rtr, mask);
    let rts = QpAttr {
        qp_state: 3,
        sq_psn: 100,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 4,
        ..QpAttr::default()
    };
    let mask = match t {
        QpType::Rc => {
            M::STATE | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC
        }
        _ => M::STATE | M::SQ_PSN,
    };
    modify(node, qp, rts, mask);
}

fn send_wr(wr_id: u64, opcode: WrOpcode, sg: &[Sge], target: WrTarget) -> SendWr<'_> {
    SendWr {
        wr_id,
        opcode,
        flags: SendFlags::SIGNALED,
        sg_list: sg,
        imm_data: ImmData::from_value(0xdead_beef),
        target,
    }
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn rc_send_of_every_size_arrives_byte_for_byte() {
    let mut net = Net::new();
    let (qa, na, qb, _) = connect(&mut net, QpType::Rc);
    let (la, _) = net.a.mr(0, 65536, 1);
    let (lb, _) = net.b.mr(0, 65536, 1);
    for (i, len) in [0usize, 1, 3, 1024, 1025, 4096, 10_000, 65536]
        .into_iter()
        .enumerate()
    {
        let data = pattern(len, i as u8);
        net.a.mem.write(BASE, &data);
        let rsg = [Sge {
            addr: BASE,
            length: 65536,
            lkey: lb,
        }];
        net.b
            .e
            .post_recv(
                qb,
                &RecvWr {
                    wr_id: 500 + i as u64,
                    sg_list: &rsg,
                },
            )
            .unwrap();
        let ssg = [Sge {
            addr: BASE,
            length: len as u32,
            lkey: la,
        }];
        let op = if i % 2 == 0 {
            WrOpcode::Send
        } else {
            WrOpcode::SendWithImm
        };
        net.a
            .e
            .post_send(qa, &send_wr(i as u64, op, &ssg, WrTarget::None), None)
            .unwrap();
        net.run();
        let sa = net.a.poll();
        assert_eq!(sa.len(), 1, "len {len}: {sa:?}");
        assert_eq!(
            (sa[0].wr_id, sa[0].status, sa[0].opcode),
            (i as u64, WcStatus::Success, WcOpcode::Send)
        );
        let rb = net.b.poll();
        assert_eq!(rb.len(), 1);
        let wc = rb[0];
        assert_eq!(
            (wc.wr_id, wc.status, wc.opcode, wc.byte_len),
            (
                500 + i as u64,
                WcStatus::Success,
                WcOpcode::Recv,
                len as u32
            )
        );
        assert_eq!(wc.qp_num, net.b.e.qp(qb).unwrap().ctl.qpn());
        assert_eq!(
            wc.wc_flags.contains(proto::wc::WcFlags::WITH_IMM),
            i % 2 == 1
        );
        if i % 2 == 1 {
            assert_eq!(wc.imm_data.value(), 0xdead_beef);
        }
        assert_eq!(net.b.mem.snapshot(BASE, len), data, "len {len}");
    }
    let _ = na;
    assert_eq!(net.a.state(qa), QpState::Rts);
}

#[test]
fn rc_write_read_and_atomics() {
    let mut net = Net::new();
    let (qa, _, qb, _) = connect(&mut net, QpType::Rc);
    let (la, _) = net.a.mr(0, 1 << 16, 1);
    let (lb, rb) = net.b.mr(0, 1 << 16, 1 | 2 | 4 | 8);
    let data = pattern(5000, 7);
    net.a.mem.write(BASE, &data);
    // WRITE 5000 bytes to B at offset 0x100.
    let sg = [Sge {
        addr: BASE,
        length: 5000,
        lkey: la,
    }];
    let t = WrTarget::Rdma(RdmaTarget {
        remote_addr: BASE + 0x100,
        rkey: rb,
    });
    net.a
        .e
        .post_send(qa, &send_wr(1, WrOpcode::RdmaWrite, &sg, t), None)
        .unwrap();
    // WRITE_WITH_IMM consumes a receive WQE at B.
    net.b
        .e
        .post_recv(
            qb,
            &RecvWr {
                wr_id: 77,
                sg_list: &[Sge {
                    addr: BASE + 0x8000,
                    length: 16,
                    lkey: lb,
                }],
            },
        )
        .unwrap();
    let sg2 = [Sge {
        addr: BASE,
        length: 10,
        lkey: la,
    }];
    let t2 = WrTarget::Rdma(RdmaTarget {
        remote_addr: BASE + 0x4000,
        rkey: rb,
    });
    net.a
        .e
        .post_send(qa, &send_wr(2, WrOpcode::RdmaWriteWithImm, &sg2, t2), None)
        .unwrap();
    // READ those 5000 bytes back into A at 0x2000.
    let rsg = [Sge {
        addr: BASE + 0x2000,
        length: 5000,
        lkey: la,
    }];
    let rt = WrTarget::Rdma(RdmaTarget {
        remote_addr: BASE + 0x100,
        rkey: rb,
    });
    net.a
        .e
        .post_send(qa, &send_wr(3, WrOpcode::RdmaRead, &rsg, rt), None)
        .unwrap();
    // Atomics on B's word at 0x6000 (initially 40).
    net.b.mem.write(BASE + 0x6000, &40u64.to_ne_bytes());
    let asg = [Sge {
        addr: BASE + 0x7000,
        length: 8,
        lkey: la,
    }];
    let faa = WrTarget::Atomic(AtomicTarget {
        remote_addr: BASE + 0x6000,
        compare_add: 2,
        swap: 0,
        rkey: rb,
    });
    net.a
        .e
        .post_send(
            qa,
            &send_wr(4, WrOpcode::AtomicFetchAndAdd, &asg, faa),
            None,
        )
        .unwrap();
    let asg2 = [Sge {
        addr: BASE + 0x7008,
        length: 8,
        lkey: la,
    }];
    let cas = WrTarget::Atomic(AtomicTarget {
        remote_addr: BASE + 0x6000,
        compare_add: 42,
        swap: 99,
        rkey: rb,
    });
    net.a
        .e
        .post_send(qa, &send_wr(5, WrOpcode::AtomicCmpAndSwp, &asg2, cas), None)
        .unwrap();
    net.run();
    let wcs = net.a.poll();
    let got: Vec<_> = wcs.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect();
    assert_eq!(
        got,
        [
            (1, WcStatus::Success, WcOpcode::RdmaWrite),
            (2, WcStatus::Success, WcOpcode::RdmaWrite),
            (3, WcStatus::Success, WcOpcode::RdmaRead),
            (4, WcStatus::Success, WcOpcode::FetchAdd),
            (5, WcStatus::Success, WcOpcode::CompSwap),
        ]
    );
    assert_eq!(wcs[2].byte_len, 5000);
    assert_eq!(net.b.mem.snapshot(BASE + 0x100, 5000), data);
    assert_eq!(net.a.mem.snapshot(BASE + 0x2000, 5000), data);
    assert_eq!(
        net.a.mem.snapshot(BASE + 0x7000, 8),
        40u64.to_ne_bytes(),
        "FAA returns the original"
    );
    assert_eq!(
        net.a.mem.snapshot(BASE + 0x7008, 8),
        42u64.to_ne_bytes(),
        "CAS returns the original"
    );
    assert_eq!(
        net.b.mem.snapshot(BASE + 0x6000, 8),
        99u64.to_ne_bytes(),
        "40 + 2 = 42, swapped to 99"
    );
    let rb_wc = net.b.poll();
    assert_eq!(rb_wc.len(), 1);
    assert_eq!(
        (rb_wc[0].wr_id, rb_wc[0].opcode, rb_wc[0].byte_len),
        (77, WcOpcode::RecvRdmaWithImm, 10)
    );
    assert_eq!(rb_wc[0].imm_data.value(), 0xdead_beef);
}

#[test]
fn uc_send_and_write() {
    let mut net = Net::new();
    let (qa, _, qb, _) = connect(&mut net, QpType::Uc);
    let (la, _) = net.a.mr(0, 1 << 16, 1);
    let (lb, rb) = net.b.mr(0, 1 << 16, 1 | 2);
    let data = pattern(3000, 1);
    net.a.mem.write(BASE, &data);
    net.b
        .e
        .post_recv(
            qb,
            &RecvWr {
                wr_id: 9,
                sg_list: &[Sge {
                    addr: BASE,
                    length: 4096,
                    lkey: lb,
                }],
            },
        )
        .unwrap();
    let sg = [Sge {
        addr: BASE,
        length: 3000,
        lkey: la,
    }];
    net.a
        .e
        .post_send(qa, &send_wr(1, WrOpcode::Send, &sg, WrTarget::None), None)
        .unwrap();
    let t = WrTarget::Rdma(RdmaTarget {
        remote_addr: BASE + 0x8000,
        rkey: rb,
    });
    net.a
        .e
        .post_send(qa, &send_wr(2, WrOpcode::RdmaWrite, &sg, t), None)
        .unwrap();
    net.run();
    let wa: Vec<_> = net.a.poll().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(wa, [(1, WcStatus::Success), (2, WcStatus::Success)]);
    let wb = net.b.poll();
    assert_eq!((wb[0].wr_id, wb[0].byte_len), (9, 3000));
    assert_eq!(net.b.mem.snapshot(BASE, 3000), data);
    assert_eq!(net.b.mem.snapshot(BASE + 0x8000, 3000), data);
}

#[test]
fn ud_send_with_grh_area_and_qkey_check() {
    let mut net = Net::new();
    let (qa, na, qb, nb) = connect(&mut net, QpType::Ud);
    let (la, _) = net.a.mr(0, 1 << 16, 1);
    let (lb, _) = net.b.mr(0, 1 << 16, 1);
    let ah = net
        .a
        .e
        .create_ah(net.a.pd, &AhAttr::roce(net.b.gid(), 0))
        .unwrap();
    let data = pattern(1000, 3);
    net.a.mem.write(BASE, &data);
    for id in [1, 2] {
        net.b
            .e
            .post_recv(
                qb,
                &RecvWr {
                    wr_id: id,
                    sg_list: &[Sge {
                        addr: BASE + id * 0x1000,
                        length: 2048,
                        lkey: lb,
                    }],
                },
            )
            .unwrap();
    }
    let sg = [Sge {
        addr: BASE,
        length: 1000,
        lkey: la,
    }];
    // A wrong Q_Key is dropped silently; the right one arrives.
    for qkey in [0x2222, 0x1111] {
        let t = WrTarget::Ud(UdTarget {
            ah,
            remote_qpn: nb,
            remote_qkey: qkey,
        });
        net.a
            .e
            .post_send(
                qa,
                &send_wr(u64::from(qkey), WrOpcode::SendWithImm, &sg, t),
                None,
            )
            .unwrap();
    }
    net.run();
    assert_eq!(net.a.poll().len(), 2, "UD sends complete when sent");
    let wb = net.b.poll();
    assert_eq!(wb.len(), 1, "{wb:?}");
    let wc = wb[0];
    assert_eq!((wc.wr_id, wc.byte_len, wc.src_qp), (1, 1040, na));
    assert!(wc
        .wc_flags
        .contains(proto::wc::WcFlags::GRH | proto::wc::WcFlags::WITH_IMM));
    let grh = net.b.mem.snapshot(BASE + 0x1000, 40);
    assert_eq!(grh[..20], [0; 20], "IPv4: 20 zero bytes first");
    assert_eq!(grh[20] >> 4, 4, "then an IPv4 header");
    assert_eq!(grh[32..36], [127, 0, 0, 1], "source address");
    assert_eq!(net.b.mem.snapshot(BASE + 0x1000 + 40, 1000), data);
    assert_eq!(
        net.b.e.qp_counters(qb).unwrap().dropped,
        1,
        "the Q_Key mismatch was counted"
    );
}

#[test]
fn rnr_with_retry_zero_fails_and_seven_waits() {
    for rnr_retry in [0u8, 7] {
        let mut net = Net::new();
        let (qa, _, qb, _) = connect(&mut net, QpType::Rc);
        let attr = QpAttr {
            qp_state: 4,
            ..QpAttr::default()
        };
        let _ = attr;
        // Re-set rnr_retry via SQD→SQD.
        modify(
            &mut net.a,
            qa,
            QpAttr {
                qp_state: 4,
                ..QpAttr::default()
            },
            AttrMask::STATE,
        );
        net.run();
        modify(
            &mut net.a,
            qa,
            QpAttr {
                qp_state: 4,
                rnr_retry,
                ..QpAttr::default()
            },
            AttrMask::STATE | AttrMask::RNR_RETRY,
        );
        modify(
            &mut net.a,
            qa,
            QpAttr {
                qp_state: 3,
                ..QpAttr::default()
            },
            AttrMask::STATE,
        );
        net.a.e.qp(qa).unwrap();
        let (la, _) = net.a.mr(0, 4096, 1);
        let (lb, _) = net.b.mr(0, 4096, 1);
        let sg = [Sge {
            addr: BASE,
            length: 8,
            lkey: la,
        }];
        net.a
            .e
            .post_send(qa, &send_wr(1, WrOpcode::Send, &sg, WrTarget::None), None)
            .unwrap();
        if rnr_retry == 7 {
            // Let a few RNR rounds pass, then post the receive: the send gets through.
            let mut buf = vec![0u8; 9000];
            for _ in 0..3 {
                while let Some(t) = net.a.e.poll_transmit(net.now, &net.a.mem, &mut buf) {
                    net.b.e.handle_datagram(
                        net.now,
                        SocketAddr::new(net.a.ip, 4791),
                        SocketAddr::new(net.b.ip, 4791),
                        &buf[..t.len],
                        &net.b.mem,
                    );
                }
                while let Some(t) = net.b.e.poll_transmit(net.now, &net.b.mem, &mut buf) {
                    net.a.e.handle_datagram(
                        net.now,
                        SocketAddr::new(net.b.ip, 4791),
                        SocketAddr::new(net.a.ip, 4791),
                        &buf[..t.len],
                        &net.a.mem,
                    );
                }
                net.now = net.a.e.poll_timeout().unwrap();
                net.a.e.handle_timeout(net.now);
            }
            net.b
                .e
                .post_recv(
                    qb,
                    &RecvWr {
                        wr_id: 5,
                        sg_list: &[Sge {
                            addr: BASE,
                            length: 64,
                            lkey: lb,
                        }],
                    },
                )
                .unwrap();
            net.run();
            assert_eq!(net.a.poll()[0].status, WcStatus::Success);
            assert!(net.a.e.qp_counters(qa).unwrap().rnr_naks_received >= 3);
        } else {
            net.run();
            let wc = net.a.poll();
            assert_eq!(wc[0].status, WcStatus::RnrRetryExcErr, "{wc:?}");
            assert_eq!(net.a.state(qa), QpState::Err);
            assert_eq!(net.b.state(qb), QpState::Rts, "the responder is unaffected");
        }
    }
}

#[test]
fn remote_access_errors_nak_and_move_both_sides_to_err() {
    let mut net = Net::new();
    let (qa, _, qb, _) = connect(&mut net, QpType::Rc);
    let (la, _) = net.a.mr(0, 4096, 1);
    let (_, rb) = net.b.mr(0, 4096, 1 | 4); // read-only remotely
    net.b.mem.write(BASE + 0x800, &[0xab; 16]);
    let sg = [Sge {
        addr: BASE,
        length: 16,
        lkey: la,
    }];
    let t = WrTarget::Rdma(RdmaTarget {
        remote_addr: BASE + 0x800,
        rkey: rb,
    });
    net.a
        .e
        .post_send(qa, &send_wr(1, WrOpcode::RdmaWrite, &sg, t), None)
        .unwrap();
    net.a
        .e
        .post_send(qa, &send_wr(2, WrOpcode::Send, &sg, WrTarget::None), None)
        .unwrap();
    net.run();
    let wc: Vec<_> = net.a.poll().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(wc, [(1, WcStatus::RemAccessErr), (2, WcStatus::WrFlushErr)]);
    assert_eq!(net.a.state(qa), QpState::Err);
    assert_eq!(net.b.state(qb), QpState::Err);
    assert_eq!(
        net.b.mem.snapshot(BASE + 0x800, 16),
        [0xab; 16],
        "memory untouched"
    );
    let ev: Vec<_> = std::iter::from_fn(|| net.b.e.poll_event()).collect();
    assert!(
        ev.iter().any(|e| matches!(
            e,
            Event::Async {
                kind: proto::datapath::AsyncEventKind::QpAccessErr,
                ..
            }
        )),
        "{ev:?}"
    );
}

#[test]
fn out_of_bounds_and_bad_rkey_never_touch_memory() {
    for (off, len, bad_key) in [(4090u64, 16u32, false), (0, 16, true)] {
        let mut net = Net::new();
        let (qa, _, _, _) = connect(&mut net, QpType::Rc);
        let (la, _) = net.a.mr(0, 4096, 1);
        let (_, rb) = net.b.mr(0, 4096, 1 | 2);
        net.a.mem.write(BASE, &[0x5a; 64]);
        let sg = [Sge {
            addr: BASE,
            length: len,
            lkey: la,
        }];
        let rkey = if bad_key { rb ^ 0x80 } else { rb };
        let t = WrTarget::Rdma(RdmaTarget {
            remote_addr: BASE + off,
            rkey,
        });
        net.a
            .e
            .post_send(qa, &send_wr(1, WrOpcode::RdmaWrite, &sg, t), None)
            .unwrap();
        net.run();
        assert_eq!(net.a.poll()[0].status, WcStatus::RemAccessErr);
        assert!(
            net.b.mem.snapshot(BASE, 8192).iter().all(|b| *b == 0),
            "not one byte written"
        );
    }
}

#[test]
fn receive_buffer_too_small_is_loc_len_err() {
    let mut net = Net::new();
    let (qa, _, qb, _) = connect(&mut net, QpType::Rc);
    let (la, _) = net.a.mr(0, 4096, 1);
    let (lb, _) = net.b.mr(0, 4096, 1);
    net.b
        .e
        .post_recv(
            qb,
            &RecvWr {
                wr_id: 3,
                sg_list: &[Sge {
                    addr: BASE,
                    length: 10,
                    lkey: lb,
                }],
            },
        )
        .unwrap();
    let sg = [Sge {
        addr: BASE,
        length: 100,
        lkey: la,
    }];
    net.a
        .e
        .post_send(qa, &send_wr(1, WrOpcode::Send, &sg, WrTarget::None), None)
        .unwrap();
    net.run();
    assert_eq!(net.a.poll()[0].status, WcStatus::RemInvReqErr);
    assert_eq!(net.b.poll()[0].status, WcStatus::LocLenErr);
    assert_eq!(
        (net.a.state(qa), net.b.state(qb)),
        (QpState::Err, QpState::Err)
    );
}

#[test]
fn bad_lkey_on_send_is_loc_prot_err() {
    let mut net = Net::new();
    let (qa, _, _, _) = connect(&mut net, QpType::Rc);
    let (la, _) = net.a.mr(0, 4096, 1);
    let sg = [Sge {
        addr: BASE,
        length: 16,
        lkey: la ^ 0x80,
    }];
    net.a
        .e
        .post_send(qa, &send_wr(1, WrOpcode::Send, &sg, WrTarget::None), None)
        .unwrap();
    net.a
        .e
        .post_send(qa, &send_wr(2, WrOpcode::Send, &sg, WrTarget::None), None)
        .unwrap();
    net.run();
    let wc: Vec<_> = net.a.poll().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(wc, [(1, WcStatus::LocProtErr), (2, WcStatus::WrFlushErr)]);
    assert_eq!(net.a.state(qa), QpState::Err);
    // Posting in ERR completes at once with a flush.
    net.a
        .e
        .post_send(qa, &send_wr(3, WrOpcode::Send, &sg, WrTarget::None), None)
        .unwrap();
    assert_eq!(net.a.poll()[0].status, WcStatus::WrFlushErr);
}

#[test]
fn dead_link_ends_in_retry_exc_err_after_the_configured_retries() {
    let mut net = Net::new();
    let (qa, _, _, _) = connect(&mut net, QpType::Rc);
    let (la, _) = net.a.mr(0, 4096, 1);
    let sent = std::rc::Rc::new(std::cell::Cell::new(0u32));
    let s2 = sent.clone();
    net.drop_from_a = Some(Box::new(move |_| {
        s2.set(s2.get() + 1);
        true
    }));
    let sg = [Sge {
        addr: BASE,
        length: 16,
        lkey: la,
    }];
    net.a
        .e
        .post_send(qa, &send_wr(1, WrOpcode::Send, &sg, WrTarget::None), None)
        .unwrap();
    net.run();
    assert_eq!(net.a.poll()[0].status, WcStatus::RetryExcErr);
    assert_eq!(sent.get(), 1 + 7, "one send and retry_cnt = 7 resends");
    // timeout 14 = 4.096 µs × 2^14; 8 timer periods until the error.
    assert_eq!(net.now, 8 * 4096 * (1 << 14));
    assert_eq!(net.a.state(qa), QpState::Err);
}

#[test]
fn a_lost_packet_is_recovered_by_sequence_nak() {
    let mut net = Net::new();
    let (qa, _, qb, _) = connect(&mut net, QpType::Rc);
    let (la, _) = net.a.mr(0, 1 << 16, 1);
    let (lb, _) = net.b.mr(0, 1 << 16, 1);
    let data = pattern(8000, 9);
    net.a.mem.write(BASE, &data);
    let mut n = 0;
    net.drop_from_a = Some(Box::new(move |_| {
        n += 1;
        n == 3
    }));
    net.b
        .e
        .post_recv(
            qb,
            &RecvWr {
                wr_id: 1,
                sg_list: &[Sge {
                    addr: BASE,
                    length: 8192,
                    lkey: lb,
                }],
            },
        )
        .unwrap();
    let sg = [Sge {
        addr: BASE,
        length: 8000,
        lkey: la,
    }];
    net.a
        .e
        .post_send(qa, &send_wr(1, WrOpcode::Send, &sg, WrTarget::None), None)
        .unwrap();
    net.run();
    assert_eq!(net.a.poll()[0].status, WcStatus::Success);
    assert_eq!(net.b.poll()[0].byte_len, 8000);
    assert_eq!(net.b.mem.snapshot(BASE, 8000), data);
    let c = net.a.e.qp_counters(qa).unwrap();
    assert_eq!(c.seq_naks_received, 1);
}
