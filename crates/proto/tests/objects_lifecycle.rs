//! The other verbs objects around a QP: use counts (`EBUSY`), closing a context,
//! SRQ create/modify/query, CQ sizes, MR access flags and keys, AH checks.

mod common;

use common::{good_av, Fixture};
use proto::engine::QpCreate;
use proto::error::{InvalidArg, ModifyError, ObjectKind, Unsupported};
use proto::srq::{SrqAttr, SRQ_LIMIT, SRQ_MAX_WR};
use proto::{Errno, Error, Gid, QpType};

fn srq_attr(max_wr: u32, max_sge: u32) -> SrqAttr {
    SrqAttr {
        max_wr,
        max_sge,
        srq_limit: 0,
    }
}

fn assert_busy(r: Result<(), Error>, kind: ObjectKind) {
    match r {
        Err(e @ Error::Busy { .. }) => {
            assert_eq!(e.errno(), Errno::EBUSY);
            assert!(
                matches!(e, Error::Busy { kind: k, .. } if k == kind),
                "{e:?}"
            );
            assert!(e.to_string().contains("still used by"), "{e}");
        }
        other => panic!("expected EBUSY for {kind}, got {other:?}"),
    }
}

#[test]
fn pd_cq_srq_are_busy_while_a_qp_uses_them() {
    let mut fx = Fixture::new();
    let (srq, _) = fx.eng.create_srq(fx.pd, &srq_attr(8, 1)).unwrap();
    let (rcq, _) = fx.eng.create_cq(fx.ctx, 8, 0).unwrap();
    let args = QpCreate {
        recv_cq: Some(rcq),
        srq: Some(srq),
        ..fx.create_args(QpType::Rc)
    };
    let qp = fx.eng.create_qp(&args).unwrap().handle;
    let counts = fx.eng.object_counts();
    assert_busy(fx.eng.dealloc_pd(fx.pd), ObjectKind::Pd);
    assert_busy(fx.eng.destroy_cq(fx.cq), ObjectKind::Cq);
    assert_busy(fx.eng.destroy_cq(rcq), ObjectKind::Cq);
    assert_busy(fx.eng.destroy_srq(srq), ObjectKind::Srq);
    assert_eq!(
        fx.eng.object_counts(),
        counts,
        "a refused destroy destroyed something"
    );
    fx.eng.destroy_qp(qp).unwrap();
    fx.eng.destroy_srq(srq).unwrap();
    fx.eng.destroy_cq(rcq).unwrap();
    fx.eng.destroy_cq(fx.cq).unwrap();
    fx.eng.dealloc_pd(fx.pd).unwrap();
    assert_eq!(fx.eng.object_counts(), [1, 0, 0, 0, 0, 0, 0]);
}

#[test]
fn a_cq_used_twice_by_one_qp_needs_that_qp_gone() {
    let mut fx = Fixture::new();
    let a = fx.qp(QpType::Ud);
    let b = fx.qp(QpType::Ud);
    fx.eng.destroy_qp(a).unwrap();
    assert_busy(fx.eng.destroy_cq(fx.cq), ObjectKind::Cq);
    fx.eng.destroy_qp(b).unwrap();
    fx.eng.destroy_cq(fx.cq).unwrap();
}

#[test]
fn pd_is_busy_with_mr_ah_srq() {
    let mut fx = Fixture::new();
    let (mr, _) = fx.eng.reg_mr(fx.pd, 0x1000, 4096, 1).unwrap();
    let ah = fx.eng.create_ah(fx.pd, &good_av()).unwrap();
    let (srq, _) = fx.eng.create_srq(fx.pd, &srq_attr(4, 1)).unwrap();
    assert_busy(fx.eng.dealloc_pd(fx.pd), ObjectKind::Pd);
    fx.eng.dereg_mr(mr).unwrap();
    assert_busy(fx.eng.dealloc_pd(fx.pd), ObjectKind::Pd);
    fx.eng.destroy_ah(ah).unwrap();
    assert_busy(fx.eng.dealloc_pd(fx.pd), ObjectKind::Pd);
    fx.eng.destroy_srq(srq).unwrap();
    fx.eng.dealloc_pd(fx.pd).unwrap();
}

