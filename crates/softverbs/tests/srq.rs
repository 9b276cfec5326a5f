//! Shared receive queues through the public API: one SRQ shared by several RC
//! QPs with the limit event, UD QPs on an SRQ, RC on an empty SRQ (RNR until a
//! WQE is posted) and LAST_WQE_REACHED when such a QP enters ERR.

mod pair;
use pair::*;
use softverbs::*;
use std::time::Duration;

fn sides(tag: u8, mr_len: usize) -> (Side, Side) {
    sides_on("feat", 2, tag, mr_len)
}

/// One SRQ behind three RC QPs: every QP's SENDs land in SRQ WQEs, taken in
/// SRQ posting order; qp_num tells which QP consumed each. The limit event
/// fires once when the count drops below the armed limit, then disarms.
#[test]
fn srq_shared_by_three_qps_with_the_limit_event() {
    let (a, b) = sides(4, 1 << 16);
    let srq =
        b.pd.create_srq(SrqAttr {
            max_wr: 16,
            max_sge: 2,
            srq_limit: 0,
        })
        .unwrap();
    let mut ib = b.init();
    ib.srq = Some(&srq);
    let pairs: Vec<_> = (0..3)
        .map(|_| rc_pair_with(&a, &a.init(), &b, &ib, &RcOpts::default()))
        .collect();
    for i in 0..8u64 {
        // Two SGEs each: 16 + 48 bytes.
        let o = i as usize * 128;
        srq.post_recv(&recv_wr(i, &[b.mr.sge(o, 16), b.mr.sge(o + 64, 48)]))
            .unwrap();
    }
    // Per-WR limits of the SRQ: max_sge, then its depth.
    let three = [b.mr.sge(0, 1), b.mr.sge(0, 1), b.mr.sge(0, 1)];
    assert_eq!(
        srq.post_recv(&recv_wr(99, &three)).unwrap_err().errno(),
        Errno::EINVAL
    );
    srq.modify(
        &SrqAttr {
            max_wr: 0,
            max_sge: 0,
            srq_limit: 3,
        },
        2,
    )
    .unwrap();
    assert_eq!(srq.query().unwrap().srq_limit, 3);
    for (k, (qa, _)) in pairs.iter().enumerate() {
        for j in 0..2u8 {
            let msg = pattern(40, 16 * k as u8 + j);
            a.mr.write(4096 + 64 * (2 * k + j as usize), &msg);
            let sg = [a.mr.sge(4096 + 64 * (2 * k + j as usize), 40)];
            qa.post_send(&send_wr(
                j.into(),
                WrOpcode::Send,
                &sg,
                WrTarget::None,
                SendFlags::SIGNALED,
            ))
            .unwrap();
            let wc = wait(&b.rcq, 1)[0];
            let taken = (2 * k + j as usize) as u64;
            assert_eq!(
                (wc.wr_id, wc.status, wc.qp_num, wc.byte_len),
                (taken, WcStatus::Success, pairs[k].1.qp_num(), 40)
            );
            let o = taken as usize * 128;
            let mut got = read(&b.mr, o, 16);
            got.extend(read(&b.mr, o + 64, 24));
            assert_eq!(got, msg, "scattered over the SRQ WQE's two SGEs");
        }
        wait(&a.scq, 2);
    }
    // 8 posted, 6 taken: 2 left < 3 → the event fired once (when 2 remained),
    // and the limit is disarmed.
    let e = b
        .ctx
        .get_async_event(Some(T))
        .unwrap()
        .expect("SRQ limit event");
    assert_eq!((e.kind, e.element), (15, srq.id()));
    assert_eq!(
        srq.query().unwrap().srq_limit,
        0,
        "the limit disarms itself"
    );
    assert_eq!(
        b.ctx
            .get_async_event(Some(Duration::from_millis(30)))
            .unwrap(),
        None
    );
    // The SRQ's depth: 16 outstanding at most (2 are posted).
    for i in 0..14u64 {
        srq.post_recv(&recv_wr(100 + i, &[b.mr.sge(0, 8)])).unwrap();
    }
    assert_eq!(
        srq.post_recv(&recv_wr(200, &[b.mr.sge(0, 8)]))
            .unwrap_err()
            .errno(),
        Errno::ENOMEM
    );
    // An SRQ in use cannot be destroyed.
    let srq = srq.destroy().unwrap_err().object;
    drop(pairs);
    srq.destroy().unwrap();
}

