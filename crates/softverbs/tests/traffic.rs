//! Real traffic through the public API: two devices in one process, each with
//! its own loopback address and UDP socket, and QPs of one device talking to
//! each other through the loopback shortcut. Data is checked byte for byte.

use softverbs::*;
use std::time::Duration;

const T: Duration = Duration::from_secs(10);
const ALL: AccessFlags = AccessFlags(0xf);

fn device(name: &str, ip: &str) -> Context {
    Device::with_config(config(name, ip)).open().unwrap()
}

fn config(name: &str, ip: &str) -> DeviceConfig {
    DeviceConfig {
        name: name.into(),
        addrs: vec![ip.parse().unwrap()],
        active_mtu: Mtu::Mtu1024,
    }
}

struct Side {
    ctx: Context,
    pd: ProtectionDomain,
    cq: CompletionQueue,
    mr: MemoryRegion,
}

impl Side {
    fn new(ctx: Context) -> Side {
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(256).unwrap();
        let mr = pd.reg_mr(1 << 20, ALL).unwrap();
        Side { ctx, pd, cq, mr }
    }

    fn init(&self) -> QpInit<'_> {
        let mut i = QpInit::new(&self.cq, &self.cq);
        i.cap = QpCap {
            max_send_wr: 64,
            max_recv_wr: 64,
            max_send_sge: 4,
            max_recv_sge: 4,
            max_inline_data: 128,
        };
        i.sq_sig_all = true;
        i
    }

    fn one(&self) -> WorkCompletion {
        let wc = self.cq.wait(1, T);
        assert_eq!(wc.len(), 1, "no completion within {T:?}");
        wc[0]
    }
}

fn rc_pair(a: &Side, b: &Side) -> (QueuePair<Rc>, QueuePair<Rc>) {
    let qa = a.pd.create_rc_qp(&a.init()).unwrap();
    let qb = b.pd.create_rc_qp(&b.init()).unwrap();
    for (s, qp, peer, gid) in [
        (a, &qa, &qb, b.ctx.query_gid(1, 0).unwrap()),
        (b, &qb, &qa, a.ctx.query_gid(1, 0).unwrap()),
    ] {
        let _ = s;
        qp.to_init(ConnectedInit {
            pkey_index: 0,
            port_num: 1,
            access: ALL,
        })
        .unwrap();
        qp.to_rtr(RcRtr {
            ah: AhAttr::roce(gid, 0),
            path_mtu: Mtu::Mtu1024,
            dest_qp_num: peer.qp_num(),
            rq_psn: 0,
            max_dest_rd_atomic: 16,
            min_rnr_timer: 1,
        })
        .unwrap();
        qp.to_rts(RcRts {
            sq_psn: 0,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 16,
        })
        .unwrap();
    }
    (qa, qb)
}

fn wr<'a>(id: u64, op: WrOpcode, sg: &'a [Sge], target: WrTarget) -> SendWr<'a> {
    SendWr {
        wr_id: id,
        opcode: op,
        flags: SendFlags::SIGNALED,
        sg_list: sg,
        imm_data: ImmData::from_value(7),
        target,
    }
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect()
}

