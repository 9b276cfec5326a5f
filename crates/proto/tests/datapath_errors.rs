//! Two engines on a virtual network: the error cases, each with the completion
//! status and QP state the spec gives, and recovery from loss and RNR.

mod net;
use net::*;

#[test]
fn rnr_with_retry_zero_fails_and_seven_waits() {
    for rnr_retry in [0u8, 7] {
        let mut net = Net::new();
        let (qa, _, qb, _) = connect(&mut net, QpType::Rc);
        // Re-set rnr_retry via SQD→SQD.
        modify(
            &mut net.a,
            qa,
            QpAttr {
                qp_state: QpState::Sqd,
                ..QpAttr::default()
            },
            AttrMask::STATE,
        );
        net.run();
        modify(
            &mut net.a,
            qa,
            QpAttr {
                qp_state: QpState::Sqd,
                rnr_retry,
                ..QpAttr::default()
            },
            AttrMask::STATE | AttrMask::RNR_RETRY,
        );
        modify(
            &mut net.a,
            qa,
            QpAttr {
                qp_state: QpState::Rts,
                ..QpAttr::default()
            },
            AttrMask::STATE,
        );
        let (la, _) = net.a.mr(0, 4096, 1);
        let (lb, _) = net.b.mr(0, 4096, 1);
        let sg = [Sge {
            addr: BASE,
            length: 8,
            lkey: la,
        }];
        net.a
            .e
            .post_send(qa, &send_wr(1, WrOpcode::Send, &sg, WrTarget::None), None)
            .unwrap();
        if rnr_retry == 7 {
            // Let a few RNR rounds pass, then post the receive: the send gets through.
            for _ in 0..3 {
                net.pump_once();
                net.now = net.a.e.poll_timeout().unwrap();
                net.a.e.handle_timeout(net.now);
            }
            net.b
                .e
                .post_recv(
                    qb,
                    &RecvWr {
                        wr_id: 5,
                        sg_list: &[Sge {
                            addr: BASE,
                            length: 64,
                            lkey: lb,
                        }],
                    },
                )
                .unwrap();
            net.run();
            assert_eq!(net.a.poll()[0].status, WcStatus::Success);
            assert!(net.a.e.qp_counters(qa).unwrap().rnr_naks_received >= 3);
        } else {
            net.run();
            let wc = net.a.poll();
            assert_eq!(wc[0].status, WcStatus::RnrRetryExcErr, "{wc:?}");
            // rnr_retry = 0 set at SQD→SQD is the budget: the first RNR NAK fails.
            assert_eq!(net.a.e.qp_counters(qa).unwrap().rnr_naks_received, 1);
            assert_eq!(net.a.state(qa), QpState::Err);
            assert_eq!(net.b.state(qb), QpState::Rts, "the responder is unaffected");
        }
    }
}

#[test]
fn remote_access_errors_nak_and_move_both_sides_to_err() {
    let mut net = Net::new();
    let (qa, _, qb, _) = connect(&mut net, QpType::Rc);
    let (la, _) = net.a.mr(0, 4096, 1);
    let (_, rb) = net.b.mr(0, 4096, 1 | 4); // read-only remotely
    net.b.mem.write(BASE + 0x800, &[0xab; 16]);
    let sg = [Sge {
        addr: BASE,
        length: 16,
        lkey: la,
    }];
    let t = WrTarget::Rdma(RdmaTarget {
        remote_addr: BASE + 0x800,
        rkey: rb,
    });
    net.a
        .e
        .post_send(qa, &send_wr(1, WrOpcode::RdmaWrite, &sg, t), None)
        .unwrap();
    net.a
        .e
        .post_send(qa, &send_wr(2, WrOpcode::Send, &sg, WrTarget::None), None)
        .unwrap();
    net.run();
    let wc: Vec<_> = net.a.poll().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(wc, [(1, WcStatus::RemAccessErr), (2, WcStatus::WrFlushErr)]);
    assert_eq!(net.a.state(qa), QpState::Err);
    assert_eq!(net.b.state(qb), QpState::Err);
    assert_eq!(
        net.b.mem.snapshot(BASE + 0x800, 16),
        [0xab; 16],
        "memory untouched"
    );
    let ev: Vec<_> = std::iter::from_fn(|| net.b.e.poll_event()).collect();
    assert!(
        ev.iter().any(|e| matches!(
            e,
            Event::Async {
                kind: proto::datapath::AsyncEventKind::QpAccessErr,
                ..
            }
        )),
        "{ev:?}"
    );
}

