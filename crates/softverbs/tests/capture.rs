//! Packet capture through the public API: two devices in one process, each
//! capturing to its own pcap file, run an RC exchange with every kind of
//! request; tshark must decode each packet as RoCEv2 with the opcodes the
//! exchange implies, none malformed, and both files must show the same packets.

mod pair;
mod tshark;

use pair::{wait, Side, ALL, T};
use softverbs::*;
use std::path::{Path, PathBuf};

fn capture_device(name: &str, ip: &str, path: &Path) -> Context {
    let cfg = DeviceConfig {
        name: name.into(),
        addrs: vec![ip.parse().unwrap()],
        active_mtu: Mtu::Mtu1024,
    };
    Device::with_config(cfg)
        .with_faults(FaultConfig::default())
        .with_capture(Some(path.to_path_buf()))
        .open()
        .unwrap()
}

fn connect(a: &Side, b: &Side) -> (QueuePair<Rc>, QueuePair<Rc>) {
    let qa = a.pd.create_rc_qp(&a.init()).unwrap();
    let qb = b.pd.create_rc_qp(&b.init()).unwrap();
    for (qp, peer, gid) in [(&qa, &qb, b.gid()), (&qb, &qa, a.gid())] {
        qp.to_init(ConnectedInit {
            pkey_index: 0,
            port_num: 1,
            access: ALL,
        })
        .unwrap();
        let rtr = RcRtr {
            ah: AhAttr::roce(gid, 0),
            path_mtu: Mtu::Mtu1024,
            dest_qp_num: peer.qp_num(),
            rq_psn: 0x100,
            max_dest_rd_atomic: 16,
            min_rnr_timer: 1,
        };
        qp.to_rtr(rtr).unwrap();
        qp.to_rts(RcRts {
            sq_psn: 0x100,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 16,
        })
        .unwrap();
    }
    (qa, qb)
}

fn post(qp: &QueuePair<Rc>, id: u64, opcode: WrOpcode, sg: &[Sge], target: WrTarget) {
    let wr = SendWr {
        wr_id: id,
        opcode,
        flags: SendFlags::SIGNALED,
        sg_list: sg,
        imm_data: ImmData::from_value(1),
        target,
    };
    qp.post_send(&wr).unwrap();
}

/// SEND (multi-packet and only), WRITE (multi and only), WRITE_WITH_IMM,
/// READ (multi and only), fetch-and-add and compare-and-swap.
fn exchange(a: &Side, b: &Side) {
    let (qa, qb) = connect(a, b);
    for id in 0..3 {
        qb.post_recv(&RecvWr {
            wr_id: id,
            sg_list: &[b.mr.sge(0, 8192)],
        })
        .unwrap();
    }
    let atomic = |compare_add, swap| AtomicTarget {
        remote_addr: b.mr.addr() + 60_000,
        compare_add,
        swap,
        rkey: b.mr.rkey(),
    };
    post(&qa, 1, WrOpcode::Send, &[a.mr.sge(0, 5000)], WrTarget::None);
    post(&qa, 2, WrOpcode::Send, &[a.mr.sge(0, 100)], WrTarget::None);
    post(
        &qa,
        3,
        WrOpcode::RdmaWrite,
        &[a.mr.sge(0, 3000)],
        WrTarget::Rdma(b.mr.remote(10_000)),
    );
    post(
        &qa,
        4,
        WrOpcode::RdmaWrite,
        &[a.mr.sge(0, 100)],
        WrTarget::Rdma(b.mr.remote(20_000)),
    );
    post(
        &qa,
        5,
        WrOpcode::RdmaWriteWithImm,
        &[a.mr.sge(0, 16)],
        WrTarget::Rdma(b.mr.remote(30_000)),
    );
    post(
        &qa,
        6,
        WrOpcode::RdmaRead,
        &[a.mr.sge(40_000, 3000)],
        WrTarget::Rdma(b.mr.remote(10_000)),
    );
    post(
        &qa,
        7,
        WrOpcode::RdmaRead,
        &[a.mr.sge(50_000, 100)],
        WrTarget::Rdma(b.mr.remote(20_000)),
    );
    post(
        &qa,
        8,
        WrOpcode::AtomicFetchAndAdd,
        &[a.mr.sge(60_000, 8)],
        WrTarget::Atomic(atomic(5, 0)),
    );
    post(
        &qa,
        9,
        WrOpcode::AtomicCmpAndSwp,
        &[a.mr.sge(60_008, 8)],
        WrTarget::Atomic(atomic(5, 9)),
    );
    let done = wait(&a.scq, 9);
    assert!(
        done.iter().all(|wc| wc.status == WcStatus::Success),
        "{done:?}"
    );
    wait(&b.rcq, 3);
    let mut word = [0u8; 8];
    b.mr.read(60_000, &mut word);
    assert_eq!(u64::from_ne_bytes(word), 9);
    let _ = T;
}

