//! Scripted CM conversations: feed MADs and timeouts to connection managers
//! and assert exactly what comes out (spec/cm.md §3–§6). The handshake, its
//! attributes per transport, rejects, SIDR, teardown and comm IDs; retries and
//! duplicates are in cm_retries.rs, refusals of bad input in cm_refusals.rs.

mod cm_common;

use cm_common::*;
use proto::cm::timing::MS_NS;
use proto::cm::{CmEvent, QpTarget};
use wire::cm::{cma, Message, MsgKind, RejReason, SidrStatus};
use wire::{Psn, Qpn};

#[test]
fn handshake_fields_match_rdma_cm_on_roce() {
    let (mut a, mut b) = (node(1, 1), node(2, 1));
    b.listen(service()).unwrap();
    let id_a = a
        .connect(0, &connect_params(1, 2, 0x11, 0x100, b"hello"))
        .unwrap();
    let tx = drain(&mut a);
    assert_eq!(tx.len(), 1);
    assert_eq!(tx[0].to, gid(2));
    let req_tid = tid(&tx[0]);
    assert_eq!(
        req_tid as u32, id_a.0,
        "cm_form_tid: low word is the local comm ID"
    );
    let Message::Req(req) = parse(&tx[0]) else {
        panic!("not a REQ")
    };
    assert_eq!(req.local_comm_id, id_a.0);
    assert_eq!(req.service_id, 0x0106_1D2F);
    assert_eq!(
        (req.local_ca_guid, req.local_qpn, req.starting_psn),
        (guid(1), Qpn::from_masked(0x11), Psn::from_masked(0x100))
    );
    assert_eq!(
        (
            req.remote_cm_response_timeout,
            req.local_cm_response_timeout,
            req.max_cm_retries
        ),
        (20, 20, 15)
    );
    assert_eq!(
        (
            req.retry_count,
            req.rnr_retry_count,
            req.path_mtu,
            req.pkey.0
        ),
        (7, 6, 3, 0xFFFF)
    );
    let p = req.primary_path;
    assert_eq!(
        (p.local_lid, p.remote_lid, p.subnet_local, p.hop_limit),
        (0xFFFF, 0xFFFF, false, 64)
    );
    assert_eq!((p.local_gid, p.remote_gid), (gid(1).0, gid(2).0));
    // cm_ack_timeout(ack delay 15, packet life 18) = 19.
    assert_eq!(p.local_ack_timeout, 19);
    assert!(!req.has_alternate_path());
    let hdr = cma::Header::parse(&req.private_data).unwrap();
    assert_eq!(
        (hdr.src_port, hdr.dst.to_string()),
        (40001, "10.0.0.2".to_string())
    );
    assert_eq!(&req.private_data[36..41], b"hello");

    b.handle_mad(0, gid(1), &tx[0].mad);
    let Some(CmEvent::ConnectRequest {
        id: id_b,
        from,
        request,
        ..
    }) = b.poll_event()
    else {
        panic!()
    };
    assert_eq!(from, gid(1));
    assert_eq!(request.private_data.len(), 92);
    assert_eq!(&request.private_data[36..41], b"hello");
    // The receiver's resources are the REQ's swapped (cm_format_req_event).
    assert_eq!(
        (request.responder_resources, request.initiator_depth),
        (2, 4)
    );
    assert_eq!(b.state(id_b), Some("MRA_REQ_SENT"));
    assert!(
        drain(&mut b).is_empty(),
        "rdma_cm's MRA is delayed until a duplicate REQ"
    );

    b.accept(0, id_b, &accept_params(0x22, 0x200, b"world"))
        .unwrap();
    let tx = drain(&mut b);
    assert_eq!(
        tid(&tx[0]),
        req_tid,
        "the REP answers the REQ's transaction"
    );
    let Message::Rep(rep) = parse(&tx[0]) else {
        panic!("not a REP")
    };
    assert_eq!((rep.local_comm_id, rep.remote_comm_id), (id_b.0, id_a.0));
    assert_eq!(
        (rep.local_qpn, rep.starting_psn, rep.local_ca_guid),
        (Qpn::from_masked(0x22), Psn::from_masked(0x200), guid(2))
    );
    assert_eq!(
        (
            rep.target_ack_delay,
            rep.responder_resources,
            rep.initiator_depth,
            rep.rnr_retry_count
        ),
        (15, 3, 1, 5)
    );
    assert_eq!(b.state(id_b), Some("REP_SENT"));

    a.handle_mad(0, gid(2), &tx[0].mad);
    let Some(CmEvent::ConnectResponse { id, reply }) = a.poll_event() else {
        panic!()
    };
    assert_eq!(id, id_a);
    assert_eq!(
        (reply.remote_qpn, reply.remote_starting_psn),
        (Qpn::from_masked(0x22), Psn::from_masked(0x200))
    );
    assert_eq!((reply.responder_resources, reply.initiator_depth), (1, 3));
    assert_eq!(&reply.private_data[..5], b"world");
    assert_eq!(reply.private_data.len(), 196);

    // QP attributes on the active side (cm_init_qp_rtr_attr / rts_attr).
    let rtr = a.qp_attrs(id_a, QpTarget::Rtr).unwrap();
    assert_eq!(
        (
            rtr.dest_qpn,
            rtr.rq_psn,
            rtr.max_dest_rd_atomic,
            rtr.path_mtu
        ),
        (
            Some(Qpn::from_masked(0x22)),
            Some(Psn::from_masked(0x100)),
            Some(1),
            Some(3)
        )
    );
    assert_eq!(rtr.ah.unwrap().dgid, gid(2));
    let rts = a.qp_attrs(id_a, QpTarget::Rts).unwrap();
    assert_eq!(
        (rts.sq_psn, rts.retry_cnt, rts.rnr_retry, rts.max_rd_atomic),
        (Some(Psn::from_masked(0x200)), Some(7), Some(5), Some(3))
    );
    // cm_ack_timeout(target ack delay 15, 19 − 1) = 19.
    assert_eq!(rts.timeout, Some(19));
    let init = a.qp_attrs(id_a, QpTarget::Init).unwrap().access.unwrap();
    assert!(init.remote_write && init.remote_read && init.remote_atomic);

    a.ready_to_use(id_a, &[]).unwrap();
    let tx = drain(&mut a);
    assert!(
        matches!(parse(&tx[0]), Message::Rtu(r) if r.local_comm_id == id_a.0 && r.remote_comm_id == id_b.0)
    );
    assert_eq!(events(&mut a), vec![CmEvent::Established { id: id_a }]);
    b.handle_mad(0, gid(1), &tx[0].mad);
    assert_eq!(events(&mut b), vec![CmEvent::Established { id: id_b }]);

    let rtr = b.qp_attrs(id_b, QpTarget::Rtr).unwrap();
    assert_eq!(
        (rtr.dest_qpn, rtr.rq_psn, rtr.max_dest_rd_atomic),
        (
            Some(Qpn::from_masked(0x11)),
            Some(Psn::from_masked(0x200)),
            Some(3)
        )
    );
    let rts = b.qp_attrs(id_b, QpTarget::Rts).unwrap();
    assert_eq!(
        (
            rts.sq_psn,
            rts.retry_cnt,
            rts.rnr_retry,
            rts.max_rd_atomic,
            rts.timeout
        ),
        (
            Some(Psn::from_masked(0x100)),
            Some(7),
            Some(6),
            Some(1),
            Some(19)
        )
    );
}

