//! Scripted CM conversations: feed MADs and timeouts to connection managers
//! and assert exactly what comes out (spec/cm.md §3–§6).

mod cm_common;

use cm_common::*;
use proto::cm::timing::MS_NS;
use proto::cm::{CmError, CmEvent, ConnId, DropReason, QpTarget};
use wire::cm::{self, cma, Message, MsgKind, RejReason, SidrStatus};
use wire::{Psn, Qpn};

const REQ: usize = 0;
const REP: usize = 3;

fn one(v: Vec<cm::Message>) -> cm::Message {
    assert_eq!(v.len(), 1, "{v:?}");
    v.into_iter().next().unwrap()
}

/// A and B up to ESTABLISHED on both sides; returns (a, b, id_a, id_b).
fn established(seed: u64) -> (proto::cm::Cm, proto::cm::Cm, ConnId, ConnId) {
    let (mut a, mut b) = (node(1, seed), node(2, seed));
    b.listen(service()).unwrap();
    let id_a = a
        .connect(0, &connect_params(1, 2, 0x11, 0x100, b"hello"))
        .unwrap();
    pump(&mut a, gid(1), &mut b, 0);
    let Some(CmEvent::ConnectRequest { id: id_b, .. }) = b.poll_event() else {
        panic!()
    };
    b.accept(0, id_b, &accept_params(0x22, 0x200, b"world"))
        .unwrap();
    pump(&mut b, gid(2), &mut a, 0);
    assert!(matches!(
        a.poll_event(),
        Some(CmEvent::ConnectResponse { .. })
    ));
    a.ready_to_use(id_a, &[]).unwrap();
    pump(&mut a, gid(1), &mut b, 0);
    assert_eq!(events(&mut a), vec![CmEvent::Established { id: id_a }]);
    assert_eq!(events(&mut b), vec![CmEvent::Established { id: id_b }]);
    (a, b, id_a, id_b)
}

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
fn unanswered_req_is_sent_16_times_6144_ms_apart_then_unreachable() {
    let mut a = node(1, 5);
    let id_a = a
        .connect(0, &connect_params(1, 2, 0x11, 0x100, &[]))
        .unwrap();
    let first = drain(&mut a);
    let mut sends = vec![(0u64, first[0].mad)];
    let mut last = 0;
    loop {
        let due = a.poll_timeout().expect("a REQ is outstanding");
        // §4.2: 2 × 2^(18−8) + 2^(20−8) ms.
        assert_eq!(due - last, 6144 * MS_NS);
        a.handle_timeout(due - 1);
        assert!(drain(&mut a).is_empty(), "nothing before the deadline");
        a.handle_timeout(due);
        last = due;
        let tx = drain(&mut a);
        if tx.is_empty() {
            break;
        }
        sends.push((due, tx[0].mad));
    }
    assert_eq!(sends.len(), 16, "1 + max_cm_retries (15)");
    assert!(
        sends.iter().all(|(_, m)| *m == sends[0].1),
        "the same REQ each time"
    );
    assert_eq!(
        events(&mut a),
        vec![CmEvent::Unreachable {
            id: id_a,
            sends: 16
        }]
    );
    assert!(a.is_empty());
    assert_eq!(
        (a.counters().sent[REQ], a.counters().retransmitted[REQ]),
        (16, 15)
    );
}

#[test]
fn duplicate_req_gets_the_delayed_mra_and_mra_stretches_the_timeout() {
    let (mut a, mut b) = (node(1, 6), node(2, 6));
    b.listen(service()).unwrap();
    let id_a = a
        .connect(0, &connect_params(1, 2, 0x11, 0x100, &[]))
        .unwrap();
    let req = drain(&mut a);
    b.handle_mad(0, gid(1), &req[0].mad);
    let Some(CmEvent::ConnectRequest { id: id_b, .. }) = b.poll_event() else {
        panic!()
    };
    let now = 6144 * MS_NS;
    b.handle_mad(now, gid(1), &req[0].mad);
    assert!(
        events(&mut b).is_empty(),
        "a duplicate is not a new request"
    );
    let mra = drain(&mut b);
    let Message::Mra(m) = parse(&mra[0]) else {
        panic!()
    };
    assert_eq!(
        (
            m.local_comm_id,
            m.remote_comm_id,
            m.message_mraed,
            m.service_timeout
        ),
        (id_b.0, id_a.0, MsgKind::Req, 24)
    );
    assert_eq!(b.counters().duplicates, 1);
    a.handle_mad(now, gid(2), &mra[0].mad);
    assert_eq!(a.state(id_a), Some("MRA_REQ_RCVD"));
    // §4.4: convert(service timeout 24) + convert(the path's ACK timeout 19) = 2^16 + 2^11 ms.
    assert_eq!(a.poll_timeout(), Some(now + (65_536 + 2048) * MS_NS));
    a.handle_mad(now, gid(2), &mra[0].mad);
    assert_eq!(a.counters().duplicates, 1);
    // The REP still completes the handshake from MRA_REQ_RCVD.
    b.accept(now, id_b, &accept_params(0x22, 0x200, &[]))
        .unwrap();
    pump(&mut b, gid(2), &mut a, now);
    assert!(matches!(
        a.poll_event(),
        Some(CmEvent::ConnectResponse { .. })
    ));
}