/// UD QPs on one SRQ: each datagram takes the next SRQ WQE, with the GRH area
/// first, and the completion names the QP that took it and the sender.
#[test]
fn ud_qps_sharing_an_srq() {
    let (a, b) = sides(11, 1 << 16);
    let srq =
        b.pd.create_srq(SrqAttr {
            max_wr: 8,
            max_sge: 1,
            srq_limit: 0,
        })
        .unwrap();
    let mut ib = b.init();
    ib.srq = Some(&srq);
    let ubs: Vec<_> = (0..2)
        .map(|_| {
            let q = b.pd.create_ud_qp(&ib).unwrap();
            q.to_init(DatagramInit {
                pkey_index: 0,
                port_num: 1,
                qkey: QKEY,
            })
            .unwrap();
            q.to_rtr(UdRtr).unwrap();
            q.to_rts(SqPsnRts { sq_psn: 0 }).unwrap();
            q
        })
        .collect();
    let ua = ud_qp(&a);
    let ah = a.pd.create_ah(&AhAttr::roce(b.gid(), 0)).unwrap();
    for i in 0..4u64 {
        srq.post_recv(&recv_wr(i, &[b.mr.sge(i as usize * 1024, 1024)]))
            .unwrap();
    }
    for i in 0..4usize {
        let msg = pattern(100, i as u8);
        a.mr.write(i * 128, &msg);
        let to = &ubs[i % 2];
        let sg = [a.mr.sge(i * 128, 100)];
        ua.post_send(&send_wr(
            i as u64,
            WrOpcode::Send,
            &sg,
            ah.ud(to.qp_num(), QKEY),
            SendFlags::SIGNALED,
        ))
        .unwrap();
        wait(&a.scq, 1);
        let r = wait(&b.rcq, 1)[0];
        assert_eq!(
            (r.wr_id, r.status, r.qp_num, r.src_qp, r.byte_len, r.wc_flags),
            (
                i as u64,
                WcStatus::Success,
                to.qp_num(),
                ua.qp_num(),
                140,
                WcFlags::GRH
            )
        );
        assert_eq!(read(&b.mr, i * 1024 + 40, 100), msg);
    }
}

/// RC on an empty SRQ: RNR NAKs until a WQE is posted to the SRQ (then the
/// SEND lands); a QP on an SRQ that enters ERR raises
/// IBV_EVENT_QP_LAST_WQE_REACHED (16), and the SRQ's WQEs stay for others.
#[test]
fn rc_on_an_empty_srq_waits_and_last_wqe_reached_on_error() {
    let (a, b) = sides(12, 1 << 16);
    let srq =
        b.pd.create_srq(SrqAttr {
            max_wr: 8,
            max_sge: 1,
            srq_limit: 0,
        })
        .unwrap();
    let mut ib = b.init();
    ib.srq = Some(&srq);
    let (qa, qb) = rc_pair_with(&a, &a.init(), &b, &ib, &RcOpts::default());
    a.mr.write(0, b"late wqe");
    qa.post_send(&send_wr(
        1,
        WrOpcode::Send,
        &[a.mr.sge(0, 8)],
        WrTarget::None,
        SendFlags::SIGNALED,
    ))
    .unwrap();
    let deadline = std::time::Instant::now() + T;
    while qb.counters().unwrap().rnr_naks_sent < 2 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        qb.counters().unwrap().rnr_naks_sent >= 2,
        "RNR NAKs while the SRQ is empty"
    );
    empty(&a.scq);
    srq.post_recv(&recv_wr(7, &[b.mr.sge(0, 64)])).unwrap();
    assert_eq!(ids(&wait(&a.scq, 1)), [(1, WcStatus::Success)]);
    let r = wait(&b.rcq, 1)[0];
    assert_eq!((r.wr_id, r.qp_num, r.byte_len), (7, qb.qp_num(), 8));
    assert_eq!(read(&b.mr, 0, 8), b"late wqe");
    // Into ERR: the event, and the SRQ's WQE is not flushed.
    srq.post_recv(&recv_wr(8, &[b.mr.sge(0, 64)])).unwrap();
    qb.apply(ToError).unwrap();
    let e = b
        .ctx
        .get_async_event(Some(T))
        .unwrap()
        .expect("LAST_WQE_REACHED");
    assert_eq!((e.kind, e.element), (16, qb.id()));
    assert_eq!(
        b.rcq.wait(1, Duration::from_millis(20)).len(),
        0,
        "SRQ WQEs are not flushed"
    );
    let (qa2, _qb2) = rc_pair_with(&a, &a.init(), &b, &ib, &RcOpts::default());
    qa2.post_send(&send_wr(
        2,
        WrOpcode::Send,
        &[a.mr.sge(0, 8)],
        WrTarget::None,
        SendFlags::SIGNALED,
    ))
    .unwrap();
    assert_eq!(
        ids(&wait(&b.rcq, 1)),
        [(8, WcStatus::Success)],
        "another QP takes the kept WQE"
    );
}
