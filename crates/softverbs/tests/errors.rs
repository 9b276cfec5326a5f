//! Error cases through the public API, two devices in one process over UDP:
//! each with the completion status and the QP states that
//! spec/rc-reliability.md §5–§7 and completions.md give, and with the memory a
//! failed operation must not touch checked byte for byte.

mod pair;
use pair::*;
use softverbs::*;
use std::time::{Duration, Instant};

fn sides(tag: u8) -> (Side, Side) {
    let a = Side::new(
        device(
            &format!("err-{tag}-a"),
            &format!("127.7.3.{}", 2 * tag),
            Mtu::Mtu1024,
        ),
        1 << 20,
    );
    let b = Side::new(
        device(
            &format!("err-{tag}-b"),
            &format!("127.7.3.{}", 2 * tag + 1),
            Mtu::Mtu1024,
        ),
        1 << 20,
    );
    (a, b)
}

const SIG: SendFlags = SendFlags::SIGNALED;

fn state<T: Transport>(q: &QueuePair<T>) -> QpState {
    q.state().unwrap()
}

/// Waits (bounded) until `q` reaches `want`: the peer learns of an error from a
/// NAK it sent, so its state changes on its own progress thread.
fn await_state<T: Transport>(q: &QueuePair<T>, want: QpState) {
    let deadline = Instant::now() + T;
    while state(q) != want && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(state(q), want);
}

/// A remote access violation is NAKed: the requester completes the WR with
/// REM_ACCESS_ERR, both QPs go to ERR, later WRs flush, and not a byte of the
/// target changes. Cases: bad rkey, out of bounds, MR without REMOTE_WRITE /
/// REMOTE_READ / REMOTE_ATOMIC.
#[test]
fn remote_access_violations() {
    let (a, b) = sides(1);
    // B's second region allows remote reads only.
    let ro =
        b.pd.reg_mr(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ)
            .unwrap();
    let wo =
        b.pd.reg_mr(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)
            .unwrap();
    ro.write(0, &[0xab; 4096]);
    wo.write(0, &[0xcd; 4096]);
    b.mr.write(0, &[0xef; 1 << 20]);
    a.mr.write(0, &pattern(4096, 1));
    let end = b.mr.len();
    let cases: Vec<(&str, WrOpcode, WrTarget)> = vec![
        (
            "bad rkey",
            WrOpcode::RdmaWrite,
            WrTarget::Rdma(RdmaTarget {
                rkey: b.mr.rkey() ^ 0x100,
                ..b.mr.remote(0)
            }),
        ),
        (
            "WRITE past the end",
            WrOpcode::RdmaWrite,
            WrTarget::Rdma(b.mr.remote(end - 8)),
        ),
        (
            "READ past the end",
            WrOpcode::RdmaRead,
            WrTarget::Rdma(b.mr.remote(end - 8)),
        ),
        (
            "WRITE below the start",
            WrOpcode::RdmaWrite,
            WrTarget::Rdma(RdmaTarget {
                remote_addr: b.mr.addr() - 8,
                rkey: b.mr.rkey(),
            }),
        ),
        (
            "WRITE without REMOTE_WRITE",
            WrOpcode::RdmaWrite,
            WrTarget::Rdma(ro.remote(0)),
        ),
        (
            "WRITE_WITH_IMM without REMOTE_WRITE",
            WrOpcode::RdmaWriteWithImm,
            WrTarget::Rdma(ro.remote(0)),
        ),
        (
            "READ without REMOTE_READ",
            WrOpcode::RdmaRead,
            WrTarget::Rdma(wo.remote(0)),
        ),
        (
            "atomic without REMOTE_ATOMIC",
            WrOpcode::AtomicFetchAndAdd,
            WrTarget::Atomic(AtomicTarget {
                remote_addr: wo.addr(),
                compare_add: 1,
                swap: 0,
                rkey: wo.rkey(),
            }),
        ),
    ];
    for (what, op, target) in cases {
        let (qa, qb) = rc_pair(&a, &b);
        qb.post_recv(&recv_wr(50, &[b.mr.sge(0, 64)])).unwrap();
        let len = if op.is_atomic() { 8 } else { 16 };
        // Local landing zone for READ/atomic results: must stay as it is.
        a.mr.write(8192, &[0x11; 16]);
        let local = if op.is_rdma_write() {
            a.mr.sge(0, len)
        } else {
            a.mr.sge(8192, len)
        };
        qa.post_send(&send_wr(1, op, &[local], target, SIG))
            .unwrap();
        qa.post_send(&send_wr(
            2,
            WrOpcode::Send,
            &[a.mr.sge(0, 8)],
            WrTarget::None,
            SendFlags(0),
        ))
        .unwrap();
        let wc = wait(&a.scq, 2);
        assert_eq!(
            ids(&wc),
            [(1, WcStatus::RemAccessErr), (2, WcStatus::WrFlushErr)],
            "{what}"
        );
        assert!(wc.iter().all(|w| w.qp_num == qa.qp_num()), "{what}");
        assert_eq!(state(&qa), QpState::Err, "{what}: requester");
        await_state(&qb, QpState::Err);
        // B's posted receive is flushed (WRITE_WITH_IMM may first fail it).
        let r = wait(&b.rcq, 1)[0];
        assert_eq!(r.wr_id, 50, "{what}");
        assert!(
            matches!(r.status, WcStatus::WrFlushErr | WcStatus::RemAccessErr),
            "{what}: {r:?}"
        );
        assert!(
            read(&b.mr, 0, 1 << 20).iter().all(|&x| x == 0xef),
            "{what}: B's main region changed"
        );
        assert!(
            read(&ro, 0, 4096).iter().all(|&x| x == 0xab),
            "{what}: read-only region changed"
        );
        assert!(
            read(&wo, 0, 4096).iter().all(|&x| x == 0xcd),
            "{what}: write-only region changed"
        );
        assert_eq!(
            read(&a.mr, 8192, 16),
            [0x11; 16],
            "{what}: nothing came back"
        );
    }
}

