//! Scripted CM conversations about bad input: malformed and forged MADs, calls
//! in the wrong state, a full table (spec/cm.md §3, §6).

mod cm_common;

use cm_common::*;
use proto::cm::{CmError, CmEvent, ConnId, DropReason, QpTarget};
use wire::cm::{self, Message, MsgKind, RejReason};
use wire::Qpn;

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
