//! Two engines on a perfect virtual network: every operation of every
//! transport, byte for byte.

mod net;
use net::*;

#[test]
fn rc_send_of_every_size_arrives_byte_for_byte() {
    let mut net = Net::new();
    let (qa, na, qb, _) = connect(&mut net, QpType::Rc);
    let (la, _) = net.a.mr(0, 65536, 1);
    let (lb, _) = net.b.mr(0, 65536, 1);
    for (i, len) in [0usize, 1, 3, 1024, 1025, 4096, 10_000, 65536]
        .into_iter()
        .enumerate()
    {
        let data = pattern(len, i as u8);
        net.a.mem.write(BASE, &data);
        let rsg = [Sge {
            addr: BASE,
            length: 65536,
            lkey: lb,
        }];
        net.b
            .e
            .post_recv(
                qb,
                &RecvWr {
                    wr_id: 500 + i as u64,
                    sg_list: &rsg,
                },
            )
            .unwrap();
        let ssg = [Sge {
            addr: BASE,
            length: len as u32,
            lkey: la,
        }];
        let op = if i % 2 == 0 {
            WrOpcode::Send
        } else {
            WrOpcode::SendWithImm
        };
        net.a
            .e
            .post_send(qa, &send_wr(i as u64, op, &ssg, WrTarget::None), None)
            .unwrap();
        net.run();
        let sa = net.a.poll();
        assert_eq!(sa.len(), 1, "len {len}: {sa:?}");
        assert_eq!(
            (sa[0].wr_id, sa[0].status, sa[0].opcode),
            (i as u64, WcStatus::Success, WcOpcode::Send)
        );
        let rb = net.b.poll();
        assert_eq!(rb.len(), 1);
        let wc = rb[0];
        assert_eq!(
            (wc.wr_id, wc.status, wc.opcode, wc.byte_len),
            (
                500 + i as u64,
                WcStatus::Success,
                WcOpcode::Recv,
                len as u32
            )
        );
        assert_eq!(wc.qp_num, net.b.e.qp(qb).unwrap().ctl.qpn());
        assert_eq!(
            wc.wc_flags.contains(proto::wc::WcFlags::WITH_IMM),
            i % 2 == 1
        );
        if i % 2 == 1 {
            assert_eq!(wc.imm_data.value(), 0xdead_beef);
        }
        assert_eq!(net.b.mem.snapshot(BASE, len), data, "len {len}");
    }
    let _ = na;
    assert_eq!(net.a.state(qa), QpState::Rts);
}

