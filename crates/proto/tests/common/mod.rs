//! Helpers shared by the control-path tests: a device and objects to create QPs
//! in, attribute values that pass every value check, and drivers that bring a
//! fresh QP into any state.
#![allow(dead_code)]

pub mod spec;

use proto::device::DeviceConfig;
use proto::engine::{CqHandle, CtxHandle, PdHandle, QpCreate, QpHandle};
use proto::qp::create::{comp_mask, QpRequest};
use proto::{
    AccessFlags, AhAttr, AttrMask, Engine, Gid, GlobalRoute, MigState, Mtu, QpAttr, QpCap, QpState,
    QpType,
};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A device with one GID (127.0.0.1) — or, with `empty_slot`, a second, empty
/// GID entry at index 1 (an all-zero IPv6 address).
pub fn config(empty_slot: bool) -> DeviceConfig {
    let mut addrs = vec![IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1))];
    if empty_slot {
        addrs.push(IpAddr::V6(Ipv6Addr::UNSPECIFIED));
    }
    DeviceConfig {
        name: "softverbs-test".into(),
        addrs,
        active_mtu: Mtu::Mtu1024,
    }
}

/// An engine with a context, a PD and one CQ used for both queues.
pub struct Fixture {
    pub eng: Engine,
    pub ctx: CtxHandle,
    pub pd: PdHandle,
    pub cq: CqHandle,
}

impl Fixture {
    pub fn new() -> Fixture {
        Fixture::with(&config(false))
    }

    pub fn with(cfg: &DeviceConfig) -> Fixture {
        let mut eng = Engine::new(cfg);
        let ctx = eng.open_context();
        let pd = eng.alloc_pd(ctx).expect("alloc_pd");
        let (cq, _) = eng.create_cq(ctx, 16, 0).expect("create_cq");
        Fixture { eng, ctx, pd, cq }
    }

    /// The create arguments for a plain QP of type `t`.
    pub fn create_args(&self, t: QpType) -> QpCreate {
        QpCreate {
            pd: self.pd,
            send_cq: Some(self.cq),
            recv_cq: Some(self.cq),
            srq: None,
            req: request(t),
            sq_sig_all: false,
        }
    }

    pub fn qp(&mut self, t: QpType) -> QpHandle {
        if t == QpType::XrcRecv {
            // A target QP lives in an XRC domain, not a PD (spec/xrc.md §2).
            let flags = proto::xrcd::OpenFlags::from_raw(proto::xrcd::O_CREAT);
            let x = self
                .eng
                .open_xrcd(self.ctx, None, flags)
                .expect("open_xrcd");
            let req = QpRequest {
                comp_mask: comp_mask::XRCD,
                ..request(t)
            };
            let q = self.eng.create_xrc_recv_qp(x, &req);
            return q.expect("create_xrc_recv_qp").handle;
        }
        let args = self.create_args(t);
        self.eng.create_qp(&args).expect("create_qp").handle
    }

    /// What `ibv_query_qp` reports: the attributes and which are valid.
    pub fn snap(&self, h: QpHandle) -> (QpAttr, AttrMask) {
        let (a, v, _) = self.eng.query_qp(h).expect("query_qp");
        (a, v)
    }

    pub fn state(&self, h: QpHandle) -> QpState {
        self.snap(h).0.qp_state
    }

    /// Modifies with `good_attr` and `mask | STATE`, panicking on refusal.
    pub fn step(&mut self, h: QpHandle, to: QpState, mask: AttrMask) {
        let from = self.state(h);
        let attr = good_attr(from, to);
        self.eng
            .modify_qp(h, &attr, mask | AttrMask::STATE)
            .unwrap_or_else(|e| panic!("{from}→{to} with {mask}: {e}"));
    }

    /// A fresh QP of type `t` in state `s` (SQE: RTS, then the device's move).
    pub fn qp_in(&mut self, t: QpType, s: QpState) -> QpHandle {
        let h = self.qp(t);
        self.drive(h, t, s);
        h
    }

