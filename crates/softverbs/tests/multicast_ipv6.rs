//! UD multicast on IPv6 devices (spec/multicast.md): `lo` cannot carry IPv6
//! multicast, so the test makes a network namespace (root only) holding both
//! ends of a veth pair, puts two receiving devices on one end's addresses and
//! one on the other's, and a sender beside them. An `ff0e::/16` group: every
//! attached QP of each device gets one copy of each SEND (the one across the
//! veth pair and the looped-back ones alike), its GRH area the IPv6 header
//! (source the sender, destination the group); a detached device gets nothing.
//! The checks run in a child of this test binary inside the namespace.
use softverbs::*;
use std::net::IpAddr;
use std::time::Duration;
use testkit::{assert_child, child, run_child, Netns};

const T: Duration = Duration::from_secs(10);
const QUIET: Duration = Duration::from_millis(300);
const QKEY: u32 = 0x1234_5678;
/// (link, address): A and the sender on one end, B on the other.
const A: &str = "fd79:6::1";
const SENDER: &str = "fd79:6::3";
const B: &str = "fd79:6::2";

fn device(name: &str, ip: &str) -> Context {
    let cfg = DeviceConfig {
        name: name.into(),
        addrs: vec![ip.parse().unwrap()],
        active_mtu: Mtu::Mtu1024,
    };
    Device::with_config(cfg).open().unwrap()
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
        let cq = ctx.create_cq(64).unwrap();
        let mr = pd.reg_mr(1 << 16, AccessFlags(0xf)).unwrap();
        Side { ctx, pd, cq, mr }
    }

    fn ud(&self) -> QueuePair<Ud> {
        let mut init = QpInit::new(&self.cq, &self.cq);
        init.sq_sig_all = true;
        let qp = self.pd.create_ud_qp(&init).unwrap();
        qp.to_init(DatagramInit {
            pkey_index: 0,
            port_num: 1,
            qkey: QKEY,
        })
        .unwrap();
        qp.to_rtr(UdRtr).unwrap();
        qp.to_rts(SqPsnRts { sq_psn: 0 }).unwrap();
        qp
    }

    fn recv(&self, qp: &QueuePair<Ud>, slot: u64) {
        qp.post_recv(&RecvWr {
            wr_id: slot,
            sg_list: &[self.mr.sge(slot as usize * 1024, 296)],
        })
        .unwrap();
    }

    fn recvs(&self, n: usize, wait: Duration) -> Vec<WorkCompletion> {
        let mut got = self.cq.wait(n, wait);
        got.extend(self.cq.wait(8, Duration::from_millis(50)));
        got
    }
}

#[test]
fn ipv6_groups_reach_every_attached_qp() {
    match child().as_deref() {
        None => {}
        Some("ipv6_groups_reach_every_attached_qp") => return in_namespace(),
        Some(_) => return,
    }
    let Some(ns) = Netns::create("svm6", 1) else {
        eprintln!("skipping: network namespaces need root");
        return;
    };
    ns.addr(0, &format!("{A}/64"));
    ns.addr(0, &format!("{SENDER}/64"));
    ns.addr(1, &format!("{B}/64"));
    let o = run_child(
        &["ip", "netns", "exec", &ns.names[0]],
        "ipv6_groups_reach_every_attached_qp",
        &[],
    );
    assert_child(&o, "IPV6-MCAST-CHECKED");
}

fn in_namespace() {
    let pid = std::process::id();
    let group_ip: IpAddr = format!("ff0e::79:{:x}", pid & 0xffff).parse().unwrap();
    let group = Gid::from(group_ip);
    let a = Side::new(device("m6-a", A));
    let b = Side::new(device("m6-b", B));
    let s = Side::new(device("m6-s", SENDER));
    let (a1, a2, b1) = (a.ud(), a.ud(), b.ud());
    for (side, qp) in [(&a, &a1), (&a, &a2), (&b, &b1)] {
        qp.attach_mcast(&group).unwrap();
        side.recv(qp, u64::from(qp.qp_num() & 0x3f));
    }
    // An IPv4-mapped group is of the other family: refused in words.
    let v4 = Gid::from("239.1.2.3".parse::<IpAddr>().unwrap());
    let e = a1.attach_mcast(&v4).unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL, "{e}");

    let tx = s.ud();
    let ah = s.pd.create_ah(&AhAttr::roce(group, 0)).unwrap();
    let send = |byte: u8| {
        s.mr.write(60_000, &[byte; 100]);
        tx.post_send(&SendWr {
            wr_id: 99,
            opcode: WrOpcode::Send,
            flags: SendFlags::SIGNALED,
            sg_list: &[s.mr.sge(60_000, 100)],
            imm_data: ImmData::from_value(0),
            target: ah.ud(0xff_ffff, QKEY),
        })
        .unwrap();
        let wc = s.cq.wait(1, T);
        assert_eq!(wc.len(), 1, "send completion");
        assert_eq!(wc[0].status, WcStatus::Success);
    };
    send(0xa6);
    let got_a = a.recvs(2, T);
    let got_b = b.recvs(1, T);
    assert_eq!(got_a.len(), 2, "both QPs of a: {got_a:?}");
    assert_eq!(got_b.len(), 1, "b's QP, across the veth pair: {got_b:?}");
    let mut qps: Vec<u32> = got_a.iter().map(|w| w.qp_num).collect();
    qps.sort_unstable();
    let mut want = vec![a1.qp_num(), a2.qp_num()];
    want.sort_unstable();
    assert_eq!(qps, want, "one copy for each attached QP");
    let sender: IpAddr = SENDER.parse().unwrap();
    let IpAddr::V6(sender) = sender else {
        unreachable!()
    };
    let IpAddr::V6(g) = group_ip else {
        unreachable!()
    };
    for (side, wc) in got_a
        .iter()
        .map(|w| (&a, w))
        .chain(got_b.iter().map(|w| (&b, w)))
    {
        assert_eq!(wc.status, WcStatus::Success);
        assert_eq!((wc.byte_len, wc.src_qp), (140, tx.qp_num()));
        assert!(wc.wc_flags.contains(WcFlags::GRH));
        let mut buf = [0u8; 140];
        side.mr.read(wc.wr_id as usize * 1024, &mut buf);
        assert_eq!(buf[40..], [0xa6; 100], "payload after the GRH area");
        // IPv6 GRH area: the IPv6 header as received.
        assert_eq!(buf[0] >> 4, 6);
        assert_eq!(buf[8..24], sender.octets(), "source: the sender");
        assert_eq!(buf[24..40], g.octets(), "destination: the group");
    }

    // b detaches: the device leaves the group and gets nothing more; a does.
    b1.detach_mcast(&group).unwrap();
    b.recv(&b1, u64::from(b1.qp_num() & 0x3f));
    a.recv(&a1, u64::from(a1.qp_num() & 0x3f));
    send(0x6a);
    assert_eq!(a.recvs(1, T).len(), 1, "a1 (a2 has no receive posted)");
    assert!(
        b.recvs(1, QUIET).is_empty(),
        "a detached device receives nothing"
    );
    let _ = &a.ctx;
    println!("IPV6-MCAST-CHECKED");
}