#[test]
fn close_context_destroys_everything_and_only_its_own() {
    let mut fx = Fixture::new();
    let other = fx.eng.open_context();
    let other_pd = fx.eng.alloc_pd(other).unwrap();
    let (other_cq, _) = fx.eng.create_cq(other, 4, 0).unwrap();
    for t in QpType::SUPPORTED {
        fx.qp_in(t, proto::QpState::Rts);
    }
    let (srq, _) = fx.eng.create_srq(fx.pd, &srq_attr(4, 1)).unwrap();
    let args = QpCreate {
        srq: Some(srq),
        ..fx.create_args(QpType::Rc)
    };
    fx.eng.create_qp(&args).unwrap();
    fx.eng.reg_mr(fx.pd, 0, 64, 0).unwrap();
    fx.eng.create_ah(fx.pd, &good_av()).unwrap();
    let pd2 = fx.eng.alloc_pd(fx.ctx).unwrap();
    fx.eng.reg_mr(pd2, 0, 64, 0).unwrap();
    fx.eng.close_context(fx.ctx).unwrap();
    // What is left is the other context's context, PD and CQ.
    assert_eq!(fx.eng.object_counts(), [1, 1, 0, 1, 0, 0, 0]);
    assert!(fx.eng.pd_ctx(other_pd).is_ok() && fx.eng.cq(other_cq).is_ok());
    assert!(fx.eng.close_context(fx.ctx).is_err(), "closed twice");
    fx.eng.close_context(other).unwrap();
    assert_eq!(fx.eng.object_counts(), [0; 7]);
}

/// An async event goes to the context that created its object (each context
/// has its own async queue): a CQ's, an SRQ's and a QP's through their PD, an
/// XRC_RECV QP's through the XRC domain open that created it; none once the
/// object is gone (the kernel drops a destroyed object's unread events).
#[test]
fn an_events_owner_is_the_context_that_made_its_object() {
    use proto::output::EventElement;
    let mut fx = Fixture::new();
    let other = fx.eng.open_context();
    let other_pd = fx.eng.alloc_pd(other).unwrap();
    let (other_cq, _) = fx.eng.create_cq(other, 4, 0).unwrap();
    let (other_srq, _) = fx.eng.create_srq(other_pd, &srq_attr(4, 1)).unwrap();
    let other_qp = fx
        .eng
        .create_qp(&QpCreate {
            pd: other_pd,
            send_cq: Some(other_cq),
            recv_cq: Some(other_cq),
            ..fx.create_args(QpType::Rc)
        })
        .unwrap()
        .handle;
    let qp = fx.qp_in(QpType::Uc, proto::QpState::Reset);
    let xrcd = fx
        .eng
        .open_xrcd(
            other,
            None,
            proto::xrcd::OpenFlags::from_raw(proto::xrcd::O_CREAT),
        )
        .unwrap();
    let req = proto::qp::create::QpRequest {
        qp_type: QpType::XrcRecv.raw(),
        comp_mask: proto::qp::create::comp_mask::XRCD,
        ..Default::default()
    };
    let xrc_qp = fx.eng.create_xrc_recv_qp(xrcd, &req).unwrap().handle;
    let owner = |fx: &Fixture, el| fx.eng.event_owners(el);
    assert_eq!(owner(&fx, EventElement::Cq(fx.cq)), [fx.ctx]);
    assert_eq!(owner(&fx, EventElement::Qp(qp)), [fx.ctx]);
    assert_eq!(owner(&fx, EventElement::Cq(other_cq)), [other]);
    assert_eq!(owner(&fx, EventElement::Srq(other_srq)), [other]);
    assert_eq!(owner(&fx, EventElement::Qp(other_qp)), [other]);
    assert_eq!(owner(&fx, EventElement::Qp(xrc_qp)), [other]);
    fx.eng.destroy_qp(other_qp).unwrap();
    fx.eng.destroy_srq(other_srq).unwrap();
    fx.eng.destroy_qp(xrc_qp).unwrap();
    assert_eq!(owner(&fx, EventElement::Qp(other_qp)), []);
    assert_eq!(owner(&fx, EventElement::Srq(other_srq)), []);
    assert_eq!(owner(&fx, EventElement::Qp(xrc_qp)), []);
    fx.eng.close_context(other).unwrap();
    assert_eq!(owner(&fx, EventElement::Cq(other_cq)), []);
}

#[test]
fn srq_create_rules() {
    let mut fx = Fixture::new();
    let dev = fx.eng.info().attr.clone();
    for (wr, sge) in [(0, 1), (dev.max_srq_wr + 1, 1), (4, dev.max_srq_sge + 1)] {
        let e = fx.eng.create_srq(fx.pd, &srq_attr(wr, sge)).unwrap_err();
        assert_eq!(e.errno(), Errno::EINVAL, "max_wr {wr} max_sge {sge}");
        assert!(e.to_string().contains("srq_attr.max_"), "{e}");
    }
    let asked = SrqAttr {
        max_wr: dev.max_srq_wr,
        max_sge: dev.max_srq_sge,
        srq_limit: 7,
    };
    let (h, got) = fx.eng.create_srq(fx.pd, &asked).unwrap();
    assert!(got.max_wr >= asked.max_wr && got.max_sge >= asked.max_sge);
    assert_eq!(got.srq_limit, 0, "srq_limit is not armed by create");
    assert_eq!(fx.eng.query_srq(h).unwrap(), got);
}

