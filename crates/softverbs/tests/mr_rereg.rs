//! `ibv_rereg_mr` through the Rust API (`MemoryRegion::rereg`): a new access,
//! PD or buffer is what every later access is checked against — a peer's
//! RDMA WRITE with the unchanged rkey reaches the new buffer only, as the new
//! flags and PD allow — and every refusal leaves the region as it was. Also
//! the CQ rules that the pyverbs suite exercises with it: a CQ cannot shrink
//! below the completions it holds or is owed, and a QP moved to RESET takes
//! its completions out of its CQs.

mod pair;

use pair::*;
use softverbs::*;

const LEN: usize = 4096;

fn write_to(a: &Side, qa: &QueuePair<Rc>, target: RdmaTarget, id: u64) -> WcStatus {
    let sg = [a.mr.sge(0, 64)];
    qa.post_send(&send_wr(
        id,
        WrOpcode::RdmaWrite,
        &sg,
        WrTarget::Rdma(target),
        SIG,
    ))
    .unwrap();
    wait(&a.scq, 1)[0].status
}

#[test]
fn rereg_access_is_enforced_and_keys_stay() {
    let (a, mut b) = sides_on("rereg-acc", 20, 0, LEN);
    assert!(a.mr.write(0, &pattern(64, 1)));
    let (lkey, rkey, addr) = (b.mr.lkey(), b.mr.rkey(), b.mr.addr());

    // Down to local write only: the peer's write is refused.
    b.mr.rereg(Rereg {
        access: Some(AccessFlags::LOCAL_WRITE),
        ..Rereg::default()
    })
    .unwrap();
    assert_eq!(b.mr.access(), AccessFlags::LOCAL_WRITE);
    assert_eq!((b.mr.lkey(), b.mr.rkey(), b.mr.addr()), (lkey, rkey, addr));
    let (qa, _qb) = rc_pair(&a, &b);
    assert_eq!(write_to(&a, &qa, b.mr.remote(0), 1), WcStatus::RemAccessErr);
    assert_eq!(read(&b.mr, 0, 64), vec![0; 64], "nothing was written");

    // Back to remote write: the same rkey works again.
    b.mr.rereg(Rereg {
        access: Some(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE),
        ..Rereg::default()
    })
    .unwrap();
    let (qa, _qb) = rc_pair(&a, &b);
    assert_eq!(write_to(&a, &qa, b.mr.remote(0), 2), WcStatus::Success);
    assert_eq!(read(&b.mr, 0, 64), pattern(64, 1));
}

#[test]
fn rereg_pd_moves_the_region_and_its_pd_use() {
    let (a, mut b) = sides_on("rereg-pd", 20, 1, LEN);
    assert!(a.mr.write(0, &pattern(64, 2)));
    let pd2 = b.ctx.alloc_pd().unwrap();
    b.mr.rereg(Rereg {
        pd: Some(&pd2),
        ..Rereg::default()
    })
    .unwrap();
    // The QP is in b.pd, the region now in pd2: the rkey is refused.
    let (qa, _qb) = rc_pair(&a, &b);
    assert_eq!(write_to(&a, &qa, b.mr.remote(0), 1), WcStatus::RemAccessErr);
    // pd2 is in use by the region; b.pd is not (its QP is gone with the pair).
    let pd2 = pd2.destroy().unwrap_err();
    assert_eq!(pd2.error.errno(), Errno::EBUSY, "{}", pd2.error);
    let pd2 = pd2.object;

    b.mr.rereg(Rereg {
        pd: Some(&b.pd),
        ..Rereg::default()
    })
    .unwrap();
    let (qa, _qb) = rc_pair(&a, &b);
    assert_eq!(write_to(&a, &qa, b.mr.remote(0), 2), WcStatus::Success);
    assert_eq!(read(&b.mr, 0, 64), pattern(64, 2));
    pd2.destroy().expect("pd2 is free once the region left it");
}

