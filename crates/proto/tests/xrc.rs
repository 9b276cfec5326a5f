//! XRC as scripted conversations between two engines (spec/xrc.md): one
//! XRC_SEND QP on A reaches two XRC SRQs on B through one XRC_RECV QP, the
//! XRCETH picking the SRQ; RDMA and atomics are checked against the SRQ's PD;
//! an SRQ of another XRC domain, or one that is gone, is an invalid request,
//! and so is a MIDDLE or LAST naming another SRQ than its message's FIRST;
//! XRC domains are shared by file and refuse to close while used; an XRC
//! SEND to a peer reached intact runs (proto::run) like an RC one.

mod net;
use net::*;
use proto::xrcd::{OpenFlags, XrcdKey, O_CREAT, O_EXCL};

const CAP: QpCap = QpCap {
    max_send_wr: 64,
    max_recv_wr: 0,
    max_send_sge: 4,
    max_recv_sge: 0,
    max_inline_data: 64,
};
const SRQ: proto::srq::SrqAttr = proto::srq::SrqAttr {
    max_wr: 16,
    max_sge: 2,
    srq_limit: 0,
};

fn flags(raw: u32) -> OpenFlags {
    OpenFlags::from_raw(raw)
}

/// An XRC_SEND QP on A (PD + send CQ only).
fn send_qp(n: &mut Node) -> (QpHandle, u32) {
    let req = QpRequest {
        qp_type: QpType::XrcSend.raw(),
        cap: CAP,
        comp_mask: proto::qp::create::comp_mask::PD,
        ..QpRequest::default()
    };
    let c = QpCreate {
        pd: n.pd,
        send_cq: Some(n.cq),
        recv_cq: None,
        srq: None,
        req,
        sq_sig_all: true,
    };
    let q = n.e.create_qp(&c).unwrap();
    assert_eq!((q.cap.max_recv_wr, q.cap.max_recv_sge), (0, 0));
    (q.handle, q.qpn)
}

/// An XRC_RECV QP on `n` in `xrcd`.
fn recv_qp(n: &mut Node, xrcd: proto::handle::XrcdHandle) -> (QpHandle, u32) {
    let req = QpRequest {
        qp_type: QpType::XrcRecv.raw(),
        comp_mask: proto::qp::create::comp_mask::XRCD,
        ..QpRequest::default()
    };
    let q = n.e.create_xrc_recv_qp(xrcd, &req).unwrap();
    assert_eq!(q.qp_type, QpType::XrcRecv);
    (q.handle, q.qpn)
}

struct Pair {
    net: Net,
    sqp: QpHandle,
    rqp: QpHandle,
    rqpn: u32,
    xrcd: proto::handle::XrcdHandle,
}

/// A: XRC_SEND; B: an XRCD (fd-less), an XRC_RECV QP; connected.
fn pair() -> Pair {
    let mut net = Net::new();
    let ctx_b = net.b.e.pd_ctx(net.b.pd).unwrap();
    let xrcd = net.b.e.open_xrcd(ctx_b, None, flags(O_CREAT)).unwrap();
    let (sqp, sqpn) = send_qp(&mut net.a);
    let (rqp, rqpn) = recv_qp(&mut net.b, xrcd);
    let (ga, gb) = (net.a.gid(), net.b.gid());
    up(&mut net.a, sqp, QpType::XrcSend, rqpn, gb);
    up(&mut net.b, rqp, QpType::XrcRecv, sqpn, ga);
    Pair {
        net,
        sqp,
        rqp,
        rqpn,
        xrcd,
    }
}

fn srq(p: &mut Pair, xrcd: proto::handle::XrcdHandle) -> (proto::engine::SrqHandle, u32) {
    let b = &mut p.net.b;
    let (h, _) = b.e.create_xrc_srq(b.pd, xrcd, b.cq, &SRQ).unwrap();
    (h, b.e.srq_num(h).unwrap())
}

fn post_srq(n: &mut Node, srq: proto::engine::SrqHandle, wr_id: u64, off: u64, lkey: u32) {
    let sg = [Sge {
        addr: BASE + off,
        length: 256,
        lkey,
    }];
    let wr = RecvWr {
        wr_id,
        sg_list: &sg,
    };
    n.e.post_srq_recv(srq, &wr).unwrap();
}

