//! `ibv_create_qp`, `ibv_query_qp` and `ibv_destroy_qp` (spec/qp-query.md):
//! which attributes query reports valid in each state for each type, what
//! `init_attr` says, every create refusal with its errno, QPN allocation and
//! destroy in every state. The other objects' rules are in objects_lifecycle.rs.

mod common;

use common::{good_attr, request, Fixture};
use proto::engine::{QpCreate, QpHandle};
use proto::error::{InvalidArg, Unsupported};
use proto::qp::create::{comp_mask, send_ops};
use proto::qp::QpControl;
use proto::srq::SrqAttr;
use proto::{AccessFlags, AttrMask, Errno, Error, QpAttr, QpCap, QpState, QpType, MASK_24};
use std::collections::HashSet;

use AttrMask as A;
use QpState::{Err, Init, Reset, Rtr, Rts, Sqd, Sqe};

/// qp-query.md §3.2: the attributes valid in `s` after the minimal sequence,
/// besides `qp_state` and `cap` (valid everywhere).
fn valid_in(t: QpType, s: QpState) -> AttrMask {
    let init = match t {
        QpType::Ud => A::of(&[A::PKEY_INDEX, A::PORT, A::QKEY]),
        _ => A::of(&[A::PKEY_INDEX, A::PORT, A::ACCESS_FLAGS]),
    };
    let rtr = match t {
        QpType::Ud => A::EMPTY,
        QpType::Uc | QpType::XrcSend => A::of(&[A::AV, A::PATH_MTU, A::DEST_QPN, A::RQ_PSN]),
        _ => A::of(&[
            A::AV,
            A::PATH_MTU,
            A::DEST_QPN,
            A::RQ_PSN,
            A::MAX_DEST_RD_ATOMIC,
            A::MIN_RNR_TIMER,
        ]),
    };
    let rts = match t {
        QpType::Rc | QpType::XrcSend => A::of(&[
            A::SQ_PSN,
            A::TIMEOUT,
            A::RETRY_CNT,
            A::RNR_RETRY,
            A::MAX_QP_RD_ATOMIC,
        ]),
        _ => A::SQ_PSN,
    };
    match s {
        Reset => A::EMPTY,
        Init | Err => init, // ERR is reached from INIT by the fixture
        Rtr => init | rtr,
        Rts | Sqd | Sqe => init | rtr | rts,
    }
}

/// What query must return when exactly `valid` was set from `good_attr`: those
/// fields as set, every other one zero.
fn expected(valid: AttrMask, state: QpState, cap: QpCap) -> QpAttr {
    let g = good_attr(Reset, Init);
    let mut e = QpAttr {
        qp_state: state,
        cur_qp_state: state,
        cap,
        ..QpAttr::default()
    };
    let has = |b| valid.contains(b);
    if has(A::PKEY_INDEX) {
        e.pkey_index = g.pkey_index
    }
    if has(A::PORT) {
        e.port_num = g.port_num
    }
    if has(A::QKEY) {
        e.qkey = g.qkey
    }
    if has(A::ACCESS_FLAGS) {
        e.qp_access_flags = g.qp_access_flags
    }
    if has(A::AV) {
        e.ah_attr = g.ah_attr
    }
    if has(A::PATH_MTU) {
        e.path_mtu = g.path_mtu
    }
    if has(A::DEST_QPN) {
        e.dest_qp_num = g.dest_qp_num
    }
    if has(A::RQ_PSN) {
        e.rq_psn = g.rq_psn
    }
    if has(A::MAX_DEST_RD_ATOMIC) {
        e.max_dest_rd_atomic = g.max_dest_rd_atomic
    }
    if has(A::MIN_RNR_TIMER) {
        e.min_rnr_timer = g.min_rnr_timer
    }
    if has(A::SQ_PSN) {
        e.sq_psn = g.sq_psn
    }
    if has(A::TIMEOUT) {
        e.timeout = g.timeout
    }
    if has(A::RETRY_CNT) {
        e.retry_cnt = g.retry_cnt
    }
    if has(A::RNR_RETRY) {
        e.rnr_retry = g.rnr_retry
    }
    if has(A::MAX_QP_RD_ATOMIC) {
        e.max_rd_atomic = g.max_rd_atomic
    }
    e
}

