//! RAW_PACKET QPs in the engine (spec/raw-packet.md): the modify rows of the
//! seeds (INIT needs PORT only), frames out through `poll_frame` byte for
//! byte, frames in through `handle_frame` into receive WQEs with
//! `byte_len` = the frame's length, and the refusals of post_send; TSO
//! work requests segmented into one frame per `mss` bytes, inline or
//! gathered, a gather failure part-way through failing the WR once.

mod net;
use net::*;
use proto::datapath::{ETH_HEADER_LEN, VLAN_TAG_LEN};

fn raw_qp(n: &mut Node) -> (QpHandle, u32) {
    n.qp(QpType::RawPacket)
}

/// RESET→INIT with STATE|PORT, INIT→RTR and RTR→RTS with STATE alone (seed
/// ibv_modify_qp table for IBV_QPT_RAW_PACKET).
fn to_rts(n: &mut Node, qp: QpHandle) {
    let attr = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        ..QpAttr::default()
    };
    n.e.modify_qp(qp, &attr, AttrMask::STATE | AttrMask::PORT)
        .unwrap();
    for s in [QpState::Rtr, QpState::Rts] {
        let attr = QpAttr {
            qp_state: s,
            ..QpAttr::default()
        };
        n.e.modify_qp(qp, &attr, AttrMask::STATE).unwrap();
    }
}

fn frame(len: usize, seed: u8) -> Vec<u8> {
    let mut f = pattern(len, seed);
    f[..6].copy_from_slice(&[0x01, 0x50, 0x56, 0x19, 0x20, 0xa7]);
    f
}

#[test]
fn modify_table_rows_of_the_seed() {
    let mut n = Node::new("10.9.0.1");
    let (qp, _) = raw_qp(&mut n);
    // INIT without PORT is refused; with STATE|PORT it is enough.
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        ..QpAttr::default()
    };
    assert!(n.e.modify_qp(qp, &init, AttrMask::STATE).is_err());
    // A QKEY (UD's) or PKEY_INDEX is not among RAW_PACKET's attributes... but
    // the required set is what the seed names.
    to_rts(&mut n, qp);
    assert_eq!(n.state(qp), QpState::Rts);
    let (attr, _, init) = n.e.query_qp(qp).unwrap();
    assert_eq!(attr.qp_state, QpState::Rts);
    assert_eq!(attr.port_num, 1);
    assert_eq!(init.qp_type, QpType::RawPacket);
}

#[test]
fn a_send_is_one_frame_byte_for_byte_and_completes() {
    let mut n = Node::new("10.9.0.2");
    let (qp, qpn) = raw_qp(&mut n);
    to_rts(&mut n, qp);
    let (lkey, _) = n.mr(0, 65536, 1);
    let data = frame(1000, 7);
    n.mem.write(BASE, &data[..600]);
    n.mem.write(BASE + 4096, &data[600..]);
    let sg = [
        Sge {
            addr: BASE,
            length: 600,
            lkey,
        },
        Sge {
            addr: BASE + 4096,
            length: 400,
            lkey,
        },
    ];
    n.e.post_send(qp, &send_wr(9, WrOpcode::Send, &sg, WrTarget::None), None)
        .unwrap();
    // Frames never go out as RoCE datagrams.
    let mut buf = vec![0u8; 70_000];
    assert!(n.e.poll_transmit(0, &n.mem, &mut buf).is_none());
    let f = n.e.poll_frame(&n.mem, &mut buf).expect("a frame");
    assert_eq!((f.qpn, f.len), (qpn, 1000));
    assert_eq!(&buf[..1000], &data[..]);
    assert!(n.e.poll_frame(&n.mem, &mut buf).is_none());
    let wc = n.poll();
    assert_eq!(wc.len(), 1);
    assert_eq!(
        (wc[0].wr_id, wc[0].status, wc[0].opcode, wc[0].qp_num),
        (9, WcStatus::Success, WcOpcode::Send, qpn)
    );
    assert_eq!(n.e.raw_counters().frames_sent, 1);
}

