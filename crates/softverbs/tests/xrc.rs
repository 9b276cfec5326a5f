//! XRC through the safe API over real UDP on loopback (spec/xrc.md): one
//! XRC_SEND QP reaches two XRC SRQs through one XRC_RECV QP; an SRQ of
//! another domain is refused by the responder; XRC domains are shared by
//! file and refuse to close while used.

mod pair;
use pair::*;
use softverbs::*;

const SRQ: SrqAttr = SrqAttr {
    max_wr: 16,
    max_sge: 1,
    srq_limit: 0,
};

fn modify(qp: &QueuePair, attr: QpAttr, mask: AttrMask) {
    qp.modify(&attr, mask | AttrMask::STATE).unwrap();
}

/// INIT → RTR → RTS with the attributes each XRC half requires
/// (spec/qp-state-machine.md §4).
fn xrc_connect(qp: &QueuePair, peer_gid: Gid, peer_qpn: u32) {
    let target = qp.qp_type() == QpType::XrcRecv;
    use AttrMask as M;
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qp_access_flags: ALL,
        ..QpAttr::default()
    };
    modify(qp, init, M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS);
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        ah_attr: AhAttr::roce(peer_gid, 0),
        path_mtu: Mtu::Mtu1024,
        dest_qp_num: peer_qpn,
        max_dest_rd_atomic: 4,
        min_rnr_timer: 1,
        ..QpAttr::default()
    };
    let responder = if target {
        M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER
    } else {
        M::EMPTY
    };
    modify(
        qp,
        rtr,
        M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN | responder,
    );
    let rts = QpAttr {
        qp_state: QpState::Rts,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 4,
        ..QpAttr::default()
    };
    let requester = if target {
        M::EMPTY
    } else {
        M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC
    };
    modify(qp, rts, M::SQ_PSN | M::TIMEOUT | requester);
}

#[test]
fn one_send_qp_two_srqs_one_recv_qp_and_a_foreign_domain_refused() {
    let (a, b) = sides_on("xrc", 13, 0, 4096);
    let mut init = a.init();
    init.cap.max_recv_wr = 0;
    init.cap.max_recv_sge = 0;
    let sqp = a.pd.create_qp(&init, QpType::XrcSend.raw()).unwrap();
    assert_eq!(sqp.cap().max_recv_wr, 0);
    let xrcd = b.ctx.open_xrcd(None, O_CREAT).unwrap();
    let rqp = xrcd.create_recv_qp().unwrap();
    assert_eq!(rqp.qp_type(), QpType::XrcRecv);
    xrc_connect(&sqp, b.gid(), rqp.qp_num());
    xrc_connect(&rqp, a.gid(), sqp.qp_num());
    let s1 = b.pd.create_xrc_srq(&xrcd, &b.rcq, SRQ).unwrap();
    let s2 = b.pd.create_xrc_srq(&xrcd, &b.rcq, SRQ).unwrap();
    let (n1, n2) = (s1.srq_num().unwrap(), s2.srq_num().unwrap());
    assert_ne!(n1, n2);
    let lkey = b.mr.lkey();
    for (srq, id, off) in [(&s1, 1, 0), (&s2, 2, 1024)] {
        let sg = [Sge {
            addr: b.mr.addr() + off,
            length: 1024,
            lkey,
        }];
        srq.post_recv(&recv_wr(id, &sg)).unwrap();
    }
    for (id, srqn, text) in [(10u64, n2, &b"for SRQ two"[..]), (11, n1, b"for SRQ one")] {
        a.mr.write(0, text);
        let sg = [Sge {
            addr: a.mr.addr(),
            length: text.len() as u32,
            lkey: a.mr.lkey(),
        }];
        let wr = send_wr(id, WrOpcode::Send, &sg, WrTarget::None, SIG);
        sqp.post_send_xrc(&wr, srqn).unwrap();
        assert_eq!(ids(&wait(&a.scq, 1)), [(id, WcStatus::Success)]);
    }
    let wc = wait(&b.rcq, 2);
    let got: Vec<_> = wc.iter().map(|w| (w.wr_id, w.byte_len, w.qp_num)).collect();
    assert_eq!(got, [(2, 11, rqp.qp_num()), (1, 11, rqp.qp_num())]);
    assert_eq!(read(&b.mr, 1024, 11), b"for SRQ two");
    assert_eq!(read(&b.mr, 0, 11), b"for SRQ one");

    // An SRQ of another XRC domain: NAK invalid request, the sender's WR fails.
    let other = b.ctx.open_xrcd(None, O_CREAT).unwrap();
    assert_ne!(other.domain().unwrap(), xrcd.domain().unwrap());
    let s3 = b.pd.create_xrc_srq(&other, &b.rcq, SRQ).unwrap();
    let sg = [Sge {
        addr: a.mr.addr(),
        length: 4,
        lkey: a.mr.lkey(),
    }];
    let wr = send_wr(12, WrOpcode::Send, &sg, WrTarget::None, SIG);
    sqp.post_send_xrc(&wr, s3.srq_num().unwrap()).unwrap();
    assert_eq!(ids(&wait(&a.scq, 1)), [(12, WcStatus::RemInvReqErr)]);
    empty(&b.rcq);

    // Closing a used domain: EBUSY, handed back; once unused it closes.
    let refused = xrcd.close().unwrap_err();
    assert_eq!(refused.error.errno(), Errno::EBUSY);
    let xrcd = refused.object;
    drop((s1, s2, rqp));
    xrcd.close().unwrap();
    drop(s3);
    other.close().unwrap();
}