#[test]
fn seeds_example_create_query_move_query() {
    let mut fx = Fixture::new();
    let h = fx.qp(QpType::Rc);
    assert_eq!(fx.snap(h).0.qp_state, Reset);
    fx.drive(h, QpType::Rc, Init);
    let (a, v) = fx.snap(h);
    assert_eq!(
        (a.qp_state, a.port_num, a.qp_access_flags),
        (Init, 1, AccessFlags(0x7))
    );
    assert!(v.contains(A::PORT | A::ACCESS_FLAGS | A::PKEY_INDEX));
}

#[test]
fn validity_per_state_per_type() {
    for t in QpType::SUPPORTED {
        for s in QpState::ALL {
            let mut fx = Fixture::new();
            let h = fx.qp_in(t, s);
            let (attr, valid, init) = fx.eng.query_qp(h).unwrap();
            let want = valid_in(t, s) | A::STATE | A::CAP;
            assert_eq!(valid, want, "{t:?} in {s}");
            assert_eq!(attr, expected(want, s, init.cap), "{t:?} in {s}");
            assert_eq!(attr.sq_draining, 0);
        }
    }
}

#[test]
fn reset_makes_everything_but_state_and_cap_invalid_again() {
    for t in QpType::SUPPORTED {
        for s in [Init, Rtr, Rts, Sqd, Sqe, Err] {
            let mut fx = Fixture::new();
            let h = fx.qp_in(t, s);
            fx.step(h, Reset, A::EMPTY);
            let (attr, valid, init) = fx.eng.query_qp(h).unwrap();
            assert_eq!(valid, A::STATE | A::CAP, "{t:?} {s}→RESET");
            assert_eq!(attr, expected(valid, Reset, init.cap));
            let mut want = request(t).cap;
            if t == QpType::XrcSend {
                // spec/xrc.md §2: no receive side.
                (want.max_recv_wr, want.max_recv_sge) = (0, 0);
            }
            // qp-query.md §2: the WQE's gather list holds 16 inline bytes per SGE.
            want.max_inline_data = want.max_inline_data.max(16 * want.max_send_sge);
            assert_eq!(init.cap, want, "cap survives RESET");
            // And the whole sequence must be supplied again.
            fx.drive(h, t, Rts);
            assert_eq!(fx.snap(h).1, valid_in(t, Rts) | A::STATE | A::CAP);
        }
    }
}

#[test]
fn optional_attributes_become_valid_only_when_given() {
    let mut fx = Fixture::new();
    let h = fx.qp_in(QpType::Rc, Rtr);
    let before = fx.snap(h).1;
    assert!(!before.contains(A::PATH_MIG_STATE) && !before.contains(A::MIN_RNR_TIMER | A::SQ_PSN));
    let mask = common::minimal(QpType::Rc, Rtr, Rts) | A::PATH_MIG_STATE;
    fx.step(h, Rts, mask);
    assert!(fx.snap(h).1.contains(A::PATH_MIG_STATE));
    // EN_SQD_ASYNC_NOTIFY and CUR_STATE are not attributes query reports as valid.
    fx.step(h, Sqd, A::EN_SQD_ASYNC_NOTIFY);
    let v = fx.snap(h).1;
    assert!(!v.contains(A::EN_SQD_ASYNC_NOTIFY) && !v.contains(A::CUR_STATE));
}

