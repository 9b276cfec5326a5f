//! Error cases of UC and UD through the public API: a local error moves the QP
//! to SQE (receives go on), a wrong Q_Key or a short buffer drops the datagram
//! (counted, WQE kept) — qp-state-machine.md §6.4, rc-reliability.md §7.

mod pair;
use pair::*;
use softverbs::*;
use std::time::{Duration, Instant};

fn sides(tag: u8) -> (Side, Side) {
    sides_on("err", 3, tag, 1 << 20)
}

/// UC send-side errors are local: LOC_PROT_ERR, the QP goes to SQE (not ERR),
/// later sends flush, receives go on, and SQE→RTS resumes sending.
#[test]
fn uc_local_error_moves_the_qp_to_sqe() {
    let (a, b) = sides(4);
    let (qa, qb) = uc_pair(&a, &b);
    let bad = Sge {
        lkey: a.mr.lkey() ^ 0x100,
        ..a.mr.sge(0, 8)
    };
    qa.post_send(&send_wr(1, WrOpcode::Send, &[bad], WrTarget::None, SIG))
        .unwrap();
    assert_eq!(ids(&wait(&a.scq, 1)), [(1, WcStatus::LocProtErr)]);
    assert_eq!(state(&qa), QpState::Sqe);
    post_send8(&qa, &a.mr, 2, SendFlags(0));
    assert_eq!(
        ids(&wait(&a.scq, 1)),
        [(2, WcStatus::WrFlushErr)],
        "posted in SQE: flushed, unsignaled too"
    );
    // Receiving still works in SQE.
    a.mr.write(100, b"from b!!");
    qa.post_recv(&recv_wr(3, &[a.mr.sge(0, 64)])).unwrap();
    post_send8(&qb, &b.mr, 4, SIG);
    assert_eq!(ids(&wait(&a.rcq, 1)), [(3, WcStatus::Success)]);
    wait(&b.scq, 1);
    // SQE → RTS: sending again.
    qa.modify(
        &QpAttr {
            qp_state: QpState::Rts,
            ..QpAttr::default()
        },
        AttrMask::STATE,
    )
    .unwrap();
    a.mr.write(200, b"again");
    qb.post_recv(&recv_wr(5, &[b.mr.sge(512, 64)])).unwrap();
    qa.post_send(&send_wr(
        6,
        WrOpcode::Send,
        &[a.mr.sge(200, 5)],
        WrTarget::None,
        SIG,
    ))
    .unwrap();
    assert_eq!(ids(&wait(&a.scq, 1)), [(6, WcStatus::Success)]);
    let r = wait(&b.rcq, 1)[0];
    assert_eq!((r.wr_id, r.byte_len), (5, 5));
    assert_eq!(read(&b.mr, 512, 5), b"again");
}

