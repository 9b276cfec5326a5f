//! The CM port through the public API driven call by call, the way the
//! drop-in librdmacm drives it: connect, accept, the QP moved through
//! rdma_init_qp_attr's transitions, COMM_EST before the RTU, and a REQ that
//! comes between bind and listen. Two devices in one process, as in cm.rs.

mod pair;

use pair::*;
use softverbs::cm::{self, ConnectOptions, PortSpace, RejReason};
use softverbs::*;
use std::time::Duration;

const W: Duration = Duration::from_secs(10);

fn sides(tag: u8) -> (Side, Side) {
    sides_on("cm", 29, tag, 1 << 16)
}

fn ip(s: &Side) -> std::net::IpAddr {
    s.gid().ip()
}

/// rdma_connect's REQ for an RC QP to TCP port `port` of `b`, with the
/// rdma_cm defaults and the cma private-data header from source port `sport`.
fn rc_request(
    pa: &cm::CmPort,
    b: &Side,
    port: u16,
    qa: &QueuePair<Rc>,
    sport: u16,
    user: &[u8],
) -> cm::ConnectParams {
    cm::ConnectParams {
        peer: ip(b).into(),
        service_id: (0x0106 << 16) | u64::from(port),
        qpn: cm::Qpn::from_masked(qa.qp_num()),
        transport: cm::TransportType::Rc,
        starting_psn: cm::Psn::from_masked(0x1000),
        responder_resources: 4,
        initiator_depth: 4,
        flow_control: true,
        retry_count: 7,
        rnr_retry_count: 7,
        srq: false,
        path_mtu: 3,
        path: cm::PathParams::default(),
        private_data: cm::cma_header(pa.local_addr(), sport, ip(b), user),
    }
}

/// The QP through one CM-given transition, as the C ABI will do it with
/// `rdma_init_qp_attr` + `ibv_modify_qp`.
fn apply(qp: &QueuePair<Rc>, a: &cm::CmQpAttrs, t: cm::QpTarget) {
    let (attr, mask) = a.to_verbs(t, 0).unwrap();
    qp.modify(&attr, mask).unwrap();
}

#[test]
fn the_cm_port_connects_the_way_librdmacm_will() {
    let (a, b) = sides(10);
    let (pa, pb) = (a.ctx.cm_port(), b.ctx.cm_port());
    let (cha, chb) = (cm::CmChannel::new().unwrap(), cm::CmChannel::new().unwrap());
    let listen = pb.listen(PortSpace::Tcp, 7020, &chb).unwrap();
    // Active: rdma_connect (REQ), the QP to INIT.
    let qa = a.pd.create_rc_qp(&a.init()).unwrap();
    let p = rc_request(&pa, &b, 7020, &qa, 0xC123, b"raw");
    let timing = ConnectOptions::default().timing;
    let ida = pa.connect(&p, timing, &cha).unwrap();
    apply(
        &qa,
        &pa.qp_attrs(ida, cm::QpTarget::Init).unwrap(),
        cm::QpTarget::Init,
    );
    // Passive: the request on the listener's channel, moved to the new id's.
    let Some(cm::CmEvent::ConnectRequest {
        id: idb, request, ..
    }) = chb.next_event(Some(W))
    else {
        panic!("no request")
    };
    assert_eq!(&request.private_data[36..39], b"raw");
    let chb2 = cm::CmChannel::new().unwrap();
    pb.route(idb, &chb2);
    // rdma_accept, kernel order: QP to INIT/RTR/RTS (rq_psn = our starting
    // PSN, as rdma_init_qp_attr sets it), then the REP.
    let qb = b.pd.create_rc_qp(&b.init()).unwrap();
    apply(
        &qb,
        &pb.qp_attrs(idb, cm::QpTarget::Init).unwrap(),
        cm::QpTarget::Init,
    );
    let mut rtr = pb.qp_attrs(idb, cm::QpTarget::Rtr).unwrap();
    rtr.rq_psn = Some(cm::Psn::from_masked(0x2000));
    apply(&qb, &rtr, cm::QpTarget::Rtr);
    apply(
        &qb,
        &pb.qp_attrs(idb, cm::QpTarget::Rts).unwrap(),
        cm::QpTarget::Rts,
    );
    let ap = cm::AcceptParams {
        qpn: cm::Qpn::from_masked(qb.qp_num()),
        starting_psn: cm::Psn::from_masked(0x2000),
        responder_resources: request.responder_resources,
        initiator_depth: request.initiator_depth,
        flow_control: true,
        rnr_retry_count: 7,
        srq: false,
        private_data: b"ok".to_vec(),
    };
    pb.accept(idb, &ap).unwrap();
    // Active: the REP, the QP to RTR/RTS, the RTU.
    let Some(cm::CmEvent::ConnectResponse { id, reply }) = cha.next_event(Some(W)) else {
        panic!("no reply")
    };
    assert_eq!(id, ida);
    assert_eq!(&reply.private_data[..2], b"ok");
    apply(
        &qa,
        &pa.qp_attrs(ida, cm::QpTarget::Rtr).unwrap(),
        cm::QpTarget::Rtr,
    );
    apply(
        &qa,
        &pa.qp_attrs(ida, cm::QpTarget::Rts).unwrap(),
        cm::QpTarget::Rts,
    );
    pa.ready_to_use(ida, &[]).unwrap();
    assert_eq!(
        cha.next_event(Some(W)),
        Some(cm::CmEvent::Established { id: ida })
    );
    assert_eq!(
        chb2.next_event(Some(W)),
        Some(cm::CmEvent::Established { id: idb })
    );
    let (x, y) = (qa.query().unwrap().attr, qb.query().unwrap().attr);
    assert_eq!((x.sq_psn, x.rq_psn), (0x2000, 0x1000));
    assert_eq!((y.sq_psn, y.rq_psn), (0x1000, 0x2000));
    assert_eq!((x.dest_qp_num, y.dest_qp_num), (qb.qp_num(), qa.qp_num()));
    // A SEND moves.
    assert!(a.mr.write(0, b"through the port"));
    qb.post_recv(&recv_wr(1, &[b.mr.sge(0, 64)])).unwrap();
    let sg = [a.mr.sge(0, 16)];
    qa.post_send(&send_wr(2, WrOpcode::Send, &sg, WrTarget::None, SIG))
        .unwrap();
    assert_eq!(ids(&wait(&b.rcq, 1)), vec![(1, WcStatus::Success)]);
    assert_eq!(read(&b.mr, 0, 16), b"through the port");
    // Disconnect: DREQ, the peer's Disconnected, DREP, ours.
    pa.disconnect(ida, &[]).unwrap();
    assert!(
        matches!(chb2.next_event(Some(W)), Some(cm::CmEvent::Disconnected { id, timed_out: false }) if id == idb)
    );
    pb.disconnect(idb, &[]).unwrap();
    assert!(
        matches!(cha.next_event(Some(W)), Some(cm::CmEvent::Disconnected { id, timed_out: false }) if id == ida)
    );
    pa.destroy(ida).unwrap();
    pb.destroy(idb).unwrap();
    pb.stop_listening(listen).unwrap();
}