#[test]
fn frames_in_fill_receive_wqes_in_order() {
    let mut n = Node::new("10.9.0.3");
    let (qp, qpn) = raw_qp(&mut n);
    let (lkey, _) = n.mr(0, 65536, 1);
    let f1 = frame(60, 1);
    // Before RTR nothing is received.
    assert!(!n.e.handle_frame(qpn, &f1, &n.mem));
    to_rts(&mut n, qp);
    // No receive WQE: dropped, counted, no completion.
    assert!(!n.e.handle_frame(qpn, &f1, &n.mem));
    assert_eq!(n.e.raw_counters().drop_no_wqe, 1);
    for i in 0..2u64 {
        let sg = [Sge {
            addr: BASE + i * 2048,
            length: 2048,
            lkey,
        }];
        n.e.post_recv(
            qp,
            &RecvWr {
                wr_id: 100 + i,
                sg_list: &sg,
            },
        )
        .unwrap();
    }
    let f2 = frame(1514, 2);
    assert!(n.e.handle_frame(qpn, &f1, &n.mem));
    assert!(n.e.handle_frame(qpn, &f2, &n.mem));
    let wc = n.poll();
    let got: Vec<_> = wc
        .iter()
        .map(|w| (w.wr_id, w.status, w.opcode, w.byte_len))
        .collect();
    assert_eq!(
        got,
        [
            (100, WcStatus::Success, WcOpcode::Recv, 60),
            (101, WcStatus::Success, WcOpcode::Recv, 1514)
        ]
    );
    assert_eq!(n.mem.snapshot(BASE, 60), f1);
    assert_eq!(n.mem.snapshot(BASE + 2048, 1514), f2);
    // A frame for a QPN that is not a RAW_PACKET QP is dropped.
    let (ud, udn) = n.qp(QpType::Ud);
    let _ = ud;
    assert!(!n.e.handle_frame(udn, &f1, &n.mem));
}

#[test]
fn a_frame_longer_than_the_wqe_is_a_local_length_error() {
    let mut n = Node::new("10.9.0.4");
    let (qp, qpn) = raw_qp(&mut n);
    to_rts(&mut n, qp);
    let (lkey, _) = n.mr(0, 65536, 1);
    let sg = [Sge {
        addr: BASE,
        length: 64,
        lkey,
    }];
    n.e.post_recv(
        qp,
        &RecvWr {
            wr_id: 5,
            sg_list: &sg,
        },
    )
    .unwrap();
    assert!(!n.e.handle_frame(qpn, &frame(65, 3), &n.mem));
    let wc = n.poll();
    assert_eq!((wc[0].wr_id, wc[0].status), (5, WcStatus::LocLenErr));
    assert_eq!(n.state(qp), QpState::Err);
}

#[test]
fn post_send_refusals_say_why() {
    let mut n = Node::new("10.9.0.5");
    let (qp, _) = raw_qp(&mut n);
    to_rts(&mut n, qp);
    let (lkey, _) = n.mr(0, 65536, 1);
    let sg = |len| {
        [Sge {
            addr: BASE,
            length: len,
            lkey,
        }]
    };
    let max = n.e.raw_frame_max();
    assert_eq!(max, 1500 + ETH_HEADER_LEN + VLAN_TAG_LEN);
    for len in [0, ETH_HEADER_LEN - 1, max + 1] {
        let s = sg(len);
        let e =
            n.e.post_send(qp, &send_wr(1, WrOpcode::Send, &s, WrTarget::None), None)
                .unwrap_err();
        assert!(
            matches!(e, proto::wr::PostError::RawFrameLength { .. }),
            "{e}"
        );
        assert_eq!(e.errno(), proto::error::Errno::EINVAL);
    }
    let s = sg(max);
    n.e.post_send(qp, &send_wr(2, WrOpcode::Send, &s, WrTarget::None), None)
        .unwrap();
    // The interface's MTU moves the limit.
    n.e.set_raw_frame_max(9000 + ETH_HEADER_LEN + VLAN_TAG_LEN);
    let s = sg(9000);
    n.e.post_send(qp, &send_wr(3, WrOpcode::Send, &s, WrTarget::None), None)
        .unwrap();
    let s = sg(100);
    let tso =
        n.e.post_send(qp, &send_wr(4, WrOpcode::Tso, &s, WrTarget::None), None)
            .unwrap_err();
    // IBV_WR_TSO needs its header (Engine::post_send_tso): without one, EINVAL.
    assert!(matches!(tso, proto::wr::PostError::Tso(_)), "{tso}");
    assert_eq!(tso.errno(), proto::error::Errno::EINVAL, "{tso}");
    for op in [WrOpcode::SendWithImm, WrOpcode::RdmaWrite] {
        let e =
            n.e.post_send(qp, &send_wr(5, op, &s, WrTarget::None), None)
                .unwrap_err();
        assert_eq!(e.errno(), proto::error::Errno::EINVAL, "{op:?}: {e}");
    }
}

