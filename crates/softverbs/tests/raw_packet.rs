//! RAW_PACKET QPs for real (spec/raw-packet.md): without CAP_NET_RAW creation
//! fails with EPERM (checked as user nobody); as root, in two network
//! namespaces this test creates, joined by a veth pair, a RAW_PACKET QP's
//! frame reaches a plain UDP socket on the peer side, the peer's datagrams
//! come back as receive completions of the whole frame when a flow matches,
//! and a datagram no flow matches is not delivered.
//!
//! The checks run in child processes of this test binary (selected by the
//! `SV_NETNS_CHILD` variable, testkit::child): as nobody (setpriv), and inside the namespaces
//! (`ip netns exec`), each bounded by `timeout`.
use softverbs::*;
use std::process::Command;
use std::time::{Duration, Instant};
use testkit::{assert_child, child, have, run_child, Netns};

const ADDRS: [&str; 2] = ["10.79.0.1", "10.79.0.2"];
const QP_PORT: u16 = 4000;
const PEER_PORT: u16 = 5000;

fn device(ip: &str) -> Context {
    let cfg = DeviceConfig {
        name: format!("raw-{ip}"),
        addrs: vec![ip.parse().unwrap()],
        active_mtu: Mtu::Mtu1024,
    };
    Device::with_config(cfg).open().unwrap()
}

#[test]
fn raw_qp_needs_cap_net_raw() {
    if child().is_none() {
        if !have("setpriv") {
            eprintln!("skipping: setpriv not installed");
            return;
        }
        let prefix = [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ];
        let o = run_child(&prefix, "raw_qp_needs_cap_net_raw", &[]);
        assert_child(&o, "EPERM-CHECKED");
        return;
    }
    // As nobody: the device works, a RAW_PACKET QP is refused with EPERM.
    let ctx = device("127.79.0.1");
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let init = QpInit::new(&cq, &cq);
    let e = pd
        .create_qp(&init, QpType::RawPacket.raw())
        .expect_err("RAW_PACKET without CAP_NET_RAW");
    assert_eq!(e.errno(), Errno::EPERM, "{e}");
    assert!(e.to_string().contains("CAP_NET_RAW"), "{e}");
    // Nothing was left behind: a UD QP is still fine.
    pd.create_ud_qp(&init).unwrap();
    println!("EPERM-CHECKED");
}

fn parse_mac(s: &str) -> [u8; 6] {
    let mut m = [0u8; 6];
    for (b, p) in m.iter_mut().zip(s.split(':')) {
        *b = u8::from_str_radix(p, 16).unwrap();
    }
    m
}

fn ipv4(s: &str) -> [u8; 4] {
    s.parse::<std::net::Ipv4Addr>().unwrap().octets()
}

/// Ethernet + IPv4 (checksummed) + UDP (checksum 0: none) + payload.
fn udp_frame(dst: [u8; 6], src: [u8; 6], ports: (u16, u16), payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend(dst);
    f.extend(src);
    f.extend(0x0800u16.to_be_bytes());
    let total = (20 + 8 + payload.len()) as u16;
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[6] = 0x40; // DF
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&ipv4(ADDRS[0]));
    ip[16..20].copy_from_slice(&ipv4(ADDRS[1]));
    let sum = ip
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum::<u32>();
    let sum = (sum & 0xffff) + (sum >> 16);
    let sum = !(((sum & 0xffff) + (sum >> 16)) as u16);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    f.extend(ip);
    f.extend(ports.0.to_be_bytes());
    f.extend(ports.1.to_be_bytes());
    f.extend((8 + payload.len() as u16).to_be_bytes());
    f.extend([0, 0]);
    f.extend(payload);
    f
}