fn xrc_send(p: &mut Pair, wr_id: u64, srqn: u32, data: &[u8], lkey: u32) {
    p.net.a.mem.write(BASE, data);
    let sg = [Sge {
        addr: BASE,
        length: data.len() as u32,
        lkey,
    }];
    let wr = send_wr(wr_id, WrOpcode::Send, &sg, WrTarget::None);
    p.net.a.e.post_send_xrc(p.sqp, &wr, None, srqn).unwrap();
}

#[test]
fn one_send_qp_reaches_two_srqs_through_one_recv_qp() {
    let mut p = pair();
    let xrcd = p.xrcd;
    let (s1, n1) = srq(&mut p, xrcd);
    let (s2, n2) = srq(&mut p, xrcd);
    assert_ne!(n1, n2);
    let (la, _) = p.net.a.mr(0, 4096, 1);
    let (lb, _) = p.net.b.mr(0, 8192, 1);
    post_srq(&mut p.net.b, s1, 11, 1024, lb);
    post_srq(&mut p.net.b, s2, 22, 2048, lb);
    xrc_send(&mut p, 1, n2, b"to the second SRQ", la);
    p.net.run();
    xrc_send(&mut p, 2, n1, b"to the first", la);
    p.net.run();
    let sa = p.net.a.poll();
    let got: Vec<_> = sa.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(got, [(1, WcStatus::Success), (2, WcStatus::Success)]);
    let rb = p.net.b.poll();
    let got: Vec<_> = rb
        .iter()
        .map(|w| (w.wr_id, w.status, w.opcode, w.byte_len, w.qp_num))
        .collect();
    assert_eq!(
        got,
        [
            (22, WcStatus::Success, WcOpcode::Recv, 17, p.rqpn),
            (11, WcStatus::Success, WcOpcode::Recv, 12, p.rqpn),
        ],
        "each message completes on the SRQ its XRCETH named, reported by the XRC_RECV QP"
    );
    assert_eq!(p.net.b.mem.snapshot(BASE + 2048, 17), b"to the second SRQ");
    assert_eq!(p.net.b.mem.snapshot(BASE + 1024, 12), b"to the first");
}

#[test]
fn rdma_and_atomics_through_the_target_use_the_srqs_pd() {
    let mut p = pair();
    let xrcd = p.xrcd;
    let (_, n1) = srq(&mut p, xrcd);
    let (la, _) = p.net.a.mr(0, 4096, 1);
    // LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC
    let (_, rb) = p.net.b.mr(0, 4096, 0xf);
    p.net.a.mem.write(BASE, b"written over XRC");
    let sg = [Sge {
        addr: BASE,
        length: 16,
        lkey: la,
    }];
    let t = WrTarget::Rdma(RdmaTarget {
        remote_addr: BASE + 512,
        rkey: rb,
    });
    let w = send_wr(1, WrOpcode::RdmaWrite, &sg, t);
    p.net.a.e.post_send_xrc(p.sqp, &w, None, n1).unwrap();
    p.net.b.mem.write(BASE + 1024, b"read over XRC!!!");
    let rsg = [Sge {
        addr: BASE + 100,
        length: 16,
        lkey: la,
    }];
    let t = WrTarget::Rdma(RdmaTarget {
        remote_addr: BASE + 1024,
        rkey: rb,
    });
    let w = send_wr(2, WrOpcode::RdmaRead, &rsg, t);
    p.net.a.e.post_send_xrc(p.sqp, &w, None, n1).unwrap();
    p.net.b.mem.write(BASE + 2048, &40u64.to_ne_bytes());
    let asg = [Sge {
        addr: BASE + 200,
        length: 8,
        lkey: la,
    }];
    let t = WrTarget::Atomic(AtomicTarget {
        remote_addr: BASE + 2048,
        compare_add: 2,
        swap: 0,
        rkey: rb,
    });
    let w = send_wr(3, WrOpcode::AtomicFetchAndAdd, &asg, t);
    p.net.a.e.post_send_xrc(p.sqp, &w, None, n1).unwrap();
    p.net.run();
    let got: Vec<_> = p.net.a.poll().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        got,
        [
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (3, WcStatus::Success)
        ]
    );
    assert_eq!(p.net.b.mem.snapshot(BASE + 512, 16), b"written over XRC");
    assert_eq!(p.net.a.mem.snapshot(BASE + 100, 16), b"read over XRC!!!");
    assert_eq!(p.net.a.mem.snapshot(BASE + 200, 8), 40u64.to_ne_bytes());
    assert_eq!(p.net.b.mem.snapshot(BASE + 2048, 8), 42u64.to_ne_bytes());
}