/// Data before the RTU (spec/cm.md 5.5): the passive QP, still in RTR when
/// the active side's first SEND arrives (its RTU not sent yet), raises
/// IBV_EVENT_COMM_EST (4); the owner answers with `establish`
/// (`rdma_notify`, the kernel's `ib_cm_notify` → `cm_establish`): the
/// passive id goes ESTABLISHED, and the RTU that follows is a duplicate that
/// reports nothing more.
#[test]
fn a_first_packet_in_rtr_raises_comm_est_and_establishes_the_passive_side() {
    let (a, b) = sides(11);
    let (pa, pb) = (a.ctx.cm_port(), b.ctx.cm_port());
    let (cha, chb) = (cm::CmChannel::new().unwrap(), cm::CmChannel::new().unwrap());
    let listen = pb.listen(PortSpace::Tcp, 7021, &chb).unwrap();
    let qa = a.pd.create_rc_qp(&a.init()).unwrap();
    let p = rc_request(&pa, &b, 7021, &qa, 0xC124, b"");
    let ida = pa
        .connect(&p, ConnectOptions::default().timing, &cha)
        .unwrap();
    apply(
        &qa,
        &pa.qp_attrs(ida, cm::QpTarget::Init).unwrap(),
        cm::QpTarget::Init,
    );
    let Some(cm::CmEvent::ConnectRequest {
        id: idb, request, ..
    }) = chb.next_event(Some(W))
    else {
        panic!("no request")
    };
    let chb2 = cm::CmChannel::new().unwrap();
    pb.route(idb, &chb2);
    // The passive QP stops in RTR (a receiver only) and the REP goes out.
    let qb = b.pd.create_rc_qp(&b.init()).unwrap();
    apply(
        &qb,
        &pb.qp_attrs(idb, cm::QpTarget::Init).unwrap(),
        cm::QpTarget::Init,
    );
    let mut rtr = pb.qp_attrs(idb, cm::QpTarget::Rtr).unwrap();
    rtr.rq_psn = Some(cm::Psn::from_masked(0x2000));
    apply(&qb, &rtr, cm::QpTarget::Rtr);
    qb.post_recv(&recv_wr(1, &[b.mr.sge(0, 64)])).unwrap();
    let ap = cm::AcceptParams {
        qpn: cm::Qpn::from_masked(qb.qp_num()),
        starting_psn: cm::Psn::from_masked(0x2000),
        responder_resources: request.responder_resources,
        initiator_depth: request.initiator_depth,
        flow_control: true,
        rnr_retry_count: 7,
        srq: false,
        private_data: Vec::new(),
    };
    pb.accept(idb, &ap).unwrap();
    let Some(cm::CmEvent::ConnectResponse { id, .. }) = cha.next_event(Some(W)) else {
        panic!("no reply")
    };
    assert_eq!(id, ida);
    apply(
        &qa,
        &pa.qp_attrs(ida, cm::QpTarget::Rtr).unwrap(),
        cm::QpTarget::Rtr,
    );
    apply(
        &qa,
        &pa.qp_attrs(ida, cm::QpTarget::Rts).unwrap(),
        cm::QpTarget::Rts,
    );
    // The active side sends before its RTU.
    assert!(a.mr.write(0, b"before the RTU"));
    let sg = [a.mr.sge(0, 14)];
    qa.post_send(&send_wr(2, WrOpcode::Send, &sg, WrTarget::None, SIG))
        .unwrap();
    assert_eq!(ids(&wait(&b.rcq, 1)), vec![(1, WcStatus::Success)]);
    assert_eq!(read(&b.mr, 0, 14), b"before the RTU");
    let e = b.ctx.get_async_event(Some(W)).unwrap().expect("COMM_EST");
    assert_eq!(
        (e.kind, e.element),
        (4, qb.id()),
        "IBV_EVENT_COMM_EST on the QP"
    );
    assert_eq!(chb2.next_event(Some(Duration::from_millis(50))), None);
    // rdma_notify(COMM_EST): the CM treats it as the RTU.
    pb.establish(idb).unwrap();
    assert_eq!(
        chb2.next_event(Some(W)),
        Some(cm::CmEvent::Established { id: idb })
    );
    // The RTU arrives late: a duplicate, nothing more to report.
    pa.ready_to_use(ida, &[]).unwrap();
    assert_eq!(
        cha.next_event(Some(W)),
        Some(cm::CmEvent::Established { id: ida })
    );
    assert_eq!(chb2.next_event(Some(Duration::from_millis(200))), None);
    assert!(pb.establish(idb).is_err(), "COMM_EST twice is refused");
    pa.destroy(ida).unwrap();
    pb.destroy(idb).unwrap();
    pb.stop_listening(listen).unwrap();
}