fn rc_all_operations(a: &Side, b: &Side) {
    let (qa, qb) = rc_pair(a, b);
    let data = pattern(100_000, 3);
    a.mr.write(0, &data);
    // SEND 100 000 bytes (98 packets at MTU 1024).
    qb.post_recv(&RecvWr {
        wr_id: 9,
        sg_list: &[b.mr.sge(0, 200_000)],
    })
    .unwrap();
    qa.post_send(&wr(
        1,
        WrOpcode::Send,
        &[a.mr.sge(0, 100_000)],
        WrTarget::None,
    ))
    .unwrap();
    assert_eq!(a.one().status, WcStatus::Success);
    let r = b.one();
    assert_eq!(
        (r.wr_id, r.status, r.byte_len),
        (9, WcStatus::Success, 100_000)
    );
    let mut got = vec![0; 100_000];
    b.mr.read(0, &mut got);
    assert_eq!(got, data);
    // WRITE to B at 300 000, READ it back into A at 500 000.
    qa.post_send(&wr(
        2,
        WrOpcode::RdmaWrite,
        &[a.mr.sge(0, 100_000)],
        WrTarget::Rdma(b.mr.remote(300_000)),
    ))
    .unwrap();
    qa.post_send(&wr(
        3,
        WrOpcode::RdmaRead,
        &[a.mr.sge(500_000, 100_000)],
        WrTarget::Rdma(b.mr.remote(300_000)),
    ))
    .unwrap();
    assert_eq!(a.one().opcode, WcOpcode::RdmaWrite);
    let rd = a.one();
    assert_eq!(
        (rd.opcode, rd.status, rd.byte_len),
        (WcOpcode::RdmaRead, WcStatus::Success, 100_000)
    );
    a.mr.read(500_000, &mut got);
    assert_eq!(got, data);
    // Atomics on B's word at 800 000.
    b.mr.write(800_000, &5u64.to_ne_bytes());
    let faa = AtomicTarget {
        remote_addr: b.mr.addr() + 800_000,
        compare_add: 10,
        swap: 0,
        rkey: b.mr.rkey(),
    };
    qa.post_send(&wr(
        4,
        WrOpcode::AtomicFetchAndAdd,
        &[a.mr.sge(900_000, 8)],
        WrTarget::Atomic(faa),
    ))
    .unwrap();
    assert_eq!(a.one().status, WcStatus::Success);
    let mut w = [0u8; 8];
    a.mr.read(900_000, &mut w);
    assert_eq!(u64::from_ne_bytes(w), 5);
    b.mr.read(800_000, &mut w);
    assert_eq!(u64::from_ne_bytes(w), 15);
    // WRITE_WITH_IMM and an inline SEND.
    qb.post_recv(&RecvWr {
        wr_id: 10,
        sg_list: &[b.mr.sge(0, 64)],
    })
    .unwrap();
    qa.post_send(&wr(
        5,
        WrOpcode::RdmaWriteWithImm,
        &[a.mr.sge(0, 16)],
        WrTarget::Rdma(b.mr.remote(700_000)),
    ))
    .unwrap();
    assert_eq!(a.one().status, WcStatus::Success);
    let r = b.one();
    assert_eq!(
        (r.opcode, r.byte_len, r.imm_data.value()),
        (WcOpcode::RecvRdmaWithImm, 16, 7)
    );
    qb.post_recv(&RecvWr {
        wr_id: 11,
        sg_list: &[b.mr.sge(0, 64)],
    })
    .unwrap();
    a.mr.write(0, b"inline!!");
    let mut inl = wr(6, WrOpcode::Send, &[], WrTarget::None);
    let sg = [a.mr.sge(0, 8)];
    inl.sg_list = &sg;
    inl.flags = SendFlags::SIGNALED | SendFlags::INLINE;
    qa.post_send(&inl).unwrap();
    a.mr.write(0, b"changed!"); // inline data was copied at post time
    assert_eq!(a.one().status, WcStatus::Success);
    assert_eq!(b.one().byte_len, 8);
    let mut m = [0u8; 8];
    b.mr.read(0, &mut m);
    assert_eq!(&m, b"inline!!");
}

#[test]
fn rc_between_two_devices_over_udp() {
    let a = Side::new(device("traffic-a", "127.7.0.1"));
    let b = Side::new(device("traffic-b", "127.7.0.2"));
    rc_all_operations(&a, &b);
}

#[test]
fn rc_within_one_device() {
    let ctx = device("traffic-one", "127.7.0.3");
    let a = Side::new(ctx.clone());
    let b = Side::new(ctx);
    rc_all_operations(&a, &b);
}