#[test]
fn psns_are_the_live_values_masked_to_24_bits() {
    // qp-query.md §3.1: query reports the next PSN to send / expected (data path).
    let fx = Fixture::new();
    let env = proto::qp::modify::ModifyEnv {
        dev: fx.eng.info(),
        privileged: false,
    };
    let mut qp = QpControl::new(QpType::Rc, 0x42, QpCap::default(), false, false);
    for to in [Init, Rtr, Rts] {
        let from = qp.state();
        qp.modify(
            &good_attr(from, to),
            common::minimal(QpType::Rc, from, to) | A::STATE,
            env,
        )
        .unwrap();
    }
    assert_eq!(
        (qp.query().0.sq_psn, qp.query().0.rq_psn),
        (0x12_3456, 0xab_cdef)
    );
    qp.set_live_psns(Some(0x0100_0005), Some(0x00ff_ffff));
    assert_eq!((qp.query().0.sq_psn, qp.query().0.rq_psn), (5, 0xff_ffff));
    qp.set_live_psns(None, Some(9));
    assert_eq!((qp.query().0.sq_psn, qp.query().0.rq_psn), (5, 9));
}

#[test]
fn init_attr_reports_cqs_srq_cap_and_sig_all() {
    let mut fx = Fixture::new();
    let (cq2, _) = fx.eng.create_cq(fx.ctx, 4, 0).unwrap();
    let (srq, _) = fx
        .eng
        .create_srq(
            fx.pd,
            &SrqAttr {
                max_wr: 4,
                max_sge: 1,
                srq_limit: 0,
            },
        )
        .unwrap();
    let args = QpCreate {
        recv_cq: Some(cq2),
        srq: Some(srq),
        sq_sig_all: true,
        ..fx.create_args(QpType::Ud)
    };
    let made = fx.eng.create_qp(&args).unwrap();
    let (_, _, init) = fx.eng.query_qp(made.handle).unwrap();
    assert_eq!(
        (init.qp_type, init.send_cq, init.recv_cq, init.srq),
        (QpType::Ud, fx.cq, cq2, Some(srq))
    );
    assert!(init.sq_sig_all);
    assert_eq!(init.cap, made.cap);
    assert_eq!(
        (init.cap.max_recv_wr, init.cap.max_recv_sge),
        (0, 0),
        "SRQ: receive caps are 0"
    );
    let plain = fx.qp(QpType::Rc);
    let (_, _, init) = fx.eng.query_qp(plain).unwrap();
    assert!(!init.sq_sig_all && init.srq.is_none());
}

// ---- create ----

fn create_err(fx: &mut Fixture, args: &QpCreate) -> Error {
    let before = fx.eng.object_counts();
    let e = fx.eng.create_qp(args).expect_err("create should fail");
    assert_eq!(
        fx.eng.object_counts(),
        before,
        "a failed create created something"
    );
    e
}

/// `create_err` with the arguments built before `fx` is borrowed mutably.
macro_rules! create_err {
    ($fx:ident, $args:expr) => {{
        let args: QpCreate = *$args;
        create_err(&mut $fx, &args)
    }};
}

fn with_req(fx: &Fixture, t: QpType, f: impl Fn(&mut proto::qp::create::QpRequest)) -> QpCreate {
    let mut args = fx.create_args(t);
    f(&mut args.req);
    args
}

#[test]
fn caps_above_device_limits_are_einval() {
    let mut fx = Fixture::new();
    let (wr, sge) = (fx.eng.info().attr.max_qp_wr, fx.eng.info().attr.max_sge);
    let inline = proto::device::MAX_INLINE_DATA;
    type SetCap = fn(&mut QpCap, u32);
    let cases: [(&str, SetCap, u32); 5] = [
        ("cap.max_send_wr", |c, v| c.max_send_wr = v, wr),
        ("cap.max_recv_wr", |c, v| c.max_recv_wr = v, wr),
        ("cap.max_send_sge", |c, v| c.max_send_sge = v, sge),
        ("cap.max_recv_sge", |c, v| c.max_recv_sge = v, sge),
        ("cap.max_inline_data", |c, v| c.max_inline_data = v, inline),
    ];
    for (name, set, max) in cases {
        let e = create_err!(fx, &with_req(&fx, QpType::Rc, |r| set(&mut r.cap, max + 1)));
        assert_eq!(e.errno(), Errno::EINVAL, "{name}");
        assert!(e.to_string().contains(name), "{e}");
        let made = fx
            .eng
            .create_qp(&with_req(&fx, QpType::Rc, |r| set(&mut r.cap, max)))
            .unwrap();
        let mut want = request(QpType::Rc).cap;
        set(&mut want, max);
        assert!(
            cap_ge(made.cap, want),
            "{name}: granted {:?} < asked {want:?}",
            made.cap
        );
    }
}

