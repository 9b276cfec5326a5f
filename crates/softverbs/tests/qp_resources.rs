//! QP lifecycle and responder resources through the public API: RESET discards
//! queued work and the QP is reusable, destroy while in use, zero-length and
//! misaligned operations, more READs and atomics than the initiator depth,
//! max_dest_rd_atomic.

mod pair;
use pair::*;
use softverbs::*;
use std::time::Duration;

fn sides(tag: u8) -> (Side, Side) {
    sides_on("err", 3, tag, 1 << 20)
}

/// RESET discards everything queued without completions; the QP can then be
/// brought up again and carries traffic as new (spec qp-state-machine.md §6.1).
#[test]
fn reset_discards_queued_work_and_the_qp_is_reusable() {
    let (a, b) = sides(12);
    let (qa, qb) = rc_pair(&a, &b);
    // Sends stuck in RNR retries (no receives), receives waiting on A.
    for i in 0..4 {
        post_send8(&qa, &a.mr, i, SIG);
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
    // Bring both sides up again from scratch (B too: its PSNs moved on),
    // with fresh PSNs as a program that reconnects uses: a retransmission
    // of the old sends may still be on its way (in a transmit batch or in
    // B's socket), and with the old PSNs it would pass for the new message.
    qb.apply(ToReset).unwrap();
    let fresh = RcOpts {
        psn: 0x1000,
        ..RcOpts::default()
    };
    rc_connect(&qa, b.gid(), qb.qp_num(), &fresh);
    rc_connect(&qb, a.gid(), qa.qp_num(), &fresh);
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
        post_send8(&qa, &a.mr, i, SIG);
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