/// `struct ibv_flow_attr` + `ibv_flow_spec_ipv4` (dst address) +
/// `ibv_flow_spec_tcp_udp` (UDP dst port), as a C caller lays it out.
fn flow_attr(dst_ip: [u8; 4], dst_port: u16) -> Vec<u8> {
    let mut a = Vec::new();
    a.extend(0u32.to_ne_bytes()); // comp_mask
    a.extend(0u32.to_ne_bytes()); // IBV_FLOW_ATTR_NORMAL
    a.extend((20u16 + 24 + 16).to_ne_bytes());
    a.extend(0u16.to_ne_bytes()); // priority
    a.extend([2u8, 1, 0, 0]); // num_of_specs, port
    a.extend(0u32.to_ne_bytes()); // flags
    let mut ip = vec![0u8; 24];
    ip[..4].copy_from_slice(&0x30u32.to_ne_bytes());
    ip[4..6].copy_from_slice(&24u16.to_ne_bytes());
    ip[12..16].copy_from_slice(&dst_ip);
    ip[20..24].copy_from_slice(&[0xff; 4]);
    a.extend(ip);
    let mut udp = vec![0u8; 16];
    udp[..4].copy_from_slice(&0x41u32.to_ne_bytes());
    udp[4..6].copy_from_slice(&16u16.to_ne_bytes());
    udp[6..8].copy_from_slice(&dst_port.to_be_bytes());
    udp[10..12].copy_from_slice(&[0xff; 2]);
    a.extend(udp);
    a
}

#[test]
fn raw_frames_cross_a_veth_pair() {
    match child().as_deref() {
        None => {}
        Some("raw_frames_cross_a_veth_pair") => return qp_side(),
        Some(_) => return,
    }
    if !have("ip") {
        eprintln!("skipping: iproute2 not installed");
        return;
    }
    let Some(ns) = Netns::pair("svr", ADDRS) else {
        eprintln!("skipping: network namespaces need root");
        return;
    };
    let env = [
        ("SV_RAW_MAC_A", ns.mac(0)),
        ("SV_RAW_MAC_B", ns.mac(1)),
        ("SV_RAW_NS_B", ns.names[1].clone()),
    ];
    let prefix = ["ip", "netns", "exec", &ns.names[0]];
    let o = run_child(&prefix, "raw_frames_cross_a_veth_pair", &env);
    assert_child(&o, "VETH-CHECKED");
}

/// The peer: a plain UDP socket in namespace B (a shell one-liner would need
/// a tool; python3 is what the suite already requires).
fn peer(ns_b: &str) -> std::process::Child {
    let script = format!(
        "import socket,time\n\
s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
s.bind(('{b}',{pp}))\n\
s.settimeout(20)\n\
print('READY',flush=True)\n\
d,a=s.recvfrom(2048)\n\
print('GOT',d.decode(),a[0],a[1],flush=True)\n\
s.sendto(b'no-flow-matches-this',('{a}',{qp}+1))\n\
time.sleep(0.2)\n\
s.sendto(b'to-the-raw-qp',('{a}',{qp}))\n",
        b = ADDRS[1],
        a = ADDRS[0],
        pp = PEER_PORT,
        qp = QP_PORT
    );
    Command::new("timeout")
        .args(["40", "ip", "netns", "exec", ns_b, "python3", "-c", &script])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

fn qp_side() {
    use std::io::BufRead;
    let var = |k: &str| std::env::var(k).unwrap();
    let (mac_a, mac_b) = (
        parse_mac(&var("SV_RAW_MAC_A")),
        parse_mac(&var("SV_RAW_MAC_B")),
    );
    let ctx = device(ADDRS[0]);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let mr = pd.reg_mr(1 << 16, AccessFlags(1)).unwrap();
    let mut init = QpInit::new(&cq, &cq);
    init.sq_sig_all = true;
    let qp = pd.create_qp(&init, QpType::RawPacket.raw()).unwrap();
    let attr = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        ..QpAttr::default()
    };
    qp.modify(&attr, AttrMask::STATE | AttrMask::PORT).unwrap();
    for s in [QpState::Rtr, QpState::Rts] {
        let attr = QpAttr {
            qp_state: s,
            ..QpAttr::default()
        };
        qp.modify(&attr, AttrMask::STATE).unwrap();
    }
    for i in 0..4u64 {
        qp.post_recv(&RecvWr {
            wr_id: 100 + i,
            sg_list: &[mr.sge(8192 + i as usize * 2048, 2048)],
        })
        .unwrap();
    }
    let _flow = qp.create_flow(&flow_attr(ipv4(ADDRS[0]), QP_PORT)).unwrap();

    let mut p = peer(&var("SV_RAW_NS_B"));
    let mut lines = std::io::BufReader::new(p.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "READY");
    // Out: one frame to the peer's MAC, IP and UDP port.
    let frame = udp_frame(mac_b, mac_a, (QP_PORT, PEER_PORT), b"from-the-raw-qp");
    mr.write(0, &frame);
    qp.post_send(&SendWr {
        wr_id: 7,
        opcode: WrOpcode::Send,
        flags: SendFlags::SIGNALED,
        sg_list: &[mr.sge(0, frame.len() as u32)],
        imm_data: ImmData::from_value(0),
        target: WrTarget::None,
    })
    .unwrap();
    let got = lines.next().unwrap().unwrap();
    assert_eq!(
        got,
        format!("GOT from-the-raw-qp {} {QP_PORT}", ADDRS[0]),
        "what the peer's UDP socket received"
    );
    // In: the peer's datagram to a port no flow names is not delivered, the
    // one to QP_PORT is, as its whole frame.
    let mut wcs = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while wcs
        .iter()
        .filter(|w: &&WorkCompletion| w.opcode == WcOpcode::Recv)
        .count()
        < 1
        && Instant::now() < deadline
    {
        wcs.extend(cq.wait(1, Duration::from_millis(100)));
    }
    std::thread::sleep(Duration::from_millis(300));
    wcs.extend(cq.wait(8, Duration::from_millis(10)));
    let send: Vec<_> = wcs.iter().filter(|w| w.opcode == WcOpcode::Send).collect();
    assert_eq!(send.len(), 1, "{wcs:?}");
    assert_eq!((send[0].wr_id, send[0].status), (7, WcStatus::Success));
    let recv: Vec<_> = wcs.iter().filter(|w| w.opcode == WcOpcode::Recv).collect();
    assert_eq!(recv.len(), 1, "only the matching datagram arrives: {wcs:?}");
    let wc = recv[0];
    assert_eq!((wc.wr_id, wc.status), (100, WcStatus::Success));
    let payload = b"to-the-raw-qp";
    assert_eq!(wc.byte_len as usize, 14 + 20 + 8 + payload.len());
    let mut rx = vec![0u8; wc.byte_len as usize];
    mr.read(8192, &mut rx);
    assert_eq!(&rx[..6], &mac_a, "to our MAC");
    assert_eq!(&rx[6..12], &mac_b, "from the peer's");
    assert_eq!(&rx[14 + 16..14 + 20], &ipv4(ADDRS[0]));
    assert_eq!(&rx[14 + 22..14 + 24], &QP_PORT.to_be_bytes());
    assert_eq!(&rx[42..], payload);
    let _ = p.wait();
    println!("VETH-CHECKED");
}