fn cap_ge(got: QpCap, want: QpCap) -> bool {
    got.max_send_wr >= want.max_send_wr
        && got.max_recv_wr >= want.max_recv_wr
        && got.max_send_sge >= want.max_send_sge
        && got.max_recv_sge >= want.max_recv_sge
        && got.max_inline_data >= want.max_inline_data
}

#[test]
fn granted_caps_are_at_least_the_request_and_zero_is_legal() {
    let mut fx = Fixture::new();
    for cap in [
        QpCap::default(),
        QpCap {
            max_send_wr: 100,
            max_recv_wr: 3,
            max_send_sge: 2,
            max_recv_sge: 5,
            max_inline_data: 64,
        },
    ] {
        let made = fx
            .eng
            .create_qp(&with_req(&fx, QpType::Ud, |r| r.cap = cap))
            .unwrap();
        assert!(cap_ge(made.cap, cap));
        assert_eq!(
            fx.eng.query_qp(made.handle).unwrap().2.cap,
            made.cap,
            "query agrees with create"
        );
    }
}

#[test]
fn srq_makes_receive_caps_ignored() {
    let mut fx = Fixture::new();
    let (srq, _) = fx
        .eng
        .create_srq(
            fx.pd,
            &SrqAttr {
                max_wr: 4,
                max_sge: 1,
                srq_limit: 0,
            },
        )
        .unwrap();
    for t in [QpType::Rc, QpType::Ud] {
        let mut args = with_req(&fx, t, |r| {
            (r.cap.max_recv_wr, r.cap.max_recv_sge, r.has_srq) = (u32::MAX, u32::MAX, true)
        });
        args.srq = Some(srq);
        let made = fx.eng.create_qp(&args).unwrap();
        assert_eq!(
            (made.cap.max_recv_wr, made.cap.max_recv_sge),
            (0, 0),
            "{t:?}"
        );
        // The SRQ handle decides, even if the request's flag disagrees.
        args.req.has_srq = false;
        let made = fx.eng.create_qp(&args).unwrap();
        assert_eq!(
            (made.cap.max_recv_wr, made.cap.max_recv_sge),
            (0, 0),
            "{t:?}, has_srq = false"
        );
    }
    let mut args = fx.create_args(QpType::Uc);
    args.srq = Some(srq);
    for flag in [true, false] {
        args.req.has_srq = flag;
        let e = create_err!(fx, &args);
        assert_eq!(e.errno(), Errno::EINVAL);
        assert!(e.to_string().contains("UC QP cannot use an SRQ"), "{e}");
    }
}

#[test]
fn unsupported_types_are_eopnotsupp() {
    let mut fx = Fixture::new();
    // 8 (RAW_PACKET) is offered: tests/raw_packet.rs; 9, 10 (XRC): tests/xrc.rs.
    for raw in [0u32, 1, 5, 0xff, 1000] {
        let e = create_err!(fx, &with_req(&fx, QpType::Rc, |r| r.qp_type = raw));
        assert_eq!(e.errno(), Errno::EOPNOTSUPP, "qp_type {raw}: {e}");
        let typed = match QpType::from_raw(raw) {
            None => Unsupported::UnknownQpType { raw },
            Some(t @ (QpType::Smi | QpType::Gsi)) => Unsupported::KernelOnlyQpType { qp_type: t },
            Some(t) => Unsupported::QpType { qp_type: t },
        };
        assert_eq!(e, Error::NotSupported(typed), "qp_type {raw}");
    }
    for t in QpType::SUPPORTED {
        fx.eng.create_qp(&fx.create_args(t)).unwrap();
    }
}

