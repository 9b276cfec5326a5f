//! The public API end to end: typed transitions, general modify, query, caps,
//! destroy/EBUSY handing objects back, contexts sharing a device, cleanup.

use softverbs::*;

fn ctx() -> Context {
    devices().unwrap().remove(0).open().unwrap()
}

const ACCESS: AccessFlags = AccessFlags(0xf);

fn connect_rc(ctx: &Context, a: &QueuePair<Rc>, b: &QueuePair<Rc>) {
    let gid = ctx.query_gid(1, 0).unwrap();
    for (qp, peer) in [(a, b), (b, a)] {
        qp.to_init(ConnectedInit {
            pkey_index: 0,
            port_num: 1,
            access: ACCESS,
        })
        .unwrap();
        qp.to_rtr(RcRtr {
            ah: AhAttr::roce(gid, 0),
            path_mtu: Mtu::Mtu1024,
            dest_qp_num: peer.qp_num(),
            rq_psn: 7,
            max_dest_rd_atomic: 4,
            min_rnr_timer: 12,
        })
        .unwrap();
        qp.to_rts(RcRts {
            sq_psn: 7,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 4,
        })
        .unwrap();
    }
}

#[test]
fn seed_example_query_state() {
    // The ibv_query_qp(3) use: ask a QP for its state.
    let ctx = ctx();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8).unwrap();
    let qp = pd.create_rc_qp(&QpInit::new(&cq, &cq)).unwrap();
    let info = qp.query().unwrap();
    assert_eq!(info.state(), QpState::Reset);
    assert_eq!(info.attr.qp_state, QpState::Reset);
    qp.to_init(ConnectedInit {
        pkey_index: 0,
        port_num: 1,
        access: ACCESS,
    })
    .unwrap();
    assert_eq!(qp.state().unwrap(), QpState::Init);
}

#[test]
fn rc_pair_reaches_rts_and_query_reports_what_modify_set() {
    let ctx = ctx();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8).unwrap();
    let a = pd.create_rc_qp(&QpInit::new(&cq, &cq)).unwrap();
    let b = pd.create_rc_qp(&QpInit::new(&cq, &cq)).unwrap();
    connect_rc(&ctx, &a, &b);
    let q = a.query().unwrap();
    assert_eq!(q.state(), QpState::Rts);
    assert_eq!(q.attr.dest_qp_num, b.qp_num());
    assert_eq!(
        (q.attr.timeout, q.attr.retry_cnt, q.attr.rnr_retry),
        (14, 7, 7)
    );
    assert_eq!(
        (
            q.attr.max_rd_atomic,
            q.attr.max_dest_rd_atomic,
            q.attr.min_rnr_timer
        ),
        (4, 4, 12)
    );
    assert_eq!(q.attr.path_mtu, Mtu::Mtu1024);
    assert_eq!(q.attr.ah_attr.grh.dgid, ctx.query_gid(1, 0).unwrap());
    assert_eq!(q.attr.qkey, 0, "no Q_Key on RC");
    assert!(q
        .valid
        .contains(AttrMask::SQ_PSN | AttrMask::AV | AttrMask::TIMEOUT));
    assert!(!q.valid.contains(AttrMask::QKEY));
}

