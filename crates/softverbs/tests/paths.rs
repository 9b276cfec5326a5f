//! Async events and the other paths through the public API: SQ drained, CQ
//! overrun, UD up to the MTU, READs over a lossy path, UC discarding damaged
//! messages, an IPv6 device.

mod pair;
use pair::*;
use softverbs::*;
use std::time::Duration;

fn sides(tag: u8, mr_len: usize) -> (Side, Side) {
    sides_on("feat", 2, tag, mr_len)
}

/// RTS→SQD with en_sqd_async_notify: once the messages in flight are
/// acknowledged, IBV_EVENT_SQ_DRAINED (5) names the QP; sends posted in SQD wait
/// for SQD→RTS.
#[test]
fn sq_drained_event_after_the_messages_in_flight_complete() {
    let (a, b) = sides(7, 1 << 20);
    let (qa, qb) = rc_pair(&a, &b);
    let n = 512 << 10;
    qb.post_recv(&recv_wr(1, &[b.mr.sge(0, n)])).unwrap();
    qb.post_recv(&recv_wr(2, &[b.mr.sge(0, 64)])).unwrap();
    qa.post_send(&send_wr(
        1,
        WrOpcode::Send,
        &[a.mr.sge(0, n)],
        WrTarget::None,
        SendFlags::SIGNALED,
    ))
    .unwrap();
    // SQD holds messages not yet started: drain once this one is under way.
    let deadline = std::time::Instant::now() + T;
    while qa.counters().unwrap().packets_sent == 0 && std::time::Instant::now() < deadline {
        std::thread::yield_now();
    }
    qa.apply(Drain { notify: true }).unwrap();
    qa.post_send(&send_wr(
        2,
        WrOpcode::Send,
        &[a.mr.sge(0, 8)],
        WrTarget::None,
        SendFlags::SIGNALED,
    ))
    .unwrap();
    let e = a
        .ctx
        .get_async_event(Some(T))
        .unwrap()
        .expect("SQ drained event");
    assert_eq!((e.kind, e.element), (5, qa.id()));
    assert_eq!(
        ids(&wait(&a.scq, 1)),
        [(1, WcStatus::Success)],
        "the message in flight finished"
    );
    assert_eq!(qa.query().unwrap().attr.sq_draining, 0);
    assert_eq!(state(&qa), QpState::Sqd);
    empty(&a.scq);
    qa.apply(Resume).unwrap();
    assert_eq!(ids(&wait(&a.scq, 1)), [(2, WcStatus::Success)]);
    assert_eq!(
        ids(&wait(&b.rcq, 2)),
        [(1, WcStatus::Success), (2, WcStatus::Success)]
    );
}

/// More completions than the CQ holds: the overrun raises IBV_EVENT_CQ_ERR (0)
/// for the CQ, and the QP whose completion was lost goes to ERR
/// (completions.md §7.2, the recommended rdmavt behaviour).
#[test]
fn cq_overrun_raises_cq_err_and_the_qp_goes_to_err() {
    let (a, b) = sides(8, 1 << 16);
    let small = b.ctx.create_cq(1).unwrap();
    let mut ib = b.init();
    ib.recv_cq = &small;
    let (qa, qb) = rc_pair_with(&a, &a.init(), &b, &ib, &RcOpts::default());
    let cap = u64::from(small.cqe());
    for i in 0..cap + 2 {
        qb.post_recv(&recv_wr(i, &[b.mr.sge(0, 64)])).unwrap();
    }
    for i in 0..=cap {
        post_send8(&qa, &a.mr, i, SendFlags(0));
    }
    let e = b
        .ctx
        .get_async_event(Some(T))
        .unwrap()
        .expect("CQ error event");
    assert_eq!((e.kind, e.element), (0, small.id()));
    await_state(&qb, QpState::Err);
}