#[test]
fn domains_are_shared_by_file_and_qps_opened_through_them() {
    let (_, b) = sides_on("xrc-file", 13, 1, 64);
    let file = XrcdKey { dev: 1, ino: 77 };
    let e = b.ctx.open_xrcd(Some(file), 0).unwrap_err();
    assert_eq!(e.errno(), Errno::EAGAIN);
    let x1 = b.ctx.open_xrcd(Some(file), O_CREAT).unwrap();
    let x2 = b.ctx.open_xrcd(Some(file), 0).unwrap();
    assert_eq!(x1.domain().unwrap(), x2.domain().unwrap());
    let e = b.ctx.open_xrcd(Some(file), O_CREAT | O_EXCL).unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL);
    let qp = x1.create_recv_qp().unwrap();
    let opened = x2.open_qp(qp.qp_num()).unwrap();
    assert_eq!(opened.qp_num(), qp.qp_num());
    drop(qp);
    assert_eq!(
        opened.state().unwrap(),
        QpState::Reset,
        "the opened handle keeps the QP"
    );
    let x3 = b.ctx.open_xrcd(None, O_CREAT).unwrap();
    assert_eq!(
        x3.open_qp(opened.qp_num()).unwrap_err().errno(),
        Errno::EINVAL,
        "another domain's QP cannot be opened"
    );
}

/// An XRC_RECV QP's events reach every context that holds a handle of it,
/// the creator's and each opener's (kernel `__ib_shared_qp_event_handler`),
/// and no other: here the `IBV_EVENT_QP_REQ_ERR` of an XRCETH naming an SRQ
/// of another domain. The creator's handle may then go first: the opener's
/// keeps the QP, and the creator's domain closes.
#[test]
fn an_xrc_recv_qps_events_reach_every_context_holding_it() {
    let (a, b) = sides_on("xrc-ev", 13, 2, 4096);
    // More contexts of b's device (the same name and address).
    let b2 = device("xrc-ev-2-b", "127.7.13.5", Mtu::Mtu1024);
    let b3 = device("xrc-ev-2-b", "127.7.13.5", Mtu::Mtu1024);
    let file = XrcdKey { dev: 1, ino: 78 };
    let bx = b.ctx.open_xrcd(Some(file), O_CREAT).unwrap();
    let b2x = b2.open_xrcd(Some(file), 0).unwrap();
    let mut init = a.init();
    init.cap.max_recv_wr = 0;
    init.cap.max_recv_sge = 0;
    let sqp = a.pd.create_qp(&init, QpType::XrcSend.raw()).unwrap();
    let rqp = bx.create_recv_qp().unwrap();
    let opened = b2x.open_qp(rqp.qp_num()).unwrap();
    xrc_connect(&sqp, b.gid(), rqp.qp_num());
    xrc_connect(&rqp, a.gid(), sqp.qp_num());
    let other = b.ctx.open_xrcd(None, O_CREAT).unwrap();
    let foreign = b.pd.create_xrc_srq(&other, &b.rcq, SRQ).unwrap();
    let sg = [Sge {
        addr: a.mr.addr(),
        length: 4,
        lkey: a.mr.lkey(),
    }];
    let wr = send_wr(1, WrOpcode::Send, &sg, WrTarget::None, SIG);
    sqp.post_send_xrc(&wr, foreign.srq_num().unwrap()).unwrap();
    assert_eq!(ids(&wait(&a.scq, 1)), [(1, WcStatus::RemInvReqErr)]);
    const QP_REQ_ERR: u32 = 2;
    let got = |ctx: &Context| ctx.get_async_event(Some(T)).unwrap();
    let creator = got(&b.ctx).expect("the creator's context gets the event");
    assert_eq!(creator.kind, QP_REQ_ERR);
    assert_eq!(got(&b2), Some(creator), "so does the opener's");
    let none = b3.get_async_event(Some(std::time::Duration::from_millis(100)));
    assert_eq!(none.unwrap(), None, "a context without a handle gets none");

    drop(rqp);
    assert_eq!(opened.state().unwrap(), QpState::Err, "the opener keeps it");
    bx.close().unwrap();
    drop(opened);
    b2x.close().unwrap();
    drop(foreign);
    other.close().unwrap();
}