#[test]
fn uc_and_ud_typed_paths() {
    let ctx = ctx();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8).unwrap();
    let gid = ctx.query_gid(1, 0).unwrap();
    let uc = pd.create_uc_qp(&QpInit::new(&cq, &cq)).unwrap();
    uc.to_init(ConnectedInit {
        pkey_index: 0,
        port_num: 1,
        access: AccessFlags::REMOTE_WRITE,
    })
    .unwrap();
    let rtr = UcRtr {
        ah: AhAttr::roce(gid, 0),
        path_mtu: Mtu::Mtu4096,
        dest_qp_num: 99,
        rq_psn: 1,
    };
    uc.to_rtr(rtr).unwrap();
    uc.to_rts(SqPsnRts { sq_psn: 2 }).unwrap();
    assert_eq!(uc.state().unwrap(), QpState::Rts);

    let ud = pd.create_ud_qp(&QpInit::new(&cq, &cq)).unwrap();
    ud.to_init(DatagramInit {
        pkey_index: 0,
        port_num: 1,
        qkey: 0x1111_1111,
    })
    .unwrap();
    ud.to_rtr(UdRtr).unwrap();
    ud.to_rts(SqPsnRts { sq_psn: 0xff_ffff }).unwrap();
    let q = ud.query().unwrap();
    assert_eq!(
        (q.state(), q.attr.qkey, q.attr.sq_psn),
        (QpState::Rts, 0x1111_1111, 0xff_ffff)
    );
    // Optional attributes through Modify's setters; wrong ones are refused at run time.
    ud.apply(Modify::to(QpState::Rts).qkey(0x2222)).unwrap();
    assert_eq!(ud.query().unwrap().attr.qkey, 0x2222);
    let e = ud
        .apply(Modify::to(QpState::Rts).access(ACCESS))
        .unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL);
    assert!(
        e.to_string().contains("does not accept ACCESS_FLAGS"),
        "{e}"
    );
}

#[test]
fn sqd_drain_and_resume_and_error_and_reset() {
    let ctx = ctx();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8).unwrap();
    let a = pd.create_rc_qp(&QpInit::new(&cq, &cq)).unwrap();
    let b = pd.create_rc_qp(&QpInit::new(&cq, &cq)).unwrap();
    connect_rc(&ctx, &a, &b);
    a.apply(Drain { notify: true }).unwrap();
    let q = a.query().unwrap();
    assert_eq!(
        (q.state(), q.attr.sq_draining),
        (QpState::Sqd, 0),
        "nothing outstanding: drained at once"
    );
    a.apply(Resume).unwrap();
    a.apply(ToError).unwrap();
    assert_eq!(a.state().unwrap(), QpState::Err);
    let e = a.apply(Resume).unwrap_err();
    assert!(e.to_string().contains("ERR→RTS is not a legal"), "{e}");
    a.apply(ToReset).unwrap();
    let q = a.query().unwrap();
    assert_eq!(q.state(), QpState::Reset);
    assert_eq!(q.attr.dest_qp_num, 0, "attributes are forgotten in RESET");
    assert_eq!(q.valid, AttrMask::STATE | AttrMask::CAP);
}

#[test]
fn refused_modify_explains_and_changes_nothing() {
    let ctx = ctx();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8).unwrap();
    let qp = pd.create_rc_qp(&QpInit::new(&cq, &cq)).unwrap();
    qp.to_init(ConnectedInit {
        pkey_index: 0,
        port_num: 1,
        access: ACCESS,
    })
    .unwrap();
    let before = qp.query().unwrap();
    let mut ah = AhAttr::roce(ctx.query_gid(1, 0).unwrap(), 0);
    ah.is_global = 0;
    let rtr = RcRtr {
        ah,
        path_mtu: Mtu::Mtu1024,
        dest_qp_num: 5,
        rq_psn: 0,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 1,
    };
    let e = qp.to_rtr(rtr).unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL);
    assert!(
        e.to_string()
            .starts_with("RoCE needs a GRH: ah_attr.is_global must be 1"),
        "{e}"
    );
    assert_eq!(qp.query().unwrap(), before);
    // RESET→ERR is refused on Linux, and we say so.
    let fresh = pd.create_rc_qp(&QpInit::new(&cq, &cq)).unwrap();
    let e = fresh.apply(ToError).unwrap_err();
    assert!(
        e.to_string()
            .contains("RESET→ERR is not a legal QP state transition"),
        "{e}"
    );
}