#[test]
fn out_of_bounds_and_bad_rkey_never_touch_memory() {
    for (off, len, bad_key) in [(4090u64, 16u32, false), (0, 16, true)] {
        let mut net = Net::new();
        let (qa, _, _, _) = connect(&mut net, QpType::Rc);
        let (la, _) = net.a.mr(0, 4096, 1);
        let (_, rb) = net.b.mr(0, 4096, 1 | 2);
        net.a.mem.write(BASE, &[0x5a; 64]);
        let sg = [Sge {
            addr: BASE,
            length: len,
            lkey: la,
        }];
        let rkey = if bad_key { rb ^ 0x80 } else { rb };
        let t = WrTarget::Rdma(RdmaTarget {
            remote_addr: BASE + off,
            rkey,
        });
        net.a
            .e
            .post_send(qa, &send_wr(1, WrOpcode::RdmaWrite, &sg, t), None)
            .unwrap();
        net.run();
        assert_eq!(net.a.poll()[0].status, WcStatus::RemAccessErr);
        assert!(
            net.b.mem.snapshot(BASE, 8192).iter().all(|b| *b == 0),
            "not one byte written"
        );
    }
}

#[test]
fn receive_buffer_too_small_is_loc_len_err() {
    let mut net = Net::new();
    let (qa, _, qb, _) = connect(&mut net, QpType::Rc);
    let (la, _) = net.a.mr(0, 4096, 1);
    let (lb, _) = net.b.mr(0, 4096, 1);
    net.b
        .e
        .post_recv(
            qb,
            &RecvWr {
                wr_id: 3,
                sg_list: &[Sge {
                    addr: BASE,
                    length: 10,
                    lkey: lb,
                }],
            },
        )
        .unwrap();
    let sg = [Sge {
        addr: BASE,
        length: 100,
        lkey: la,
    }];
    net.a
        .e
        .post_send(qa, &send_wr(1, WrOpcode::Send, &sg, WrTarget::None), None)
        .unwrap();
    net.run();
    assert_eq!(net.a.poll()[0].status, WcStatus::RemInvReqErr);
    assert_eq!(net.b.poll()[0].status, WcStatus::LocLenErr);
    assert_eq!(
        (net.a.state(qa), net.b.state(qb)),
        (QpState::Err, QpState::Err)
    );
}

#[test]
fn bad_lkey_on_send_is_loc_prot_err() {
    let mut net = Net::new();
    let (qa, _, _, _) = connect(&mut net, QpType::Rc);
    let (la, _) = net.a.mr(0, 4096, 1);
    let sg = [Sge {
        addr: BASE,
        length: 16,
        lkey: la ^ 0x80,
    }];
    net.a
        .e
        .post_send(qa, &send_wr(1, WrOpcode::Send, &sg, WrTarget::None), None)
        .unwrap();
    net.a
        .e
        .post_send(qa, &send_wr(2, WrOpcode::Send, &sg, WrTarget::None), None)
        .unwrap();
    net.run();
    let wc: Vec<_> = net.a.poll().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(wc, [(1, WcStatus::LocProtErr), (2, WcStatus::WrFlushErr)]);
    assert_eq!(net.a.state(qa), QpState::Err);
    // Posting in ERR completes at once with a flush.
    net.a
        .e
        .post_send(qa, &send_wr(3, WrOpcode::Send, &sg, WrTarget::None), None)
        .unwrap();
    assert_eq!(net.a.poll()[0].status, WcStatus::WrFlushErr);
}

#[test]
fn dead_link_ends_in_retry_exc_err_after_the_configured_retries() {
    let mut net = Net::new();
    let (qa, _, _, _) = connect(&mut net, QpType::Rc);
    let (la, _) = net.a.mr(0, 4096, 1);
    let sent = std::rc::Rc::new(std::cell::Cell::new(0u32));
    let s2 = sent.clone();
    net.drop_from_a = Some(Box::new(move |_| {
        s2.set(s2.get() + 1);
        true
    }));
    let sg = [Sge {
        addr: BASE,
        length: 16,
        lkey: la,
    }];
    net.a
        .e
        .post_send(qa, &send_wr(1, WrOpcode::Send, &sg, WrTarget::None), None)
        .unwrap();
    net.run();
    assert_eq!(net.a.poll()[0].status, WcStatus::RetryExcErr);
    assert_eq!(sent.get(), 1 + 7, "one send and retry_cnt = 7 resends");
    // timeout 14 = 4.096 µs × 2^14; 8 timer periods until the error.
    assert_eq!(net.now, 8 * 4096 * (1 << 14));
    assert_eq!(net.a.state(qa), QpState::Err);
}

#[test]
fn a_lost_packet_is_recovered_by_sequence_nak() {
    let mut net = Net::new();
    let (qa, _, qb, _) = connect(&mut net, QpType::Rc);
    let (la, _) = net.a.mr(0, 1 << 16, 1);
    let (lb, _) = net.b.mr(0, 1 << 16, 1);
    let data = pattern(8000, 9);
    net.a.mem.write(BASE, &data);
    let mut n = 0;
    net.drop_from_a = Some(Box::new(move |_| {
        n += 1;
        n == 3
    }));
    net.b
        .e
        .post_recv(
            qb,
            &RecvWr {
                wr_id: 1,
                sg_list: &[Sge {
                    addr: BASE,
                    length: 8192,
                    lkey: lb,
                }],
            },
        )
        .unwrap();
    let sg = [Sge {
        addr: BASE,
        length: 8000,
        lkey: la,
    }];
    net.a
        .e
        .post_send(qa, &send_wr(1, WrOpcode::Send, &sg, WrTarget::None), None)
        .unwrap();
    net.run();
    assert_eq!(net.a.poll()[0].status, WcStatus::Success);
    assert_eq!(net.b.poll()[0].byte_len, 8000);
    assert_eq!(net.b.mem.snapshot(BASE, 8000), data);
    let c = net.a.e.qp_counters(qa).unwrap();
    assert_eq!(c.seq_naks_received, 1);
}