#[test]
fn teardown_goes_through_timewait() {
    let (mut a, mut b, id_a, id_b) = established(2);
    let t = 1_000 * MS_NS;
    a.disconnect(t, id_a, &[]).unwrap();
    let m = one(pump(&mut a, gid(1), &mut b, t));
    assert!(matches!(m, Message::Dreq(d) if d.remote_qpn == Qpn::from_masked(0x22)));
    assert_eq!(a.state(id_a), Some("DREQ_SENT"));
    assert_eq!(
        events(&mut b),
        vec![CmEvent::Disconnected {
            id: id_b,
            timed_out: false
        }]
    );
    assert_eq!(b.state(id_b), Some("DREQ_RCVD"));
    b.disconnect(t, id_b, &[]).unwrap();
    assert!(matches!(
        one(pump(&mut b, gid(2), &mut a, t)),
        Message::Drep(_)
    ));
    assert_eq!(
        events(&mut a),
        vec![CmEvent::Disconnected {
            id: id_a,
            timed_out: false
        }]
    );
    // TimeWait lasts cm_convert_to_ms(av.timeout 19) = 2^11 = 2048 ms (§4.5).
    let tw = 2048 * MS_NS;
    assert_eq!(a.poll_timeout(), Some(t + tw));
    a.handle_timeout(t + tw - 1);
    assert!(events(&mut a).is_empty());
    a.handle_timeout(t + tw);
    assert_eq!(events(&mut a), vec![CmEvent::TimewaitExit { id: id_a }]);
    b.handle_timeout(t + tw);
    assert_eq!(events(&mut b), vec![CmEvent::TimewaitExit { id: id_b }]);
    assert!(a.is_empty() && b.is_empty());
}