#[test]
fn uc_and_ud_between_two_devices() {
    let a = Side::new(device("traffic-uc-a", "127.7.0.4"));
    let b = Side::new(device("traffic-uc-b", "127.7.0.5"));
    let (ga, gb) = (
        a.ctx.query_gid(1, 0).unwrap(),
        b.ctx.query_gid(1, 0).unwrap(),
    );
    // UC.
    let qa = a.pd.create_uc_qp(&a.init()).unwrap();
    let qb = b.pd.create_uc_qp(&b.init()).unwrap();
    for (qp, peer, gid) in [(&qa, &qb, gb), (&qb, &qa, ga)] {
        qp.to_init(ConnectedInit {
            pkey_index: 0,
            port_num: 1,
            access: ALL,
        })
        .unwrap();
        qp.to_rtr(UcRtr {
            ah: AhAttr::roce(gid, 0),
            path_mtu: Mtu::Mtu1024,
            dest_qp_num: peer.qp_num(),
            rq_psn: 5,
        })
        .unwrap();
        qp.to_rts(SqPsnRts { sq_psn: 5 }).unwrap();
    }
    let data = pattern(5000, 9);
    a.mr.write(0, &data);
    qb.post_recv(&RecvWr {
        wr_id: 1,
        sg_list: &[b.mr.sge(0, 8192)],
    })
    .unwrap();
    qa.post_send(&wr(1, WrOpcode::Send, &[a.mr.sge(0, 5000)], WrTarget::None))
        .unwrap();
    assert_eq!(a.one().status, WcStatus::Success);
    assert_eq!(b.one().byte_len, 5000);
    let mut got = vec![0; 5000];
    b.mr.read(0, &mut got);
    assert_eq!(got, data);
    // UD.
    let ua = a.pd.create_ud_qp(&a.init()).unwrap();
    let ub = b.pd.create_ud_qp(&b.init()).unwrap();
    for qp in [&ua, &ub] {
        qp.to_init(DatagramInit {
            pkey_index: 0,
            port_num: 1,
            qkey: 0x11,
        })
        .unwrap();
        qp.to_rtr(UdRtr).unwrap();
        qp.to_rts(SqPsnRts { sq_psn: 0 }).unwrap();
    }
    let ah = a.pd.create_ah(&AhAttr::roce(gb, 0)).unwrap();
    ub.post_recv(&RecvWr {
        wr_id: 2,
        sg_list: &[b.mr.sge(10_000, 2000)],
    })
    .unwrap();
    ua.post_send(&wr(
        2,
        WrOpcode::SendWithImm,
        &[a.mr.sge(0, 1000)],
        ah.ud(ub.qp_num(), 0x11),
    ))
    .unwrap();
    assert_eq!(a.one().status, WcStatus::Success);
    let r = b.one();
    assert_eq!(
        (r.byte_len, r.src_qp, r.imm_data.value()),
        (1040, ua.qp_num(), 7)
    );
    assert!(r.wc_flags.contains(WcFlags::GRH));
    let mut got = vec![0; 1000];
    b.mr.read(10_040, &mut got);
    assert_eq!(got[..], data[..1000]);
}

#[test]
fn completion_channel_fires_when_armed() {
    let ctx = device("traffic-chan", "127.7.0.6");
    let ch = ctx.create_comp_channel().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq_with_channel(16, &ch).unwrap();
    let mr = pd.reg_mr(4096, ALL).unwrap();
    let side = Side {
        ctx: ctx.clone(),
        pd,
        cq,
        mr,
    };
    let other = Side::new(ctx);
    let (qa, qb) = rc_pair(&side, &other);
    side.cq.req_notify(false).unwrap();
    qb.post_recv(&RecvWr {
        wr_id: 1,
        sg_list: &[other.mr.sge(0, 64)],
    })
    .unwrap();
    qa.post_send(&wr(1, WrOpcode::Send, &[side.mr.sge(0, 8)], WrTarget::None))
        .unwrap();
    assert_eq!(ch.get_event(Some(T)).unwrap(), Some(side.cq.id()));
    assert_eq!(side.one().status, WcStatus::Success);
    // Not re-armed: no second event.
    qb.post_recv(&RecvWr {
        wr_id: 2,
        sg_list: &[other.mr.sge(0, 64)],
    })
    .unwrap();
    qa.post_send(&wr(2, WrOpcode::Send, &[side.mr.sge(0, 8)], WrTarget::None))
        .unwrap();
    assert_eq!(side.one().status, WcStatus::Success);
    assert_eq!(ch.get_event(Some(Duration::from_millis(50))).unwrap(), None);
}

#[test]
fn post_in_the_wrong_state_is_refused_with_einval() {
    let ctx = device("traffic-state", "127.7.0.7");
    let s = Side::new(ctx);
    let qp = s.pd.create_rc_qp(&s.init()).unwrap();
    let e = qp
        .post_send(&wr(1, WrOpcode::Send, &[s.mr.sge(0, 8)], WrTarget::None))
        .unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL);
    assert!(e.to_string().contains("RESET"), "{e}");
    let e = qp
        .post_recv(&RecvWr {
            wr_id: 1,
            sg_list: &[s.mr.sge(0, 8)],
        })
        .unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL);
}