#[test]
fn a_gather_outside_any_mr_fails_the_wqe_and_the_sq() {
    let mut n = Node::new("10.9.0.6");
    let (qp, _) = raw_qp(&mut n);
    to_rts(&mut n, qp);
    let sg = [Sge {
        addr: BASE,
        length: 100,
        lkey: 0x4242,
    }];
    n.e.post_send(qp, &send_wr(8, WrOpcode::Send, &sg, WrTarget::None), None)
        .unwrap();
    let mut buf = vec![0u8; 2048];
    assert!(n.e.poll_frame(&n.mem, &mut buf).is_none());
    let wc = n.poll();
    assert_eq!((wc[0].wr_id, wc[0].status), (8, WcStatus::LocProtErr));
    assert_eq!(n.state(qp), QpState::Sqe);
}

#[test]
fn completions_carry_the_drivers_time_which_never_goes_back() {
    let mut n = Node::new("10.9.0.7");
    let (qp, qpn) = raw_qp(&mut n);
    to_rts(&mut n, qp);
    let (lkey, _) = n.mr(0, 65536, 1);
    let sg = [Sge {
        addr: BASE,
        length: 2048,
        lkey,
    }];
    for i in 0..2 {
        n.e.post_recv(
            qp,
            &RecvWr {
                wr_id: i,
                sg_list: &sg,
            },
        )
        .unwrap();
    }
    n.e.set_now(5_000);
    assert!(n.e.handle_frame(qpn, &frame(60, 1), &n.mem));
    n.e.set_now(4_000); // an older reading: ignored
    assert!(n.e.handle_frame(qpn, &frame(60, 2), &n.mem));
    n.e.set_now(9_000);
    n.e.post_send(
        qp,
        &send_wr(
            7,
            WrOpcode::Send,
            &[Sge {
                length: 60,
                ..sg[0]
            }],
            WrTarget::None,
        ),
        None,
    )
    .unwrap();
    let mut buf = vec![0u8; 2048];
    assert!(n.e.poll_frame(&n.mem, &mut buf).is_some());
    let ts: Vec<_> = n.poll().iter().map(|w| (w.wr_id, w.timestamp_ns)).collect();
    assert_eq!(ts, [(0, 5_000), (1, 5_000), (7, 9_000)]);
}

/// A RAW_PACKET QP created with `max_tso_header`.
fn tso_qp(n: &mut Node, max_tso_header: u16) -> (QpHandle, u32) {
    let req = QpRequest {
        qp_type: QpType::RawPacket.raw(),
        cap: QpCap {
            max_send_wr: 8,
            max_recv_wr: 8,
            max_send_sge: 2,
            max_recv_sge: 1,
            max_inline_data: 256,
        },
        comp_mask: proto::qp::create::comp_mask::PD | proto::qp::create::comp_mask::MAX_TSO_HEADER,
        max_tso_header,
        ..QpRequest::default()
    };
    let c = QpCreate {
        pd: n.pd,
        send_cq: Some(n.cq),
        recv_cq: Some(n.cq),
        srq: None,
        req,
        sq_sig_all: true,
    };
    let q = n.e.create_qp(&c).unwrap();
    (q.handle, q.qpn)
}

/// Ethernet + IPv4 (ID 7) + TCP (seq 100, PSH|FIN|ACK): 54 bytes.
fn tcp4_header() -> Vec<u8> {
    let mut h = vec![0u8; 54];
    h[..6].copy_from_slice(&[0x01, 0x50, 0x56, 0x19, 0x20, 0xa7]);
    h[12] = 0x08;
    h[14] = 0x45;
    h[19] = 7;
    h[22] = 64;
    h[23] = 6;
    h[26..34].copy_from_slice(&[192, 168, 0, 1, 192, 168, 0, 2]);
    h[41] = 100;
    h[46] = 5 << 4;
    h[47] = 0x08 | 0x10 | 0x01;
    h
}