#[test]
fn nobody_listening_is_rejected_with_invalid_service_id() {
    let (mut a, mut b) = (node(1, 3), node(2, 3));
    let id_a = a
        .connect(0, &connect_params(1, 2, 0x11, 0x100, &[]))
        .unwrap();
    let req = drain(&mut a);
    b.handle_mad(0, gid(1), &req[0].mad);
    assert!(events(&mut b).is_empty());
    let tx = drain(&mut b);
    assert_eq!(tid(&tx[0]), tid(&req[0]));
    let Message::Rej(rej) = parse(&tx[0]) else {
        panic!()
    };
    // cm_issue_rej: IDs swapped from the REQ (its remote ID is 0).
    assert_eq!(
        (rej.local_comm_id, rej.remote_comm_id, rej.message_rejected),
        (0, id_a.0, MsgKind::Req)
    );
    assert_eq!(rej.reason, RejReason::InvalidServiceId);
    a.handle_mad(0, gid(2), &tx[0].mad);
    let ev = events(&mut a);
    assert!(
        matches!(&ev[..], [CmEvent::Rejected { id, reason: RejReason::InvalidServiceId, .. }] if *id == id_a)
    );
    assert!(a.is_empty() && b.is_empty());
}

#[test]
fn consumer_reject_carries_private_data() {
    let (mut a, mut b) = (node(1, 4), node(2, 4));
    b.listen(service()).unwrap();
    let id_a = a
        .connect(0, &connect_params(1, 2, 0x11, 0x100, &[]))
        .unwrap();
    pump(&mut a, gid(1), &mut b, 0);
    let Some(CmEvent::ConnectRequest { id: id_b, .. }) = b.poll_event() else {
        panic!()
    };
    b.reject(0, id_b, b"go away").unwrap();
    let Message::Rej(rej) = one(pump(&mut b, gid(2), &mut a, 0)) else {
        panic!()
    };
    assert_eq!(
        (rej.reason, rej.message_rejected, rej.local_comm_id),
        (RejReason::ConsumerDefined, MsgKind::Req, id_b.0)
    );
    let ev = events(&mut a);
    let [CmEvent::Rejected {
        id,
        reason,
        private_data,
    }] = &ev[..]
    else {
        panic!("{ev:?}")
    };
    assert_eq!(
        (*id, *reason, private_data.len()),
        (id_a, RejReason::ConsumerDefined, 148)
    );
    assert_eq!(&private_data[..7], b"go away");
    assert!(a.is_empty() && b.is_empty());
}

#[test]
fn uc_connections_get_no_rdma_read_or_retry_attributes() {
    let (mut a, mut b) = (node(1, 17), node(2, 17));
    b.listen(service()).unwrap();
    let mut p = connect_params(1, 2, 0x11, 1, &[]);
    p.transport = wire::cm::TransportType::Uc;
    let id_a = a.connect(0, &p).unwrap();
    pump(&mut a, gid(1), &mut b, 0);
    let Some(CmEvent::ConnectRequest {
        id: id_b, request, ..
    }) = b.poll_event()
    else {
        panic!()
    };
    assert_eq!(request.transport, wire::cm::TransportType::Uc);
    b.accept(0, id_b, &accept_params(0x22, 2, &[])).unwrap();
    pump(&mut b, gid(2), &mut a, 0);
    let rtr = a.qp_attrs(id_a, QpTarget::Rtr).unwrap();
    assert_eq!((rtr.max_dest_rd_atomic, rtr.min_rnr_timer), (None, None));
    assert_eq!(rtr.dest_qpn, Some(Qpn::from_masked(0x22)));
    let rts = a.qp_attrs(id_a, QpTarget::Rts).unwrap();
    assert_eq!(
        (rts.retry_cnt, rts.rnr_retry, rts.max_rd_atomic, rts.timeout),
        (None, None, None, None)
    );
    assert_eq!(rts.sq_psn, Some(Psn::from_masked(2)));
}

