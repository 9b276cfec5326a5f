//! Error cases of RC through the public API, two devices in one process over
//! UDP: each with the completion status and the QP states that
//! spec/rc-reliability.md §5–§7 and completions.md give, and with the memory a
//! failed operation must not touch checked byte for byte. UC/UD errors are in
//! `unreliable_errors.rs`, QP lifecycle and responder resources in
//! `qp_resources.rs`.

mod pair;
use pair::*;
use softverbs::*;
use std::time::{Duration, Instant};

fn sides(tag: u8) -> (Side, Side) {
    sides_on("err", 3, tag, 1 << 20)
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
        post_send8(&qa, &a.mr, 2, SendFlags(0));
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
        post_send8(&qa, &a.mr, 2, SendFlags(0));
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
    post_send8(&qa, &a.mr, 3, SendFlags(0));
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
    post_send8(&qa, &a.mr, 1, SIG);
    post_send8(&qa, &a.mr, 2, SendFlags(0));
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
    post_send8(&qa, &a.mr, 3, SIG);
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
        post_send8(&qa, &a.mr, i, flags);
    }
    for i in 0..3 {
        qa.post_recv(&recv_wr(100 + i, &[a.mr.sge(4096, 64)]))
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(5));
    empty(&a.scq);
    qa.modify(
        &QpAttr {
            qp_state: QpState::Err,
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