#[test]
fn comp_mask_rules() {
    let mut fx = Fixture::new();
    use comp_mask::*;
    // max_tso_header is for RAW_PACKET QPs (spec/raw-packet.md §4).
    let e = create_err!(
        fx,
        &with_req(&fx, QpType::Rc, |r| r.comp_mask = PD | MAX_TSO_HEADER)
    );
    assert_eq!(e.errno(), Errno::EINVAL, "{e}");
    assert_eq!(
        e,
        Error::Invalid(InvalidArg::TsoHeaderNotRaw {
            qp_type: QpType::Rc
        })
    );
    for bit in [IND_TABLE, RX_HASH, 1 << 7, 1 << 31] {
        let e = create_err!(fx, &with_req(&fx, QpType::Rc, |r| r.comp_mask = PD | bit));
        assert_eq!(e.errno(), Errno::EOPNOTSUPP, "comp_mask bit {bit:#x}");
        assert_eq!(
            e,
            Error::NotSupported(Unsupported::QpExCompMask { bits: bit }),
            "comp_mask bit {bit:#x}"
        );
    }
    let e = create_err!(fx, &with_req(&fx, QpType::Rc, |r| r.comp_mask = 0));
    assert_eq!(e.errno(), Errno::EINVAL);
    assert!(e.to_string().contains("IBV_QP_INIT_ATTR_PD"), "{e}");
    assert_eq!(e, Error::Invalid(InvalidArg::QpExWithoutPd));
    let e = create_err!(
        fx,
        &with_req(&fx, QpType::Rc, |r| (r.comp_mask, r.create_flags) =
            (PD | CREATE_FLAGS, 1 << 1))
    );
    assert_eq!(e.errno(), Errno::EOPNOTSUPP);
    assert_eq!(
        e,
        Error::NotSupported(Unsupported::QpCreateFlags { flags: 1 << 1 })
    );
    // create_flags without its comp_mask bit is not read; zero flags with the bit are fine.
    fx.eng
        .create_qp(&with_req(&fx, QpType::Rc, |r| r.create_flags = 1 << 8))
        .unwrap();
    fx.eng
        .create_qp(&with_req(&fx, QpType::Rc, |r| {
            r.comp_mask = PD | CREATE_FLAGS
        }))
        .unwrap();
}

#[test]
fn send_ops_flags_must_fit_the_type() {
    let mut fx = Fixture::new();
    let with_ops = |fx: &Fixture, t, ops| {
        with_req(fx, t, move |r| {
            (r.comp_mask, r.send_ops_flags) = (comp_mask::PD | comp_mask::SEND_OPS_FLAGS, ops)
        })
    };
    let bad = [
        (QpType::Ud, send_ops::RDMA_WRITE),
        (QpType::Uc, send_ops::RDMA_READ),
        (QpType::Uc, send_ops::ATOMIC_FETCH_AND_ADD),
        (QpType::Rc, 1 << 10), // TSO
        (QpType::Rc, 1 << 40),
    ];
    for (t, ops) in bad {
        let e = create_err!(fx, &with_ops(&fx, t, ops));
        assert_eq!(e.errno(), Errno::EOPNOTSUPP, "{t:?} {ops:#x}");
        assert!(e.to_string().contains("send_ops_flags"), "{e}");
        assert!(
            matches!(e, Error::NotSupported(Unsupported::SendOps { qp_type, extra, .. })
                if qp_type == t && extra == ops & !send_ops::supported(t)),
            "{e:?}"
        );
    }
    for t in QpType::SUPPORTED {
        fx.eng
            .create_qp(&with_ops(&fx, t, send_ops::supported(t)))
            .unwrap();
        fx.eng.create_qp(&with_ops(&fx, t, send_ops::SEND)).unwrap();
    }
    // Without SEND_OPS_FLAGS in comp_mask the field is not read.
    fx.eng
        .create_qp(&with_req(&fx, QpType::Ud, |r| r.send_ops_flags = u64::MAX))
        .unwrap();
}