/// XRC (transport 3, Extended Transport Type 1; spec/xrc.md §8): the active
/// side's QP is the initiator (no responder attributes at RTR), the passive
/// side's the target (no requester attributes at RTS), both get the ACK
/// timeout (kernel cm.c `cm_init_qp_rtr_attr`, `cm_init_qp_rts_attr`).
#[test]
fn xrc_connections_split_the_attributes_between_initiator_and_target() {
    let (mut a, mut b) = (node(1, 19), node(2, 19));
    b.listen(service()).unwrap();
    let mut p = connect_params(1, 2, 0x11, 1, &[]);
    p.transport = wire::cm::TransportType::Extended;
    let id_a = a.connect(0, &p).unwrap();
    pump(&mut a, gid(1), &mut b, 0);
    let Some(CmEvent::ConnectRequest {
        id: id_b, request, ..
    }) = b.poll_event()
    else {
        panic!()
    };
    assert_eq!(request.transport, wire::cm::TransportType::Extended);
    b.accept(0, id_b, &accept_params(0x22, 2, &[])).unwrap();
    pump(&mut b, gid(2), &mut a, 0);
    // The initiator.
    let rtr = a.qp_attrs(id_a, QpTarget::Rtr).unwrap();
    assert_eq!((rtr.max_dest_rd_atomic, rtr.min_rnr_timer), (None, None));
    assert_eq!(rtr.dest_qpn, Some(Qpn::from_masked(0x22)));
    let rts = a.qp_attrs(id_a, QpTarget::Rts).unwrap();
    assert!(rts.retry_cnt.is_some() && rts.rnr_retry.is_some() && rts.max_rd_atomic.is_some());
    assert!(rts.timeout.is_some());
    // The target.
    let rtr = b.qp_attrs(id_b, QpTarget::Rtr).unwrap();
    assert!(rtr.max_dest_rd_atomic.is_some() && rtr.min_rnr_timer.is_some());
    let rts = b.qp_attrs(id_b, QpTarget::Rts).unwrap();
    assert_eq!(
        (rts.retry_cnt, rts.rnr_retry, rts.max_rd_atomic),
        (None, None, None)
    );
    assert!(rts.timeout.is_some() && rts.sq_psn.is_some());
}

#[test]
fn comm_ids_are_unique_non_zero_and_tids_carry_them() {
    let mut a = node(1, 18);
    let mut seen = std::collections::HashSet::new();
    let mut his = std::collections::HashSet::new();
    for i in 0..500 {
        let id = a
            .connect(0, &connect_params(1, 2, 0x100 + i, 1, &[]))
            .unwrap();
        assert!(
            id.0 != 0 && seen.insert(id),
            "comm ID {id:?} reused or zero"
        );
        let t = tid(&drain(&mut a)[0]);
        assert_eq!(t as u32, id.0);
        his.insert(t >> 32);
    }
    assert_eq!(his.len(), 1, "one hi_tid per agent (cm_form_tid)");
    assert_eq!(a.len(), 500);
    // Another seed allocates other IDs (cm_alloc_id_priv's random operand).
    let mut b = node(1, 19);
    let other = b.connect(0, &connect_params(1, 2, 0x100, 1, &[])).unwrap();
    assert!(!seen.contains(&other));
}