/// Microsoft's published Toeplitz key.
const RSS_KEY: [u8; 40] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
    0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
    0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

fn to_rts(qp: &QueuePair) {
    let attr = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        ..QpAttr::default()
    };
    qp.modify(&attr, AttrMask::STATE | AttrMask::PORT).unwrap();
    for s in [QpState::Rtr, QpState::Rts] {
        let attr = QpAttr {
            qp_state: s,
            ..QpAttr::default()
        };
        qp.modify(&attr, AttrMask::STATE).unwrap();
    }
}

/// An ETH rule on the destination MAC, in the C layout.
fn eth_rule(mac: [u8; 6]) -> Vec<u8> {
    let mut a = Vec::new();
    a.extend(0u32.to_ne_bytes());
    a.extend(0u32.to_ne_bytes());
    a.extend(60u16.to_ne_bytes());
    a.extend(0u16.to_ne_bytes());
    a.extend([1u8, 1, 0, 0]);
    a.extend(0u32.to_ne_bytes());
    let mut eth = vec![0u8; 40];
    eth[..4].copy_from_slice(&0x20u32.to_ne_bytes());
    eth[4..6].copy_from_slice(&40u16.to_ne_bytes());
    eth[6..12].copy_from_slice(&mac);
    eth[22..28].copy_from_slice(&[0xff; 6]);
    a.extend(eth);
    a
}