#[test]
fn an_srq_of_another_xrc_domain_is_an_invalid_request() {
    let mut p = pair();
    let ctx_b = p.net.b.e.pd_ctx(p.net.b.pd).unwrap();
    let other = p.net.b.e.open_xrcd(ctx_b, None, flags(O_CREAT)).unwrap();
    assert_ne!(
        p.net.b.e.xrcd_domain(other).unwrap(),
        p.net.b.e.xrcd_domain(p.xrcd).unwrap()
    );
    let (s3, n3) = srq(&mut p, other);
    let (la, _) = p.net.a.mr(0, 4096, 1);
    let (lb, _) = p.net.b.mr(0, 4096, 1);
    post_srq(&mut p.net.b, s3, 33, 0, lb);
    xrc_send(&mut p, 7, n3, b"wrong domain", la);
    p.net.run();
    let sa = p.net.a.poll();
    assert_eq!(sa.len(), 1, "{sa:?}");
    assert_eq!((sa[0].wr_id, sa[0].status), (7, WcStatus::RemInvReqErr));
    assert!(p.net.b.poll().is_empty(), "the SRQ's WQE was not taken");
    assert_eq!(
        p.net.b.state(p.rqp),
        QpState::Err,
        "class C: the target QP to ERR"
    );
    // A basic SRQ is no target either.
    let mut q = pair();
    let b = &mut q.net.b;
    let (basic, _) = b.e.create_srq(b.pd, &SRQ).unwrap();
    let n = b.e.srq_num(basic).unwrap();
    let (la, _) = q.net.a.mr(0, 4096, 1);
    xrc_send(&mut q, 8, n, b"basic", la);
    q.net.run();
    let sa = q.net.a.poll();
    assert_eq!((sa[0].wr_id, sa[0].status), (8, WcStatus::RemInvReqErr));
}

#[test]
fn a_closed_xrcd_refuses_and_its_srq_numbers_are_gone() {
    let mut p = pair();
    let xrcd = p.xrcd;
    let (s1, n1) = srq(&mut p, xrcd);
    let b = &mut p.net.b;
    let e = b.e.close_xrcd(xrcd).unwrap_err();
    assert_eq!(e.errno(), Errno::EBUSY);
    assert!(e.to_string().contains("2 XRC SRQ(s)/QP(s)"), "{e}");
    b.e.destroy_srq(s1).unwrap();
    b.e.destroy_qp(p.rqp).unwrap();
    b.e.close_xrcd(xrcd).unwrap();
    assert_eq!(b.e.xrc_counts(), (0, 0));
    // Every XRC verb on the closed XRCD: EINVAL, saying why.
    let e = b.e.create_xrc_srq(b.pd, xrcd, b.cq, &SRQ).unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL);
    assert!(e.to_string().contains("closed or never opened"), "{e}");
    let req = QpRequest {
        qp_type: QpType::XrcRecv.raw(),
        comp_mask: proto::qp::create::comp_mask::XRCD,
        ..QpRequest::default()
    };
    let e = b.e.create_xrc_recv_qp(xrcd, &req).unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL);
    assert_eq!(b.e.close_xrcd(xrcd).unwrap_err().errno(), Errno::EINVAL);
    assert_eq!(
        b.e.open_qp(xrcd, p.rqpn, QpType::XrcRecv.raw())
            .unwrap_err()
            .errno(),
        Errno::EINVAL
    );
    let _ = n1;
}

