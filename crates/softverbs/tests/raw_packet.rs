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
    assert_eq!(got.len(), 32, "every frame reached a WQ: {got:?}");
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