#[test]
fn many_rc_qps_with_traffic_and_no_leak() {
    let a = Side::new(device("traffic-many-a", "127.7.0.8"));
    let b = Side::new(device("traffic-many-b", "127.7.0.9"));
    let before = a.ctx.device_object_counts();
    {
        let mut pairs = Vec::new();
        for _ in 0..256 {
            pairs.push(rc_pair(&a, &b));
        }
        for (i, (qa, qb)) in pairs.iter().enumerate() {
            qb.post_recv(&RecvWr {
                wr_id: i as u64,
                sg_list: &[b.mr.sge(i * 64, 64)],
            })
            .unwrap();
            a.mr.write(i * 64, &[i as u8; 64]);
            qa.post_send(&wr(
                i as u64,
                WrOpcode::Send,
                &[a.mr.sge(i * 64, 64)],
                WrTarget::None,
            ))
            .unwrap();
        }
        let sa = a.cq.wait(256, T);
        let sb = b.cq.wait(256, T);
        assert_eq!((sa.len(), sb.len()), (256, 256));
        assert!(sa.iter().chain(&sb).all(|w| w.status == WcStatus::Success));
        for i in 0..256 {
            let mut m = [0u8; 64];
            b.mr.read(i * 64, &mut m);
            assert_eq!(m, [i as u8; 64]);
        }
    }
    assert_eq!(a.ctx.device_object_counts(), before, "every QP released");
}

#[test]
fn a_large_write_leaves_in_gso_sends_far_fewer_than_its_packets() {
    // 600 000 bytes at MTU 1024: about 586 packets of one size (the last shorter)
    // to one peer, sent as UDP GSO groups; the data arrives byte for byte.
    // Over the socket: the same-host path (which would carry the packets
    // between these two devices through a shared ring) is off.
    let socket_device = |name, ip| {
        let d = Device::with_config(config(name, ip)).with_same_host(false);
        d.open().unwrap()
    };
    let a = Side::new(socket_device("traffic-gso-a", "127.7.9.1"));
    let b = Side::new(socket_device("traffic-gso-b", "127.7.9.2"));
    let (sent, calls, gso, ring) = large_write(&a, &b);
    assert!(sent >= 586, "{sent} datagrams");
    assert_eq!(ring, 0, "the path is off");
    assert!(gso > 0, "no GSO send");
    assert!(calls * 4 < sent, "{calls} send calls for {sent} datagrams");
}

/// Writes 600 000 bytes from `a` to `b` and checks them: `a`'s datagrams
/// sent, socket send calls, GSO datagrams, datagrams put in a shared ring.
fn large_write(a: &Side, b: &Side) -> (u64, u64, u64, u64) {
    let (qa, _qb) = rc_pair(a, b);
    let data = pattern(600_000, 11);
    a.mr.write(0, &data);
    let before = a.ctx.counters().io;
    qa.post_send(&wr(
        1,
        WrOpcode::RdmaWrite,
        &[a.mr.sge(0, 600_000)],
        WrTarget::Rdma(b.mr.remote(400_000)),
    ))
    .unwrap();
    let wc = a.one();
    assert_eq!(
        (wc.opcode, wc.status),
        (WcOpcode::RdmaWrite, WcStatus::Success)
    );
    let after = a.ctx.counters().io;
    let mut got = vec![0; 600_000];
    b.mr.read(400_000, &mut got);
    assert!(got == data, "the written bytes differ");
    (
        after.datagrams_sent - before.datagrams_sent,
        after.send_calls - before.send_calls,
        after.gso_datagrams - before.gso_datagrams,
        after.shm_datagrams_sent - before.shm_datagrams_sent,
    )
}