#[test]
fn rss_spreads_frames_over_the_tables_wqs() {
    if !testkit::is_root() {
        eprintln!("skipping: RAW_PACKET QPs need CAP_NET_RAW");
        return;
    }
    let pid = std::process::id();
    // A multicast MAC of this process alone: lo shows every frame to every socket.
    let mac = [
        0x03,
        0x52,
        0x55,
        (pid >> 16) as u8,
        (pid >> 8) as u8,
        pid as u8,
    ];
    let ctx = device("127.79.1.1");
    let pd = ctx.alloc_pd().unwrap();
    let cqs = [ctx.create_cq(64).unwrap(), ctx.create_cq(64).unwrap()];
    let mr = pd.reg_mr(1 << 20, AccessFlags(1)).unwrap();
    let wqs: Vec<WorkQueue> = (0..4)
        .map(|i| pd.create_wq(&cqs[i % 2], 32, 1).unwrap())
        .collect();
    // RESET -> ERR is no WQ transition; a wrong curr_wq_state is refused.
    let e = wqs[0].modify(WqState::Err, None).unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL, "{e}");
    let e = wqs[0].modify(WqState::Rdy, Some(WqState::Rdy)).unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL, "{e}");
    for (i, wq) in wqs.iter().enumerate() {
        wq.modify(WqState::Rdy, Some(WqState::Reset)).unwrap();
        assert_eq!(wq.state(), WqState::Rdy);
        for j in 0..16 {
            let slot = i * 16 + j;
            wq.post_recv(&RecvWr {
                wr_id: slot as u64,
                sg_list: &[mr.sge(slot * 2048, 2048)],
            })
            .unwrap();
        }
    }
    let refs: Vec<&WorkQueue> = wqs.iter().collect();
    let e = ctx.create_rwq_ind_table(3, &refs).unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL, "{e}");
    let table = ctx.create_rwq_ind_table(2, &refs).unwrap();
    let fields = rx_hash_fields::SRC_IPV4 | rx_hash_fields::DST_IPV4;
    for (function, key, fields, errno) in [
        (2u8, &RSS_KEY[..], fields, Errno::EOPNOTSUPP),
        (1, &RSS_KEY[..], 1 << 8, Errno::EOPNOTSUPP),
        (1, &[][..], fields, Errno::EINVAL),
    ] {
        let e = pd.create_rss_qp(&table, function, key, fields).unwrap_err();
        assert_eq!(e.errno(), errno, "{e}");
    }
    let rss = pd.create_rss_qp(&table, 1, &RSS_KEY, fields).unwrap();
    let _flow = rss.create_flow(&eth_rule(mac)).unwrap();

    // A plain RAW_PACKET QP sends 32 frames from 32 source addresses.
    let scq = ctx.create_cq(64).unwrap();
    let mut init = QpInit::new(&scq, &scq);
    init.sq_sig_all = true;
    init.cap.max_send_wr = 64;
    let tx = pd.create_qp(&init, QpType::RawPacket.raw()).unwrap();
    to_rts(&tx);
    let base = 600 * 1024;
    for i in 0..32u8 {
        let mut f = udp_frame(mac, [2, 0, 0, 0, 0, 1], (1234, 5678), b"rss");
        f[14 + 12..14 + 16].copy_from_slice(&[10, i, 1, 1]);
        let at = base + usize::from(i) * 256;
        mr.write(at, &f);
        tx.post_send(&SendWr {
            wr_id: u64::from(i),
            opcode: WrOpcode::Send,
            flags: SendFlags::SIGNALED,
            sg_list: &[mr.sge(at, f.len() as u32)],
            imm_data: ImmData::from_value(0),
            target: WrTarget::None,
        })
        .unwrap();
    }
    assert_eq!(scq.wait(32, Duration::from_secs(10)).len(), 32);
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.len() < 32 && Instant::now() < deadline {
        for cq in &cqs {
            got.extend(cq.wait(32, Duration::from_millis(20)));
        }
    }
    let c = ctx.counters();
    assert_eq!(
        got.len(),
        32,
        "every frame reached a WQ: {got:?}\nraw: {:?}\nio: {:?}",
        c.raw,
        c.io
    );
    // The kernel queued each frame to the RSS QP's socket once (its own
    // sends are not read back, and its filter takes this MAC alone).
    assert_eq!((c.io.raw_kernel_queued, c.io.raw_kernel_drops), (32, 0));
    let wq_nums: Vec<u32> = wqs.iter().map(WorkQueue::wq_num).collect();
    let mut used = std::collections::BTreeSet::new();
    let mut scratch = Vec::new();
    for wc in &got {
        assert_eq!((wc.status, wc.opcode), (WcStatus::Success, WcOpcode::Recv));
        let slot = wc.wr_id as usize;
        let mut frame = vec![0u8; wc.byte_len as usize];
        mr.read(slot * 2048, &mut frame);
        // The WQ the Toeplitz hash of the addresses picks, and its CQ.
        let want = wq_nums[rss_pick(&RSS_KEY, fields, 2, &frame, &mut scratch)];
        assert_eq!(wc.qp_num, want, "frame from {:?}", &frame[26..30]);
        assert_eq!(wq_nums[slot / 16], want, "the WQE came from that WQ");
        used.insert(want);
    }
    assert!(
        used.len() > 1,
        "32 source addresses spread over one WQ only"
    );

    // What is in use cannot go.
    let table = table.destroy().unwrap_err();
    assert_eq!(table.error.errno(), Errno::EBUSY, "{}", table.error);
    let wq0 = wqs.into_iter().next().unwrap().destroy().unwrap_err();
    assert_eq!(wq0.error.errno(), Errno::EBUSY, "{}", wq0.error);
    drop(_flow);
    rss.destroy().unwrap();
    table.object.destroy().unwrap();
    wq0.object.destroy().unwrap();
}

