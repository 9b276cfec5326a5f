//! UD multicast through the public API (spec/multicast.md): QPs of two
//! devices (two loopback addresses, each its own socket and group socket)
//! attached to one group each receive one copy of every SEND to it; a
//! detached QP receives nothing more; a wrong Q_Key is dropped; destroy while
//! attached is EBUSY; bad input is refused in words.
use softverbs::*;
use std::time::Duration;

const T: Duration = Duration::from_secs(10);
const QUIET: Duration = Duration::from_millis(300);
const ALL: AccessFlags = AccessFlags(0xf);
const QKEY: u32 = 0x1234_5678;

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
        let mr = pd.reg_mr(1 << 16, ALL).unwrap();
        Side { ctx, pd, cq, mr }
    }

    fn ud(&self, qkey: u32) -> QueuePair<Ud> {
        let mut init = QpInit::new(&self.cq, &self.cq);
        init.sq_sig_all = true;
        let qp = self.pd.create_ud_qp(&init).unwrap();
        qp.to_init(DatagramInit {
            pkey_index: 0,
            port_num: 1,
            qkey,
        })
        .unwrap();
        qp.to_rtr(UdRtr).unwrap();
        qp.to_rts(SqPsnRts { sq_psn: 0 }).unwrap();
        qp
    }

    /// Posts a receive of 40 + 256 bytes at `slot` (a distinct area per QP).
    fn recv(&self, qp: &QueuePair<Ud>, slot: u64) {
        qp.post_recv(&RecvWr {
            wr_id: slot,
            sg_list: &[self.mr.sge(slot as usize * 1024, 296)],
        })
        .unwrap();
    }
}

/// A group of this test process alone (other runs of the suite on the host
/// may use the same loopback addresses at the same time).
fn group(n: u8) -> Gid {
    let pid = std::process::id();
    let ip = std::net::Ipv4Addr::new(239, n, (pid >> 8) as u8, pid as u8);
    Gid::from(std::net::IpAddr::V4(ip))
}

fn send(s: &Side, qp: &QueuePair<Ud>, ah: &AddressHandle, qkey: u32, byte: u8) {
    s.mr.write(60_000, &[byte; 100]);
    qp.post_send(&SendWr {
        wr_id: 99,
        opcode: WrOpcode::Send,
        flags: SendFlags::SIGNALED,
        sg_list: &[s.mr.sge(60_000, 100)],
        imm_data: ImmData::from_value(0),
        target: ah.ud(0xff_ffff, qkey),
    })
    .unwrap();
    let wc = s.cq.wait(1, T);
    assert_eq!(wc.len(), 1, "send completion");
    assert_eq!((wc[0].wr_id, wc[0].status), (99, WcStatus::Success));
}

/// Every completion on `s.cq` within `wait` (stops early once `n` came).
fn recvs(s: &Side, n: usize, wait: Duration) -> Vec<WorkCompletion> {
    let mut got = s.cq.wait(n, wait);
    got.extend(s.cq.wait(8, Duration::from_millis(50)));
    got
}