/// UD messages are limited to the path MTU: one byte more is refused at post.
#[test]
fn ud_messages_up_to_the_mtu() {
    let (a, b) = sides(9, 1 << 16);
    let ua = ud_qp(&a);
    let ub = ud_qp(&b);
    let mtu = a.ctx.query_port(1).unwrap().active_mtu.bytes();
    let ah = a.pd.create_ah(&AhAttr::roce(b.gid(), 0)).unwrap();
    let sig = SendFlags::SIGNALED;
    let e = ua
        .post_send(&send_wr(
            1,
            WrOpcode::Send,
            &[a.mr.sge(0, mtu + 1)],
            ah.ud(ub.qp_num(), QKEY),
            sig,
        ))
        .unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL, "{e}");
    a.mr.write(0, &pattern(mtu as usize, 3));
    ub.post_recv(&recv_wr(1, &[b.mr.sge(0, mtu + 40)])).unwrap();
    ua.post_send(&send_wr(
        2,
        WrOpcode::Send,
        &[a.mr.sge(0, mtu)],
        ah.ud(ub.qp_num(), QKEY),
        sig,
    ))
    .unwrap();
    assert_eq!(ids(&wait(&a.scq, 1)), [(2, WcStatus::Success)]);
    assert_eq!(wait(&b.rcq, 1)[0].byte_len, mtu + 40);
    assert_eq!(read(&b.mr, 40, mtu as usize), pattern(mtu as usize, 3));
}

/// READ responses lost on the way (the responder's device drops 5 % of what
/// it sends, seeded): the requester asks again from the first missing
/// response, the responder drops the stale stream, and every READ completes
/// with every byte right — never a success with a hole in it. (A long ACK
/// timeout keeps a busy machine's scheduling delays from looking like a dead
/// link; recovery from loss inside a stream does not wait for it.)
#[test]
fn reads_recover_from_lost_responses() {
    for seed in [3u64, 5] {
        let faults: FaultConfig = format!("loss=0.05,seed={seed},dir=tx").parse().unwrap();
        let cfg = |n: &str, ip: &str| DeviceConfig {
            name: format!("{n}-{seed}"),
            addrs: vec![private_addr(ip)],
            active_mtu: Mtu::Mtu1024,
        };
        let a = Side::new(
            Device::with_config(cfg("feat-loss-a", "127.7.2.30"))
                .open()
                .unwrap(),
            1 << 20,
        );
        let b_dev = Device::with_config(cfg("feat-loss-b", "127.7.2.31")).with_faults(faults);
        let b = Side::new(b_dev.open().unwrap(), 1 << 20);
        let o = RcOpts {
            timeout: 17,
            ..RcOpts::default()
        };
        let (qa, _qb) = rc_pair_with(&a, &a.init(), &b, &b.init(), &o);
        let n = 256 << 10;
        let data = pattern(n, seed as u8);
        b.mr.write(0, &data);
        let sig = SendFlags::SIGNALED;
        for (id, off) in [(1u64, 0usize), (2, n)] {
            let t = WrTarget::Rdma(b.mr.remote(0));
            qa.post_send(&send_wr(
                id,
                WrOpcode::RdmaRead,
                &[a.mr.sge(off, n as u32)],
                t,
                sig,
            ))
            .unwrap();
        }
        assert_eq!(
            ids(&wait(&a.scq, 2)),
            [(1, WcStatus::Success), (2, WcStatus::Success)],
            "seed {seed}"
        );
        assert!(
            read(&a.mr, 0, n) == data,
            "seed {seed}: first READ data intact"
        );
        assert!(
            read(&a.mr, n, n) == data,
            "seed {seed}: second READ data intact"
        );
        assert!(
            b.ctx.counters().io.fault_drops > 0,
            "seed {seed}: the path did lose packets"
        );
    }
}