/// What one run of [`faulted_frames`] saw.
struct FaultRun {
    sent: Vec<Vec<u8>>,
    received: Vec<Vec<u8>>,
    tx_records: Vec<Vec<u8>>,
    rx_records: Vec<Vec<u8>>,
    tx: IoCounters,
    rx: IoCounters,
}

fn records(path: &std::path::Path) -> Vec<Vec<u8>> {
    let file = std::fs::read(path).unwrap();
    let reader = wire::pcap::PcapReader::new(&file).unwrap();
    assert_eq!(reader.linktype, 1, "Ethernet records");
    reader.map(|r| r.unwrap().data.to_vec()).collect()
}

fn sorted(mut v: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    v.sort();
    v
}

/// Three frames from a RAW_PACKET QP of one device to a RAW_PACKET QP of
/// another (on lo, to a multicast MAC of this process and run), each device
/// with its own faults and capture file; waits for `expect` receives (and a
/// little longer, for extras), closes both devices, reads both captures.
fn faulted_frames(tag: u8, tx_faults: &str, rx_faults: &str, expect: usize) -> FaultRun {
    let pid = std::process::id();
    let mac = [0x03, 0x52, 0x56, (pid >> 8) as u8, pid as u8, tag];
    let dir = std::env::temp_dir().join(format!("sv-rawfault-{pid}-{tag}"));
    std::fs::create_dir_all(&dir).unwrap();
    let (tx_pcap, rx_pcap) = (dir.join("tx.pcap"), dir.join("rx.pcap"));
    let open = |side: &str, host: u8, faults: &str, pcap: &std::path::Path| {
        let cfg = DeviceConfig {
            name: format!("rawfault-{side}-{tag}"),
            addrs: vec![format!("127.79.3.{host}").parse().unwrap()],
            active_mtu: Mtu::Mtu1024,
        };
        Device::with_config(cfg)
            .with_faults(faults.parse().unwrap())
            .with_capture(Some(pcap.to_path_buf()))
            .open()
            .unwrap()
    };
    let (tx_ctx, rx_ctx) = (
        open("tx", 2 * tag + 1, tx_faults, &tx_pcap),
        open("rx", 2 * tag + 2, rx_faults, &rx_pcap),
    );
    let sent: Vec<Vec<u8>> = (0..3u8)
        .map(|i| udp_frame(mac, [2, 0, 0, 0, tag, i], (1234, 5678), &[b'f', tag, i]))
        .collect();
    let (received, tx, rx) = {
        let rpd = rx_ctx.alloc_pd().unwrap();
        let rcq = rx_ctx.create_cq(64).unwrap();
        let rmr = rpd.reg_mr(1 << 16, AccessFlags(1)).unwrap();
        let rqp = rpd
            .create_qp(&QpInit::new(&rcq, &rcq), QpType::RawPacket.raw())
            .unwrap();
        to_rts(&rqp);
        for i in 0..8u64 {
            let sg = [rmr.sge(i as usize * 2048, 2048)];
            rqp.post_recv(&RecvWr {
                wr_id: i,
                sg_list: &sg,
            })
            .unwrap();
        }
        let _flow = rqp.create_flow(&eth_rule(mac)).unwrap();
        let tpd = tx_ctx.alloc_pd().unwrap();
        let tcq = tx_ctx.create_cq(64).unwrap();
        let tmr = tpd.reg_mr(1 << 16, AccessFlags(1)).unwrap();
        let mut init = QpInit::new(&tcq, &tcq);
        init.sq_sig_all = true;
        let tqp = tpd.create_qp(&init, QpType::RawPacket.raw()).unwrap();
        to_rts(&tqp);
        for (i, f) in sent.iter().enumerate() {
            tmr.write(i * 256, f);
            tqp.post_send(&SendWr {
                wr_id: i as u64,
                opcode: WrOpcode::Send,
                flags: SendFlags::SIGNALED,
                sg_list: &[tmr.sge(i * 256, f.len() as u32)],
                imm_data: ImmData::from_value(0),
                target: WrTarget::None,
            })
            .unwrap();
        }
        let done = tcq.wait(3, Duration::from_secs(10));
        assert_eq!(done.len(), 3, "{done:?}");
        assert!(done.iter().all(|w| w.status == WcStatus::Success));
        let mut wcs = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while wcs.len() < expect && Instant::now() < deadline {
            wcs.extend(rcq.wait(8, Duration::from_millis(20)));
        }
        std::thread::sleep(Duration::from_millis(200));
        wcs.extend(rcq.wait(8, Duration::from_millis(10)));
        let received = wcs
            .iter()
            .map(|w| {
                assert_eq!(w.status, WcStatus::Success, "{w:?}");
                let mut f = vec![0u8; w.byte_len as usize];
                rmr.read(w.wr_id as usize * 2048, &mut f);
                f
            })
            .collect();
        (received, tx_ctx.counters().io, rx_ctx.counters().io)
    };
    drop((tx_ctx, rx_ctx));
    let run = FaultRun {
        sent,
        received,
        tx_records: records(&tx_pcap),
        rx_records: records(&rx_pcap),
        tx,
        rx,
    };
    let _ = std::fs::remove_dir_all(&dir);
    run
}