#[test]
fn duplicate_rep_gets_mra_then_the_rtu_again() {
    let (mut a, mut b) = (node(1, 7), node(2, 7));
    b.listen(service()).unwrap();
    let id_a = a
        .connect(0, &connect_params(1, 2, 0x11, 0x100, &[]))
        .unwrap();
    pump(&mut a, gid(1), &mut b, 0);
    let Some(CmEvent::ConnectRequest { id: id_b, .. }) = b.poll_event() else {
        panic!()
    };
    b.accept(0, id_b, &accept_params(0x22, 0x200, &[])).unwrap();
    let rep = drain(&mut b);
    a.handle_mad(0, gid(2), &rep[0].mad);
    events(&mut a);
    a.handle_mad(1, gid(2), &rep[0].mad);
    let mra = drain(&mut a);
    let Message::Mra(m) = parse(&mra[0]) else {
        panic!()
    };
    assert_eq!(m.message_mraed, MsgKind::Rep);
    a.ready_to_use(id_a, b"rtu").unwrap();
    let rtu = drain(&mut a);
    a.handle_mad(2, gid(2), &rep[0].mad);
    let again = drain(&mut a);
    assert_eq!(again, rtu, "cm_dup_rep_handler resends the RTU");
    assert_eq!(a.counters().duplicates, 2);
    // B's REP was MRAed: B waits the stretched timeout, then the RTU lands.
    b.handle_mad(2, gid(1), &mra[0].mad);
    assert_eq!(b.state(id_b), Some("MRA_REP_RCVD"));
    b.handle_mad(3, gid(1), &rtu[0].mad);
    assert_eq!(events(&mut b), vec![CmEvent::Established { id: id_b }]);
}

#[test]
fn duplicate_dreq_gets_the_drep_again_even_after_timewait() {
    let (mut a, mut b, id_a, id_b) = established(8);
    a.disconnect(10, id_a, &[]).unwrap();
    let dreq = drain(&mut a);
    b.handle_mad(10, gid(1), &dreq[0].mad);
    b.disconnect(10, id_b, &[]).unwrap();
    let drep = drain(&mut b);
    b.handle_mad(11, gid(1), &dreq[0].mad);
    assert_eq!(drain(&mut b), drep, "TIMEWAIT resends the DREP");
    b.handle_timeout(10 + 2048 * MS_NS);
    assert!(b.is_empty());
    b.handle_mad(3000 * MS_NS, gid(1), &dreq[0].mad);
    let Message::Drep(d) = parse(&drain(&mut b)[0]) else {
        panic!()
    };
    // cm_issue_drep: IDs swapped from the DREQ.
    assert_eq!((d.local_comm_id, d.remote_comm_id), (id_b.0, id_a.0));
    assert_eq!(b.counters().duplicates, 2);
    // A in DREQ_SENT takes the first DREP; the second one finds TIMEWAIT.
    a.handle_mad(12, gid(2), &drep[0].mad);
    a.handle_mad(13, gid(2), &drep[0].mad);
    assert_eq!(
        events(&mut a),
        vec![CmEvent::Disconnected {
            id: id_a,
            timed_out: false
        }]
    );
    assert_eq!(a.counters().dropped(DropReason::WrongState), 1);
}