/// UC over a lossy path (the sender's device drops 10 % of its packets,
/// seeded): a message that lost a packet is discarded whole and its receive
/// WQE reused for the next one (rc-reliability.md §6); every message that
/// completes is intact, in order, and nothing is ever completed half-filled.
#[test]
fn uc_discards_damaged_messages_and_reuses_the_wqe() {
    let faults: FaultConfig = "loss=0.1,seed=11,dir=tx".parse().unwrap();
    let cfg = |n: &str, ip: &str| DeviceConfig {
        name: n.into(),
        addrs: vec![private_addr(ip)],
        active_mtu: Mtu::Mtu1024,
    };
    let a = Side::new(
        Device::with_config(cfg("feat-ucloss-a", "127.7.2.40"))
            .with_faults(faults)
            .open()
            .unwrap(),
        1 << 20,
    );
    let b = Side::new(
        Device::with_config(cfg("feat-ucloss-b", "127.7.2.41"))
            .open()
            .unwrap(),
        1 << 20,
    );
    let (qa, qb) = uc_pair(&a, &b);
    let (msgs, len) = (40usize, 3000usize);
    for k in 0..msgs {
        a.mr.write(k * 4096, &pattern(len, k as u8));
        qb.post_recv(&recv_wr(k as u64, &[b.mr.sge(k * 4096, 4096)]))
            .unwrap();
    }
    for k in 0..msgs {
        let sg = [a.mr.sge(k * 4096, len as u32)];
        qa.post_send(&send_wr(
            k as u64,
            WrOpcode::Send,
            &sg,
            WrTarget::None,
            SendFlags::SIGNALED,
        ))
        .unwrap();
        if k % 16 == 15 {
            wait(&a.scq, 16);
        }
    }
    wait(&a.scq, msgs % 16);
    // The sender is done; collect what arrives until the receiver is quiet.
    let mut got = Vec::new();
    loop {
        let more = b.rcq.wait(msgs, Duration::from_millis(200));
        if more.is_empty() {
            break;
        }
        got.extend(more);
    }
    assert!(a.ctx.counters().io.fault_drops > 0, "the path lost packets");
    assert!(
        !got.is_empty() && got.len() < msgs,
        "some messages made it, some did not: {}",
        got.len()
    );
    let mut last = None;
    for (i, w) in got.iter().enumerate() {
        // WQEs are taken in posting order; a discarded message leaves its WQE for the next.
        assert_eq!(
            (w.wr_id, w.status, w.byte_len),
            (i as u64, WcStatus::Success, len as u32)
        );
        let data = read(&b.mr, i * 4096, len);
        let k = (0..msgs)
            .find(|&k| data == pattern(len, k as u8))
            .expect("an intact message");
        assert!(last.is_none_or(|l| k > l), "in order");
        last = Some(k);
    }
    assert_eq!(state(&qb), QpState::Rts);
}