/// RAW_PACKET frames go through `SOFTVERBS_FAULTS` and `SOFTVERBS_PCAP` as
/// RoCE datagrams do (spec/raw-packet.md §5): duplicated on send (both copies
/// on the wire, captured, received), lost on receive (captured as read, never
/// delivered), corrupted and delayed on send (the capture shows the frame as
/// it left, one bit flipped; the receiver gets exactly that).
#[test]
fn raw_frames_pass_faults_and_capture() {
    if !testkit::is_root() {
        eprintln!("skipping: RAW_PACKET QPs need CAP_NET_RAW");
        return;
    }
    // Duplication on send.
    let r = faulted_frames(0, "dup=1,seed=1", "", 6);
    let twice = sorted(r.sent.iter().chain(&r.sent).cloned().collect());
    assert_eq!(r.tx.fault_duplicates, 3);
    assert_eq!(
        sorted(r.tx_records),
        twice,
        "both copies left and were captured"
    );
    assert_eq!(sorted(r.received), twice, "both copies arrived");
    assert_eq!(sorted(r.rx_records), twice, "and were captured as read");

    // Loss on receive: captured as read (before the receive faults), not delivered.
    let r = faulted_frames(1, "", "loss=1,dir=rx", 0);
    assert_eq!(r.rx.fault_drops, 3);
    assert!(r.received.is_empty(), "{:?}", r.received);
    assert_eq!(r.tx_records, r.sent);
    assert_eq!(sorted(r.rx_records), sorted(r.sent.clone()));

    // Corruption and delay on send: one bit flipped in each frame as it left.
    let r = faulted_frames(2, "corrupt=1,delay=2ms,seed=5", "", 0);
    assert_eq!((r.tx.fault_corruptions, r.tx.fault_delays), (3, 3));
    assert_eq!(r.tx_records.len(), 3);
    for (rec, orig) in r.tx_records.iter().zip(&r.sent) {
        let bits: u32 = rec
            .iter()
            .zip(orig)
            .map(|(a, b)| (a ^ b).count_ones())
            .sum();
        assert_eq!((rec.len(), bits), (orig.len(), 1), "one bit flipped");
    }
    // The receiver's flow matches the destination MAC: a frame whose flipped
    // bit is elsewhere arrives exactly as captured.
    let mac = &r.sent[0][..6];
    let arriving: Vec<_> = r
        .tx_records
        .iter()
        .filter(|f| &f[..6] == mac)
        .cloned()
        .collect();
    // (Seed 5 flips no MAC bit of these frames: the check is not vacuous.)
    assert_eq!(arriving.len(), 3);
    assert_eq!(sorted(r.received.clone()), sorted(arriving));
    assert_eq!(sorted(r.rx_records), sorted(r.received));
}