#[test]
fn a_send_to_a_destroyed_srq_is_an_invalid_request() {
    let mut p = pair();
    let xrcd = p.xrcd;
    let (s1, n1) = srq(&mut p, xrcd);
    p.net.b.e.destroy_srq(s1).unwrap();
    let (la, _) = p.net.a.mr(0, 4096, 1);
    xrc_send(&mut p, 9, n1, b"nobody home", la);
    p.net.run();
    let sa = p.net.a.poll();
    assert_eq!((sa[0].wr_id, sa[0].status), (9, WcStatus::RemInvReqErr));
}

#[test]
fn xrc_domains_are_shared_by_file_with_the_kernels_oflags_rules() {
    let mut n = Node::new("127.0.0.3");
    let ctx = n.e.pd_ctx(n.pd).unwrap();
    let k = XrcdKey { dev: 8, ino: 1234 };
    let e = n.e.open_xrcd(ctx, Some(k), flags(0)).unwrap_err();
    assert_eq!(e.errno(), Errno::EAGAIN, "{e}");
    assert!(e.to_string().contains("O_CREAT"), "{e}");
    let x1 = n.e.open_xrcd(ctx, Some(k), flags(O_CREAT)).unwrap();
    let x2 = n.e.open_xrcd(ctx, Some(k), flags(0)).unwrap();
    let ctx2 = n.e.open_context();
    let x3 = n.e.open_xrcd(ctx2, Some(k), flags(O_CREAT)).unwrap();
    let d = n.e.xrcd_domain(x1).unwrap();
    assert_eq!(n.e.xrcd_domain(x2).unwrap(), d);
    assert_eq!(
        n.e.xrcd_domain(x3).unwrap(),
        d,
        "another context, same file"
    );
    let e =
        n.e.open_xrcd(ctx, Some(k), flags(O_CREAT | O_EXCL))
            .unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL);
    assert!(e.to_string().contains("O_EXCL"), "{e}");
    let x4 = n.e.open_xrcd(ctx, None, flags(0)).unwrap();
    assert_ne!(
        n.e.xrcd_domain(x4).unwrap(),
        d,
        "no file: a domain of its own"
    );
    // A QP created through one open is opened through another of the same file.
    let (qp, qpn) = recv_qp(&mut n, x1);
    let opened = n.e.open_qp(x3, qpn, QpType::XrcRecv.raw()).unwrap();
    assert_eq!(opened.handle, qp);
    let e = n.e.open_qp(x4, qpn, QpType::XrcRecv.raw()).unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL, "{e}");
    let e = n.e.open_qp(x3, qpn, QpType::Rc.raw()).unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL, "{e}");
    n.e.destroy_qp(qp).unwrap();
    assert!(n.e.qp(qp).is_ok(), "the opened handle keeps the QP");
    n.e.destroy_qp(qp).unwrap();
    assert!(n.e.qp(qp).is_err(), "the last handle destroys it");
    for x in [x1, x2, x4] {
        n.e.close_xrcd(x).unwrap();
    }
    assert_eq!(n.e.xrc_counts(), (1, 1), "x3 keeps the file's domain");
    n.e.close_context(ctx2).unwrap();
    assert_eq!(n.e.xrc_counts(), (0, 0));
    let e = n.e.open_xrcd(ctx, Some(k), flags(0)).unwrap_err();
    assert_eq!(
        e.errno(),
        Errno::EAGAIN,
        "the domain went with its last open"
    );
}