#[test]
fn rereg_translation_moves_remote_access_to_the_new_buffer() {
    let (a, mut b) = sides_on("rereg-tr", 20, 2, LEN);
    assert!(a.mr.write(0, &pattern(64, 3)));
    let (old_addr, rkey) = (b.mr.addr(), b.mr.rkey());
    b.mr.rereg(Rereg {
        len: Some(2 * LEN),
        ..Rereg::default()
    })
    .unwrap();
    assert_ne!(b.mr.addr(), old_addr);
    assert_eq!((b.mr.len(), b.mr.rkey()), (2 * LEN, rkey));
    let (qa, _qb) = rc_pair(&a, &b);
    // The old range is out of reach through the same rkey.
    let old = RdmaTarget {
        remote_addr: old_addr,
        rkey,
    };
    assert_eq!(write_to(&a, &qa, old, 1), WcStatus::RemAccessErr);
    // The new one, to its last byte, is in reach.
    let (qa, _qb) = rc_pair(&a, &b);
    assert_eq!(
        write_to(&a, &qa, b.mr.remote(2 * LEN - 64), 2),
        WcStatus::Success
    );
    assert_eq!(read(&b.mr, 2 * LEN - 64, 64), pattern(64, 3));
}

#[test]
fn refused_reregistrations_say_why_and_change_nothing() {
    let (a, mut b) = sides_on("rereg-bad", 20, 3, LEN);
    let before = (b.mr.addr(), b.mr.len(), b.mr.access(), b.mr.rkey());
    let pd_other_dev = a.ctx.alloc_pd().unwrap();
    let cases: Vec<(Rereg<'_>, Errno, &str)> = vec![
        (Rereg::default(), Errno::EINVAL, "name no change"),
        (
            Rereg {
                access: Some(AccessFlags::REMOTE_WRITE),
                ..Rereg::default()
            },
            Errno::EINVAL,
            "require LOCAL_WRITE",
        ),
        (
            Rereg {
                access: Some(AccessFlags::ZERO_BASED | AccessFlags::LOCAL_WRITE),
                ..Rereg::default()
            },
            Errno::EOPNOTSUPP,
            "zero-based",
        ),
        (
            Rereg {
                len: Some(0),
                ..Rereg::default()
            },
            Errno::EINVAL,
            "non-zero length",
        ),
        (
            Rereg {
                pd: Some(&pd_other_dev),
                ..Rereg::default()
            },
            Errno::EINVAL,
            "another device",
        ),
    ];
    for (r, errno, words) in cases {
        let e = b.mr.rereg(r).unwrap_err();
        assert_eq!(e.errno(), errno, "{r:?}: {e}");
        assert!(e.to_string().contains(words), "{r:?}: {e}");
        assert_eq!(
            (b.mr.addr(), b.mr.len(), b.mr.access(), b.mr.rkey()),
            before
        );
    }
    // Still fully usable after the refusals.
    let (qa, _qb) = rc_pair(&a, &b);
    assert_eq!(write_to(&a, &qa, b.mr.remote(0), 1), WcStatus::Success);
}

#[test]
fn rereg_to_a_pd_of_another_context_is_refused() {
    // Two contexts on one device share its engine; a PD of the other one is
    // refused, as the kernel refuses a PD handle of another file.
    let dev = Device::with_config(DeviceConfig {
        name: "rereg-ctx".into(),
        addrs: vec![private_addr("127.7.20.9")],
        active_mtu: Mtu::Mtu1024,
    });
    let (ctx, ctx2) = (dev.open().unwrap(), dev.open().unwrap());
    let pd = ctx.alloc_pd().unwrap();
    let mut mr = pd.reg_mr(LEN, ALL).unwrap();
    let foreign = ctx2.alloc_pd().unwrap();
    let e = mr
        .rereg(Rereg {
            pd: Some(&foreign),
            ..Rereg::default()
        })
        .unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL);
    assert!(e.to_string().contains("another context"), "{e}");
    // A PD of the same context is fine.
    let mine = ctx.alloc_pd().unwrap();
    mr.rereg(Rereg {
        pd: Some(&mine),
        ..Rereg::default()
    })
    .unwrap();
    pd.destroy().expect("the region left it");
}