#[test]
fn srq_modify_rules_all_or_nothing() {
    let mut fx = Fixture::new();
    let (h, _) = fx.eng.create_srq(fx.pd, &srq_attr(16, 1)).unwrap();
    let e = fx.eng.modify_srq(h, &srq_attr(8, 1), 1 << 2).unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL);
    // Limit above the new max_wr: nothing changes, not even max_wr.
    let e = fx
        .eng
        .modify_srq(
            h,
            &SrqAttr {
                max_wr: 32,
                max_sge: 1,
                srq_limit: 33,
            },
            SRQ_MAX_WR | SRQ_LIMIT,
        )
        .unwrap_err();
    assert!(e.to_string().contains("srq_limit"), "{e}");
    assert_eq!(fx.eng.query_srq(h).unwrap(), srq_attr(16, 1));
    fx.eng
        .modify_srq(
            h,
            &SrqAttr {
                max_wr: 32,
                max_sge: 9,
                srq_limit: 20,
            },
            SRQ_MAX_WR | SRQ_LIMIT,
        )
        .unwrap();
    assert_eq!(
        fx.eng.query_srq(h).unwrap(),
        SrqAttr {
            max_wr: 32,
            max_sge: 1,
            srq_limit: 20
        }
    );
    let e = fx
        .eng
        .modify_srq(h, &srq_attr(0, 1), SRQ_MAX_WR)
        .unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL);
    fx.eng
        .modify_srq(
            h,
            &SrqAttr {
                max_wr: 0,
                max_sge: 0,
                srq_limit: 32,
            },
            SRQ_LIMIT,
        )
        .unwrap();
    assert_eq!(fx.eng.query_srq(h).unwrap().srq_limit, 32);
}

#[test]
fn cq_sizes() {
    let mut fx = Fixture::new();
    let max = fx.eng.info().attr.max_cqe;
    for bad in [0i32, -1, i32::MIN, max as i32 + 1] {
        let e = fx.eng.create_cq(fx.ctx, bad, 0).unwrap_err();
        assert_eq!(e.errno(), Errno::EINVAL, "cqe {bad}");
        assert!(e.to_string().contains("cqe"), "{e}");
    }
    for want in [1i32, 100, max as i32] {
        let (h, got) = fx.eng.create_cq(fx.ctx, want, 0).unwrap();
        assert!(got >= want as u32);
        assert_eq!(fx.eng.cq(h).unwrap().cqe, got);
    }
    let e = fx.eng.create_cq(fx.ctx, 4, 1).unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL, "comp_vector 1");
    assert_eq!(
        e,
        Error::Invalid(InvalidArg::CompVector {
            comp_vector: 1,
            count: 1
        })
    );
    assert_eq!(
        fx.eng.create_cq(fx.ctx, 4, -1).unwrap_err().errno(),
        Errno::EINVAL
    );
}

#[test]
fn mr_access_flag_rules() {
    let mut fx = Fixture::new();
    let (lw, rw, rr, ra) = (1u32, 2, 4, 8);
    for bad in [rw, ra, rw | rr, ra | rr] {
        let e = fx.eng.reg_mr(fx.pd, 0x1000, 64, bad).expect_err("refused");
        assert_eq!(e.errno(), Errno::EINVAL, "{bad:#x}");
    }
    for (flags, errno) in [
        // ZERO_BASED (device memory only) and FLUSH_PERSISTENT (no persistent
        // memory) are not offered; ON_DEMAND (1 << 6, spec/odp.md) and
        // FLUSH_GLOBAL (1 << 8, spec/memory-windows.md) are.
        (1u32 << 5, Errno::EOPNOTSUPP),
        (1 << 9, Errno::EOPNOTSUPP),
        (1 << 12, Errno::EINVAL),
    ] {
        assert_eq!(
            fx.eng
                .reg_mr(fx.pd, 0x1000, 64, flags)
                .err()
                .unwrap()
                .errno(),
            errno,
            "{flags:#x}"
        );
    }
    let before = fx.eng.object_counts();
    assert_eq!(
        fx.eng.reg_mr(fx.pd, u64::MAX - 10, 64, 0).unwrap_err(),
        Error::Invalid(InvalidArg::MrWraps {
            addr: u64::MAX - 10,
            length: 64
        }),
        "wraps"
    );
    assert_eq!(
        fx.eng.reg_mr(fx.pd, 0x1000, 64, 1 << 9).unwrap_err(),
        Error::NotSupported(Unsupported::MrAccess {
            flags: proto::AccessFlags(1 << 9)
        })
    );
    assert_eq!(fx.eng.object_counts(), before);
    for ok in [
        0,
        lw,
        rr,
        lw | rw,
        lw | ra,
        lw | rw | rr | ra,
        lw | (1 << 20),
        lw | (1 << 8),
    ] {
        fx.eng
            .reg_mr(fx.pd, 0x1000, 64, ok)
            .unwrap_or_else(|e| panic!("{ok:#x}: {e}"));
    }
}