/// Ones'-complement sum (RFC 1071), written apart from the library's.
fn csum(chunks: &[&[u8]]) -> u16 {
    let mut bytes = Vec::new();
    for c in chunks {
        bytes.extend_from_slice(c);
    }
    if bytes.len() % 2 == 1 {
        bytes.push(0);
    }
    let mut s: u64 = bytes
        .chunks(2)
        .map(|w| u64::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// Ethernet (to `mac`) + IPv6 (fe80::1 → fe80::2) + TCP with 12 bytes of
/// options (seq 0xffff_ff00, so the segments' sequence numbers wrap), flags
/// CWR|PSH|ACK|FIN: 14 + 40 + 32 = 86 bytes.
fn tso_v6_header(mac: [u8; 6]) -> Vec<u8> {
    let mut h = Vec::new();
    h.extend(mac);
    h.extend([2, 0, 0, 0, 0, 0x66]);
    h.extend(0x86ddu16.to_be_bytes());
    let mut ip = [0u8; 40];
    ip[0] = 0x60;
    ip[6] = 6; // TCP
    ip[7] = 64;
    ip[8] = 0xfe;
    ip[9] = 0x80;
    ip[23] = 1;
    ip[24] = 0xfe;
    ip[25] = 0x80;
    ip[39] = 2;
    h.extend(ip);
    let mut tcp = [0u8; 32];
    tcp[0..2].copy_from_slice(&40000u16.to_be_bytes());
    tcp[2..4].copy_from_slice(&80u16.to_be_bytes());
    tcp[4..8].copy_from_slice(&0xffff_ff00u32.to_be_bytes());
    tcp[12] = 8 << 4;
    tcp[13] = 0x80 | 0x08 | 0x10 | 0x01;
    tcp[20..24].copy_from_slice(&[1, 1, 8, 10]); // NOP NOP timestamps…
    h.extend(tcp);
    h
}

/// IBV_WR_TSO on a RAW_PACKET QP (spec/raw-packet.md §4): an IPv6 TCP payload
/// of 2500 bytes with mss 1000 leaves as three frames, read back on lo
/// through a flow and checked field by field against an independent
/// checksum; the WR completes once, as TSO. And the refusals: a header
/// longer than the QP's max_tso_header, a header that is not TCP, TSO on a
/// UD QP, max_tso_header on a UD QP or beyond the device's limit.
#[test]
fn tso_segments_a_tcp_payload() {
    if !testkit::is_root() {
        eprintln!("skipping: RAW_PACKET QPs need CAP_NET_RAW");
        return;
    }
    let pid = std::process::id();
    let mac = [
        0x03,
        0x54,
        0x53,
        (pid >> 16) as u8,
        (pid >> 8) as u8,
        pid as u8,
    ];
    let ctx = device("127.79.4.1");
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let mr = pd.reg_mr(1 << 16, AccessFlags(1)).unwrap();
    let create = |max_tso_header: u16, t: QpType| {
        let mut init = QpInit::new(&cq, &cq);
        init.sq_sig_all = true;
        init.comp_mask |= 1 << 3; // IBV_QP_INIT_ATTR_MAX_TSO_HEADER
        init.max_tso_header = max_tso_header;
        pd.create_qp(&init, t.raw())
    };
    let e = create(513, QpType::RawPacket).unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL, "{e}");
    let e = create(64, QpType::Ud).unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL, "{e}");
    assert!(e.to_string().contains("RAW_PACKET"), "{e}");
    let qp = create(128, QpType::RawPacket).unwrap();
    to_rts(&qp);
    for i in 0..4u64 {
        let sg = [mr.sge(32768 + i as usize * 2048, 2048)];
        qp.post_recv(&RecvWr {
            wr_id: i,
            sg_list: &sg,
        })
        .unwrap();
    }
    let _flow = qp.create_flow(&eth_rule(mac)).unwrap();
    let payload: Vec<u8> = (0..2500u32).map(|i| (i * 7 + i / 256) as u8).collect();
    mr.write(0, &payload);
    let hdr = tso_v6_header(mac);
    let wr = SendWr {
        wr_id: 42,
        opcode: WrOpcode::Tso,
        flags: SendFlags::SIGNALED,
        sg_list: &[mr.sge(0, 2500)],
        imm_data: ImmData::from_value(0),
        target: WrTarget::None,
    };
    // Refusals first: nothing of these is sent.
    let mut long = hdr.clone();
    long.extend([0; 43]); // 129 bytes > max_tso_header 128
    let e = qp.post_send_tso(&wr, &long, 1000).unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL, "{e}");
    let mut udp = hdr.clone();
    udp[14 + 6] = 17;
    let e = qp.post_send_tso(&wr, &udp, 1000).unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL, "{e}");
    assert!(e.to_string().contains("not TCP"), "{e}");
    let e = qp.post_send_tso(&wr, &hdr, 0).unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL, "{e}");

    qp.post_send_tso(&wr, &hdr, 1000).unwrap();
    let mut wcs = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while wcs.len() < 4 && Instant::now() < deadline {
        wcs.extend(cq.wait(8, Duration::from_millis(20)));
    }
    std::thread::sleep(Duration::from_millis(100));
    wcs.extend(cq.wait(8, Duration::from_millis(10)));
    let sends: Vec<_> = wcs.iter().filter(|w| w.opcode != WcOpcode::Recv).collect();
    assert_eq!(sends.len(), 1, "one completion for the WR: {wcs:?}");
    assert_eq!(
        (
            sends[0].wr_id,
            sends[0].status,
            sends[0].opcode,
            sends[0].byte_len
        ),
        (42, WcStatus::Success, WcOpcode::Tso, 2500)
    );
    let mut recvs: Vec<_> = wcs.iter().filter(|w| w.opcode == WcOpcode::Recv).collect();
    recvs.sort_by_key(|w| w.wr_id);
    assert_eq!(recvs.len(), 3, "{wcs:?}");
    let mut joined = Vec::new();
    for (i, wc) in recvs.iter().enumerate() {
        assert_eq!(wc.status, WcStatus::Success);
        let piece = if i < 2 { 1000 } else { 500 };
        assert_eq!(wc.byte_len as usize, 86 + piece);
        let mut f = vec![0u8; wc.byte_len as usize];
        mr.read(32768 + wc.wr_id as usize * 2048, &mut f);
        assert_eq!(&f[..14], &hdr[..14], "Ethernet header replicated");
        let ip = &f[14..54];
        assert_eq!(&ip[..4], &hdr[14..18]);
        assert_eq!(
            u16::from_be_bytes([ip[4], ip[5]]) as usize,
            32 + piece,
            "payload length"
        );
        assert_eq!(&ip[6..], &hdr[20..54], "rest of the IPv6 header");
        let tcp = &f[54..];
        let seq = u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]);
        assert_eq!(
            seq,
            0xffff_ff00u32.wrapping_add(1000 * i as u32),
            "sequence number"
        );
        let last = i == 2;
        assert_eq!(tcp[13] & 0x09 != 0, last, "FIN and PSH on the last only");
        assert_eq!(tcp[13] & 0x80 != 0, i == 0, "CWR on the first only");
        assert_eq!(tcp[13] & 0x10, 0x10, "ACK on each");
        assert_eq!(&tcp[20..32], &hdr[74..86], "TCP options replicated");
        let len = (tcp.len() as u32).to_be_bytes();
        let pseudo: Vec<u8> = [&ip[8..40], &len[..], &[0, 0, 0, 6]].concat();
        assert_eq!(csum(&[&pseudo, tcp]), 0, "segment {i}: TCP checksum");
        joined.extend_from_slice(&tcp[32..]);
    }
    assert_eq!(joined, payload, "the payload, in order");

    // TSO on a UD QP: the verbs allow it, softverbs does not offer it.
    let ud = pd.create_ud_qp(&QpInit::new(&cq, &cq)).unwrap();
    ud.to_init(DatagramInit {
        pkey_index: 0,
        port_num: 1,
        qkey: 0x1111,
    })
    .unwrap();
    ud.to_rtr(UdRtr).unwrap();
    ud.to_rts(SqPsnRts { sq_psn: 0 }).unwrap();
    let e = ud.post_send_tso(&wr, &hdr, 1000).unwrap_err();
    assert_eq!(e.errno(), Errno::EOPNOTSUPP, "{e}");
    drop(_flow);
}