#[test]
fn create_rules_and_caps() {
    let ctx = ctx();
    let dev = ctx.query_device();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8).unwrap();
    let mut init = QpInit::new(&cq, &cq);
    init.cap = QpCap {
        max_send_wr: 100,
        max_recv_wr: 200,
        max_send_sge: 3,
        max_recv_sge: 4,
        max_inline_data: 64,
    };
    init.sq_sig_all = true;
    let qp = pd.create_rc_qp(&init).unwrap();
    let c = qp.cap();
    assert!(c.max_send_wr >= 100 && c.max_recv_wr >= 200 && c.max_send_sge >= 3);
    assert!(c.max_recv_sge >= 4 && c.max_inline_data >= 64);
    let q = qp.query().unwrap();
    assert_eq!((q.cap, q.sq_sig_all, q.qp_type), (c, true, QpType::Rc));
    assert!(qp.qp_num() > 1 && qp.qp_num() <= 0xff_ffff);

    init.cap.max_send_wr = dev.max_qp_wr + 1;
    let e = pd.create_rc_qp(&init).unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL);
    assert!(e.to_string().contains("cap.max_send_wr"), "{e}");

    // With an SRQ the receive caps are ignored (and read back as 0).
    let srq = pd
        .create_srq(SrqAttr {
            max_wr: 32,
            max_sge: 2,
            srq_limit: 0,
        })
        .unwrap();
    let mut init = QpInit::new(&cq, &cq);
    init.srq = Some(&srq);
    init.cap.max_recv_wr = u32::MAX;
    let qp = pd.create_rc_qp(&init).unwrap();
    assert_eq!((qp.cap().max_recv_wr, qp.cap().max_recv_sge), (0, 0));
    assert!(qp.query().unwrap().has_srq);
    assert_eq!(
        pd.create_uc_qp(&init).unwrap_err().errno(),
        Errno::EINVAL,
        "UC cannot use an SRQ"
    );

    let e = pd.create_qp(&QpInit::new(&cq, &cq), 9).unwrap_err();
    assert_eq!(e.errno(), Errno::EOPNOTSUPP);
    assert!(e.to_string().contains("XRC_SEND"), "{e}");
    // RAW_PACKET needs CAP_NET_RAW (tests/raw_packet.rs): made, or EPERM.
    match pd.create_qp(&QpInit::new(&cq, &cq), 8) {
        Ok(raw) => assert!(raw.typed::<Rc>().is_err()),
        Err(e) => assert_eq!(e.errno(), Errno::EPERM, "{e}"),
    }
    let any = pd.create_qp(&QpInit::new(&cq, &cq), 4).unwrap();
    assert!(any.typed::<Rc>().is_err());
}

#[test]
fn destroy_in_use_is_busy_and_hands_the_object_back() {
    let ctx = ctx();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8).unwrap();
    let srq = pd
        .create_srq(SrqAttr {
            max_wr: 8,
            max_sge: 1,
            srq_limit: 0,
        })
        .unwrap();
    let mut init = QpInit::new(&cq, &cq);
    init.srq = Some(&srq);
    let qp = pd.create_rc_qp(&init).unwrap();

    let e = cq.destroy().unwrap_err();
    assert_eq!(e.error.errno(), Errno::EBUSY);
    assert!(
        e.error.to_string().contains("still used by 1 queue pair"),
        "{}",
        e.error
    );
    let cq = e.object;
    let srq = srq.destroy().unwrap_err().object;
    let e = pd.destroy().unwrap_err();
    assert_eq!(e.error.errno(), Errno::EBUSY);
    let pd = e.object;
    // The objects handed back still work.
    assert_eq!(cq.cqe(), 8);
    assert_eq!(srq.query().unwrap().max_wr, 8);
    let _mr = pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();

    qp.destroy().unwrap();
    srq.destroy().unwrap();
    cq.destroy().unwrap();
    let e = pd.destroy().unwrap_err();
    assert!(e.error.to_string().contains("memory region"), "{}", e.error);
}