#[test]
fn mr_keys_are_distinct_and_find_their_mr() {
    let mut fx = Fixture::new();
    let mut keys = std::collections::HashSet::new();
    let mut hs = Vec::new();
    for i in 0..50u64 {
        let (h, mr) = fx.eng.reg_mr(fx.pd, 0x10000 * i, 4096, 1 | 2 | 4).unwrap();
        let (l, r, addr) = (mr.lkey, mr.rkey, mr.addr);
        assert_ne!(l, r);
        assert!(
            keys.insert(l) && keys.insert(r),
            "key reused among live MRs"
        );
        assert_eq!(fx.eng.mr_by_lkey(l).unwrap().addr, addr);
        assert_eq!(fx.eng.mr_by_rkey(r).unwrap().addr, addr);
        assert!(
            fx.eng.mr_by_lkey(r).is_none() && fx.eng.mr_by_rkey(l).is_none(),
            "lkey ≠ rkey roles"
        );
        hs.push((h, l, r));
    }
    let (h, l, r) = hs[10];
    fx.eng.dereg_mr(h).unwrap();
    assert!(fx.eng.mr_by_lkey(l).is_none() && fx.eng.mr_by_rkey(r).is_none());
    let (_, mr) = fx.eng.reg_mr(fx.pd, 0, 64, 1).unwrap();
    assert!(
        mr.lkey != l && mr.rkey != r,
        "a stale key must not name the slot's next MR"
    );
    assert!(fx.eng.mr_by_lkey(l).is_none());
    assert!(fx.eng.mr_by_lkey(0).is_none() && fx.eng.mr_by_rkey(u32::MAX).is_none());
}

#[test]
fn ah_checks() {
    let mut fx = Fixture::new();
    type Tweak = fn(&mut proto::AhAttr);
    let cases: [(Tweak, &str); 5] = [
        (|a| a.port_num = 0, "ah_attr.port_num = 0"),
        (|a| a.port_num = 2, "ah_attr.port_num = 2"),
        (|a| a.is_global = 0, "RoCE needs a GRH"),
        (|a| a.grh.sgid_index = 1, "GID index 1"),
        (|a| a.grh.dgid = Gid::ZERO, "dgid is all zeros"),
    ];
    let before = fx.eng.object_counts();
    for (tweak, words) in cases {
        let mut av = good_av();
        tweak(&mut av);
        let e = fx.eng.create_ah(fx.pd, &av).unwrap_err();
        assert_eq!(e.errno(), Errno::EINVAL, "{e}");
        assert!(e.to_string().contains(words), "{e}");
    }
    assert_eq!(fx.eng.object_counts(), before);
    let e = fx
        .eng
        .create_ah(
            fx.pd,
            &proto::AhAttr {
                is_global: 0,
                ..good_av()
            },
        )
        .unwrap_err();
    assert!(matches!(
        e,
        Error::Modify(ModifyError::NoGrh { which: "ah_attr" })
    ));
    let h = fx.eng.create_ah(fx.pd, &good_av()).unwrap();
    assert_eq!(fx.eng.ah(h).unwrap().attr, good_av());
    fx.eng.destroy_ah(h).unwrap();
    assert!(fx.eng.ah(h).is_err() && fx.eng.destroy_ah(h).is_err());
}

#[test]
fn ah_on_an_empty_gid_entry_is_enodata() {
    let mut fx = Fixture::with(&common::config(true));
    let av = proto::AhAttr {
        grh: proto::GlobalRoute {
            sgid_index: 1,
            ..good_av().grh
        },
        ..good_av()
    };
    assert_eq!(
        fx.eng.create_ah(fx.pd, &av).unwrap_err().errno(),
        Errno::ENODATA
    );
}