#[test]
fn both_cqs_are_required_and_must_share_the_context() {
    let mut fx = Fixture::new();
    for (s, r) in [(None, Some(fx.cq)), (Some(fx.cq), None), (None, None)] {
        let args = QpCreate {
            send_cq: s,
            recv_cq: r,
            ..fx.create_args(QpType::Rc)
        };
        assert_eq!(create_err!(fx, &args).errno(), Errno::EINVAL);
    }
    let other = fx.eng.open_context();
    let (foreign_cq, _) = fx.eng.create_cq(other, 4, 0).unwrap();
    let args = QpCreate {
        recv_cq: Some(foreign_cq),
        ..fx.create_args(QpType::Rc)
    };
    assert_eq!(create_err!(fx, &args).errno(), Errno::EINVAL);
    let other_pd = fx.eng.alloc_pd(other).unwrap();
    let (foreign_srq, _) = fx
        .eng
        .create_srq(
            other_pd,
            &SrqAttr {
                max_wr: 4,
                max_sge: 1,
                srq_limit: 0,
            },
        )
        .unwrap();
    let args = QpCreate {
        srq: Some(foreign_srq),
        ..fx.create_args(QpType::Rc)
    };
    let e = create_err!(fx, &args);
    assert_eq!(e.errno(), Errno::EINVAL);
    assert!(e.to_string().contains("SRQ"), "{e}");
}

// ---- QPNs and destroy ----

#[test]
fn qpns_are_24_bit_unique_and_never_reserved() {
    let mut fx = Fixture::new();
    let mut live: Vec<(QpHandle, u32)> = Vec::new();
    let mut seen = HashSet::new();
    for i in 0..3000u32 {
        let made = fx
            .eng
            .create_qp(&fx.create_args(QpType::SUPPORTED[i as usize % 3]))
            .unwrap();
        let n = made.qpn;
        assert!(n <= MASK_24 && n > 1 && n != MASK_24, "qpn {n:#x}");
        assert!(
            live.iter().all(|(_, q)| *q != n),
            "qpn {n:#x} given twice while live"
        );
        assert_eq!(fx.eng.qp_by_qpn(n), Some(made.handle));
        assert_eq!(fx.eng.qp(made.handle).unwrap().ctl.qpn(), n);
        seen.insert(n);
        live.push((made.handle, n));
        if i % 3 == 0 {
            let (h, q) = live.swap_remove((i as usize * 7) % live.len());
            fx.eng.destroy_qp(h).unwrap();
            assert_eq!(fx.eng.qp_by_qpn(q), None);
        }
    }
    assert_eq!(seen.len(), 3000, "no QPN reused this soon");
}

#[test]
fn destroy_in_every_state() {
    for t in QpType::SUPPORTED {
        for s in QpState::ALL {
            let mut fx = Fixture::new();
            let base = fx.eng.object_counts();
            let h = fx.qp_in(t, s);
            let qpn = fx.eng.qp(h).unwrap().ctl.qpn();
            fx.eng
                .destroy_qp(h)
                .unwrap_or_else(|e| panic!("{t:?} in {s}: {e}"));
            assert_eq!(fx.eng.object_counts(), base);
            assert_eq!(fx.eng.qp_by_qpn(qpn), None);
            let e = fx.eng.query_qp(h).unwrap_err();
            assert!(matches!(e, Error::NoSuchObject { .. }) && e.errno() == Errno::EINVAL);
            assert!(fx.eng.destroy_qp(h).is_err(), "double destroy");
            assert!(fx.eng.modify_qp(h, &good_attr(s, Err), A::STATE).is_err());
        }
    }
}

#[test]
fn stale_handle_does_not_reach_the_next_qp() {
    let mut fx = Fixture::new();
    let old = fx.qp(QpType::Rc);
    fx.eng.destroy_qp(old).unwrap();
    let new = fx.qp(QpType::Rc);
    assert_eq!(old.index(), new.index(), "slot reused");
    assert!(fx.eng.query_qp(old).is_err());
    assert!(fx.eng.query_qp(new).is_ok());
}