#[test]
fn tso_work_requests_become_one_frame_per_mss() {
    let mut n = Node::new("10.9.0.8");
    let (qp, qpn) = tso_qp(&mut n, 64);
    to_rts(&mut n, qp);
    let (lkey, _) = n.mr(0, 65536, 1);
    let payload = pattern(250, 3);
    n.mem.write(BASE, &payload[..100]);
    n.mem.write(BASE + 8192, &payload[100..]);
    let sg = [
        Sge {
            addr: BASE,
            length: 100,
            lkey,
        },
        Sge {
            addr: BASE + 8192,
            length: 150,
            lkey,
        },
    ];
    let hdr = tcp4_header();
    let wr = send_wr(1, WrOpcode::Send, &sg, WrTarget::None);
    // A header beyond the QP's max_tso_header (64) is refused.
    let mut long = hdr.clone();
    long.extend([0u8; 12]);
    long[46] = 8 << 4;
    let e = n.e.post_send_tso(qp, &wr, None, &long, 100).unwrap_err();
    assert_eq!(e.errno(), proto::error::Errno::EINVAL, "{e}");
    n.e.post_send_tso(qp, &wr, None, &hdr, 100).unwrap();
    // Inline: the payload copied at post time, the same segmentation.
    let inline = SendWr {
        wr_id: 2,
        flags: SendFlags(SendFlags::SIGNALED.0 | SendFlags::INLINE.0),
        ..wr
    };
    n.e.post_send_tso(qp, &inline, Some(&payload), &hdr, 100)
        .unwrap();
    let mut buf = vec![0u8; 2048];
    let mut frames = Vec::new();
    while let Some(f) = n.e.poll_frame(&n.mem, &mut buf) {
        assert_eq!(f.qpn, qpn);
        frames.push(buf[..f.len].to_vec());
    }
    assert_eq!(frames.len(), 6, "3 segments of each WR");
    for (k, f) in frames.iter().enumerate() {
        let i = k % 3;
        let piece = if i < 2 { 100 } else { 50 };
        assert_eq!(f.len(), 54 + piece);
        assert_eq!(u16::from_be_bytes([f[16], f[17]]) as usize, 40 + piece);
        assert_eq!(u16::from_be_bytes([f[18], f[19]]), 7 + i as u16);
        let seq = u32::from_be_bytes([f[38], f[39], f[40], f[41]]);
        assert_eq!(seq, 100 + 100 * i as u32);
        assert_eq!(f[47] & 0x09 != 0, i == 2, "FIN/PSH on the last");
        assert_eq!(&f[54..], &payload[100 * i..100 * i + piece]);
    }
    let wc: Vec<_> = n
        .poll()
        .iter()
        .map(|w| (w.wr_id, w.status, w.opcode, w.byte_len))
        .collect();
    assert_eq!(
        wc,
        [
            (1, WcStatus::Success, WcOpcode::Tso, 250),
            (2, WcStatus::Success, WcOpcode::Tso, 250)
        ],
        "one completion per WR, after its last segment"
    );
}

#[test]
fn a_tso_gather_failing_part_way_fails_the_wr_once() {
    let mut n = Node::new("10.9.0.9");
    let (qp, _) = tso_qp(&mut n, 64);
    to_rts(&mut n, qp);
    let (lkey, _) = n.mr(0, 4096, 1);
    // The second SGE names a key no MR has: segment 2 cannot be gathered.
    let sg = [
        Sge {
            addr: BASE,
            length: 100,
            lkey,
        },
        Sge {
            addr: BASE + 8192,
            length: 100,
            lkey: 0x4242,
        },
    ];
    let wr = send_wr(5, WrOpcode::Send, &sg, WrTarget::None);
    n.e.post_send_tso(qp, &wr, None, &tcp4_header(), 100)
        .unwrap();
    let mut buf = vec![0u8; 2048];
    assert!(
        n.e.poll_frame(&n.mem, &mut buf).is_some(),
        "segment 1 leaves"
    );
    assert!(
        n.e.poll_frame(&n.mem, &mut buf).is_none(),
        "segment 2 cannot"
    );
    let wc: Vec<_> = n
        .poll()
        .iter()
        .map(|w| (w.wr_id, w.status, w.opcode))
        .collect();
    assert_eq!(wc, [(5, WcStatus::LocProtErr, WcOpcode::Tso)]);
    assert_eq!(n.state(qp), QpState::Sqe);
}