/// Every handle of an XRC_RECV QP holds it, whichever context made it
/// (kernel: the real QP's `open_list`, `__ib_destroy_shared_qp`): its
/// events go to each holder's context; the creator's handle may go first
/// (the QP lives on, its events still reach the openers, and the creator's
/// XRCD open may close); closing a context releases the handles it opened,
/// and the QP goes with the last.
#[test]
fn an_xrc_recv_qps_handles_each_hold_it_and_each_get_its_events() {
    use proto::output::EventElement;
    let mut n = Node::new("127.0.0.3");
    let ctx = n.e.pd_ctx(n.pd).unwrap();
    let k = XrcdKey { dev: 8, ino: 4321 };
    let x1 = n.e.open_xrcd(ctx, Some(k), flags(O_CREAT)).unwrap();
    let (ctx2, ctx3) = (n.e.open_context(), n.e.open_context());
    let x2 = n.e.open_xrcd(ctx2, Some(k), flags(0)).unwrap();
    let x3 = n.e.open_xrcd(ctx3, Some(k), flags(0)).unwrap();
    let (qp, qpn) = recv_qp(&mut n, x1);
    let el = EventElement::Qp(qp);
    assert_eq!(n.e.event_owners(el), [ctx]);
    for x in [x2, x3] {
        n.e.open_qp(x, qpn, QpType::XrcRecv.raw()).unwrap();
    }
    assert_eq!(n.e.event_owners(el), [ctx, ctx2, ctx3]);
    // The creator's handle goes first: the openers keep the QP and its events.
    n.e.destroy_xrc_qp_handle(qp, x1).unwrap();
    assert!(n.e.qp(qp).is_ok(), "the opened handles keep the QP");
    assert_eq!(n.e.event_owners(el), [ctx2, ctx3]);
    n.e.close_xrcd(x1).unwrap();
    let e = n.e.close_xrcd(x2).unwrap_err();
    assert_eq!(e.errno(), Errno::EBUSY, "the QP now counts on x2: {e}");
    // A context closed with an opened handle lets go of it.
    n.e.close_context(ctx2).unwrap();
    assert_eq!(n.e.event_owners(el), [ctx3]);
    assert!(n.e.qp(qp).is_ok(), "ctx3 still holds it");
    n.e.destroy_xrc_qp_handle(qp, x3).unwrap();
    assert!(n.e.qp(qp).is_err(), "the last handle destroys it");
    assert_eq!(n.e.event_owners(el), []);
    n.e.close_xrcd(x3).unwrap();
    n.e.close_context(ctx3).unwrap();
    assert_eq!(n.e.xrc_counts(), (0, 0));
}

#[test]
fn closing_a_context_takes_its_xrc_objects_with_it() {
    let mut p = pair();
    let xrcd = p.xrcd;
    let _ = srq(&mut p, xrcd);
    let ctx = p.net.b.e.pd_ctx(p.net.b.pd).unwrap();
    p.net.b.e.close_context(ctx).unwrap();
    assert_eq!(p.net.b.e.xrc_counts(), (0, 0));
    assert_eq!(p.net.b.e.object_counts(), [0; 7]);
}

#[test]
fn xrc_qps_refuse_what_they_do_not_have() {
    let mut p = pair();
    let b = &mut p.net.b;
    // An XRC_RECV QP has no send queue; it is not made through a PD.
    let sg: [Sge; 0] = [];
    let w = send_wr(1, WrOpcode::Send, &sg, WrTarget::None);
    assert_eq!(
        b.e.post_send(p.rqp, &w, None).unwrap_err().errno(),
        Errno::EINVAL
    );
    let req = QpRequest {
        qp_type: QpType::XrcRecv.raw(),
        comp_mask: proto::qp::create::comp_mask::PD,
        ..QpRequest::default()
    };
    let c = QpCreate {
        pd: b.pd,
        send_cq: Some(b.cq),
        recv_cq: Some(b.cq),
        srq: None,
        req,
        sq_sig_all: false,
    };
    let e = b.e.create_qp(&c).unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL);
    assert!(e.to_string().contains("XRC domain"), "{e}");
    // The CQ of an XRC SRQ is in use while the SRQ lives.
    let (h, _) = b.e.create_xrc_srq(b.pd, p.xrcd, b.cq, &SRQ).unwrap();
    assert_eq!(b.e.destroy_cq(b.cq).unwrap_err().errno(), Errno::EBUSY);
    b.e.destroy_srq(h).unwrap();
}