/// UD: a datagram with the wrong Q_Key is dropped silently — no completion, no
/// receive WQE consumed, the drop counted; a Q_Key with bit 31 set means "the
/// sender's own". A datagram larger than the receive buffer (40 + payload) is
/// dropped too, and the QP stays in RTS.
#[test]
fn ud_wrong_qkey_and_short_buffer_are_dropped() {
    let (a, b) = sides(8);
    let ua = ud_qp(&a);
    let ub = ud_qp(&b);
    let ah = a.pd.create_ah(&AhAttr::roce(b.gid(), 0)).unwrap();
    for i in 0..2 {
        ub.post_recv(&recv_wr(i, &[b.mr.sge(i as usize * 256, 256)]))
            .unwrap();
    }
    let dropped0 = ub.counters().unwrap().dropped;
    a.mr.write(0, b"wrong key");
    a.mr.write(16, b"right key");
    ua.post_send(&send_wr(
        1,
        WrOpcode::Send,
        &[a.mr.sge(0, 9)],
        ah.ud(ub.qp_num(), QKEY + 1),
        SIG,
    ))
    .unwrap();
    assert_eq!(
        ids(&wait(&a.scq, 1)),
        [(1, WcStatus::Success)],
        "UD send completes once transmitted"
    );
    // Bit 31: the sender's own Q_Key (equal to B's here) — delivered.
    ua.post_send(&send_wr(
        2,
        WrOpcode::Send,
        &[a.mr.sge(16, 9)],
        ah.ud(ub.qp_num(), 0x8000_0000),
        SIG,
    ))
    .unwrap();
    wait(&a.scq, 1);
    let r = wait(&b.rcq, 1)[0];
    assert_eq!(
        (r.wr_id, r.byte_len, r.src_qp),
        (0, 49, ua.qp_num()),
        "the first WQE took the second datagram"
    );
    assert_eq!(read(&b.mr, 40, 9), b"right key");
    empty(&b.rcq);
    let c = ub.counters().unwrap();
    assert_eq!(
        (c.drop_qkey, c.dropped),
        (1, dropped0 + 1),
        "the Q_Key drop is counted as such"
    );
    // 40 + 300 bytes do not fit the remaining 256-byte WQE: dropped silently
    // (no completion), the WQE kept for the next datagram, the QP still in RTS.
    ua.post_send(&send_wr(
        3,
        WrOpcode::Send,
        &[a.mr.sge(0, 300)],
        ah.ud(ub.qp_num(), QKEY),
        SIG,
    ))
    .unwrap();
    wait(&a.scq, 1);
    let t = Instant::now() + T;
    while ub.counters().unwrap().dropped < dropped0 + 2 && Instant::now() < t {
        std::thread::sleep(Duration::from_millis(1));
    }
    let c = ub.counters().unwrap();
    assert_eq!((c.drop_invalid, c.dropped), (1, dropped0 + 2), "{c:?}");
    assert_eq!(state(&ub), QpState::Rts);
    empty(&b.rcq);
    ua.post_send(&send_wr(
        4,
        WrOpcode::Send,
        &[a.mr.sge(16, 9)],
        ah.ud(ub.qp_num(), QKEY),
        SIG,
    ))
    .unwrap();
    wait(&a.scq, 1);
    let r = wait(&b.rcq, 1)[0];
    assert_eq!(
        (r.wr_id, r.status, r.byte_len),
        (1, WcStatus::Success, 49),
        "the kept WQE took the next datagram"
    );
}

/// UD send-side errors are local too: LOC_PROT_ERR, the QP goes to SQE, the
/// WRs behind flush, receives still complete, SQE→RTS resumes.
#[test]
fn ud_local_error_moves_the_qp_to_sqe() {
    let (a, b) = sides(10);
    let ua = ud_qp(&a);
    let ub = ud_qp(&b);
    let to_b = a.pd.create_ah(&AhAttr::roce(b.gid(), 0)).unwrap();
    let to_a = b.pd.create_ah(&AhAttr::roce(a.gid(), 0)).unwrap();
    let bad = Sge {
        lkey: a.mr.lkey() ^ 0x100,
        ..a.mr.sge(0, 8)
    };
    ua.post_send(&send_wr(
        1,
        WrOpcode::Send,
        &[bad],
        to_b.ud(ub.qp_num(), QKEY),
        SIG,
    ))
    .unwrap();
    ua.post_send(&send_wr(
        2,
        WrOpcode::Send,
        &[a.mr.sge(0, 8)],
        to_b.ud(ub.qp_num(), QKEY),
        SendFlags(0),
    ))
    .unwrap();
    assert_eq!(
        ids(&wait(&a.scq, 2)),
        [(1, WcStatus::LocProtErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(state(&ua), QpState::Sqe);
    // Receiving goes on in SQE.
    ua.post_recv(&recv_wr(3, &[a.mr.sge(4096, 128)])).unwrap();
    b.mr.write(0, b"hello a");
    ub.post_send(&send_wr(
        4,
        WrOpcode::Send,
        &[b.mr.sge(0, 7)],
        to_a.ud(ua.qp_num(), QKEY),
        SIG,
    ))
    .unwrap();
    let r = wait(&a.rcq, 1)[0];
    assert_eq!(
        (r.wr_id, r.status, r.byte_len, r.src_qp),
        (3, WcStatus::Success, 47, ub.qp_num())
    );
    assert_eq!(read(&a.mr, 4096 + 40, 7), b"hello a");
    // SQE → RTS.
    ua.apply(Resume).unwrap();
    ub.post_recv(&recv_wr(5, &[b.mr.sge(4096, 128)])).unwrap();
    ua.post_send(&send_wr(
        6,
        WrOpcode::Send,
        &[a.mr.sge(0, 8)],
        to_b.ud(ub.qp_num(), QKEY),
        SIG,
    ))
    .unwrap();
    assert_eq!(ids(&wait(&a.scq, 1)), [(6, WcStatus::Success)]);
    assert_eq!(ids(&wait(&b.rcq, 1)), [(5, WcStatus::Success)]);
}