#[test]
fn every_attached_qp_gets_one_copy() {
    let group = group(10);
    let a = Side::new(device("mc-a", "127.31.0.1"));
    let b = Side::new(device("mc-b", "127.31.0.2"));
    let sender = Side::new(device("mc-s", "127.31.0.3"));
    let (a1, a2, b1) = (a.ud(QKEY), a.ud(QKEY), b.ud(QKEY));
    let wrong = b.ud(QKEY + 1);
    for (side, qp) in [(&a, &a1), (&a, &a2), (&b, &b1), (&b, &wrong)] {
        qp.attach_mcast(&group).unwrap();
        qp.attach_mcast(&group).unwrap(); // twice: a no-op, as on Linux
        side.recv(qp, u64::from(qp.qp_num() & 0x3f));
    }
    let attr = a.ctx.query_device();
    assert_eq!(attr.max_mcast_grp, 512);
    assert_eq!(attr.max_mcast_qp_attach, 56);
    assert_eq!(attr.max_total_mcast_qp_attach, 512 * 56);

    let tx = sender.ud(QKEY);
    let ah = sender.pd.create_ah(&AhAttr::roce(group, 0)).unwrap();
    send(&sender, &tx, &ah, QKEY, 0xa5);
    let got_a = recvs(&a, 2, T);
    let got_b = recvs(&b, 1, T);
    assert_eq!(got_a.len(), 2, "both QPs of device a: {got_a:?}");
    assert_eq!(
        got_b.len(),
        1,
        "b1 only (the other QP's Q_Key differs): {got_b:?}"
    );
    let mut qps: Vec<u32> = got_a.iter().map(|w| w.qp_num).collect();
    qps.sort_unstable();
    let mut want = vec![a1.qp_num(), a2.qp_num()];
    want.sort_unstable();
    assert_eq!(qps, want, "one copy for each attached QP");
    assert_eq!(got_b[0].qp_num, b1.qp_num());
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
        assert_eq!(buf[40..], [0xa5; 100], "payload after the GRH area");
        // IPv4 GRH area: 20 zero bytes, then the IPv4 header (rc-reliability.md §7):
        // source 127.31.0.3, destination the group.
        assert_eq!(buf[20] >> 4, 4);
        assert_eq!(buf[32..36], [127, 31, 0, 3]);
        assert_eq!(buf[36..40], group.0[12..]);
    }

    // Destroy while attached: EBUSY, the QP comes back; after detach it works.
    let err = a2.destroy().unwrap_err();
    assert_eq!(err.error.errno(), Errno::EBUSY, "{}", err.error);
    assert!(err.error.to_string().contains("attached"), "{}", err.error);
    let a2 = err.object;
    a2.detach_mcast(&group).unwrap();
    let e = a2.detach_mcast(&group).unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL, "{e}");
    assert!(e.to_string().contains("not attached"), "{e}");
    a.recv(&a1, u64::from(a1.qp_num() & 0x3f));
    b.recv(&b1, u64::from(b1.qp_num() & 0x3f));
    send(&sender, &tx, &ah, QKEY, 0x5a);
    let got_a = recvs(&a, 1, T);
    assert_eq!(got_a.len(), 1, "only a1 now: {got_a:?}");
    assert_eq!(got_a[0].qp_num, a1.qp_num());
    assert_eq!(recvs(&b, 1, T).len(), 1);
    a2.destroy().unwrap();

    // All of b's QPs detach: b leaves the group and receives nothing more.
    b1.detach_mcast(&group).unwrap();
    wrong.detach_mcast(&group).unwrap();
    a.recv(&a1, u64::from(a1.qp_num() & 0x3f));
    send(&sender, &tx, &ah, QKEY, 0x77);
    assert_eq!(recvs(&a, 1, T).len(), 1);
    assert!(
        recvs(&b, 1, QUIET).is_empty(),
        "a detached QP receives nothing"
    );
}

#[test]
fn bad_input_is_refused_in_words() {
    let s = Side::new(device("mc-err", "127.31.0.9"));
    let ud = s.ud(QKEY);
    let unicast = Gid::from("127.0.0.1".parse::<std::net::IpAddr>().unwrap());
    let e = ud.attach_mcast(&unicast).unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL);
    assert!(e.to_string().contains("not a multicast GID"), "{e}");
    let v6 = Gid::from("ff0e::1".parse::<std::net::IpAddr>().unwrap());
    let e = ud.attach_mcast(&v6).unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL);
    assert!(e.to_string().contains("family"), "{e}");
    let group = group(12);
    let e = ud.detach_mcast(&group).unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL, "{e}");
    let mut init = QpInit::new(&s.cq, &s.cq);
    init.sq_sig_all = true;
    let rc = s.pd.create_rc_qp(&init).unwrap();
    let e = rc.attach_mcast(&group).unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL);
    assert!(e.to_string().contains("only UD QPs"), "{e}");
    // Dropping an attached QP's last handle detaches and destroys it.
    ud.attach_mcast(&group).unwrap();
    drop(ud);
    let again = s.ud(QKEY);
    again.attach_mcast(&group).unwrap();
    again.detach_mcast(&group).unwrap();
    again.destroy().unwrap();
}

#[test]
fn the_sending_qp_gets_its_own_copy_when_attached() {
    let group = group(11);
    let s = Side::new(device("mc-self", "127.31.0.7"));
    let qp = s.ud(QKEY);
    qp.attach_mcast(&group).unwrap();
    s.recv(&qp, 1);
    let ah = s.pd.create_ah(&AhAttr::roce(group, 0)).unwrap();
    s.mr.write(60_000, &[3; 100]);
    qp.post_send(&SendWr {
        wr_id: 99,
        opcode: WrOpcode::Send,
        flags: SendFlags::SIGNALED,
        sg_list: &[s.mr.sge(60_000, 100)],
        imm_data: ImmData::from_value(0),
        target: ah.ud(0xff_ffff, QKEY),
    })
    .unwrap();
    let mut got = recvs(&s, 2, T);
    got.sort_by_key(|w| w.wr_id);
    assert_eq!(got.len(), 2, "send completion and own copy: {got:?}");
    assert_eq!((got[0].wr_id, got[0].opcode), (1, WcOpcode::Recv));
    assert_eq!((got[0].src_qp, got[0].byte_len), (qp.qp_num(), 140));
    assert_eq!(got[1].wr_id, 99);
    qp.detach_mcast(&group).unwrap();
}
