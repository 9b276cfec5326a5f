//! Scripted CM conversations about time: MAD retries and their timeouts, MRA,
//! duplicates of every message, stale connections, destroying ids mid-way and
//! TimeWait (spec/cm.md §4–§6).

mod cm_common;

use cm_common::*;
use proto::cm::timing::MS_NS;
use proto::cm::{CmEvent, DropReason};
use wire::cm::{Message, MsgKind, RejReason};

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