/// rdma_bind_addr, the port told to the peer, then rdma_listen (qperf's
/// server, rdma.c `cm_open_server`): a REQ that comes between the bind
/// (`CmPort::reserve`) and the listen waits for the listen instead of being
/// refused (invalid service ID), on the device's own address and on a
/// shared one, where the REQ is read by the process of slot 0 (every CM MAD
/// is steered there) and forwarded to the binder in slot 1 through the
/// service's registry name, taken at the bind (spec/cm.md §8).
#[test]
fn a_req_between_bind_and_listen_waits_for_the_listen() {
    let (a, b) = sides(12);
    // A second device on b's address: it takes slot 1 of the address.
    let cfg = DeviceConfig {
        name: "cm-12-b2".into(),
        addrs: vec![ip(&b)],
        active_mtu: Mtu::Mtu1024,
    };
    let b2 = Side::new(Device::with_config(cfg).open().unwrap(), 1 << 16);
    let pa = a.ctx.cm_port();
    for (srv, port, shared) in [(&b, 7022, false), (&b2, 7023, true)] {
        let ps = srv.ctx.cm_port();
        let (cha, chs) = (cm::CmChannel::new().unwrap(), cm::CmChannel::new().unwrap());
        ps.reserve(PortSpace::Tcp, port);
        let reqs = |s: &Side| s.ctx.counters().cm.received[0];
        let before = reqs(srv);
        let forwards = b2.ctx.counters().io.forwards_received;
        let qa = a.pd.create_rc_qp(&a.init()).unwrap();
        let p = rc_request(&pa, srv, port, &qa, 0xC125, b"early");
        let ida = pa
            .connect(&p, ConnectOptions::default().timing, &cha)
            .unwrap();
        // The REQ reached the binder's CM before any listen (bounded wait).
        let deadline = std::time::Instant::now() + W;
        while reqs(srv) == before && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(reqs(srv), before + 1, "port {port}: the REQ never came");
        if shared {
            // Slot 0 read it and forwarded it to the binder.
            assert!(b2.ctx.counters().io.forwards_received > forwards);
        }
        let listen = ps.listen(PortSpace::Tcp, port, &chs).unwrap();
        let Some(cm::CmEvent::ConnectRequest {
            id: ids, request, ..
        }) = chs.next_event(Some(W))
        else {
            panic!("port {port}: the listen did not get the early REQ")
        };
        assert_eq!(&request.private_data[36..41], b"early");
        // The requester learns the listener's answer, not "nobody listens".
        ps.reject(ids, b"no").unwrap();
        assert!(matches!(
            cha.next_event(Some(W)),
            Some(cm::CmEvent::Rejected { id, reason: RejReason::ConsumerDefined, .. }) if id == ida
        ));
        ps.stop_listening(listen).unwrap();
        ps.release(PortSpace::Tcp, port);
    }
}