/// A device on IPv6 (::1; both QPs on it, so the datagrams take the device's
/// loopback path, fully encoded and parsed): RC data intact, and the UD GRH
/// area holds the IPv6 header as received (rc-reliability.md §7).
#[test]
fn ipv6_device_rc_and_ud_grh_area() {
    let cfg = DeviceConfig {
        name: "feat-v6".into(),
        addrs: vec!["::1".parse().unwrap()],
        active_mtu: Mtu::Mtu1024,
    };
    let ctx = Device::with_config(cfg).open().unwrap();
    let gid = ctx.query_gid(1, 0).unwrap();
    assert_eq!(gid.ip(), "::1".parse::<std::net::IpAddr>().unwrap());
    let a = Side::new(ctx.clone(), 1 << 16);
    let b = Side::new(ctx, 1 << 16);
    let (qa, qb) = rc_pair(&a, &b);
    let data = pattern(5000, 6);
    a.mr.write(0, &data);
    qb.post_recv(&recv_wr(1, &[b.mr.sge(0, 8192)])).unwrap();
    qa.post_send(&send_wr(
        1,
        WrOpcode::Send,
        &[a.mr.sge(0, 5000)],
        WrTarget::None,
        SendFlags::SIGNALED,
    ))
    .unwrap();
    assert_eq!(ids(&wait(&a.scq, 1)), [(1, WcStatus::Success)]);
    assert_eq!(wait(&b.rcq, 1)[0].byte_len, 5000);
    assert_eq!(read(&b.mr, 0, 5000), data);
    let ua = ud_qp(&a);
    let ub = ud_qp(&b);
    let ah = a.pd.create_ah(&AhAttr::roce(gid, 0)).unwrap();
    ub.post_recv(&recv_wr(2, &[b.mr.sge(16384, 1024)])).unwrap();
    ua.post_send(&send_wr(
        2,
        WrOpcode::SendWithImm,
        &[a.mr.sge(0, 100)],
        ah.ud(ub.qp_num(), QKEY),
        SendFlags::SIGNALED,
    ))
    .unwrap();
    assert_eq!(ids(&wait(&a.scq, 1)), [(2, WcStatus::Success)]);
    let r = wait(&b.rcq, 1)[0];
    assert_eq!(
        (r.byte_len, r.src_qp, r.wc_flags.0),
        (140, ua.qp_num(), WcFlags::GRH.0 | WcFlags::WITH_IMM.0)
    );
    let g = read(&b.mr, 16384, 40);
    assert_eq!(g[0] >> 4, 6, "IPv6 version");
    assert_eq!(g[6], 17, "next header: UDP");
    // Payload length: UDP 8 + BTH 12 + DETH 8 + ImmDt 4 + 100 + ICRC 4.
    assert_eq!(u16::from_be_bytes([g[4], g[5]]), 8 + 12 + 8 + 4 + 100 + 4);
    let one = std::net::Ipv6Addr::LOCALHOST.octets();
    assert_eq!(
        (&g[8..24], &g[24..40]),
        (&one[..], &one[..]),
        "source and destination ::1"
    );
    assert_eq!(read(&b.mr, 16384 + 40, 100), data[..100]);
}

/// The ACK of a SEND that a poll delivered may wait for the
/// responder's next post or poll (sv_io's `pollrx::defers`, so that it
/// leaves with the reply; over UDP only). It still leaves when the
/// responder destroys the QP, or moves it to ERR, right after that poll,
/// in the polling thread: the requester's SEND completes with success, not
/// `RETRY_EXC_ERR`. Each case runs until a round's poll deferred the ACK
/// (at most 20 rounds).
#[test]
fn a_deferred_ack_leaves_before_its_qp_goes_or_fails() {
    let side = |end: &str, host: u8| {
        side_on_path(
            &format!("feat-udp-{end}"),
            &format!("127.7.2.{host}"),
            false,
            1 << 16,
        )
    };
    let (a, b) = (side("a", 20), side("b", 21));
    let opts = RcOpts {
        timeout: 12,
        ..RcOpts::default()
    };
    for end in ["destroy", "error"] {
        let mut deferred = 0;
        for _ in 0..20 {
            let (qa, qb) = rc_pair_with(&a, &a.init(), &b, &b.init(), &opts);
            qb.post_recv(&recv_wr(1, &[b.mr.sge(0, 64)])).unwrap();
            let before = b.ctx.counters().io.deferred_transmits;
            let after = std::thread::scope(|s| {
                let responder = s.spawn(|| {
                    let wc = wait(&b.rcq, 1);
                    let after = b.ctx.counters().io.deferred_transmits;
                    match end {
                        "destroy" => qb.destroy().map_err(|e| e.error).unwrap(),
                        _ => qb.apply(Modify::to(QpState::Err)).unwrap(),
                    }
                    assert_eq!(wc[0].status, WcStatus::Success, "{end}");
                    after
                });
                // The responder polls (its lease holds) before the SEND comes.
                std::thread::sleep(Duration::from_millis(5));
                post_send8(&qa, &a.mr, 7, SIG);
                responder.join().unwrap()
            });
            let wc = wait(&a.scq, 1);
            assert_eq!(ids(&wc), [(7, WcStatus::Success)], "{end}");
            if after > before {
                deferred += 1;
                if deferred == 2 {
                    break;
                }
            }
        }
        assert!(deferred > 0, "{end}: no poll deferred an ACK in 20 rounds");
    }
}