/// Two processes share address 1 (slots 0 and 5, spec/cm.md §8): every MAD
/// for the address is routed only by `cm::steer` and a service registry, as
/// io's forwarding does, and each reaches the CM that owns its comm ID.
#[test]
fn a_shared_address_steers_each_mad_to_the_slot_of_its_comm_id() {
    use proto::cm::{comm_id_slot, steer, Cm, CmConfig, Steer};
    let same_device = |seed| Cm::new(CmConfig::rdma_cm(gid(1), guid(1), seed));
    // procs[0] holds slot 0, procs[1] slot 5; both are address 1.
    let mut procs = [same_device(40), same_device(41)];
    let slots = [0u8, 5];
    procs[1].set_slot(5).unwrap();
    let mut b = node(2, 42);
    // The registry: the service ID slot 5 listens on (io: the abstract name).
    procs[1].listen(service()).unwrap();
    let registry = |sid: u64| (sid == service()).then_some(1usize);
    // What io does with a MAD that arrived for address 1 (in any process).
    let route = |mad: &[u8]| match steer(mad) {
        Steer::Slot(s) => slots.iter().position(|&x| x == s).expect("a held slot"),
        Steer::Service(sid) => registry(sid).unwrap_or(0),
        Steer::Here => 0,
    };
    let to_addr1 = |b: &mut Cm, procs: &mut [Cm; 2], now| {
        let mut kinds = Vec::new();
        for t in drain(b) {
            let p = route(&t.mad);
            kinds.push((parse(&t).name(), p));
            procs[p].handle_mad(now, gid(2), &t.mad);
        }
        kinds
    };
    // B connects to the listener in slot 5: REQ by service, RTU by comm ID.
    let id_b = b.connect(0, &connect_params(2, 1, 0x22, 1, &[])).unwrap();
    assert_eq!(to_addr1(&mut b, &mut procs, 0), vec![("REQ", 1)]);
    let Some(CmEvent::ConnectRequest { id: id_p, .. }) = procs[1].poll_event() else {
        panic!("the listener's process got the REQ")
    };
    assert_eq!(comm_id_slot(id_p.0), 5);
    procs[1]
        .accept(0, id_p, &accept_params(0x0a_0011, 1, &[]))
        .unwrap();
    pump(&mut procs[1], gid(1), &mut b, 0);
    assert!(matches!(
        b.poll_event(),
        Some(CmEvent::ConnectResponse { .. })
    ));
    b.ready_to_use(id_b, &[]).unwrap();
    assert_eq!(to_addr1(&mut b, &mut procs, 0), vec![("RTU", 1)]);
    assert_eq!(
        events(&mut procs[1]),
        vec![CmEvent::Established { id: id_p }]
    );
    b.disconnect(1, id_b, &[]).unwrap();
    assert_eq!(to_addr1(&mut b, &mut procs, 1), vec![("DREQ", 1)]);
    assert_eq!(
        events(&mut procs[1]),
        vec![CmEvent::Disconnected {
            id: id_p,
            timed_out: false
        }]
    );
    // Slot 5 connects out: B's REP (and later its DREP) find slot 5, not 0.
    let id_out = procs[1]
        .connect(2, &connect_params(1, 2, 0x0a_0012, 1, &[]))
        .unwrap();
    assert_eq!(comm_id_slot(id_out.0), 5);
    b.listen(service()).unwrap();
    events(&mut b);
    pump(&mut procs[1], gid(1), &mut b, 2);
    let Some(CmEvent::ConnectRequest { id: id_in, .. }) = b.poll_event() else {
        panic!()
    };
    b.accept(2, id_in, &accept_params(0x33, 1, &[])).unwrap();
    assert_eq!(to_addr1(&mut b, &mut procs, 2), vec![("REP", 1)]);
    assert!(matches!(
        procs[1].poll_event(),
        Some(CmEvent::ConnectResponse { id, .. }) if id == id_out
    ));
    // A SIDR_REP finds the slot of its request ID.
    b.listen(cma::service_id(cma::PortSpace::Udp, PORT))
        .unwrap();
    let sidr = procs[1]
        .sidr_request(3, gid(2), cma::service_id(cma::PortSpace::Udp, PORT), &[])
        .unwrap();
    pump(&mut procs[1], gid(1), &mut b, 3);
    let Some(CmEvent::SidrRequest { id: sid_b, .. }) = b.poll_event() else {
        panic!()
    };
    b.sidr_reply(sid_b, SidrStatus::Success, Qpn::from_masked(0x44), 7, &[])
        .unwrap();
    assert_eq!(to_addr1(&mut b, &mut procs, 3), vec![("SIDR_REP", 1)]);
    assert!(matches!(
        procs[1].poll_event(),
        Some(CmEvent::SidrResolved { id, .. }) if id == sidr
    ));
    // A REQ for a service nobody on the address listens on: slot 0 refuses.
    let mut unlisted = connect_params(2, 1, 0x55, 1, &[]);
    unlisted.service_id = cma::service_id(cma::PortSpace::Tcp, PORT + 1);
    let id_u = b.connect(4, &unlisted).unwrap();
    assert_eq!(to_addr1(&mut b, &mut procs, 4), vec![("REQ", 0)]);
    let Message::Rej(r) = one(pump(&mut procs[0], gid(1), &mut b, 4)) else {
        panic!()
    };
    assert_eq!(
        (r.reason, r.remote_comm_id),
        (RejReason::InvalidServiceId, id_u.0)
    );
    // Slot 0's own IDs keep the top bits clear; slots stop at 127.
    let id0 = procs[0]
        .connect(5, &connect_params(1, 2, 0x66, 1, &[]))
        .unwrap();
    assert_eq!(comm_id_slot(id0.0), 0);
    assert!(procs[0].set_slot(128).is_err());
}