#[test]
fn a_message_in_progress_is_flushed_to_its_srqs_cq() {
    let mut p = pair();
    let xrcd = p.xrcd;
    let (s1, n1) = srq(&mut p, xrcd);
    let (la, _) = p.net.a.mr(0, 8192, 1);
    let (lb, _) = p.net.b.mr(0, 8192, 1);
    let sg = [Sge {
        addr: BASE + 4096,
        length: 4096,
        lkey: lb,
    }];
    p.net
        .b
        .e
        .post_srq_recv(
            s1,
            &RecvWr {
                wr_id: 5,
                sg_list: &sg,
            },
        )
        .unwrap();
    // A three-packet message whose LAST packet never arrives.
    let mut sent = 0;
    p.net.drop_from_a = Some(Box::new(move |_| {
        sent += 1;
        sent > 2
    }));
    let data = pattern(3000, 1);
    xrc_send(&mut p, 1, n1, &data, la);
    for _ in 0..4 {
        p.net.pump_once();
    }
    assert!(p.net.b.poll().is_empty(), "the message is in progress");
    let to_err = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    modify(&mut p.net.b, p.rqp, to_err, AttrMask::STATE);
    let wc = p.net.b.poll();
    let got: Vec<_> = wc.iter().map(|w| (w.wr_id, w.status, w.qp_num)).collect();
    assert_eq!(
        got,
        [(5, WcStatus::WrFlushErr, p.rqpn)],
        "the SRQ WQE the message held completes once, on the SRQ's CQ"
    );
}

/// A three-packet XRC SEND (1024-byte MTU) to SRQ `n1` whose packets from
/// number `from` on (2 = the MIDDLE, 3 = the LAST) are held back; the first
/// held one goes to B with its XRCETH naming `srqn` (ICRC sealed again),
/// then the network runs freely. Returns the completions of A and B.
fn send_with_xrceth_rewritten(
    p: &mut Pair,
    n1: u32,
    from: usize,
    srqn: u32,
) -> (Vec<WorkCompletion>, Vec<WorkCompletion>) {
    use std::cell::RefCell;
    use std::rc::Rc;
    let (la, _) = p.net.a.mr(0, 8192, 1);
    let held: Rc<RefCell<Vec<Vec<u8>>>> = Rc::default();
    let keep = Rc::clone(&held);
    let mut seen = 0;
    p.net.drop_from_a = Some(Box::new(move |pkt| {
        seen += 1;
        if seen >= from {
            keep.borrow_mut().push(pkt.to_vec());
        }
        seen >= from
    }));
    let data = pattern(3000, 9);
    xrc_send(p, 1, n1, &data, la);
    for _ in 0..4 {
        p.net.pump_once();
    }
    p.net.drop_from_a = None;
    let mut pkt = held.borrow_mut().remove(0);
    // BTH (12 bytes), then the XRCETH: 8 reserved bits and the 24-bit SRQN.
    pkt[13..16].copy_from_slice(&srqn.to_be_bytes()[1..]);
    let (from_ip, to_ip) = (p.net.a.ip, p.net.b.ip);
    let mut encap = wire::Encap::from_addrs(from_ip, to_ip, 4791).unwrap();
    encap.dst_port = 4791;
    wire::icrc::seal(&encap, &mut pkt).unwrap();
    let (src, dst) = (SocketAddr::new(from_ip, 4791), SocketAddr::new(to_ip, 4791));
    let b = &mut p.net.b;
    b.e.handle_datagram(p.net.now, src, dst, &pkt, &b.mem);
    p.net.run();
    (p.net.a.poll(), p.net.b.poll())
}