#[test]
fn malformed_and_forged_mads_are_dropped_and_counted() {
    let (mut a, mut b, id_a, id_b) = established(9);
    a.disconnect(0, id_a, &[]).unwrap();
    let dreq = drain(&mut a).remove(0).mad;
    let before = b.state(id_b);
    b.handle_mad(0, gid(1), &dreq[..200]);
    let mut sa = dreq;
    sa[1] = 0x03;
    b.handle_mad(0, gid(1), &sa);
    let mut lap = dreq;
    lap[17] = 0x19;
    b.handle_mad(0, gid(1), &lap);
    let mut bad_rej = cm::Repr::parse(&dreq).unwrap();
    bad_rej.message = Message::Rej(cm::rej::Repr {
        local_comm_id: id_a.0,
        remote_comm_id: id_b.0,
        message_rejected: MsgKind::Other,
        reason: RejReason::ConsumerDefined,
        ari_len: 0,
        ari: [0; 72],
        private_data: [0; 148],
    });
    let mut bad_rej = bad_rej.to_bytes();
    bad_rej[24 + 8] = 0xC0; // Message REJected = 3, reserved
    b.handle_mad(0, gid(1), &bad_rej);
    let mut wrong_ids = cm::Repr::parse(&dreq).unwrap();
    if let Message::Dreq(d) = &mut wrong_ids.message {
        d.local_comm_id ^= 1;
    }
    b.handle_mad(0, gid(1), &wrong_ids.to_bytes());
    let forged = dreq;
    b.handle_mad(0, gid(7), &forged);
    let mut other_qp = cm::Repr::parse(&dreq).unwrap();
    if let Message::Dreq(d) = &mut other_qp.message {
        d.remote_qpn = Qpn::from_masked(0x99);
    }
    b.handle_mad(0, gid(1), &other_qp.to_bytes());
    assert_eq!(b.state(id_b), before, "nothing changed the connection");
    assert!(events(&mut b).is_empty());
    let c = b.counters();
    assert_eq!(c.dropped(DropReason::Length), 1);
    assert_eq!(c.dropped(DropReason::NotCmSend), 1);
    assert_eq!(c.dropped(DropReason::Attribute), 1);
    assert_eq!(c.dropped(DropReason::BadField), 1);
    assert_eq!(c.dropped(DropReason::ForeignSource), 1);
    assert_eq!(c.dropped(DropReason::WrongQpn), 1);
    // A DREQ naming no connection is answered (cm_issue_drep), not dropped.
    assert_eq!(drain(&mut b).len(), 1);
    // The real DREQ still works.
    b.handle_mad(0, gid(1), &dreq);
    assert_eq!(
        events(&mut b),
        vec![CmEvent::Disconnected {
            id: id_b,
            timed_out: false
        }]
    );
}

#[test]
fn a_req_reusing_a_live_qp_is_rejected_as_stale_and_the_old_connection_dropped() {
    let (_a, mut b, _id_a, id_b) = established(10);
    // A restarts: a new CM with the same GUID and GID reuses QP 0x11.
    let mut a2 = node(1, 99);
    a2.connect(0, &connect_params(1, 2, 0x11, 0x500, &[]))
        .unwrap();
    let req = drain(&mut a2);
    // The REQ arrives a minute in: the DREQ's resends are timed from then.
    let now = 60_000 * MS_NS;
    b.handle_mad(now, gid(1), &req[0].mad);
    let out: Vec<_> = drain(&mut b).iter().map(parse).collect();
    assert!(
        matches!(&out[0], Message::Rej(r) if r.reason == RejReason::StaleConnection && r.message_rejected == MsgKind::Req)
    );
    assert!(
        matches!(&out[1], Message::Dreq(_)),
        "cm_match_req disconnects the stale connection"
    );
    assert_eq!(b.state(id_b), Some("DREQ_SENT"));
    let due = b.poll_timeout().expect("the DREQ is outstanding");
    assert!(
        due > now,
        "the DREQ is not already overdue ({due} <= {now})"
    );
    b.handle_timeout(now);
    assert!(drain(&mut b).is_empty(), "no resend at once");
}