#[test]
fn sidr_resolves_refuses_and_times_out() {
    let (mut a, mut b) = (node(1, 12), node(2, 12));
    let udp = cma::service_id(cma::PortSpace::Udp, 8080);
    b.listen(udp).unwrap();
    let id = a
        .sidr_request(0, gid(2), udp, &req_private_data(1, 2, b"sidr"))
        .unwrap();
    assert_eq!(a.state(id), Some("SIDR_REQ_SENT"));
    let req = drain(&mut a);
    b.handle_mad(0, gid(1), &req[0].mad);
    b.handle_mad(0, gid(1), &req[0].mad);
    let ev = events(&mut b);
    let [CmEvent::SidrRequest {
        id: rid,
        private_data,
        ..
    }] = &ev[..]
    else {
        panic!("{ev:?}")
    };
    assert_eq!(&private_data[36..40], b"sidr");
    assert_eq!(b.counters().duplicates, 1);
    b.sidr_reply(
        *rid,
        SidrStatus::Success,
        Qpn::from_masked(0x33),
        cma::RDMA_UDP_QKEY,
        b"ok",
    )
    .unwrap();
    let rep = drain(&mut b);
    assert_eq!(tid(&rep[0]), tid(&req[0]));
    a.handle_mad(0, gid(2), &rep[0].mad);
    let ev = events(&mut a);
    let [CmEvent::SidrResolved {
        qpn,
        qkey,
        private_data,
        ..
    }] = &ev[..]
    else {
        panic!("{ev:?}")
    };
    assert_eq!(
        (*qpn, *qkey, &private_data[..2]),
        (Qpn::from_masked(0x33), 0x0123_4567, &b"ok"[..])
    );
    assert!(a.is_empty() && b.is_empty());

    // No listener: status 1 (unsupported).
    let id2 = a.sidr_request(0, gid(2), udp + 1, &[]).unwrap();
    pump(&mut a, gid(1), &mut b, 0);
    pump(&mut b, gid(2), &mut a, 0);
    assert_eq!(
        events(&mut a),
        vec![CmEvent::SidrUnreachable {
            id: id2,
            status: Some(SidrStatus::Unsupported),
            sends: 1
        }]
    );

    // Nobody answers: 16 sends, 4096 ms apart.
    let id3 = a.sidr_request(0, gid(3), udp, &[]).unwrap();
    let mut sends = drain(&mut a).len();
    let mut last = 0;
    while let Some(due) = a.poll_timeout() {
        assert_eq!(due - last, 4096 * MS_NS);
        a.handle_timeout(due);
        last = due;
        sends += drain(&mut a).len();
    }
    assert_eq!(sends, 16);
    assert_eq!(
        events(&mut a),
        vec![CmEvent::SidrUnreachable {
            id: id3,
            status: None,
            sends: 16
        }]
    );
}