#[test]
fn resize_cq_below_queued_or_owed_completions_is_einval() {
    let (a, b) = sides_on("resize", 20, 5, LEN);
    let cq = a.ctx.create_cq(8).unwrap();
    let mut init = a.init();
    init.send_cq = &cq;
    let (qa, _qb) = rc_pair_with(&a, &init, &b, &b.init(), &RcOpts::default());
    // b posts no receive and RNR retry is infinite (7): five SENDs stay owed.
    let sg = [a.mr.sge(0, 8)];
    for id in 0..5 {
        qa.post_send(&send_wr(id, WrOpcode::Send, &sg, WrTarget::None, SIG))
            .unwrap();
    }
    let e = softverbs::raw::resize_cq(&cq, 4).unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL);
    assert!(
        e.to_string()
            .contains("5 more that signaled send WRs in flight"),
        "{e}"
    );
    assert_eq!(
        softverbs::raw::resize_cq(&cq, 5).unwrap(),
        5,
        "exactly what is owed fits"
    );
    assert_eq!(softverbs::raw::resize_cq(&cq, 16).unwrap(), 16);
}

#[test]
fn reset_takes_a_qps_completions_out_of_its_cqs() {
    let (a, b) = sides_on("reset-purge", 20, 6, LEN);
    // Two QPs on a's CQs, each with receives, both moved to ERR: five flush
    // completions wait in a.rcq.
    let (qa, _qb) = rc_pair(&a, &b);
    let (qc, _qd) = rc_pair(&a, &b);
    for (qp, n) in [(&qa, 3u64), (&qc, 2)] {
        for id in 0..n {
            let sg = [a.mr.sge(64 * id as usize, 64)];
            qp.post_recv(&recv_wr(id, &sg)).unwrap();
        }
        qp.apply(Modify::to(QpState::Err)).unwrap();
    }
    // RESET takes qa's three out; qc's two stay.
    qa.apply(Modify::to(QpState::Reset)).unwrap();
    let wc = wait(&a.rcq, 2);
    assert!(
        wc.iter()
            .all(|w| w.qp_num == qc.qp_num() && w.status == WcStatus::WrFlushErr),
        "{wc:?}"
    );
    empty(&a.rcq);
    empty(&a.scq);
}

/// `ibv_destroy_qp` takes the QP's completions out of its CQs, successful
/// and flushed alike, as rdma-core's mlx4/mlx5 providers do at destroy
/// (spec/qp-state-machine.md §8): a program that frees what a destroyed QP's
/// `wr_id`s name (libfabric's ofi_rxm) never polls them afterwards.
#[test]
fn destroy_takes_a_qps_completions_out_of_its_cqs() {
    let (a, b) = sides_on("destroy-purge", 20, 7, LEN);
    let (qa, qb) = rc_pair(&a, &b);
    let (qc, _qd) = rc_pair(&a, &b);
    // qa: three receives; b's SEND fills the first (acknowledged, so its
    // completion waits in a.rcq), ERR flushes the other two.
    for id in 0..3u64 {
        let sg = [a.mr.sge(64 * id as usize, 64)];
        qa.post_recv(&recv_wr(id, &sg)).unwrap();
    }
    let sg = [b.mr.sge(0, 64)];
    qb.post_send(&send_wr(9, WrOpcode::Send, &sg, WrTarget::None, SIG))
        .unwrap();
    assert_eq!(wait(&b.scq, 1)[0].status, WcStatus::Success);
    qa.apply(Modify::to(QpState::Err)).unwrap();
    // qc: two receives, flushed.
    for id in 10..12u64 {
        let sg = [a.mr.sge(64 * id as usize, 64)];
        qc.post_recv(&recv_wr(id, &sg)).unwrap();
    }
    qc.apply(Modify::to(QpState::Err)).unwrap();
    // Destroying qa takes its three out; qc's two stay.
    assert!(qa.destroy().is_ok());
    let wc = wait(&a.rcq, 2);
    assert!(
        wc.iter()
            .all(|w| w.qp_num == qc.qp_num() && w.status == WcStatus::WrFlushErr),
        "{wc:?}"
    );
    empty(&a.rcq);
    empty(&a.scq);
}