#[test]
fn tshark_decodes_a_captured_rc_exchange() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let (pa, pb) = (
        dir.join("softverbs-capture-a.pcap"),
        dir.join("softverbs-capture-b.pcap"),
    );
    let (a_records, b_records);
    {
        let a = Side::new(capture_device("capture-a", "127.9.5.1", &pa), 1 << 17);
        let b = Side::new(capture_device("capture-b", "127.9.5.2", &pb), 1 << 17);
        exchange(&a, &b);
        // Let the last ACKs land before closing (counted, so no sleep-and-hope).
        let settled = |s: &Side| s.ctx.counters().io.pcap_records;
        let start = std::time::Instant::now();
        while settled(&a) != settled(&b) && start.elapsed() < T {
            std::thread::yield_now();
        }
        (a_records, b_records) = (
            a.ctx.counters().io.pcap_records,
            b.ctx.counters().io.pcap_records,
        );
        assert!(a_records > 0);
        for side in [&a, &b] {
            // Engine and driver agree; with no faults nothing is lost or added.
            let c = side.ctx.counters();
            assert_eq!(c.engine.packets_sent, c.io.datagrams_sent, "{c:?}");
            assert_eq!(c.engine.packets_received, c.io.datagrams_received, "{c:?}");
            assert_eq!(
                c.io.pcap_records,
                c.io.datagrams_sent + c.io.datagrams_received
            );
            assert_eq!(
                (c.io.pcap_errors, c.io.fault_drops, c.io.loopback_datagrams),
                (0, 0, 0)
            );
        }
    } // devices closed: files complete
    if !tshark::available() {
        eprintln!("skipped: tshark not found");
        return;
    }
    let da = tshark::decode(&pa);
    let db = tshark::decode(&pb);
    assert_eq!(da.len() as u64, a_records);
    assert_eq!(db.len() as u64, b_records);
    for p in da.iter().chain(&db) {
        assert!(!p.malformed && p.opcode.is_some(), "{p:?}");
    }
    // Requests A sent, and responses/ACKs it received: exactly these opcodes.
    let sent: Vec<u8> = da
        .iter()
        .filter(|p| p.src == "127.9.5.1")
        .filter_map(|p| p.opcode)
        .collect();
    let received: Vec<u8> = da
        .iter()
        .filter(|p| p.src == "127.9.5.2")
        .filter_map(|p| p.opcode)
        .collect();
    let set = |v: &[u8]| {
        v.iter()
            .copied()
            .collect::<std::collections::BTreeSet<u8>>()
    };
    // SEND first/middle/last/only, WRITE first/middle/last/only/only-with-imm, READ request, CAS, FAA.
    let requests = [
        0x00, 0x01, 0x02, 0x04, 0x06, 0x07, 0x08, 0x0a, 0x0b, 0x0c, 0x13, 0x14,
    ];
    // READ response first/middle/last/only, ACK, atomic ACK.
    let responses = [0x0d, 0x0e, 0x0f, 0x10, 0x11, 0x12];
    assert_eq!(set(&sent), set(&requests), "A sent {sent:x?}");
    assert_eq!(set(&received), set(&responses), "A received {received:x?}");
    // No faults: B's file shows the same packets, in the same order.
    let key = |p: &tshark::Decoded| (p.src.clone(), p.opcode, p.psn, p.dest_qp);
    let a_to_b: Vec<_> = da
        .iter()
        .filter(|p| p.src == "127.9.5.1")
        .map(key)
        .collect();
    let b_from_a: Vec<_> = db
        .iter()
        .filter(|p| p.src == "127.9.5.1")
        .map(key)
        .collect();
    assert_eq!(a_to_b, b_from_a);
    assert!(a_to_b.iter().all(|k| k.2.is_some_and(|psn| psn >= 0x100)));
    eprintln!("tshark decoded {} + {} packets", da.len(), db.len());
}