#[test]
fn memory_regions_keys_and_access_rules() {
    let ctx = ctx();
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd.reg_mr(4096, ACCESS).unwrap();
    assert_ne!(mr.lkey(), mr.rkey());
    assert_eq!(mr.len(), 4096);
    assert!(mr.write(4000, &[1, 2, 3]));
    let mut out = [0; 3];
    assert!(mr.read(4000, &mut out));
    assert_eq!(out, [1, 2, 3]);
    assert!(!mr.write(4095, &[1, 2]));
    let e = pd.reg_mr(64, AccessFlags::REMOTE_WRITE).unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL);
    assert!(e.to_string().contains("require LOCAL_WRITE"), "{e}");
    assert_eq!(
        pd.reg_mr(64, AccessFlags::REMOTE_ATOMIC)
            .unwrap_err()
            .errno(),
        Errno::EINVAL
    );
    let other = pd.reg_mr(64, AccessFlags::REMOTE_READ).unwrap();
    assert!(other.lkey() != mr.lkey() && other.rkey() != mr.rkey());
}

#[test]
fn device_queries() {
    let ctx = ctx();
    let port = ctx.query_port(1).unwrap();
    assert_eq!(port.state, PortState::Active);
    assert_eq!(port.max_mtu, Mtu::Mtu4096);
    assert_eq!(port.link_layer, 2);
    assert_eq!(ctx.query_port(2).unwrap_err().errno(), Errno::EINVAL);
    let gid = ctx.query_gid(1, 0).unwrap();
    assert_eq!(gid.0[..12], [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]);
    assert!(gid.ip().is_loopback());
    assert_eq!(ctx.query_pkey(1, 0).unwrap(), 0xffff);
    let d = ctx.query_device();
    assert!(d.max_qp_wr >= 16384 && d.max_sge >= 32 && d.max_qp_rd_atom >= 128);
    let e = ctx.create_cq(0).unwrap_err();
    assert!(e.to_string().contains("cqe = 0 is out of range"), "{e}");
    assert!(ctx.create_cq(d.max_cqe as i32).is_ok());
    assert_eq!(
        ctx.create_cq(d.max_cqe as i32 + 1).unwrap_err().errno(),
        Errno::EINVAL
    );
}

#[test]
fn contexts_share_the_device_and_clean_up_when_closed() {
    let dev = Device::with_config(proto_config("sharing-test"));
    let c1 = dev.open().unwrap();
    let c2 = dev.open().unwrap();
    let baseline = c1.device_object_counts();
    {
        let pd = c2.alloc_pd().unwrap();
        let cq = c2.create_cq(4).unwrap();
        let _qp = pd.create_rc_qp(&QpInit::new(&cq, &cq)).unwrap();
        let _mr = pd.reg_mr(128, AccessFlags::LOCAL_WRITE).unwrap();
        let n = c1.device_object_counts();
        assert_eq!(
            &n[1..],
            &[baseline[1] + 1, baseline[2] + 1, baseline[3] + 1, 0, 0, 1]
        );
    }
    assert_eq!(c1.device_object_counts(), baseline, "everything released");
    drop(c2);
    assert_eq!(c1.device_object_counts()[0], 1);
}

fn proto_config(name: &str) -> DeviceConfig {
    DeviceConfig {
        name: name.into(),
        addrs: vec!["127.9.9.9".parse().unwrap()],
        active_mtu: Mtu::Mtu1024,
    }
}

#[test]
fn refusals_are_logged_with_their_reason() {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);
    impl Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let sink = Sink::default();
    let writer = sink.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    // The process-wide default, not a scoped one: a scoped subscriber misses
    // events whose callsite another test's thread (with no subscriber) has
    // already cached as uninteresting. Other tests' log lines land in the sink
    // too, which does not matter here.
    tracing::subscriber::set_global_default(subscriber)
        .expect("only this test installs a subscriber");
    {
        let ctx = ctx();
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(8).unwrap();
        let qp = pd.create_rc_qp(&QpInit::new(&cq, &cq)).unwrap();
        let _ = qp.modify(
            &QpAttr {
                qp_state: QpState::Rts,
                ..QpAttr::default()
            },
            AttrMask::STATE,
        );
    }
    let log = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
    assert!(log.contains("WARN"), "{log}");
    assert!(
        log.contains("modify_qp refused (EINVAL): RESET→RTS is not a legal QP state transition"),
        "{log}"
    );
}