    /// Drives a QP in RESET to `s` by the minimal sequences of spec §4.11.
    pub fn drive(&mut self, h: QpHandle, t: QpType, s: QpState) {
        use QpState::*;
        let path: &[QpState] = match s {
            Reset => &[],
            Init => &[Init],
            Rtr => &[Init, Rtr],
            Rts | Sqe => &[Init, Rtr, Rts],
            Sqd => &[Init, Rtr, Rts, Sqd],
            Err => &[Init, QpState::Err],
        };
        for to in path {
            let from = self.state(h);
            self.step(h, *to, minimal(t, from, *to));
        }
        if s == Sqe {
            self.eng.qp_device_move(h, Sqe).expect("device move to SQE");
        }
        assert_eq!(self.state(h), s);
    }
}

/// A plain create request: PD only, small capacities.
pub fn request(t: QpType) -> QpRequest {
    QpRequest {
        qp_type: t.raw(),
        cap: QpCap {
            max_send_wr: 8,
            max_recv_wr: 8,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        has_srq: false,
        comp_mask: comp_mask::PD,
        create_flags: 0,
        send_ops_flags: 0,
        max_tso_header: 0,
    }
}

/// The man-page minimum masks (spec §4.11), written out by hand.
pub fn minimal(t: QpType, from: QpState, to: QpState) -> AttrMask {
    use AttrMask as A;
    use QpState::*;
    let m = |bits: &[AttrMask]| AttrMask::of(bits);
    match (from, to, t) {
        (Reset, Init, QpType::Ud) => m(&[A::PKEY_INDEX, A::PORT, A::QKEY]),
        (Reset, Init, _) => m(&[A::PKEY_INDEX, A::PORT, A::ACCESS_FLAGS]),
        (Init, Rtr, QpType::Ud) => A::EMPTY,
        (Init, Rtr, QpType::Uc | QpType::XrcSend) => {
            m(&[A::AV, A::PATH_MTU, A::DEST_QPN, A::RQ_PSN])
        }
        (Init, Rtr, _) => m(&[
            A::AV,
            A::PATH_MTU,
            A::DEST_QPN,
            A::RQ_PSN,
            A::MAX_DEST_RD_ATOMIC,
            A::MIN_RNR_TIMER,
        ]),
        (Rtr, Rts, QpType::Rc | QpType::XrcSend) => m(&[
            A::SQ_PSN,
            A::MAX_QP_RD_ATOMIC,
            A::RETRY_CNT,
            A::RNR_RETRY,
            A::TIMEOUT,
        ]),
        (Rtr, Rts, QpType::XrcRecv) => m(&[A::SQ_PSN, A::TIMEOUT]),
        (Rtr, Rts, _) => A::SQ_PSN,
        _ => A::EMPTY,
    }
}

/// A valid RoCE address vector: GRH, sgid_index 0, a nonzero dgid, port 1.
pub fn good_av() -> AhAttr {
    let dgid = Gid::from(Ipv4Addr::new(127, 0, 0, 2));
    AhAttr {
        grh: GlobalRoute {
            dgid,
            flow_label: 5,
            sgid_index: 0,
            hop_limit: 64,
            traffic_class: 0,
        },
        dlid: 0,
        sl: 0,
        src_path_bits: 0,
        static_rate: 0,
        is_global: 1,
        port_num: 1,
    }
}

/// Attribute values that pass every value check, for the modify `from → to`
/// (`cur_qp_state` = `from`, so CUR_STATE is always truthful).
pub fn good_attr(from: QpState, to: QpState) -> QpAttr {
    QpAttr {
        qp_state: to,
        cur_qp_state: from,
        // Not the defaults, so a value reported without its valid bit shows.
        path_mtu: Mtu::Mtu2048,
        path_mig_state: MigState::Rearm,
        qkey: 0x1111_1111,
        rq_psn: 0x00ab_cdef,
        sq_psn: 0x0012_3456,
        dest_qp_num: 0x99,
        qp_access_flags: AccessFlags(0x7),
        cap: QpCap::default(),
        ah_attr: good_av(),
        alt_ah_attr: good_av(),
        pkey_index: 0,
        alt_pkey_index: 0,
        en_sqd_async_notify: 1,
        sq_draining: 0,
        max_rd_atomic: 4,
        max_dest_rd_atomic: 4,
        min_rnr_timer: 12,
        port_num: 1,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        alt_port_num: 1,
        alt_timeout: 14,
        rate_limit: 0,
    }
}

/// Every bit a modify may carry except STATE, one at a time.
pub fn known_bits() -> impl Iterator<Item = AttrMask> {
    (AttrMask::KNOWN - AttrMask::STATE).iter()
}