#[test]
fn passive_side_gives_up_on_an_unanswered_rep() {
    let (mut a, mut b) = (node(1, 11), node(2, 11));
    b.listen(service()).unwrap();
    a.connect(0, &connect_params(1, 2, 0x11, 0x100, &[]))
        .unwrap();
    pump(&mut a, gid(1), &mut b, 0);
    let Some(CmEvent::ConnectRequest { id: id_b, .. }) = b.poll_event() else {
        panic!()
    };
    b.accept(0, id_b, &accept_params(0x22, 0x200, &[])).unwrap();
    let mut sends = drain(&mut b).len();
    let mut last = 0;
    while let Some(due) = b.poll_timeout() {
        // §4.2: the REP's timeout is cm_convert_to_ms(REQ Local CM Response Timeout 20).
        assert_eq!(due - last, 4096 * MS_NS);
        b.handle_timeout(due);
        last = due;
        sends += drain(&mut b).len();
    }
    assert_eq!(sends, 16);
    assert_eq!(
        events(&mut b),
        vec![CmEvent::Unreachable {
            id: id_b,
            sends: 16
        }]
    );
    assert_eq!(b.counters().retransmitted[REP], 15);
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

#[test]
fn calls_in_the_wrong_state_say_why() {
    let (mut a, mut b, id_a, id_b) = established(13);
    assert_eq!(
        b.accept(0, id_b, &accept_params(1, 1, &[])),
        Err(CmError::WrongState {
            op: "accept",
            state: "ESTABLISHED"
        })
    );
    assert!(matches!(
        a.ready_to_use(id_a, &[]),
        Err(CmError::WrongState { .. })
    ));
    assert_eq!(
        a.disconnect(0, ConnId(id_a.0 ^ 1), &[]),
        Err(CmError::UnknownId(id_a.0 ^ 1))
    );
    assert_eq!(
        b.listen(service()),
        Err(CmError::AlreadyListening(service()))
    );
    assert_eq!(b.listen(service()).unwrap_err().errno(), 98);
    let mut p = connect_params(1, 2, 1, 1, &[0; 57]);
    assert_eq!(
        a.connect(0, &p),
        Err(CmError::PrivateDataTooLong {
            what: "REQ",
            len: 93,
            max: 92
        })
    );
    p.private_data.clear();
    p.retry_count = 8;
    assert!(matches!(
        a.connect(0, &p),
        Err(CmError::OutOfRange {
            field: "retry_count",
            ..
        })
    ));
    assert!(matches!(
        a.qp_attrs(ConnId(0), QpTarget::Rtr),
        Err(CmError::UnknownId(0))
    ));
}

#[test]
fn a_full_table_refuses_with_no_resources() {
    let mut cfg = proto::cm::CmConfig::rdma_cm(gid(2), guid(2), 14);
    cfg.max_connections = 1;
    let mut b = proto::cm::Cm::new(cfg);
    b.listen(service()).unwrap();
    let (mut a1, mut a3) = (node(1, 14), node(3, 14));
    a1.connect(0, &connect_params(1, 2, 0x11, 1, &[])).unwrap();
    pump(&mut a1, gid(1), &mut b, 0);
    assert!(matches!(
        b.poll_event(),
        Some(CmEvent::ConnectRequest { .. })
    ));
    let id3 = a3.connect(0, &connect_params(3, 2, 0x33, 1, &[])).unwrap();
    pump(&mut a3, gid(3), &mut b, 0);
    assert!(b.poll_event().is_none());
    let tx = drain(&mut b);
    assert_eq!(tx[0].to, gid(3));
    assert!(
        matches!(parse(&tx[0]), Message::Rej(r) if r.reason == RejReason::NoResources && r.remote_comm_id == id3.0)
    );
    assert_eq!(b.counters().dropped(DropReason::NoResources), 1);
    let err = b
        .connect(0, &connect_params(2, 1, 0x22, 1, &[]))
        .unwrap_err();
    assert_eq!(
        (err.clone(), err.errno()),
        (CmError::TooManyConnections(1), 12)
    );
}

#[test]
fn destroying_a_pending_request_sends_rej_timeout_matched_by_ca_guid() {
    let (mut a, mut b) = (node(1, 15), node(2, 15));
    b.listen(service()).unwrap();
    let id_a = a.connect(0, &connect_params(1, 2, 0x11, 1, &[])).unwrap();
    pump(&mut a, gid(1), &mut b, 0);
    let Some(CmEvent::ConnectRequest { id: id_b, .. }) = b.poll_event() else {
        panic!()
    };
    a.destroy(0, id_a).unwrap();
    assert!(a.is_empty());
    let Message::Rej(r) = one(pump(&mut a, gid(1), &mut b, 0)) else {
        panic!()
    };
    // cm_destroy_id in REQ_SENT: reason timeout, ARI = our CA GUID (§5.8).
    assert_eq!(
        (r.reason, r.ari_len, r.message_rejected),
        (RejReason::Timeout, 8, MsgKind::Other)
    );
    assert_eq!(r.ari[..8], guid(1).to_be_bytes());
    let ev = events(&mut b);
    assert!(
        matches!(&ev[..], [CmEvent::Rejected { id, reason: RejReason::Timeout, .. }] if *id == id_b),
        "{ev:?}"
    );
    assert!(b.is_empty());
}

#[test]
fn duplicate_req_after_rep_is_quiet_and_a_late_reject_reaches_the_active_side() {
    let (mut a, mut b) = (node(1, 16), node(2, 16));
    b.listen(service()).unwrap();
    let id_a = a.connect(0, &connect_params(1, 2, 0x11, 1, &[])).unwrap();
    let req = drain(&mut a);
    b.handle_mad(0, gid(1), &req[0].mad);
    let Some(CmEvent::ConnectRequest { id: id_b, .. }) = b.poll_event() else {
        panic!()
    };
    b.accept(0, id_b, &accept_params(0x22, 2, &[])).unwrap();
    let rep = drain(&mut b);
    b.handle_mad(1, gid(1), &req[0].mad);
    assert!(
        drain(&mut b).is_empty(),
        "REP_SENT answers a duplicate REQ with nothing (the REP is retried)"
    );
    assert_eq!(b.counters().duplicates, 1);
    a.handle_mad(1, gid(2), &rep[0].mad);
    assert!(matches!(
        a.poll_event(),
        Some(CmEvent::ConnectResponse { .. })
    ));
    b.destroy(0, id_b).unwrap();
    let Message::Rej(r) = one(pump(&mut b, gid(2), &mut a, 2)) else {
        panic!()
    };
    assert_eq!(
        (r.reason, r.message_rejected),
        (RejReason::ConsumerDefined, MsgKind::Other)
    );
    let ev = events(&mut a);
    assert!(
        matches!(&ev[..], [CmEvent::Rejected { id, reason: RejReason::ConsumerDefined, .. }] if *id == id_a),
        "{ev:?}"
    );
    // REP_RCVD/MRA_REP_SENT → TimeWait on a REJ (§5.7), then gone.
    assert_eq!(a.state(id_a), Some("TIMEWAIT"));
    a.handle_timeout(2 + 2048 * MS_NS);
    assert_eq!(events(&mut a), vec![CmEvent::TimewaitExit { id: id_a }]);
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

/// `cm_destroy_id` on an ESTABLISHED id (spec/cm.md §5.8): one DREQ (never
/// resent), then TimeWait, silent for the owner: a late DREQ gets its DREP,
/// a late REQ a REJ (stale connection), the comm ID is not handed out again
/// until TimeWait ends, and no event is reported.
#[test]
fn destroying_a_connected_id_sends_one_dreq_and_waits_out_timewait_silently() {
    let (mut a, mut b, id_a, id_b) = established(31);
    // The REQ that opened the connection, for a late retransmission: the same
    // seed and parameters give the same comm ID and TID.
    let req = {
        let mut a2 = node(1, 31);
        a2.connect(0, &connect_params(1, 2, 0x11, 0x100, b"hello"))
            .unwrap();
        drain(&mut a2)
    };
    a.destroy(100, id_a).unwrap();
    let Message::Dreq(d) = one(drain(&mut a).iter().map(parse).collect()) else {
        panic!()
    };
    assert_eq!((d.local_comm_id, d.remote_comm_id), (id_a.0, id_b.0));
    assert_eq!(a.state(id_a), Some("TIMEWAIT"));
    // The DREQ's retry is cancelled: nothing is resent however long we wait.
    a.handle_timeout(100 + 2047 * MS_NS);
    assert!(drain(&mut a).is_empty(), "the DREQ is sent once");
    assert_eq!(a.state(id_a), Some("TIMEWAIT"));
    // That DREQ was lost; B disconnects on its own: A in TimeWait answers.
    b.disconnect(200, id_b, &[]).unwrap();
    let b_dreq = drain(&mut b);
    a.handle_mad(300, gid(2), &b_dreq[0].mad);
    let Message::Drep(p) = one(drain(&mut a).iter().map(parse).collect()) else {
        panic!("a late DREQ gets its DREP")
    };
    assert_eq!((p.local_comm_id, p.remote_comm_id), (id_a.0, id_b.0));
    // B destroys too (DREQ_SENT: TimeWait, nothing sent); a late REQ of the
    // connection finds it there and gets REJ stale connection.
    b.destroy(400, id_b).unwrap();
    assert!(drain(&mut b).is_empty());
    b.handle_mad(500, gid(1), &req[0].mad);
    let Message::Rej(r) = one(drain(&mut b).iter().map(parse).collect()) else {
        panic!("a late REQ gets a REJ")
    };
    assert_eq!(r.reason, RejReason::StaleConnection);
    assert!(
        events(&mut a).is_empty() && events(&mut b).is_empty(),
        "destroyed ids report nothing"
    );
    // The comm ID stays taken until TimeWait ends (2^11 ms, §4.5).
    assert_eq!((a.len(), b.len()), (1, 1));
    a.handle_timeout(100 + 2048 * MS_NS);
    b.handle_timeout(400 + 2048 * MS_NS);
    assert!(
        a.is_empty() && b.is_empty(),
        "TimeWait over: the comm IDs are free"
    );
    assert!(
        events(&mut a).is_empty() && events(&mut b).is_empty(),
        "no TimewaitExit for a destroyed id"
    );
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