/// Local protection: a SEND gathering through a bad lkey, or a READ scattering
/// into a region without LOCAL_WRITE, completes with LOC_PROT_ERR; RC goes to
/// ERR and later WRs flush.
#[test]
fn local_protection_errors_on_rc() {
    let (a, b) = sides(2);
    let no_local_write = a.pd.reg_mr(4096, AccessFlags(0)).unwrap();
    let bad = Sge {
        lkey: a.mr.lkey() ^ 0x100,
        ..a.mr.sge(0, 8)
    };
    let cases: Vec<(&str, WrOpcode, Sge, WrTarget)> = vec![
        ("SEND with a bad lkey", WrOpcode::Send, bad, WrTarget::None),
        (
            "SEND past the end of the region",
            WrOpcode::Send,
            a.mr.sge(a.mr.len() - 4, 8),
            WrTarget::None,
        ),
        (
            "WRITE with a bad lkey",
            WrOpcode::RdmaWrite,
            bad,
            WrTarget::Rdma(b.mr.remote(0)),
        ),
        (
            "READ into a region without LOCAL_WRITE",
            WrOpcode::RdmaRead,
            no_local_write.sge(0, 8),
            WrTarget::Rdma(b.mr.remote(0)),
        ),
    ];
    for (what, op, sge, target) in cases {
        let (qa, qb) = rc_pair(&a, &b);
        qb.post_recv(&recv_wr(7, &[b.mr.sge(0, 64)])).unwrap();
        qa.post_send(&send_wr(1, op, &[sge], target, SIG)).unwrap();
        qa.post_send(&send_wr(
            2,
            WrOpcode::Send,
            &[a.mr.sge(0, 8)],
            WrTarget::None,
            SendFlags(0),
        ))
        .unwrap();
        assert_eq!(
            ids(&wait(&a.scq, 2)),
            [(1, WcStatus::LocProtErr), (2, WcStatus::WrFlushErr)],
            "{what}"
        );
        assert_eq!(state(&qa), QpState::Err, "{what}");
        assert_eq!(read(&no_local_write, 0, 8), [0; 8], "{what}");
        if op == WrOpcode::RdmaRead {
            // The READ fails only when its response arrives; the SEND behind it may
            // have reached B by then (B's side of it is a normal receive).
            let _ = b.rcq.wait(1, Duration::from_millis(20));
        }
        empty(&b.rcq);
        assert_eq!(
            state(&qb),
            QpState::Rts,
            "{what}: the responder saw nothing wrong"
        );
    }
}