#[test]
fn a_large_write_between_two_devices_of_this_host_goes_through_the_shared_ring() {
    // The same write with the same-host path on (two devices of one
    // process, as two processes would be): after a warm-up WRITE that lets
    // the receiver accept the ring, every packet goes through it, none
    // through the socket, and the receiver skips no byte of the data.
    let path_device = |name, ip| {
        let d = Device::with_config(config(name, ip)).with_same_host(true);
        d.open().unwrap()
    };
    let a = Side::new(path_device("traffic-shm-a", "127.7.9.3"));
    let b = Side::new(path_device("traffic-shm-b", "127.7.9.4"));
    // The warm-up also lets A name B to its engine as reached intact (B
    // has no faults or capture): A then computes no ICRC for B.
    let unsealed = || a.ctx.counters().engine.qps.packets_unsealed;
    let mut ring = 0;
    for _ in 0..50 {
        let before = unsealed();
        let (_, _, _, r) = large_write(&a, &b);
        ring = r;
        if ring > 0 && unsealed() > before {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(ring > 0, "the path never came up");
    let before = unsealed();
    let (c0, packets0) = (
        a.ctx.counters().io,
        a.ctx.counters().engine.qps.packets_sent,
    );
    let (sent, calls, _, ring) = large_write(&a, &b);
    let (c, packets) = (
        a.ctx.counters().io,
        a.ctx.counters().engine.qps.packets_sent,
    );
    let packets = packets - packets0;
    assert!(packets >= 586, "{packets} packets");
    assert_eq!((ring, calls), (sent, 0), "all through the ring");
    assert_eq!(unsealed() - before, packets, "no ICRC computed for B");
    // The application thread's transmit builds them straight in B's ring
    // (no batch, no copy) whenever nothing is queued before them, and puts
    // a message's packets in runs (proto::run): fewer datagrams than
    // packets, B's engine takes them apart.
    let built = c.shm_built_in_ring - c0.shm_built_in_ring;
    let runs = c.shm_runs_sent - c0.shm_runs_sent;
    assert!(
        built > 0 && built <= sent,
        "{built} of {sent} built in the ring"
    );
    assert!(
        runs > 0 && sent < packets,
        "{runs} runs, {sent} datagrams for {packets} packets"
    );
    let e = b.ctx.counters().engine;
    assert!(e.qps.runs_received >= runs, "{e:?}");
    assert_eq!(e.drop_icrc, 0);
    assert_eq!(e.drop_malformed, 0);
    // B answers as it takes the requests from the ring: its ACKs go back
    // through A's ring with no transmit turn of their own (sv_io's
    // shm::Rooms, spec/performance.md §25).
    let r = b.ctx.counters().io;
    assert!(r.shm_responses > 0, "{r:?}");
}

#[test]
fn a_write_to_an_idle_queue_leaves_from_the_posting_thread() {
    // Each WRITE waits for its completion, so each post finds the send queue
    // idle: its datagram leaves from this thread (sv_io's Driver::posted),
    // unless the progress thread held the engine at that instant (then the
    // doorbell); over 20 posts at least one must have left from here. The
    // path is off unless SOFTVERBS_CALLER_TX=1 (and off with faults or
    // capture): only then does this test check it.
    if !std::env::var("SOFTVERBS_CALLER_TX").is_ok_and(|v| v.trim() == "1")
        || std::env::var("SOFTVERBS_FAULTS").is_ok_and(|v| !v.trim().is_empty())
        || std::env::var("SOFTVERBS_PCAP").is_ok_and(|v| !v.trim().is_empty())
    {
        eprintln!("skipped: the caller's transmit is off in this environment");
        return;
    }
    // Over the socket: the caller's transmit stands aside while the
    // same-host path is on (its rings are the progress thread's).
    let socket_device = |name, ip| {
        let d = Device::with_config(config(name, ip)).with_same_host(false);
        d.open().unwrap()
    };
    let a = Side::new(socket_device("traffic-ctx-a", "127.7.9.5"));
    let b = Side::new(socket_device("traffic-ctx-b", "127.7.9.6"));
    let (qa, _qb) = rc_pair(&a, &b);
    a.mr.write(0, &pattern(64, 5));
    let before = a.ctx.counters().io;
    for id in 0..20 {
        qa.post_send(&wr(
            id,
            WrOpcode::RdmaWrite,
            &[a.mr.sge(0, 64)],
            WrTarget::Rdma(b.mr.remote(4096)),
        ))
        .unwrap();
        let wc = a.one();
        assert_eq!((wc.wr_id, wc.status), (id, WcStatus::Success));
    }
    let after = a.ctx.counters().io;
    assert!(
        after.caller_datagrams > before.caller_datagrams,
        "no datagram left from the posting thread: {after:?}"
    );
    let mut got = vec![0; 64];
    b.mr.read(4096, &mut got);
    assert_eq!(got, pattern(64, 5));
}