#[test]
fn rc_write_read_and_atomics() {
    let mut net = Net::new();
    let (qa, _, qb, _) = connect(&mut net, QpType::Rc);
    let (la, _) = net.a.mr(0, 1 << 16, 1);
    let (lb, rb) = net.b.mr(0, 1 << 16, 1 | 2 | 4 | 8);
    let data = pattern(5000, 7);
    net.a.mem.write(BASE, &data);
    // WRITE 5000 bytes to B at offset 0x100.
    let sg = [Sge {
        addr: BASE,
        length: 5000,
        lkey: la,
    }];
    let t = WrTarget::Rdma(RdmaTarget {
        remote_addr: BASE + 0x100,
        rkey: rb,
    });
    net.a
        .e
        .post_send(qa, &send_wr(1, WrOpcode::RdmaWrite, &sg, t), None)
        .unwrap();
    // WRITE_WITH_IMM consumes a receive WQE at B.
    net.b
        .e
        .post_recv(
            qb,
            &RecvWr {
                wr_id: 77,
                sg_list: &[Sge {
                    addr: BASE + 0x8000,
                    length: 16,
                    lkey: lb,
                }],
            },
        )
        .unwrap();
    let sg2 = [Sge {
        addr: BASE,
        length: 10,
        lkey: la,
    }];
    let t2 = WrTarget::Rdma(RdmaTarget {
        remote_addr: BASE + 0x4000,
        rkey: rb,
    });
    net.a
        .e
        .post_send(qa, &send_wr(2, WrOpcode::RdmaWriteWithImm, &sg2, t2), None)
        .unwrap();
    // READ those 5000 bytes back into A at 0x2000.
    let rsg = [Sge {
        addr: BASE + 0x2000,
        length: 5000,
        lkey: la,
    }];
    let rt = WrTarget::Rdma(RdmaTarget {
        remote_addr: BASE + 0x100,
        rkey: rb,
    });
    net.a
        .e
        .post_send(qa, &send_wr(3, WrOpcode::RdmaRead, &rsg, rt), None)
        .unwrap();
    // Atomics on B's word at 0x6000 (initially 40).
    net.b.mem.write(BASE + 0x6000, &40u64.to_ne_bytes());
    let asg = [Sge {
        addr: BASE + 0x7000,
        length: 8,
        lkey: la,
    }];
    let faa = WrTarget::Atomic(AtomicTarget {
        remote_addr: BASE + 0x6000,
        compare_add: 2,
        swap: 0,
        rkey: rb,
    });
    net.a
        .e
        .post_send(
            qa,
            &send_wr(4, WrOpcode::AtomicFetchAndAdd, &asg, faa),
            None,
        )
        .unwrap();
    let asg2 = [Sge {
        addr: BASE + 0x7008,
        length: 8,
        lkey: la,
    }];
    let cas = WrTarget::Atomic(AtomicTarget {
        remote_addr: BASE + 0x6000,
        compare_add: 42,
        swap: 99,
        rkey: rb,
    });
    net.a
        .e
        .post_send(qa, &send_wr(5, WrOpcode::AtomicCmpAndSwp, &asg2, cas), None)
        .unwrap();
    net.run();
    let wcs = net.a.poll();
    let got: Vec<_> = wcs.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect();
    assert_eq!(
        got,
        [
            (1, WcStatus::Success, WcOpcode::RdmaWrite),
            (2, WcStatus::Success, WcOpcode::RdmaWrite),
            (3, WcStatus::Success, WcOpcode::RdmaRead),
            (4, WcStatus::Success, WcOpcode::FetchAdd),
            (5, WcStatus::Success, WcOpcode::CompSwap),
        ]
    );
    assert_eq!(wcs[2].byte_len, 5000);
    assert_eq!(net.b.mem.snapshot(BASE + 0x100, 5000), data);
    assert_eq!(net.a.mem.snapshot(BASE + 0x2000, 5000), data);
    assert_eq!(
        net.a.mem.snapshot(BASE + 0x7000, 8),
        40u64.to_ne_bytes(),
        "FAA returns the original"
    );
    assert_eq!(
        net.a.mem.snapshot(BASE + 0x7008, 8),
        42u64.to_ne_bytes(),
        "CAS returns the original"
    );
    assert_eq!(
        net.b.mem.snapshot(BASE + 0x6000, 8),
        99u64.to_ne_bytes(),
        "40 + 2 = 42, swapped to 99"
    );
    let rb_wc = net.b.poll();
    assert_eq!(rb_wc.len(), 1);
    assert_eq!(
        (rb_wc[0].wr_id, rb_wc[0].opcode, rb_wc[0].byte_len),
        (77, WcOpcode::RecvRdmaWithImm, 10)
    );
    assert_eq!(rb_wc[0].imm_data.value(), 0xdead_beef);
}

#[test]
fn uc_send_and_write() {
    let mut net = Net::new();
    let (qa, _, qb, _) = connect(&mut net, QpType::Uc);
    let (la, _) = net.a.mr(0, 1 << 16, 1);
    let (lb, rb) = net.b.mr(0, 1 << 16, 1 | 2);
    let data = pattern(3000, 1);
    net.a.mem.write(BASE, &data);
    net.b
        .e
        .post_recv(
            qb,
            &RecvWr {
                wr_id: 9,
                sg_list: &[Sge {
                    addr: BASE,
                    length: 4096,
                    lkey: lb,
                }],
            },
        )
        .unwrap();
    let sg = [Sge {
        addr: BASE,
        length: 3000,
        lkey: la,
    }];
    net.a
        .e
        .post_send(qa, &send_wr(1, WrOpcode::Send, &sg, WrTarget::None), None)
        .unwrap();
    let t = WrTarget::Rdma(RdmaTarget {
        remote_addr: BASE + 0x8000,
        rkey: rb,
    });
    net.a
        .e
        .post_send(qa, &send_wr(2, WrOpcode::RdmaWrite, &sg, t), None)
        .unwrap();
    net.run();
    let wa: Vec<_> = net.a.poll().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(wa, [(1, WcStatus::Success), (2, WcStatus::Success)]);
    let wb = net.b.poll();
    assert_eq!((wb[0].wr_id, wb[0].byte_len), (9, 3000));
    assert_eq!(net.b.mem.snapshot(BASE, 3000), data);
    assert_eq!(net.b.mem.snapshot(BASE + 0x8000, 3000), data);
}