/// The failing WR is not the oldest outstanding one: a READ is still in
/// flight when the SEND behind it fails its gather. The READ completes
/// normally, the SEND with LOC_PROT_ERR (not a flush), the WR after it flushes
/// (completions.md §3: an error completion is followed by flushes).
#[test]
fn local_protection_error_behind_an_outstanding_read() {
    let (a, b) = sides(3);
    let (qa, qb) = rc_pair(&a, &b);
    let n = 256 << 10;
    b.mr.write(0, &pattern(n, 9));
    qb.post_recv(&recv_wr(7, &[b.mr.sge(0, 64)])).unwrap();
    let bad = Sge {
        lkey: a.mr.lkey() ^ 0x100,
        ..a.mr.sge(0, 8)
    };
    qa.post_send(&send_wr(
        1,
        WrOpcode::RdmaRead,
        &[a.mr.sge(0, n as u32)],
        WrTarget::Rdma(b.mr.remote(0)),
        SIG,
    ))
    .unwrap();
    qa.post_send(&send_wr(
        2,
        WrOpcode::Send,
        &[bad],
        WrTarget::None,
        SendFlags(0),
    ))
    .unwrap();
    qa.post_send(&send_wr(
        3,
        WrOpcode::Send,
        &[a.mr.sge(0, 8)],
        WrTarget::None,
        SendFlags(0),
    ))
    .unwrap();
    let wc = wait(&a.scq, 3);
    assert_eq!(
        ids(&wc),
        [
            (1, WcStatus::Success),
            (2, WcStatus::LocProtErr),
            (3, WcStatus::WrFlushErr)
        ]
    );
    assert!(
        read(&a.mr, 0, n) == pattern(n, 9),
        "the READ's data arrived"
    );
    assert_eq!(state(&qa), QpState::Err);
    empty(&b.rcq);
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
    qa.post_send(&send_wr(
        2,
        WrOpcode::Send,
        &[a.mr.sge(0, 8)],
        WrTarget::None,
        SendFlags(0),
    ))
    .unwrap();
    assert_eq!(
        ids(&wait(&a.scq, 1)),
        [(2, WcStatus::WrFlushErr)],
        "posted in SQE: flushed, unsignaled too"
    );
    // Receiving still works in SQE.
    a.mr.write(100, b"from b!!");
    qa.post_recv(&recv_wr(3, &[a.mr.sge(0, 64)])).unwrap();
    qb.post_send(&send_wr(
        4,
        WrOpcode::Send,
        &[b.mr.sge(0, 8)],
        WrTarget::None,
        SIG,
    ))
    .unwrap();
    assert_eq!(ids(&wait(&a.rcq, 1)), [(3, WcStatus::Success)]);
    wait(&b.scq, 1);
    // SQE → RTS: sending again.
    qa.modify(
        &QpAttr {
            qp_state: QpState::Rts as u32,
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

/// A SEND larger than the receive buffer: the responder completes the receive
/// with LOC_LEN_ERR, the requester gets REM_INV_REQ_ERR (NAK invalid
/// request), both QPs go to ERR.
#[test]
fn receive_buffer_too_small() {
    let (a, b) = sides(5);
    let (qa, qb) = rc_pair(&a, &b);
    b.mr.write(0, &[0x5a; 256]);
    qb.post_recv(&recv_wr(1, &[b.mr.sge(0, 50)])).unwrap();
    qb.post_recv(&recv_wr(2, &[b.mr.sge(100, 50)])).unwrap();
    qa.post_send(&send_wr(
        1,
        WrOpcode::Send,
        &[a.mr.sge(0, 100)],
        WrTarget::None,
        SIG,
    ))
    .unwrap();
    assert_eq!(ids(&wait(&a.scq, 1)), [(1, WcStatus::RemInvReqErr)]);
    let r = wait(&b.rcq, 2);
    assert_eq!(
        ids(&r),
        [(1, WcStatus::LocLenErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(r[0].qp_num, qb.qp_num());
    assert_eq!(state(&qa), QpState::Err);
    await_state(&qb, QpState::Err);
    assert!(
        read(&b.mr, 50, 50).iter().all(|&x| x == 0x5a),
        "nothing written past the 50-byte buffer"
    );
}

/// No receive posted: RNR NAKs. rnr_retry = 0 fails at once with
/// RNR_RETRY_EXC_ERR (requester to ERR, responder unaffected); rnr_retry = 7
/// retries forever, and the SEND lands once a receive is posted.
#[test]
fn rnr_with_retry_zero_and_seven() {
    let (a, b) = sides(6);
    let o = RcOpts {
        rnr_retry: 0,
        ..RcOpts::default()
    };
    let (qa, qb) = rc_pair_with(&a, &a.init(), &b, &b.init(), &o);
    qa.post_send(&send_wr(
        1,
        WrOpcode::Send,
        &[a.mr.sge(0, 8)],
        WrTarget::None,
        SIG,
    ))
    .unwrap();
    qa.post_send(&send_wr(
        2,
        WrOpcode::Send,
        &[a.mr.sge(0, 8)],
        WrTarget::None,
        SendFlags(0),
    ))
    .unwrap();
    assert_eq!(
        ids(&wait(&a.scq, 2)),
        [(1, WcStatus::RnrRetryExcErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(state(&qa), QpState::Err);
    assert_eq!(state(&qb), QpState::Rts);
    assert!(qb.counters().unwrap().rnr_naks_sent >= 1);

    let o = RcOpts {
        rnr_retry: 7,
        min_rnr_timer: 1,
        ..RcOpts::default()
    };
    let (qa, qb) = rc_pair_with(&a, &a.init(), &b, &b.init(), &o);
    a.mr.write(0, b"patience");
    qa.post_send(&send_wr(
        3,
        WrOpcode::Send,
        &[a.mr.sge(0, 8)],
        WrTarget::None,
        SIG,
    ))
    .unwrap();
    let deadline = Instant::now() + T;
    while qa.counters().unwrap().rnr_naks_received < 3 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        qa.counters().unwrap().rnr_naks_received >= 3,
        "RNR NAKs retried"
    );
    empty(&a.scq);
    qb.post_recv(&recv_wr(4, &[b.mr.sge(0, 64)])).unwrap();
    assert_eq!(ids(&wait(&a.scq, 1)), [(3, WcStatus::Success)]);
    assert_eq!(ids(&wait(&b.rcq, 1)), [(4, WcStatus::Success)]);
    assert_eq!(read(&b.mr, 0, 8), b"patience");
    assert_eq!(state(&qa), QpState::Rts);
}

/// Moving a QP to ERR flushes every outstanding WR in posting order with
/// WR_FLUSH_ERR — unsignaled send WRs included — sends first, then receives.
#[test]
fn err_flushes_every_outstanding_wr_even_unsignaled() {
    let (a, b) = sides(7);
    let (qa, _qb) = rc_pair(&a, &b);
    // B posts no receives: the sends sit in RNR retries (rnr_retry 7).
    for i in 0..6 {
        let flags = if i % 2 == 0 { SIG } else { SendFlags(0) };
        qa.post_send(&send_wr(
            i,
            WrOpcode::Send,
            &[a.mr.sge(0, 8)],
            WrTarget::None,
            flags,
        ))
        .unwrap();
    }
    for i in 0..3 {
        qa.post_recv(&recv_wr(100 + i, &[a.mr.sge(4096, 64)]))
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(5));
    empty(&a.scq);
    qa.modify(
        &QpAttr {
            qp_state: QpState::Err as u32,
            ..QpAttr::default()
        },
        AttrMask::STATE,
    )
    .unwrap();
    let s = wait(&a.scq, 6);
    assert_eq!(
        ids(&s),
        (0..6)
            .map(|i| (i, WcStatus::WrFlushErr))
            .collect::<Vec<_>>()
    );
    let r = wait(&a.rcq, 3);
    assert_eq!(
        ids(&r),
        (100..103)
            .map(|i| (i, WcStatus::WrFlushErr))
            .collect::<Vec<_>>()
    );
    for w in s.iter().chain(&r) {
        // On error only wr_id, status, qp_num (and vendor_err) are meaningful; the rest is zero.
        assert_eq!(
            (w.qp_num, w.byte_len, w.wc_flags, w.src_qp),
            (qa.qp_num(), 0, WcFlags::NONE, 0),
            "{w:?}"
        );
    }
    empty(&a.scq);
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

/// post_send / post_recv in states that refuse them: EINVAL with a reason.
#[test]
fn posting_in_the_wrong_state_is_einval_with_a_reason() {
    let (a, _b) = sides(9);
    let ud = a.pd.create_ud_qp(&a.init()).unwrap();
    let e = ud.post_recv(&recv_wr(1, &[a.mr.sge(0, 64)])).unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL);
    assert!(e.to_string().contains("RESET"), "{e}");
    ud.to_init(DatagramInit {
        pkey_index: 0,
        port_num: 1,
        qkey: QKEY,
    })
    .unwrap();
    ud.post_recv(&recv_wr(1, &[a.mr.sge(0, 64)])).unwrap();
    let ah = a.pd.create_ah(&AhAttr::roce(a.gid(), 0)).unwrap();
    let e = ud
        .post_send(&send_wr(
            1,
            WrOpcode::Send,
            &[a.mr.sge(0, 8)],
            ah.ud(1, QKEY),
            SIG,
        ))
        .unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL);
    assert!(e.to_string().contains("INIT"), "{e}");
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

/// A region deregistered while the peer still holds its rkey: the next WRITE
/// is NAKed (REM_ACCESS_ERR), and the bytes where the region was are not
/// touched (the buffer is gone; B's other region stays as it was).
#[test]
fn a_deregistered_region_is_out_of_reach() {
    let (a, b) = sides(11);
    let (qa, qb) = rc_pair(&a, &b);
    let mr = b.pd.reg_mr(4096, ALL).unwrap();
    let target = WrTarget::Rdma(mr.remote(0));
    a.mr.write(0, &[7; 64]);
    qa.post_send(&send_wr(
        1,
        WrOpcode::RdmaWrite,
        &[a.mr.sge(0, 64)],
        target,
        SIG,
    ))
    .unwrap();
    assert_eq!(ids(&wait(&a.scq, 1)), [(1, WcStatus::Success)]);
    assert_eq!(read(&mr, 0, 64), [7; 64]);
    mr.dereg();
    qa.post_send(&send_wr(
        2,
        WrOpcode::RdmaWrite,
        &[a.mr.sge(0, 64)],
        target,
        SIG,
    ))
    .unwrap();
    assert_eq!(ids(&wait(&a.scq, 1)), [(2, WcStatus::RemAccessErr)]);
    await_state(&qb, QpState::Err);
    assert!(read(&b.mr, 0, 1 << 20).iter().all(|&x| x == 0));
}

/// RESET discards everything queued without completions; the QP can then be
/// brought up again and carries traffic as new (spec qp-state-machine.md §6.1).
#[test]
fn reset_discards_queued_work_and_the_qp_is_reusable() {
    let (a, b) = sides(12);
    let (qa, qb) = rc_pair(&a, &b);
    // Sends stuck in RNR retries (no receives), receives waiting on A.
    for i in 0..4 {
        qa.post_send(&send_wr(
            i,
            WrOpcode::Send,
            &[a.mr.sge(0, 8)],
            WrTarget::None,
            SIG,
        ))
        .unwrap();
        qa.post_recv(&recv_wr(10 + i, &[a.mr.sge(4096, 64)]))
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(5));
    qa.apply(ToReset).unwrap();
    assert_eq!(
        a.scq.wait(1, Duration::from_millis(30)).len(),
        0,
        "RESET completes nothing"
    );
    empty(&a.rcq);
    // Bring both sides up again from scratch (B too: its PSNs moved on).
    qb.apply(ToReset).unwrap();
    rc_connect(&qa, b.gid(), qb.qp_num(), &RcOpts::default());
    rc_connect(&qb, a.gid(), qa.qp_num(), &RcOpts::default());
    a.mr.write(0, b"fresh");
    qb.post_recv(&recv_wr(20, &[b.mr.sge(0, 64)])).unwrap();
    qa.post_send(&send_wr(
        21,
        WrOpcode::Send,
        &[a.mr.sge(0, 5)],
        WrTarget::None,
        SIG,
    ))
    .unwrap();
    assert_eq!(ids(&wait(&a.scq, 1)), [(21, WcStatus::Success)]);
    let r = wait(&b.rcq, 1)[0];
    assert_eq!((r.wr_id, r.byte_len), (20, 5));
    assert_eq!(read(&b.mr, 0, 5), b"fresh");
    empty(&a.scq);
}

/// Destroying objects in use is refused (EBUSY) and changes nothing; a QP
/// destroyed with work outstanding leaves no completions behind and the CQ
/// can then go.
#[test]
fn destroy_in_use_is_ebusy_and_destroying_a_busy_qp_is_clean() {
    let (a, b) = sides(13);
    let (qa, _qb) = rc_pair(&a, &b);
    for i in 0..3 {
        qa.post_send(&send_wr(
            i,
            WrOpcode::Send,
            &[a.mr.sge(0, 8)],
            WrTarget::None,
            SIG,
        ))
        .unwrap();
    }
    let Side {
        ctx,
        pd,
        scq,
        rcq,
        mr,
    } = a;
    let scq = scq.destroy().unwrap_err();
    assert_eq!(scq.error.errno(), Errno::EBUSY);
    let pd = pd.destroy().unwrap_err();
    assert_eq!(pd.error.errno(), Errno::EBUSY);
    qa.destroy().unwrap();
    empty(&scq.object);
    let before = ctx.device_object_counts();
    scq.object.destroy().unwrap();
    rcq.destroy().unwrap();
    drop(mr);
    pd.object.destroy().unwrap();
    let after = ctx.device_object_counts();
    assert!(
        after.iter().zip(&before).all(|(x, y)| x <= y) && after != before,
        "{before:?} -> {after:?}"
    );
}

/// Zero-length READ and WRITE(+IMM) do not check VA or R_Key (IBA C9-88,
/// rc-reliability.md §3 step 6): they succeed with a bogus rkey. A misaligned
/// atomic is refused at post.
#[test]
fn zero_length_skips_the_rkey_check_and_misaligned_atomics_are_refused() {
    let (a, b) = sides(14);
    let (qa, qb) = rc_pair(&a, &b);
    let bogus = WrTarget::Rdma(RdmaTarget {
        remote_addr: 0xdead_0000,
        rkey: 0x1234_5678,
    });
    qb.post_recv(&recv_wr(5, &[b.mr.sge(0, 64)])).unwrap();
    for (id, op) in [
        (1, WrOpcode::RdmaWrite),
        (2, WrOpcode::RdmaRead),
        (3, WrOpcode::RdmaWriteWithImm),
    ] {
        qa.post_send(&send_wr(id, op, &[], bogus, SIG)).unwrap();
    }
    let wc = wait(&a.scq, 3);
    assert_eq!(
        ids(&wc),
        [
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (3, WcStatus::Success)
        ]
    );
    assert!(wc.iter().all(|w| w.byte_len == 0));
    let r = wait(&b.rcq, 1)[0];
    assert_eq!(
        (r.wr_id, r.opcode, r.byte_len, r.imm_data.value()),
        (5, WcOpcode::RecvRdmaWithImm, 0, 0x1234)
    );
    assert_eq!((state(&qa), state(&qb)), (QpState::Rts, QpState::Rts));
    // A misaligned atomic is refused at post (EINVAL) — before any packet;
    // the responder's own alignment check is covered by the proto tests.
    let t = WrTarget::Atomic(AtomicTarget {
        remote_addr: b.mr.addr() + 68,
        compare_add: 1,
        swap: 0,
        rkey: b.mr.rkey(),
    });
    let e = qa
        .post_send(&send_wr(
            6,
            WrOpcode::AtomicFetchAndAdd,
            &[a.mr.sge(0, 8)],
            t,
            SIG,
        ))
        .unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL, "{e}");
    assert_eq!(state(&qa), QpState::Rts);
}

/// More READs and atomics than max_rd_atomic (16 here) posted at once: the
/// requester keeps at most that many in flight and every one completes, in
/// order, with its data.
#[test]
fn more_reads_and_atomics_than_the_initiator_depth() {
    let (a, b) = sides(15);
    let mut ia = a.init();
    ia.cap.max_send_wr = 64;
    let (qa, _qb) = rc_pair_with(&a, &ia, &b, &b.init(), &RcOpts::default());
    let data = pattern(48 * 1000, 8);
    b.mr.write(0, &data);
    b.mr.write(100_000, &0u64.to_ne_bytes());
    for i in 0..48u64 {
        let o = i as usize * 1000;
        if i % 3 == 2 {
            let t = WrTarget::Atomic(AtomicTarget {
                remote_addr: b.mr.addr() + 100_000,
                compare_add: 1,
                swap: 0,
                rkey: b.mr.rkey(),
            });
            qa.post_send(&send_wr(
                i,
                WrOpcode::AtomicFetchAndAdd,
                &[a.mr.sge(200_000 + o, 8)],
                t,
                SIG,
            ))
            .unwrap();
        } else {
            let t = WrTarget::Rdma(b.mr.remote(o));
            qa.post_send(&send_wr(
                i,
                WrOpcode::RdmaRead,
                &[a.mr.sge(o, 1000)],
                t,
                SIG,
            ))
            .unwrap();
        }
    }
    let wc = wait(&a.scq, 48);
    assert_eq!(
        ids(&wc),
        (0..48).map(|i| (i, WcStatus::Success)).collect::<Vec<_>>()
    );
    for i in 0..48usize {
        if i % 3 == 2 {
            let mut w = [0u8; 8];
            a.mr.read(200_000 + i * 1000, &mut w);
            assert_eq!(
                u64::from_ne_bytes(w),
                (i / 3) as u64,
                "FETCH_ADD {i} saw the adds before it"
            );
        } else {
            assert_eq!(
                read(&a.mr, i * 1000, 1000),
                data[i * 1000..(i + 1) * 1000],
                "READ {i}"
            );
        }
    }
    assert_eq!(read(&b.mr, 100_000, 8), 16u64.to_ne_bytes());
}

/// Responder resources (rc-reliability.md §3 step 4): with max_dest_rd_atomic
/// = 0 a READ or atomic is an invalid request (REM_INV_REQ_ERR, both QPs in
/// ERR); with 1, many READs in flight still all complete (the resources only
/// keep answers for duplicates).
#[test]
fn responder_resources_for_reads_and_atomics() {
    let (a, b) = sides(16);
    for (op, what) in [
        (WrOpcode::RdmaRead, "READ"),
        (WrOpcode::AtomicFetchAndAdd, "FETCH_ADD"),
    ] {
        let qa = a.pd.create_rc_qp(&a.init()).unwrap();
        let qb = b.pd.create_rc_qp(&b.init()).unwrap();
        rc_connect(&qa, b.gid(), qb.qp_num(), &RcOpts::default());
        rc_connect(
            &qb,
            a.gid(),
            qa.qp_num(),
            &RcOpts {
                max_dest_rd_atomic: 0,
                ..RcOpts::default()
            },
        );
        let t = if op.is_atomic() {
            WrTarget::Atomic(AtomicTarget {
                remote_addr: b.mr.addr(),
                compare_add: 1,
                swap: 0,
                rkey: b.mr.rkey(),
            })
        } else {
            WrTarget::Rdma(b.mr.remote(0))
        };
        qa.post_send(&send_wr(1, op, &[a.mr.sge(0, 8)], t, SIG))
            .unwrap();
        assert_eq!(
            ids(&wait(&a.scq, 1)),
            [(1, WcStatus::RemInvReqErr)],
            "{what}"
        );
        assert_eq!(state(&qa), QpState::Err, "{what}");
        await_state(&qb, QpState::Err);
        assert_eq!(read(&b.mr, 0, 8), [0; 8], "{what}");
    }
    let qa = a.pd.create_rc_qp(&a.init()).unwrap();
    let qb = b.pd.create_rc_qp(&b.init()).unwrap();
    rc_connect(&qa, b.gid(), qb.qp_num(), &RcOpts::default());
    rc_connect(
        &qb,
        a.gid(),
        qa.qp_num(),
        &RcOpts {
            max_dest_rd_atomic: 1,
            ..RcOpts::default()
        },
    );
    let data = pattern(16 * 2000, 2);
    b.mr.write(0, &data);
    for i in 0..16u64 {
        let o = i as usize * 2000;
        qa.post_send(&send_wr(
            i,
            WrOpcode::RdmaRead,
            &[a.mr.sge(o, 2000)],
            WrTarget::Rdma(b.mr.remote(o)),
            SIG,
        ))
        .unwrap();
    }
    assert_eq!(
        ids(&wait(&a.scq, 16)),
        (0..16).map(|i| (i, WcStatus::Success)).collect::<Vec<_>>()
    );
    assert_eq!(read(&a.mr, 0, 16 * 2000), data);
}