#[test]
fn a_middle_or_last_naming_another_srq_is_an_invalid_request() {
    // The harness first: the LAST sent again unchanged (sealed anew) completes
    // the message into SRQ 1.
    let mut p = pair();
    let xrcd = p.xrcd;
    let (s1, n1) = srq(&mut p, xrcd);
    let (lb, _) = p.net.b.mr(0, 8192, 1);
    post_srq_len(&mut p.net.b, s1, 5, 4096, lb);
    let (a, b) = send_with_xrceth_rewritten(&mut p, n1, 3, n1);
    assert_eq!((a.len(), a[0].status), (1, WcStatus::Success), "{a:?}");
    let got: Vec<_> = b.iter().map(|w| (w.wr_id, w.status, w.byte_len)).collect();
    assert_eq!(got, [(5, WcStatus::Success, 3000)]);
    assert_eq!(p.net.b.mem.snapshot(BASE + 4096, 3000), pattern(3000, 9));

    // A MIDDLE, then a LAST, naming SRQ 2 of the same domain: invalid request.
    for (at, what) in [(2, "MIDDLE"), (3, "LAST")] {
        let mut p = pair();
        let xrcd = p.xrcd;
        let (s1, n1) = srq(&mut p, xrcd);
        let (s2, n2) = srq(&mut p, xrcd);
        let (lb, _) = p.net.b.mr(0, 8192, 1);
        post_srq_len(&mut p.net.b, s1, 5, 4096, lb);
        post_srq_len(&mut p.net.b, s2, 6, 0, lb);
        let (a, b) = send_with_xrceth_rewritten(&mut p, n1, at, n2);
        let sa: Vec<_> = a.iter().map(|w| (w.wr_id, w.status)).collect();
        assert_eq!(sa, [(1, WcStatus::RemInvReqErr)], "{what}: the sender's WR");
        let sb: Vec<_> = b.iter().map(|w| (w.wr_id, w.status, w.qp_num)).collect();
        assert_eq!(
            sb,
            [(5, WcStatus::RemInvReqErr, p.rqpn)],
            "{what}: the WQE the FIRST took completes in error; SRQ 2's stays"
        );
        assert_eq!(p.net.b.state(p.rqp), QpState::Err, "{what}: class C");
        assert_eq!(
            p.net.b.mem.snapshot(BASE, 16),
            [0u8; 16],
            "{what}: nothing reached SRQ 2's buffer"
        );
    }
}

fn post_srq_len(n: &mut Node, srq: proto::engine::SrqHandle, wr_id: u64, off: u64, lkey: u32) {
    let sg = [Sge {
        addr: BASE + off,
        length: 4096,
        lkey,
    }];
    let wr = RecvWr {
        wr_id,
        sg_list: &sg,
    };
    n.e.post_srq_recv(srq, &wr).unwrap();
}

#[test]
fn an_xrc_send_to_a_peer_reached_intact_runs_and_lands_the_same() {
    // The same 3 000-byte SEND (3 packets at MTU 1024) to an SRQ, packet by
    // packet and as a run (proto::run) to B named reached intact: the run's
    // packets are the plain ones bit for bit (XRCETH in each), and the
    // message lands the same.
    let go = |runs: bool| {
        let mut p = pair();
        let xrcd = p.xrcd;
        let (s, n) = srq(&mut p, xrcd);
        let (la, _) = p.net.a.mr(0, 8192, 1);
        let (lb, _) = p.net.b.mr(0, 8192, 1);
        post_srq_len(&mut p.net.b, s, 11, 0, lb);
        let peer = proto::intact::IntactPeer {
            ip: p.net.b.ip,
            qpns: (p.rqpn, p.rqpn),
        };
        p.net.a.e.set_intact_peers(&[peer]);
        xrc_send(&mut p, 1, n, &pattern(3000, 5), la);
        let mut buf = vec![0u8; 65536];
        let mut packets = Vec::new();
        let (a, b) = (&mut p.net.a, &mut p.net.b);
        let nruns = transmit_local(a, b, 0, runs, &mut buf, &mut packets, &mut false);
        p.net.run();
        let wcs: Vec<_> = [p.net.a.poll(), p.net.b.poll()]
            .concat()
            .iter()
            .map(|w| (w.wr_id, w.status, w.byte_len, w.qp_num))
            .collect();
        (packets, nruns, wcs, p.net.b.mem.snapshot(BASE, 3000))
    };
    let (plain, run) = (go(false), go(true));
    assert_eq!((plain.1, run.1), (0, 1), "one run of the three packets");
    assert_eq!(run.0.len(), 3);
    assert_eq!(run.0, plain.0, "the same packets");
    assert_eq!(run.2, plain.2, "the same completions");
    assert_eq!(run.2.len(), 2, "{:?}", run.2);
    assert!(
        run.2.iter().all(|w| w.1 == WcStatus::Success),
        "{:?}",
        run.2
    );
    assert_eq!(run.3, pattern(3000, 5), "placed");
}