#[test]
fn ud_send_with_grh_area_and_qkey_check() {
    let mut net = Net::new();
    let (qa, na, qb, nb) = connect(&mut net, QpType::Ud);
    let (la, _) = net.a.mr(0, 1 << 16, 1);
    let (lb, _) = net.b.mr(0, 1 << 16, 1);
    let ah = net
        .a
        .e
        .create_ah(net.a.pd, &AhAttr::roce(net.b.gid(), 0))
        .unwrap();
    let data = pattern(1000, 3);
    net.a.mem.write(BASE, &data);
    for id in [1, 2] {
        net.b
            .e
            .post_recv(
                qb,
                &RecvWr {
                    wr_id: id,
                    sg_list: &[Sge {
                        addr: BASE + id * 0x1000,
                        length: 2048,
                        lkey: lb,
                    }],
                },
            )
            .unwrap();
    }
    let sg = [Sge {
        addr: BASE,
        length: 1000,
        lkey: la,
    }];
    // A wrong Q_Key is dropped silently; the right one arrives.
    for qkey in [0x2222, 0x1111] {
        let t = WrTarget::Ud(UdTarget {
            ah,
            remote_qpn: nb,
            remote_qkey: qkey,
        });
        net.a
            .e
            .post_send(
                qa,
                &send_wr(u64::from(qkey), WrOpcode::SendWithImm, &sg, t),
                None,
            )
            .unwrap();
    }
    net.run();
    assert_eq!(net.a.poll().len(), 2, "UD sends complete when sent");
    let wb = net.b.poll();
    assert_eq!(wb.len(), 1, "{wb:?}");
    let wc = wb[0];
    assert_eq!((wc.wr_id, wc.byte_len, wc.src_qp), (1, 1040, na));
    assert!(wc
        .wc_flags
        .contains(proto::wc::WcFlags::GRH | proto::wc::WcFlags::WITH_IMM));
    let grh = net.b.mem.snapshot(BASE + 0x1000, 40);
    assert_eq!(grh[..20], [0; 20], "IPv4: 20 zero bytes first");
    assert_eq!(grh[20] >> 4, 4, "then an IPv4 header");
    assert_eq!(grh[32..36], [127, 0, 0, 1], "source address");
    assert_eq!(net.b.mem.snapshot(BASE + 0x1000 + 40, 1000), data);
    assert_eq!(
        net.b.e.qp_counters(qb).unwrap().dropped,
        1,
        "the Q_Key mismatch was counted"
    );
}

#[test]
fn multi_packet_write_with_imm_reports_the_rdma_length() {
    let mut net = Net::new();
    let (qa, _, qb, _) = connect(&mut net, QpType::Rc);
    let (la, _) = net.a.mr(0, 1 << 16, 1);
    let (lb, rb) = net.b.mr(0, 1 << 16, 1 | 2);
    let data = pattern(3000, 5);
    net.a.mem.write(BASE, &data);
    let rsg = [Sge {
        addr: BASE,
        length: 16,
        lkey: lb,
    }];
    net.b
        .e
        .post_recv(
            qb,
            &RecvWr {
                wr_id: 8,
                sg_list: &rsg,
            },
        )
        .unwrap();
    let sg = [Sge {
        addr: BASE,
        length: 3000,
        lkey: la,
    }];
    let t = WrTarget::Rdma(RdmaTarget {
        remote_addr: BASE + 0x4000,
        rkey: rb,
    });
    let wr = send_wr(1, WrOpcode::RdmaWriteWithImm, &sg, t);
    net.a.e.post_send(qa, &wr, None).unwrap();
    net.run();
    assert_eq!(net.a.poll()[0].status, WcStatus::Success);
    let wc = net.b.poll();
    // Three packets at MTU 1024; byte_len is the whole RDMA length, not the last packet's.
    assert_eq!(
        (wc[0].opcode, wc[0].byte_len),
        (WcOpcode::RecvRdmaWithImm, 3000)
    );
    assert_eq!(net.b.mem.snapshot(BASE + 0x4000, 3000), data);
}