/// The WR whose gather fails is not the oldest outstanding one: the READ ahead
/// of it is still waiting for its response. The READ completes normally, the
/// failing SEND with LOC_PROT_ERR (not a flush), the WR behind it flushes,
/// and only then is the QP in ERR.
#[test]
fn bad_lkey_behind_an_outstanding_read_is_loc_prot_err() {
    let mut net = Net::new();
    let (qa, _, qb, _) = connect(&mut net, QpType::Rc);
    let (la, _) = net.a.mr(0, 65536, 1);
    let (_, rb) = net.b.mr(0, 65536, 1 | 4);
    net.b.mem.write(BASE, &pattern(8000, 4));
    let read = [Sge {
        addr: BASE,
        length: 8000,
        lkey: la,
    }];
    let bad = [Sge {
        addr: BASE,
        length: 16,
        lkey: la ^ 0x80,
    }];
    let t = WrTarget::Rdma(RdmaTarget {
        remote_addr: BASE,
        rkey: rb,
    });
    let a = &mut net.a.e;
    a.post_send(qa, &send_wr(1, WrOpcode::RdmaRead, &read, t), None)
        .unwrap();
    a.post_send(qa, &send_wr(2, WrOpcode::Send, &bad, WrTarget::None), None)
        .unwrap();
    a.post_send(
        qa,
        &send_wr(3, WrOpcode::Send, &read[..0], WrTarget::None),
        None,
    )
    .unwrap();
    net.run();
    let wc: Vec<_> = net.a.poll().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        wc,
        [
            (1, WcStatus::Success),
            (2, WcStatus::LocProtErr),
            (3, WcStatus::WrFlushErr)
        ]
    );
    assert_eq!(net.a.mem.snapshot(BASE, 8000), pattern(8000, 4));
    assert_eq!(net.a.state(qa), QpState::Err);
    assert_eq!(net.b.state(qb), QpState::Rts);
}

/// A peer's atomic at a VA that is not 8-byte aligned (our own post refuses
/// one, so the packet is altered on the wire, ICRC recomputed): NAK invalid
/// request (rc-reliability.md §3 step 6): REM_INV_REQ_ERR, both QPs in ERR,
/// memory untouched.
#[test]
fn misaligned_atomic_from_a_peer_is_an_invalid_request() {
    use std::cell::RefCell;
    let mut net = Net::new();
    let (qa, _, qb, _) = connect(&mut net, QpType::Rc);
    let (la, _) = net.a.mr(0, 4096, 1);
    let (_, rb) = net.b.mr(0, 4096, 1 | 8);
    net.b.mem.write(BASE + 64, &[0x33; 16]);
    let caught = std::rc::Rc::new(RefCell::new(Vec::new()));
    let c = caught.clone();
    net.drop_from_a = Some(Box::new(move |p| {
        *c.borrow_mut() = p.to_vec();
        true
    }));
    let sg = [Sge {
        addr: BASE,
        length: 8,
        lkey: la,
    }];
    let t = WrTarget::Atomic(AtomicTarget {
        remote_addr: BASE + 64,
        compare_add: 1,
        swap: 0,
        rkey: rb,
    });
    net.a
        .e
        .post_send(qa, &send_wr(1, WrOpcode::AtomicFetchAndAdd, &sg, t), None)
        .unwrap();
    net.pump_once();
    net.drop_from_a = None;
    let mut r = wire::TransportRepr::parse(&caught.borrow()).unwrap();
    r.atomic_eth.as_mut().unwrap().va += 4;
    let encap = wire::Encap::from_addrs(net.a.ip, net.b.ip, 4791).unwrap();
    let mut out = vec![0u8; 256];
    let n = r.emit(&mut out, &[], &encap).unwrap();
    let (from, to) = (net.a.addr(), net.b.addr());
    net.b
        .e
        .handle_datagram(net.now, from, to, &out[..n], &net.b.mem);
    net.run();
    let wc: Vec<_> = net.a.poll().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(wc, [(1, WcStatus::RemInvReqErr)]);
    assert_eq!(
        (net.a.state(qa), net.b.state(qb)),
        (QpState::Err, QpState::Err)
    );
    assert_eq!(net.b.mem.snapshot(BASE + 64, 16), [0x33; 16]);
}
